"""Equal steps per rank: the epoch's tail, its pool of examples, and its rounds.

While the shared work queue still has items to lease, each rank batches what its own
readers read. Once it has none (closed, empty, nothing given back by a dead rank) the
job is in its *tail*: the work queue's actor says so to every rank's batcher, and from
then on each rank pushes the examples it still gets (its queue's content, then the rest
of its files) to a :class:`TailPool` in that actor, and takes its batches from the pool.

The pool hands out batches so that every live rank ends with the same count: a rank
whose count is below the highest one takes a full batch as soon as the pool holds one
(ranks that ran ahead before the tail wait); when every count is equal, a new *round*
starts only once the pool holds one full batch for each live rank. When every live rank
has pushed its last example, what is left (less than one batch per live rank) follows
the batcher's ``remainder``: ``"drop"`` (counted), ``"smaller"`` (split evenly, sizes
differ by at most one; dropped when there are fewer examples than ranks) or ``"pad"``
(one more full batch each, filled by repeating the remaining examples). A rank still
behind at that point (it ran ahead too far for the rest to level it) is levelled with a
padded batch, in every mode.

In a deterministic job (``Session(deterministic=True)``) the tail does not depend on
timing either: a rank batches its own share of the items (see :mod:`.schedule`) until
its input ends, then pushes what is left (less than a batch) to the pool and joins. The
pool waits for every live rank to have pushed its last example, orders the examples by
rank and then by the order each rank pushed them, and plans every rank's remaining
batches at once, in rank order: ranks behind the highest count are levelled first (full
batches from the pool, else padded), then rounds of one batch per rank, then the
remainder. Each rank takes its planned batches in order.

A ``dynamic_pad`` batcher's examples differ in shape: each pushed chunk comes with every
example's own shape, and each batch the pool hands out is padded to the largest of its
own examples (as the rank's PaddingFIFOQueue pads its ``dequeue_many``), never to the
largest of the chunk an example came in.

A rank may die after its reader read its last item while what it read still waits in
its batcher, before the batcher joined the tail: its leases then come back, and a reader
must be there to read them again. So a reader at the end of the queue also waits for
every rank with a batcher that holds leases and has not joined (see
:meth:`TailPool._others_busy`: readers waiting for each other end in rank order, the
highest first).

No wait is unbounded: a take waits for the pool, the pool for the ranks still pushing,
and a rank that dies is dropped from the rounds (the lease book's anchor watch or its
``lease_timeout``); a batch handed to it and not confirmed by its next take goes back to
the pool. A rank that never reaches its first batch is waited for ``lease_timeout``
after the tail began, and so is a rank holding leases that does not join.

:class:`EqualSteps` is the rank's side: the batcher's ``dequeue`` calls it.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import time
from typing import TYPE_CHECKING, Any, Literal

import anyio
import numpy as np

from .._errors import (
    AsyncReaderError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)
from .._runtime.checkpoint import note_payload
from .schedule import rank_of

if TYPE_CHECKING:
    from .remote_queue import RayBackend, RemoteQueue
    from .work_queue import LeaseBook

__all__ = ["REMAINDERS", "EqualSteps", "TailPool"]

#: What happens to the examples left when there are fewer than one batch per live rank.
REMAINDERS = ("drop", "pad", "smaller")

#: The longest an actor-side wait lasts before the rank asks again (bounded calls).
_POLL = 10.0
#: How often the actor looks at the work queue for the tail's start.
_TAIL_CHECK = 0.02

Comps = list[np.ndarray[Any, Any]]


@dataclasses.dataclass(eq=False)
class _Chunk:
    """Examples pushed by a rank: flat components, and their record keys if known."""

    comps: Comps
    keys: list[bytes] | None
    #: Where it comes from in a deterministic job: (rank, how many chunks it pushed before).
    order: tuple[int, int] = (-1, 0)
    #: A ``dynamic_pad`` batcher's examples: each one's own shape, per component (rows of
    #: ``int64`` dimensions). Its arrays may be padded wider (with zeros, or ``b""``), to
    #: the largest example they were batched with; a batch cuts and pads them to its own
    #: largest. ``None``: every example has its array's row shape.
    shapes: list[np.ndarray[Any, Any]] | None = None

    def __len__(self) -> int:
        return len(self.comps[0])


@dataclasses.dataclass(eq=False)
class _Handed:
    """A batch handed to a rank: its request id, components, padded rows, real examples."""

    rid: int
    comps: Comps
    padded: int
    real: _Chunk | None


@dataclasses.dataclass(eq=False)
class _Member:
    """A rank in the tail: its batch count, whether its input ended, what is in doubt."""

    count: int
    ended: bool = False
    #: The last batch it had before the tail: the step it may not have acknowledged.
    window: _Chunk | None = None
    #: The last batch handed out and not confirmed yet.
    in_doubt: _Handed | None = None
    generation: int = 0
    pushes: int = 0


def _row_shapes(chunk: _Chunk, i: int) -> np.ndarray[Any, Any]:
    """The shapes of ``chunk``'s examples in component ``i`` (one row each)."""
    if chunk.shapes is not None:
        return chunk.shapes[i]
    comp = chunk.comps[i]
    return np.broadcast_to(np.array(comp.shape[1:], dtype=np.int64), (len(comp), comp.ndim - 1))


def _concat(chunks: list[_Chunk]) -> _Chunk:
    """``chunks``' examples in one batch: each ``dynamic_pad`` component padded to the
    largest of these examples (as a PaddingFIFOQueue's ``dequeue_many`` pads), not to
    the largest of the batches they were pushed in."""
    ragged = any(c.shapes is not None for c in chunks)
    if len(chunks) == 1 and not ragged:
        return chunks[0]
    keys: list[bytes] | None = []
    for c in chunks:
        if c.keys is None or keys is None:
            keys = None
        else:
            keys += c.keys
    if not ragged:
        comps = [np.concatenate([c.comps[i] for c in chunks]) for i in range(len(chunks[0].comps))]
        return _Chunk(comps, keys)
    shapes = [
        np.concatenate([_row_shapes(c, i) for c in chunks]) for i in range(len(chunks[0].comps))
    ]
    comps = [_fit([c.comps[i] for c in chunks], shape) for i, shape in enumerate(shapes)]
    return _Chunk(comps, keys, shapes=shapes)


def _fit(parts: list[np.ndarray[Any, Any]], shapes: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``parts`` (one component of consecutive examples, each part padded to some width)
    joined and padded to the largest of ``shapes``, the examples' own shapes."""
    first = parts[0]
    dims = tuple(int(d) for d in shapes.max(axis=0)) if len(shapes) else (0,) * (first.ndim - 1)
    if len(parts) == 1 and first.shape[1:] == dims:
        return first
    if first.dtype.kind == "O":
        out = np.full((len(shapes), *dims), b"", dtype=object)
    else:
        out = np.zeros((len(shapes), *dims), dtype=first.dtype)
    start = 0
    for part in parts:
        # What lies beyond an example's own shape is padding: cut it to the batch's width.
        cut = part[(slice(None), *(slice(0, d) for d in dims))]
        out[(slice(start, start + len(part)), *(slice(0, d) for d in cut.shape[1:]))] = cut
        start += len(part)
    return out


def _split(chunk: _Chunk, n: int) -> tuple[_Chunk, _Chunk]:
    keys = chunk.keys
    shapes = chunk.shapes
    head = _Chunk(
        [c[:n] for c in chunk.comps],
        None if keys is None else keys[:n],
        shapes=None if shapes is None else [s[:n] for s in shapes],
    )
    tail = _Chunk(
        [c[n:] for c in chunk.comps],
        None if keys is None else keys[n:],
        shapes=None if shapes is None else [s[n:] for s in shapes],
    )
    return head, tail


def _repeated(chunk: _Chunk, size: int, key_index: int | None) -> _Chunk:
    """``chunk``'s examples repeated in order up to ``size`` rows; padded rows get an
    empty record key (so that acknowledging a batch's keys skips them)."""
    n = len(chunk)
    index = np.arange(size) % n
    comps = [c[index] for c in chunk.comps]  # copies
    if key_index is not None and size > n:
        comps[key_index][n:] = b""
    shapes = None if chunk.shapes is None else [s[index] for s in chunk.shapes]
    return _Chunk(comps, None, shapes=shapes)


def _padded(chunk: _Chunk, size: int, key_index: int | None) -> Comps:
    """:func:`_repeated`, as one batch."""
    return _concat([_repeated(chunk, size, key_index)]).comps


def _difference(first: str, known: dict[str, Any], client: str, layout: dict[str, Any]) -> str:
    """Say how ``client``'s examples differ from ``first``'s, naming the component."""
    what = f"the examples of rank {client.partition('-')[0]} ({layout['batcher']})"
    than = f"those of rank {first.partition('-')[0]} ({known['batcher']})"
    if known["structure"] != layout["structure"] or len(known["components"]) != len(
        layout["components"]
    ):
        return f"{what} are {layout['describe']}, {than} {known['describe']}"
    for (name, dtype, shape), (_, dtype0, shape0) in zip(
        layout["components"], known["components"], strict=True
    ):
        if dtype != dtype0:
            return f"component {name} of {what} has dtype {dtype}, in {than} {dtype0}"
        if len(shape) != len(shape0):
            return (
                f"component {name} of {what} has {len(shape)} dimensions (shape {shape}), "
                f"in {than} {len(shape0)} (shape {shape0})"
            )
        if shape != shape0:
            return f"component {name} of {what} has shape {shape}, in {than} {shape0}"
    return f"{what} differ from {than}"  # pragma: no cover - compared equal above


class TailPool:
    """The tail's pool of one work queue (the actor side; see the module).

    Args:
        book: The queue's leases: who is alive, and whether items are still to lease.
        queue: The hosted work queue.
        name: Its shared name, for messages.
    """

    def __init__(self, book: LeaseBook, queue: Any, name: str) -> None:
        self._book = book
        self._queue = queue
        self._name = name
        self._config: tuple[int, str, int] | None = None  # batch size, remainder, ranks
        self._key_index: int | None = None
        self._grace = 0.0
        self._members: dict[str, _Member] = {}
        self._gone: set[str] = set()
        self._chunks: collections.deque[_Chunk] = collections.deque()
        self._size = 0
        self._sample: _Chunk | None = None
        self._structure: Any = None
        self._tail_since: float | None = None
        self._final: list[Comps] | None = None  # the last round, one batch per live rank
        self._final_padding: list[int] = []
        self._level = -1  # the count every rank ends with, once decided
        #: A deterministic job's batches for each rank, planned once all have ended.
        self._plan: dict[str, collections.deque[tuple[Any, ...]]] | None = None
        self._changed = asyncio.Event()
        #: The examples' layout every rank must batch (the first rank's), and why a
        #: rank's was refused: the pool joins examples along their first dimension only.
        self._layout: tuple[str, dict[str, Any]] | None = None
        self._refused: str | None = None
        #: Ranks with a batcher of this queue's examples: each joins the tail.
        self._batching: set[str] = set()
        self._wake: asyncio.TimerHandle | None = None
        self.dropped = 0
        self.padded = 0
        book.listeners.append(self._rank_gone)
        book.others_busy = self._others_busy
        book.read_out = self._read_out

    # -- the tail's start --------------------------------------------------------------

    def in_tail(self) -> bool:
        """Whether no work item is left to lease (the queue is closed and empty, and no
        item given back by a dead rank waits)."""
        if self._tail_since is not None:
            return True
        queue = self._queue
        if self._book.pending() or not queue.is_closed() or queue.size() > 0:
            return False
        self._tail_since = time.monotonic()
        return True

    async def wait_tail(self, within: float) -> bool:
        """Return ``True`` once the job is in its tail, ``False`` after ``within`` s.

        Raises:
            InvalidArgumentError: the ranks' examples have different layouts.
        """
        deadline = time.monotonic() + within
        while not self.in_tail():
            self._check_refused()
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(_TAIL_CHECK)
        return True

    # -- ranks ------------------------------------------------------------------------

    def layout(self, client: str, layout: dict[str, Any] | None) -> None:
        """``client``'s batcher batches examples of ``layout`` (at its first batch, long
        before the tail): the pool can join its examples with every other rank's only
        if the components, their dtypes and their shapes are the same (the size of a
        ``None`` dimension of ``dynamic_pad`` examples may differ: the pool pads each
        batch). ``None``: the layout is not known yet (no example so far); the rank
        batches all the same.

        Raises:
            InvalidArgumentError: ``layout`` differs from the first rank's (every rank
                then gets this error from its next call about the tail).
        """
        self._check_refused()
        self._batching.add(client)
        if layout is None:
            return
        if self._layout is None:
            self._layout = (client, layout)
            return
        first, known = self._layout
        if known == layout:
            return
        self._refused = f"queue '{self._name}': {_difference(first, known, client, layout)}"
        self._notify()
        self._check_refused()

    def _check_refused(self) -> None:
        if self._refused is not None:
            raise InvalidArgumentError(
                f"{self._refused}; the epoch's tail joins every rank's examples into "
                "batches, so every rank must batch examples of one layout (give shapes=; "
                "for components whose size varies, such as a RecordBatch, batch with "
                "dynamic_pad=True on every rank)"
            )

    def join(
        self,
        client: str,
        count: int,
        config: tuple[int, str, int],
        key_index: int | None,
        sample: Comps | None,
        structure: Any,
        grace: float,
        sample_shapes: Comps | None = None,
    ) -> None:
        """``client`` enters the tail with ``count`` batches so far; ``sample`` is its
        last batch (``sample_shapes``: its examples' own shapes, with ``dynamic_pad``).

        Raises:
            InvalidArgumentError: another rank batches with another batch size,
                remainder or world size.
            FailedPreconditionError: ``client`` was declared dead, or is not watched.
        """
        self._check_refused()
        self._book.check_watched(client)
        self._book.seen(client)
        if self._config is None:
            self._config = config
            self._key_index = key_index
            self._grace = grace
        elif self._config != config:
            raise InvalidArgumentError(
                f"queue '{self._name}': ranks batch its records differently (batch_size, "
                f"remainder, world_size): {self._config!r} and {config!r}"
            )
        if self._structure is None and structure is not None:
            self._structure = structure
        window = None
        if sample is not None:
            keys = None if key_index is None else [bytes(k) for k in sample[key_index]]
            window = _Chunk(sample, keys, shapes=sample_shapes)
            if self._sample is None:
                self._sample = window
        if self._tail_since is None:  # its input ended: nothing is left to lease
            self._tail_since = time.monotonic()
        self._members.setdefault(client, _Member(count, window=window))
        self._notify()
        self._book.wake()  # readers waiting for it to join look again

    def _others_busy(self, client: str) -> bool:
        """Whether another live rank may still give items back that ``client``'s reader
        must then read: a rank in the tail that has not pushed its last example, or a
        rank with a batcher that holds leases and has not joined the tail yet (what it
        read waits in its batcher; if it dies, its leases come back).

        Two such ranks whose readers both wait at the end would wait for each other:
        a reader waits for a rank whose reader waits too only if that rank's number is
        higher, so the readers end one after the other, the highest first. A rank that
        has not joined is waited for at most its ``lease_timeout`` after the tail began
        (it is alive but its batcher is not asked for batches)."""
        book = self._book
        now = time.monotonic()
        for other in book.clients():
            if other == client or other in self._gone:
                continue
            member = self._members.get(other)
            if member is not None:
                if member.ended:
                    continue
            elif (
                other not in self._batching
                or not book.holds(other)
                or not self._still_awaited(other, now)
            ):
                continue  # no batcher, nothing to give back, or waited for long enough
            if book.taking(other) and rank_of(other) < rank_of(client):
                continue
            return True
        return False

    def _still_awaited(self, client: str, now: float) -> bool:
        """Whether ``client``, not in the tail yet, is within its ``lease_timeout`` of the
        tail's start; if so, readers waiting for it look again when that time is up."""
        self.in_tail()
        since = now if self._tail_since is None else self._tail_since
        deadline = since + self._book.lease_timeout(client)
        if now >= deadline:
            return False
        wake = self._wake
        if wake is None or wake.cancelled() or wake.when() > deadline:
            loop = asyncio.get_running_loop()
            if wake is not None:
                wake.cancel()
            self._wake = loop.call_at(loop.time() + (deadline - now), self._book.wake)
        return True

    def _read_out(self, client: str) -> bool:
        """Whether ``client`` pushed its last example: its items need no reading again
        (what it read is in the pool or acknowledged, but for its window, see
        :meth:`_rank_gone`)."""
        member = self._members.get(client)
        return member is not None and member.ended

    def _rank_gone(self, client: str, died: bool) -> None:
        """``client`` died or left: later rounds count one rank fewer."""
        if client in self._gone:
            return
        self._gone.add(client)
        member = self._members.pop(client, None)
        window = None if member is None or not died or not member.ended else member.window
        if window is not None and window.keys is not None and self._level < 0:
            # Its items are not read again: the examples of its last local step that it
            # had not acknowledged are delivered from here instead.
            lost = set(self._book.unacked(window.keys))
            if lost:
                index = np.array([k in lost for k in window.keys])
                comps = [c[index] for c in window.comps]
                keys = [k for k in window.keys if k in lost]
                shapes = None if window.shapes is None else [s[index] for s in window.shapes]
                self._book.pooled(keys)
                self._give_back(_Chunk(comps, keys, shapes=shapes))
        if member is not None and member.in_doubt is not None:
            handed, member.in_doubt = member.in_doubt, None
            self.padded -= handed.padded
            if handed.real is not None and len(handed.real):
                if self._final is not None:
                    self._drop(handed.real)  # the last round was formed with it
                else:
                    self._give_back(handed.real)
        planned = None if self._plan is None else self._plan.pop(client, None)
        for batch in planned or ():
            # Its planned batches are never taken: nobody else needs them.
            self.padded -= batch[2]
            if batch[4] is not None and len(batch[4]):
                self._drop(batch[4])
        if member is not None and self._final and member.count < self._level:
            # Its batch of the last round was never taken: nobody else needs it.
            comps, padded = self._final.pop(), self._final_padding.pop()
            self.padded -= padded
            self._drop(self._real(comps, padded))
        self._notify()

    def _give_back(self, chunk: _Chunk) -> None:
        self._chunks.appendleft(chunk)
        self._size += len(chunk)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- examples in, batches out ------------------------------------------------------

    def push(
        self,
        client: str,
        comps: Comps | None,
        keys: list[bytes] | None,
        ended: bool,
        shapes: Comps | None = None,
        *,
        again: bool = False,
    ) -> None:
        """Add examples ``client`` read; ``ended``: its input has ended. ``shapes``: a
        ``dynamic_pad`` batcher's examples' own shapes (see :class:`_Chunk`).
        ``again``: examples the rank had pushed before the job checkpoint it is
        restored from (see ``LeaseBook.pooled``).

        Raises:
            FailedPreconditionError: ``client`` was declared dead or is not in the tail.
        """
        self._check_refused()
        self._book.check_watched(client)
        member = self._members.get(client)
        if member is None:
            raise FailedPreconditionError(f"queue '{self._name}': push before joining the tail")
        if comps is not None and len(comps[0]):
            if keys:
                # Not read again if the rank dies: the pool delivers them (checked first,
                # so a refused push marks nothing).
                self._book.pooled(keys, again=again)
            chunk = _Chunk(comps, keys, (rank_of(client), member.pushes), shapes)
            member.pushes += 1
            if self._final is not None or self._level >= 0:
                self._drop(chunk)  # cannot happen while the rank's input runs; be safe
            else:
                self._chunks.append(chunk)
                self._size += len(chunk)
                if self._sample is None:
                    self._sample = chunk
        if ended and not member.ended:
            member.ended = True
            self._book.wake()
        self._notify()

    async def take(self, client: str, rid: int, confirm: int) -> tuple[Any, ...]:
        """The next batch of ``client`` (request ``rid``), once the rounds allow it.

        ``confirm`` is the id of the last batch ``client`` received; a batch handed out
        since and not confirmed goes back to the pool (the reply was lost). Returns after
        at most :data:`_POLL` s.

        Returns:
            ``("batch", components, padded rows, structure)``, ``("end", dropped,
            padded)`` once every rank has its last batch, ``("checkpoint", number)``
            when job checkpoint ``number`` waits for this rank (it takes part from
            here, see ``LeaseBook.checkpoint_for``), or ``("wait",)``: ask again.

        Raises:
            FailedPreconditionError: ``client`` was declared dead or is not in the tail.
        """
        self._book.check_watched(client)
        self._book.seen(client)
        member = self._members.get(client)
        if member is None:
            raise FailedPreconditionError(f"queue '{self._name}': take before joining the tail")
        handed, member.in_doubt = member.in_doubt, None
        if handed is not None and handed.rid != confirm and self._plan is not None:
            member.count -= 1  # the rank never got it: still its next planned batch
            batch = ("batch", handed.comps, handed.padded, self._structure, handed.real)
            self._plan.setdefault(client, collections.deque()).appendleft(batch)
        elif handed is not None and handed.rid != confirm:  # the rank never got it
            member.count -= 1
            self.padded -= handed.padded
            if self._final is not None:
                self._final.append(handed.comps)
                self._final_padding.append(handed.padded)
                self.padded += handed.padded
            elif handed.real is not None and len(handed.real):
                self._give_back(handed.real)
            self._notify()
        member.generation += 1
        generation = member.generation
        deadline = time.monotonic() + _POLL
        while True:
            self._check_refused()
            self._book.check_watched(client)
            if member.generation != generation or client not in self._members:
                return ("wait",)  # superseded by a later take of the same rank
            decided = self._decide(client, member)
            if decided is not None:
                if decided[0] == "batch":
                    member.in_doubt = _Handed(rid, decided[1], decided[2], decided[4])
                    member.count += 1
                    return decided[:4]
                return decided
            number = self._book.checkpoint_for(client)
            if number is not None:
                return ("checkpoint", number)
            left = deadline - time.monotonic()
            if left <= 0:
                return ("wait",)
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), min(left, 0.5))

    def _live(self) -> list[_Member]:
        return list(self._members.values())

    def _ready(self) -> bool:
        """Every rank joined or is gone, or the stragglers' grace has passed."""
        assert self._config is not None
        world = self._config[2]
        if len(self._members) + len(self._gone) >= world:
            return True
        if self._book.schedule is not None and any(
            c not in self._members and c not in self._gone for c in self._book.clients()
        ):
            return False  # a deterministic job waits for every rank still reading its share
        assert self._tail_since is not None
        return time.monotonic() - self._tail_since > self._grace

    def _decide(self, client: str, member: _Member) -> tuple[Any, ...] | None:
        """What ``client`` gets now: a batch, the end, or ``None`` (wait)."""
        assert self._config is not None
        batch_size, remainder, _ = self._config
        if self._book.schedule is not None:
            return self._decide_planned(client, member)
        if self._level >= 0:
            if member.count >= self._level:
                return ("end", self.dropped, self.padded)
            if self._final:
                comps = self._final.pop()
                padded = self._final_padding.pop()
                return ("batch", comps, padded, self._structure, self._real(comps, padded))
            # A rank that joined after the last round was formed (its grace had passed):
            # level it with padding.
            return self._level_up(batch_size)
        if not self._ready():
            return None
        live = self._live()
        high = max(m.count for m in live)
        low = min(m.count for m in live)
        ended = all(m.ended for m in live)
        if member.count < high:  # behind: level it
            if self._size >= batch_size:
                return self._full(batch_size)
            if ended:
                return self._level_up(batch_size)
            return None
        if low < high:
            return None  # the ranks behind come first
        if self._size >= batch_size * len(live):
            return self._full(batch_size)  # a new round: one batch for each live rank
        if not ended:
            return None
        self._last_round(len(live), batch_size, remainder, high)
        return self._decide(client, member)

    def _decide_planned(self, client: str, member: _Member) -> tuple[Any, ...] | None:
        """A deterministic job's :meth:`_decide`: the rank's next planned batch."""
        assert self._config is not None
        if self._plan is None:
            if not self._ready() or not all(m.ended for m in self._live()):
                return None
            self._make_plan()
            assert self._plan is not None
        planned = self._plan.get(client)
        if planned:
            return planned.popleft()
        if member.count < self._level:
            # It joined after the plan was made (its grace had passed): level it.
            return self._level_up(self._config[0])
        return ("end", self.dropped, self.padded)

    def _make_plan(self) -> None:
        """Plan every live rank's remaining batches at once, in rank order (see the
        module): nothing in it depends on which rank asked first."""
        assert self._config is not None
        batch_size, remainder, _ = self._config
        order = sorted(self._members, key=rank_of)
        self._chunks = collections.deque(sorted(self._chunks, key=lambda c: c.order))
        samples = [w for w in (self._members[c].window for c in order) if w is not None]
        if samples:
            self._sample = samples[0]
        elif self._chunks:
            self._sample = self._chunks[0]
        counts = {c: self._members[c].count for c in order}
        high = max(counts.values())
        plan: dict[str, collections.deque[tuple[Any, ...]]] = {
            c: collections.deque() for c in order
        }
        for c in order:  # level the ranks behind first
            for _ in range(high - counts[c]):
                if self._size >= batch_size:
                    plan[c].append(self._full(batch_size))
                else:
                    plan[c].append(self._level_up(batch_size))
        while self._size >= batch_size * len(order):  # rounds
            for c in order:
                plan[c].append(self._full(batch_size))
            high += 1
        self._last_round(len(order), batch_size, remainder, high)
        assert self._final is not None
        for c, comps, padded in zip(order, self._final, self._final_padding, strict=False):
            plan[c].append(("batch", comps, padded, self._structure, self._real(comps, padded)))
        self._final, self._final_padding = [], []
        self._plan = plan

    def _take_examples(self, n: int) -> _Chunk:
        parts: list[_Chunk] = []
        need = n
        while need:
            chunk = self._chunks.popleft()
            if len(chunk) > need:
                chunk, rest = _split(chunk, need)
                self._chunks.appendleft(rest)
            parts.append(chunk)
            need -= len(chunk)
        self._size -= n
        return _concat(parts)

    def _full(self, batch_size: int) -> tuple[Any, ...]:
        chunk = self._take_examples(batch_size)
        return ("batch", chunk.comps, 0, self._structure, chunk)

    def _level_up(self, batch_size: int) -> tuple[Any, ...]:
        """A batch for a rank behind when too few examples are left: padded."""
        if self._size:
            chunk = self._take_examples(self._size)
            real: _Chunk | None = chunk
        else:
            assert self._sample is not None  # a rank ahead had batches: it sent one
            chunk, real = self._sample, None
        n = len(chunk) if real is not None else 0
        self.padded += batch_size - n
        comps = _padded(chunk, batch_size, self._key_index)
        if real is None and self._key_index is not None:
            comps[self._key_index][:] = b""
        return ("batch", comps, batch_size - n, self._structure, real)

    def _last_round(self, ranks: int, batch_size: int, remainder: str, count: int) -> None:
        """Decide what the examples left (< one batch per live rank) become."""
        left = self._take_examples(self._size) if self._size else None
        n = 0 if left is None else len(left)
        self._level = count
        self._final, self._final_padding = [], []
        if left is None or remainder == "drop" or (remainder == "smaller" and n < ranks):
            if left is not None:
                self._drop(left)
            self._notify()
            return
        self._level = count + 1
        if remainder == "smaller":
            sizes = [n // ranks + (1 if i < n % ranks else 0) for i in range(ranks)]
            rest = left
            for size in sizes:
                part, rest = _split(rest, size)
                self._final.append(_concat([part]).comps)
                self._final_padding.append(0)
        else:  # "pad": the remaining examples spread over one full batch each
            rest = _repeated(left, ranks * batch_size, self._key_index)
            for i in range(ranks):
                part, rest = _split(rest, batch_size)
                self._final.append(_concat([part]).comps)
                self._final_padding.append(max(0, min(batch_size, (i + 1) * batch_size - n)))
            self.padded += ranks * batch_size - n
        self._notify()

    def _real(self, comps: Comps, padded: int) -> _Chunk:
        """The examples of a batch that are not padding (they come first)."""
        n = len(comps[0]) - padded
        real = [c[:n] for c in comps]
        index = self._key_index
        return _Chunk(real, None if index is None else [bytes(k) for k in real[index]])

    def _drop(self, chunk: _Chunk) -> None:
        self.dropped += len(chunk)
        if chunk.keys is not None:
            self._book.dropped(chunk.keys)

    def status(self) -> dict[str, Any]:
        """The tail's state (tests)."""
        return {
            "tail": self._tail_since is not None,
            "counts": {c: m.count for c, m in self._members.items()},
            "gone": sorted(self._gone),
            "pooled": self._size,
            "dropped": self.dropped,
            "padded": self.padded,
        }


# -- the rank's side ---------------------------------------------------------------------


class EqualSteps:
    """A batcher's batches in a ranked session: local until the tail, then from the pool.

    Args:
        backend: The session's backend.
        queue: The shared work queue the rank's readers lease from (its actor hosts the
            pool); ``None`` for a restored batcher whose queue is found at its first take
            (``RayBackend.home_queue``).
        batcher: The batcher (its queue, structure, batch size and name).
        remainder: ``"drop"``, ``"pad"`` or ``"smaller"``.
    """

    def __init__(
        self,
        backend: RayBackend,
        queue: RemoteQueue | None,
        batcher: Any,
        remainder: Literal["drop", "pad", "smaller"],
    ) -> None:
        self._backend = backend
        #: No queue yet: found at the first take.
        self._homeless = queue is None
        self._queue: RemoteQueue = queue  # type: ignore[assignment]
        self._batcher = batcher
        self._remainder = remainder
        self._tail = anyio.Event()
        self._joined = False
        #: Set when a join under way ended (well or not): a second caller waits for it.
        self._joining: anyio.Event | None = None
        #: A ``next()`` call is under way (it joins the tail itself when it gets there).
        self._in_next = False
        self._ended: OutOfRangeError | None = None
        #: Batches of this epoch so far: a restored batcher's count goes on (ranks restored
        #: from one job checkpoint may have taken part in it at different steps).
        self._count: int = batcher._batches
        self._sample: Comps | None = None
        #: A dynamic_pad batcher's batches are padded to their own largest example: the
        #: pool gets each example's own shape with it, to pad its batches the same way.
        self._ragged = batcher._kind == "padding"
        self._sample_shapes: Comps | None = None
        self._rid = 0
        self._confirm = -1
        self._pusher_error: BaseException | None = None
        self._laid_out = False
        #: Every example this rank read is in the pool (or was handed out before).
        self.pushed_all = False
        #: What a deterministic job's checkpoint keeps of this rank in the tail (see
        #: :meth:`tail_state`): its count when it joined, the examples it pushed (flat
        #: components, and their own shapes with dynamic_pad), its last local batch.
        self._join_count = 0
        #: The component holding the record keys (``record_refs``), once the layout is known.
        self._key_index: Any = None
        self._pushed: list[tuple[Comps, Comps | None]] = []
        #: A restored rank's examples pushed before its checkpoint, as saved, while they
        #: wait to be read and pushed again (a checkpoint meanwhile saves them as they are).
        self._repush: list[Any] = []
        self._window: tuple[Comps | None, Comps | None] = (None, None)
        #: Restored from such a checkpoint: this rank joins again as it had, pushes the
        #: same examples, and skips the planned batches it had taken.
        self._restored: dict[str, Any] | None = batcher._tail_restore
        self._skip = 0
        if self._restored is not None:
            batcher._tail_restore = None
            self._tail.set()
        self.padded = 0
        self.last_padding = 0
        self.dropped = 0
        if not backend.deterministic:
            # A deterministic job's tail begins for a rank when its own share is read
            # (its input ends), whatever the others do.
            batcher._coord.start_soon(self._watch, name=f"{batcher._what}-tail-watch")

    @property
    def count(self) -> int:
        """Batches of this epoch so far (a job checkpoint saves it)."""
        return self._count

    def restore_count(self, count: int) -> None:
        """Go on from ``count`` batches (this rank's at a job checkpoint it is restored
        from): the tail levels ranks by their counts, so a rank restored without its
        pipeline is not taken for one that has had no batch."""
        self._count = max(self._count, count)

    @property
    def savable(self) -> bool:
        """Whether a deterministic job's checkpoint can keep this rank's part of the tail
        (:meth:`tail_state`): it joined. Each example it read is then pushed to the pool
        (saved as pushed) or still in its local queue (saved with the queue): the pusher
        moves a chunk from one to the other without a pause between."""
        return self._backend.deterministic and self._joined

    def tail_state(self) -> dict[str, Any] | None:
        """This rank's part of the tail, for a deterministic job's checkpoint (saved with
        the batcher, while the pipeline is paused): the count it joined with, the
        examples it pushed and its last local batch as record references. The pool plans
        from nothing else, so a restore that pushes them again with that count gets the
        same plan. ``None`` before the tail; also when they cannot be named as reader
        records (the pipeline is then not saved)."""
        if not self._backend.deterministic or not self._joined:
            return None
        queue = self._batcher._queue
        pushed = [self._references(queue, comps, shapes) for comps, shapes in self._pushed]
        pushed += self._repush  # still to be pushed again, in their order
        sample, shapes = self._window
        window = None if sample is None else self._references(queue, sample, shapes)
        if any(p is None for p in pushed) or (sample is not None and window is None):
            note_payload(self._batcher._what)
            return None
        return {"joined": self._join_count, "pushed": pushed, "window": window}

    @staticmethod
    def _references(queue: Any, comps: Comps, shapes: Comps | None) -> Any:
        """``comps`` (a batch of examples) as the batcher's queue saves its elements: record
        references, or ``None`` when it saves payloads."""
        if shapes is None:
            return queue._save_outside({"stacked": list(comps)})
        rows = []
        for i in range(len(comps[0])):
            row = []
            for comp, dims in zip(comps, shapes, strict=True):
                value = comp[i]
                if dims.shape[1]:  # cut to the example's own shape (the rest is padding)
                    value = value[tuple(slice(0, int(d)) for d in dims[i])]
                row.append(value)
            rows.append(row)
        return queue._save_outside({"rows": rows})

    async def _reread(self, saved: Any) -> tuple[Comps, Comps | None]:
        """The examples :meth:`_references` saved, read again (each record checked)."""
        queue = self._batcher._queue
        snapshot = await queue._restore_outside(saved)
        if "stacked" in snapshot:
            return [np.asarray(c) for c in snapshot["stacked"]], None
        # A dynamic_pad batcher's examples, each of its own shape: padded as its queue
        # pads a batch, with their shapes.
        codec = queue._codec
        rows = codec.restore_rows(snapshot)
        return self._flat(codec.decode_many(rows)), codec.row_shapes(rows)

    @property
    def in_tail(self) -> bool:
        """Whether this rank's batches come from the tail's pool now (or will: its
        input ended, or the job reached its tail)."""
        return self._joined or self._tail.is_set()

    async def _call(self, method: str, *args: Any) -> Any:
        queue = self._queue
        actor = queue._actor
        reply = await self._backend._wait(getattr(actor, method).remote(*args), queue.name, actor)
        if isinstance(reply, tuple) and reply and reply[0] == "error":
            from .remote_queue import _error

            raise _error(reply[1], reply[2])
        return reply

    async def _watch(self) -> None:
        """Wait (in bounded calls) until the work queue's actor reports the tail, then
        join it unless a batch is being taken (that take joins).

        Joining here, not at the rank's next take, matters when ranks step together (an
        all-reduce in each training step): a rank that took its batch locally just before
        the tail began waits in its step for the others, while they wait in the pool for
        every rank to join. The pool learns its batch count now and the rounds go on.
        """
        while not await self._call("tail_wait", _POLL):
            pass
        self._tail.set()
        if self._laid_out and not self._in_next:
            # An error here (a refused layout, a fenced rank) is raised again by the
            # rank's next take, which joins in its turn.
            with contextlib.suppress(AsyncReaderError):
                await self._join_once()

    async def next(self) -> Comps:
        """The batch's flat components.

        Raises:
            OutOfRangeError: every rank had its last batch of the epoch.
            InvalidArgumentError: in a deterministic job, another batcher of this rank
                on another work queue is in the middle of its epoch.
        """
        if self._ended is not None:
            await anyio.lowlevel.checkpoint()
            raise OutOfRangeError(str(self._ended))
        if self._homeless:
            self._queue = await self._backend.home_queue(self._batcher)
            self._homeless = False
        if self._backend.deterministic:
            self._check_one_epoch_at_a_time()
        self._in_next = True
        try:
            return await self._next()
        finally:
            self._in_next = False

    def _check_one_epoch_at_a_time(self) -> None:
        """Refuse a take while another work queue's batcher of this rank is mid-epoch.

        A deterministic epoch's tail is planned once every rank has read its share, and a
        rank reads on only while its trainer takes from that batcher: two batchers taken
        in turns would each wait at the epoch's end for a rank waiting on the other.

        Raises:
            InvalidArgumentError: such a batcher is mid-epoch.
        """
        for other in self._backend._steps:
            if other is self or other._homeless or other._ended is not None:
                continue
            if other._queue is self._queue:
                continue
            if other._count > 0 or other._joined:
                raise InvalidArgumentError(
                    f"{self._batcher._what} of shared queue '{self._queue.name}': in a "
                    f"deterministic job, {other._batcher._what} of shared queue "
                    f"'{other._queue.name}' is in the middle of its epoch ({other._count} "
                    "batches): take one batcher's epoch to its end before the other's (the "
                    "epoch's tail waits for every rank's share to be read, so batchers "
                    "taken in turns would wait on each other)"
                )

    async def _next(self) -> Comps:
        if not self._laid_out:
            await self._send_layout()
        if not self._tail.is_set():
            local = await self._local_or_tail()
            if local is not None:
                self._count += 1
                self._sample = local
                self.last_padding = 0
                if self._tail.is_set():
                    # The tail began while this batch was taken: join now, with it
                    # counted, as the watch does between takes (shielded: the batch is
                    # in hand, a cancellation must not lose it).
                    with anyio.CancelScope(shield=True), contextlib.suppress(AsyncReaderError):
                        await self._join_once()
                return local
        if not self._joined:
            await self._join_once()
        while True:
            if self._pusher_error is not None:
                raise self._pusher_error
            self._rid += 1
            reply = await self._call("tail_take", self._backend._client, self._rid, self._confirm)
            if reply[0] == "batch":
                self._confirm = self._rid
                _, comps, padded, structure = reply
                if self._skip:
                    # Taken before the checkpoint this rank is restored from (counted).
                    self._skip -= 1
                    self.padded += padded
                    continue
                batcher = self._batcher
                if batcher._structure is None and structure is not None:
                    from .._pipeline.structure import Structure

                    batcher._structure = Structure.from_state(structure)
                if self._key_index is None and batcher._record_refs is not None:
                    # Its first batch came from the pool: the layout is the pool's.
                    with contextlib.suppress(InvalidArgumentError):
                        refs = batcher._queue_record_refs()
                        self._key_index = None if refs is None else refs.key
                if self._key_index is not None:
                    self._queue._pool_keys.update(bytes(k) for k in comps[self._key_index] if k)
                self._count += 1
                self.padded += padded
                self.last_padding = padded
                return list(comps)
            if reply[0] == "checkpoint":
                # A job checkpoint waits for this rank while its trainer waits here, and
                # the batch it waits for needs ranks that wait in that checkpoint: it
                # takes part from here (it holds no step), then waits on.
                await self._backend.join_checkpoint(reply[1])
                continue
            if reply[0] == "end":
                self.dropped = reply[1]
                self._ended = OutOfRangeError(
                    f"{self._batcher._what}: the epoch ended on every rank after "
                    f"{self._count} batches each ({reply[1]} examples of the remainder "
                    f"dropped, {reply[2]} padded)"
                )
                raise OutOfRangeError(str(self._ended))

    async def _send_layout(self) -> None:
        """Tell the pool the layout of this rank's examples (once, at the first batch):
        one that cannot be joined with the other ranks' is refused now, not at the
        epoch's end."""
        self._laid_out = True
        batcher = self._batcher
        queue = batcher._queue
        structure = batcher._structure
        if queue is None or structure is None:
            # No example yet: the pool learns only that this rank batches (it joins
            # the tail; the others' readers wait for it while it holds leases).
            await self._call("tail_layout", self._backend._client, None)
            return
        names = list(structure.keys) or [str(i) for i in range(structure.size)]
        components = [
            (repr(name), np.dtype(dtype).str, list(shape))
            for name, dtype, shape in zip(names, queue.dtypes, queue.shapes, strict=True)
        ]
        layout = {
            "batcher": batcher._what,
            "structure": structure.to_state(),
            "describe": structure.describe(),
            "components": components,
        }
        await self._call("tail_layout", self._backend._client, layout)

    async def _local_or_tail(self) -> Comps | None:
        """A local batch, or ``None`` once the tail began (or this rank's input ended)."""
        batcher = self._batcher
        queue = batcher._queue
        if queue is None:
            return None  # the input ended before the first example
        size = batcher._batch_size
        got: list[Any] = []

        async def local(scope: anyio.CancelScope) -> None:
            with contextlib.suppress(OutOfRangeError):  # fewer than a batch left: pooled
                if self._ragged:
                    out, self._sample_shapes = await queue._dequeue_shaped(size, up_to=False)
                    got.append(out)
                else:
                    got.append(await queue.dequeue_many(size))
            scope.cancel()

        async def tail(scope: anyio.CancelScope) -> None:
            await self._tail.wait()
            scope.cancel()

        async with anyio.create_task_group() as tg:
            tg.start_soon(local, tg.cancel_scope)
            tg.start_soon(tail, tg.cancel_scope)
        if not got:
            self._tail.set()  # this rank's input ended: the tail has begun
            return None
        out = got[0]
        structure = batcher._structure_or_fail()
        return list(out) if isinstance(out, (tuple, list)) and len(out) == structure.size else [out]

    async def _join_once(self) -> None:
        """Join the tail, once: a caller that finds a join under way waits for it, and
        tries again if it failed."""
        while not self._joined:
            joining = self._joining
            if joining is not None:
                await joining.wait()
                continue
            joining = self._joining = anyio.Event()
            try:
                await self._join()
            finally:
                self._joining = None
                joining.set()

    async def _join(self) -> None:
        batcher = self._batcher
        structure = batcher._structure
        try:
            refs = batcher._queue_record_refs() if structure is not None else None
        except InvalidArgumentError:
            refs = None
        self._key_index = None if refs is None else refs.key
        config = (batcher._batch_size, self._remainder, self._backend.world_size)
        count = self._count
        restored = self._restored
        if restored is not None:
            # As it joined before the checkpoint: the planned batches it had taken since
            # are taken again, and skipped.
            count = restored["joined"]
            self._skip = max(0, self._count - count)
            if restored["window"] is not None:
                self._sample, self._sample_shapes = await self._reread(restored["window"])
        self._join_count = count
        self._window = (self._sample, self._sample_shapes)
        await self._call(
            "tail_join",
            self._backend._client,
            count,
            config,
            self._key_index,
            self._sample,
            None if structure is None else structure.to_state(),
            self._backend._cluster.lease_timeout,
            self._sample_shapes,
        )
        self._joined = True
        batcher._coord.start_soon(self._push, name=f"{batcher._what}-tail-push")

    async def _push(self) -> None:
        """Move what this rank still reads to the pool, a batch at a time."""
        batcher = self._batcher
        queue = batcher._queue
        client = self._backend._client
        size = batcher._batch_size
        try:
            restored, self._restored = self._restored, None
            self._repush = [] if restored is None else list(restored["pushed"])
            while self._repush:
                # Pushed before the checkpoint: again, first, so in the same order. Taken
                # off the list as it joins the pushed ones, with no pause between.
                comps, shapes = await self._reread(self._repush[0])
                del self._repush[0]
                await self._push_chunk(client, comps, shapes, again=True)
            while queue is not None:
                shapes = None
                try:
                    if self._ragged:
                        out, shapes = await queue._dequeue_shaped(size, up_to=True)
                    else:
                        out = await queue.dequeue_up_to(size)
                except OutOfRangeError:
                    break
                await self._push_chunk(client, self._flat(out), shapes)
            await self._call("tail_push", client, None, None, True)
            self.pushed_all = True
        except AsyncReaderError as exc:
            self._pusher_error = exc
            raise

    async def _push_chunk(
        self, client: str, comps: Comps, shapes: Comps | None, *, again: bool = False
    ) -> None:
        # Kept by a checkpoint (tail_state) from the moment the chunk left the local queue
        # or the restored list: appended before this coroutine first suspends.
        if self._backend.deterministic:
            self._pushed.append((comps, shapes))
        keys = None
        if self._key_index is not None:
            keys = [bytes(k) for k in comps[self._key_index]]
        await self._call("tail_push", client, comps, keys, False, shapes, again)

    def _flat(self, out: Any) -> Comps:
        structure = self._batcher._structure_or_fail()
        return list(out) if isinstance(out, (tuple, list)) and len(out) == structure.size else [out]
