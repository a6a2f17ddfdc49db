"""Job checkpoints: one cut through every rank and every shared work queue of a job.

``await sess.checkpoint()`` in a Session with a cluster is *collective*: every rank calls
it at the same step. Each rank first reports its readers' positions (an empty ack), then
arrives at the job's registry actor (which hosts :class:`CheckpointHost`) with its own
part (the states it tracks with ``Session.track_state`` / ``track_rng``). When the last
rank has arrived, and while every rank waits there (so no rank acknowledges anything),
the actor asks each shared queue's actor for its snapshot and returns the whole tree to
every rank, which encodes (and signs) it: every rank gets the same bytes.

A rank whose acknowledging task waits in a reader for a work item while the queue is
closed and drained waits for the other ranks' items (they may die and give them back);
those ranks wait in the checkpoint for it. So while a checkpoint waits, the barrier
tells the queues' actors which ranks are missing, and such a waiting lease call returns
to its rank, which takes part from there with its tracked states as they are (see
``LeaseBook.checkpoint_wanted``) and then waits for work again: its part of the
checkpoint is a rank waiting for work, which is what a restore of it gives. A reader in
a background task takes part the same way while the acknowledging task waits for input
(see ``input_waits``); the rank's own later ``checkpoint()`` call of that number gets
the same answer.

A rank that does not arrive within ``timeout`` fails the others with
:class:`TimeoutError`; a rank known dead (its anchor actor ended) fails them at once with
:class:`~asyncreader.FailedPreconditionError`.

A work queue's snapshot names no work item: items are *indices* into the sequence of
items the job enqueued into the queue (:class:`ItemLog`), with the number of those items
and a digest of them. A restored queue takes the first items the restoring program
enqueues as that sequence again (checked against the digest), so a checkpoint can only
make readers read items the program itself names. The queue then holds the items not
taken yet, and every lease (held or given back) becomes a pending item resumed as a dead
rank's lease is: read again from its last reported position skipping acknowledged keys.
Ranks' in-flight records (read, not acknowledged) are thus read again, once, whatever the
number of ranks of the restoring job. Records in the epoch's tail pool (see ``tail``) are
such records too: their leases stay held until another rank acknowledges them (or, when
their rank is gone, are kept released with their pooled keys), so a checkpoint in the
tail saves them as leases, and the pool is not saved.

In a deterministic job each rank's part also holds its *pipeline* (its batchers' and
local queues' contents, reader records as references), saved while its stage tasks are
paused, from before its positions are reported until the cut, so that buffers, positions
and acknowledgements describe one moment. A rank in the epoch's tail saves one with the
examples it pushed to the tail's pool (see ``EqualSteps.tail_state``; the others are in
its local queue); a rank whose pipeline holds elements it cannot name as reader records
saves none. Restored with as many
ranks (and deterministic), a rank restores its pipeline, and tells each work queue's
actor which records of which items its buffers hold (:func:`held_records`, derived from the
references themselves): every reader of those items skips them while that rank lives
(see ``LeaseBook.register``), and its acknowledgements of them before its readers take
the items again are matched to the restored leases (with several work queues, to the
queue whose items they are of). For an unsigned checkpoint the references may only name
the items of the restored leases, which the rank learns from the actors once the
program has enqueued the items again (:meth:`ItemLog.lease_items`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import math
import time
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError
from .._readers.work import work_item_bytes

if TYPE_CHECKING:
    from .work_queue import LeaseBook

__all__ = ["JOB_FORMAT", "CheckpointHost", "ItemLog", "check_job_tree", "held_records"]

#: What a job checkpoint's tree says it is.
JOB_FORMAT: Final = "asyncreader-job/1"
#: How often the checkpoint barrier looks for dead ranks while it waits for the others.
_DEATH_POLL: Final = 0.2
#: How often a restoring rank's question for the restored leases' items looks again.
_ITEMS_POLL: Final = 0.02
#: The keys of a section of record references (see ``RefLayout.strip``).
_REF_SECTION: Final = frozenset({"works", "work", "record", "crc32c", "rest"})


def _digest_update(digest: Any, work: bytes) -> None:
    digest.update(len(work).to_bytes(8, "little"))
    digest.update(work)


class ItemLog:
    """The items a hosted queue was given, in order, while they are all strings.

    Kept by the queue's actor so that a job checkpoint can name work items by index. A
    queue that is given anything else (examples) stops keeping it. During a restore it
    also takes the items the restoring program enqueues again (see the module).
    """

    def __init__(self) -> None:
        self.values: list[Any] | None = []
        self.first: dict[bytes, int] = {}
        self.digest = hashlib.sha256()
        #: A restore waiting for the program's items: the queue's snapshot.
        self.expect: dict[str, Any] | None = None
        self.restored: dict[str, Any] | None = None

    def note(self, values: list[Any]) -> None:
        """Keep ``values`` (enqueued), or stop keeping items if one is not a string."""
        if self.values is None:
            return
        for value in values:
            if not isinstance(value, (str, bytes)):
                self.values = None
                self.first.clear()
                return
            work = work_item_bytes(value)
            self.first.setdefault(work, len(self.values))
            self.values.append(value)
            _digest_update(self.digest, work)

    # -- snapshot ----------------------------------------------------------------------

    def snapshot(self, queue: Any, book: LeaseBook, name: str) -> dict[str, Any]:
        """The queue's state for a job checkpoint (synchronous: one instant).

        Raises:
            FailedPreconditionError: the queue holds elements that are not work items
                (examples), or a restore of it is still waiting for the program's items.
        """
        if self.expect is not None:
            raise FailedPreconditionError(
                f"shared queue '{name}' is still being restored: the program has not "
                f"enqueued its {self.expect['total']} items again yet"
            )
        values = self.values
        if values is None:
            if queue.size() == 0 and not queue._enqueuers:
                return {"examples": True}
            raise FailedPreconditionError(
                f"shared queue '{name}' holds {queue.size()} element(s) that are not work "
                "items: a job checkpoint saves work queues (queues of strings that readers "
                "lease from) and empty queues"
            )
        if queue._enqueuers:
            raise FailedPreconditionError(
                f"shared queue '{name}' has enqueues waiting for room: a job checkpoint "
                "needs its work queues' enqueues done (give them no capacity limit)"
            )
        if type(queue).__name__ not in ("FIFOQueue", "PaddingFIFOQueue"):
            raise FailedPreconditionError(
                f"shared queue '{name}' is a {type(queue).__name__}: a job checkpoint "
                "saves work queues that are FIFOQueues"
            )
        total = len(values)
        # A FIFO work queue holds the newest items it was given, in order: leases take
        # from its front and a withdrawn dequeue puts its elements back at the front.
        start = total - queue.size()
        leases = []
        held = book.job_leases()
        for lease in held:
            index = self.first.get(work_item_bytes(lease.item))
            if index is None:  # pragma: no cover - every leased item went through note()
                raise FailedPreconditionError(
                    f"shared queue '{name}': leased item {lease.item!r} was never enqueued"
                )
            position, position_offset = lease.resume if lease.resume is not None else (b"", 0)
            leases.append([index, sorted(lease.consumed), lease.offset, position, position_offset])
        snapshot = {
            "total": total,
            "digest": self.digest.digest(),
            "queued": [start, total],
            "leases": leases,
        }
        schedule = book.job_schedule(held)
        if schedule is not None:
            snapshot["schedule"] = schedule  # a deterministic job: who reads which item
        return snapshot

    # -- restore -----------------------------------------------------------------------

    def restore(self, snapshot: dict[str, Any], name: str) -> None:
        """Wait for the program's items to restore ``snapshot`` (see the module).

        Raises:
            FailedPreconditionError: the queue was used before, or restored from another
                checkpoint.
        """
        if self.expect == snapshot or self.restored == snapshot:
            return  # another rank of the restoring job asked first
        if self.expect is not None or self.restored is not None or self.values != []:
            raise FailedPreconditionError(
                f"shared queue '{name}' was used (or restored) before this rank restored "
                "it from its job checkpoint: start the restored job in a new namespace, or "
                "delete the old job first (RayCluster.delete_job)"
            )
        if "examples" in snapshot:
            self.restored = snapshot
            return
        self.expect = snapshot
        self.values = []
        self.digest = hashlib.sha256()

    async def enqueue(self, queue: Any, book: LeaseBook, verb: str, args: tuple[Any, ...]) -> Any:
        """Run an enqueue verb on ``queue``, keeping its items; while a restore waits,
        the first items rebuild the checkpointed queue (see the module).

        Raises:
            InvalidArgumentError: the items are not those of the checkpointed job.
        """
        values = [args[0]] if verb == "enqueue" else args[0]
        if not isinstance(values, (list, tuple)):
            if self.expect is not None:
                raise InvalidArgumentError(
                    f"shared queue '{book._name}' is restored from a job checkpoint: "
                    "enqueue its work items again as a list of strings"
                )
            self.values = None
            return await getattr(queue, verb)(*args)
        expect = self.expect
        if expect is None:
            self.note(list(values))
            return await getattr(queue, verb)(*args)
        want = int(expect["total"]) - len(self.values or [])
        replay, rest = list(values[:want]), list(values[want:])
        self.note(replay)
        if self.values is None:
            raise InvalidArgumentError(
                f"shared queue '{book._name}' is restored from a job checkpoint of work "
                "items: enqueue the same strings again"
            )
        if len(self.values) == int(expect["total"]):
            await self._rebuild(queue, book, expect)
        if rest:
            self.note(rest)
            return await queue.enqueue_many(rest)
        return None

    async def _rebuild(self, queue: Any, book: LeaseBook, expect: dict[str, Any]) -> None:
        name = book._name
        if self.digest.digest() != expect["digest"]:
            # Still restoring: the queue takes nothing until the right items come.
            self.values = []
            self.digest = hashlib.sha256()
            raise InvalidArgumentError(
                f"the {expect['total']} items enqueued into shared queue '{name}' are not "
                "those of the checkpointed job: a restored job must enqueue the same work "
                "items, in the same order"
            )
        values = self.values
        assert values is not None
        start, stop = expect["queued"]
        entries = []
        for index, consumed, offset, position, position_offset in expect["leases"]:
            resume = (bytes(position), int(position_offset)) if position else None
            entries.append((values[index], set(consumed), int(offset), resume))
        self.expect, self.restored = None, expect
        # Leases first: they were taken before the rest.
        book.job_restore(entries, expect.get("schedule"))
        if stop > start:
            await queue.enqueue_many(list(values[start:stop]))

    async def lease_items(self, within: float) -> list[bytes] | None:
        """The work items readers had taken at the restored checkpoint (its leases', and
        those done before), once the program has enqueued the items again (``None`` if
        that takes longer than ``within`` s): the files a restoring rank's pipeline may
        hold records of (a rank in the epoch's tail holds records of items done)."""
        deadline = time.monotonic() + within
        while self.restored is None or self.values is None:
            if time.monotonic() > deadline:
                return None
            await asyncio.sleep(_ITEMS_POLL)
        restored, values = self.restored, self.values
        if "examples" in restored:
            return []
        taken = {int(lease[0]) for lease in restored["leases"]}
        taken.update(range(int(restored["queued"][0])))
        return [work_item_bytes(values[index]) for index in sorted(taken)]

    def close_check(self, name: str) -> None:
        """A close while a restore still waits for items: the program gave too few.

        Raises:
            InvalidArgumentError: naming how many items the checkpoint's job had.
        """
        expect = self.expect
        if expect is not None:
            raise InvalidArgumentError(
                f"shared queue '{name}' is closed after {len(self.values or [])} item(s), "
                f"but the checkpointed job had enqueued {expect['total']}: a restored job "
                "must enqueue the same work items again"
            )


def check_job_tree(tree: Any) -> dict[str, Any]:
    """Check the shape of a decoded job checkpoint; return it.

    Raises:
        InvalidArgumentError: it is not a job checkpoint, or is malformed (a work item
            index out of range, a field of the wrong type).
    """
    if not isinstance(tree, dict) or tree.get("format") != JOB_FORMAT:
        raise InvalidArgumentError(
            "a Session with a cluster restores job checkpoints (from sess.checkpoint() "
            "in a Session with a cluster); this is not one"
        )
    try:
        ranks, queues = tree["ranks"], tree["queues"]
        if not isinstance(ranks, list) or not all(isinstance(p, dict) for p in ranks):
            raise TypeError("ranks")
        for r, part in enumerate(ranks):
            pipeline = part.get("pipeline")
            if pipeline is not None and not isinstance(pipeline, dict):
                raise TypeError(f"rank {r}'s pipeline")
        if int(tree["world_size"]) != len(ranks) or not isinstance(queues, dict):
            raise TypeError("world_size")
        for name, snap in queues.items():
            _check_snapshot(name, snap)
    except (TypeError, KeyError, ValueError, IndexError) as exc:
        raise InvalidArgumentError(f"malformed job checkpoint ({exc})") from None
    return tree


def held_records(pipeline: dict[str, Any], rank: int) -> dict[bytes, list[int]]:
    """The records a rank's saved pipeline holds (its queues' and batchers' record
    references), by work item: what its restored buffers hold, so its leases skip them.

    Raises:
        InvalidArgumentError: a section of references is malformed.
    """
    held: dict[bytes, set[int]] = {}
    todo: list[Any] = [pipeline]
    try:
        while todo:
            node = todo.pop()
            if isinstance(node, dict):
                if node.keys() == _REF_SECTION:
                    _held_section(node, held)
                    continue
                todo.extend(node.values())
            elif isinstance(node, (list, tuple)):
                todo.extend(node)
    except (TypeError, ValueError, IndexError, OverflowError) as exc:
        raise InvalidArgumentError(
            f"malformed job checkpoint (rank {rank}'s pipeline: record references: {exc})"
        ) from None
    return {work: sorted(records) for work, records in held.items()}


def _held_section(section: dict[str, Any], held: dict[bytes, set[int]]) -> None:
    works = section["works"]
    if not isinstance(works, list) or not all(isinstance(w, bytes) for w in works):
        raise TypeError("work items")
    index = np.asarray(section["work"])
    records = np.asarray(section["record"])
    crcs = np.asarray(section["crc32c"])
    if index.ndim != 1 or not index.shape == records.shape == crcs.shape:
        raise ValueError("reference arrays differ in length")
    if not len(index):
        return
    if index.dtype.kind not in "iu" or records.dtype.kind not in "iu":
        raise TypeError("reference arrays")
    if int(index.min()) < 0 or int(index.max()) >= len(works) or int(records.min()) < 0:
        raise IndexError("reference out of range")
    for i, record in zip(index.tolist(), records.tolist(), strict=True):
        held.setdefault(works[i], set()).add(record)


def _check_snapshot(name: str, snap: Any) -> None:
    if not isinstance(snap, dict):
        raise TypeError(name)
    if "examples" in snap:
        return
    total = snap["total"]
    if not isinstance(total, int) or total < 0 or not isinstance(snap["digest"], bytes):
        raise TypeError(f"{name}: total")
    start, stop = snap["queued"]
    if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop == total):
        raise ValueError(f"{name}: queued items [{start!r}, {stop!r}) of {total}")
    for lease in snap["leases"]:
        index, consumed, offset, position, position_offset = lease
        if not (isinstance(index, int) and 0 <= index < total):
            raise IndexError(f"{name}: work item index {index!r} of {total}")
        if not isinstance(consumed, list) or not all(isinstance(k, bytes) for k in consumed):
            raise TypeError(f"{name}: acknowledged keys")
        if not isinstance(offset, int) or not isinstance(position_offset, int):
            raise TypeError(f"{name}: offsets")
        if not isinstance(position, bytes):
            raise TypeError(f"{name}: position")
    schedule = snap.get("schedule")
    if schedule is not None:
        world, after = schedule["world_size"], schedule["position"]
        positions = schedule["positions"]
        if not (isinstance(world, int) and world > 0 and isinstance(after, int) and after >= 0):
            raise ValueError(f"{name}: schedule of {world!r} ranks at item {after!r}")
        if not isinstance(positions, list) or len(positions) != len(snap["leases"]):
            raise ValueError(f"{name}: schedule positions")
        if not all(isinstance(p, int) and -1 <= p < after for p in positions):
            raise ValueError(f"{name}: schedule position out of range")


class _Round:
    """One collective checkpoint: who arrived, and the outcome."""

    def __init__(self, number: int, world_size: int, deadline: float) -> None:
        self.number = number
        #: The queues were told which ranks it waits for (and must hear that it ended).
        self.told = False
        self.world_size = world_size
        self.deadline = deadline
        self.parts: dict[int, Any] = {}
        self.queues: dict[str, Any] = {}
        self.done = asyncio.Event()
        self.result: tuple[Any, ...] | None = None
        self.watcher: asyncio.Task[None] | None = None


class CheckpointHost:
    """The barrier of a job's collective checkpoints (see the module).

    One per job, inside the job's registry actor (:class:`~.hosting.JobHost`).
    """

    def __init__(self) -> None:
        self._rounds: dict[int, _Round] = {}

    async def arrive(
        self,
        number: int,
        rank: int,
        world_size: int,
        part: Any,
        queues: dict[str, Any],
        timeout: float | None,  # noqa: ASYNC109 - the barrier's bound, for every rank
    ) -> tuple[Any, ...]:
        """Rank ``rank`` takes its ``number``-th checkpoint; wait for the others.

        Returns:
            ``("ok", tree)`` (the same for every rank) or ``("error", type name,
            message)``.
        """
        loop = asyncio.get_running_loop()
        limit = math.inf if timeout is None else timeout
        round_ = self._rounds.get(number)
        if round_ is None:
            round_ = self._rounds[number] = _Round(number, world_size, loop.time() + limit)
            round_.watcher = asyncio.ensure_future(self._watch(number, round_))
            for old in [n for n in self._rounds if n < number - 1]:
                del self._rounds[old]
        if round_.result is None:
            round_.parts[rank] = part
            round_.queues.update(queues)
            if len(round_.parts) == round_.world_size:
                await self._cut(round_)
        await round_.done.wait()
        assert round_.result is not None
        return round_.result

    async def _watch(self, number: int, round_: _Round) -> None:
        """Fail the round when a missing rank is dead, or at its deadline."""
        loop = asyncio.get_running_loop()
        sent: set[int] | None = None
        while round_.result is None:
            missing = set(range(round_.world_size)) - set(round_.parts)
            if not missing:
                return
            if missing != sent:
                # A missing rank whose reader waits for the arrived ranks' items takes
                # part from its lease call (see LeaseBook.checkpoint_wanted).
                self._tell_queues(round_, number, sorted(missing))
                round_.told, sent = True, missing
            if loop.time() >= round_.deadline:
                self._finish(
                    round_,
                    ("error", "TimeoutError", f"job checkpoint {number}: rank(s) "
                     f"{sorted(missing)} did not call checkpoint() within the timeout"),
                )  # fmt: skip
                return
            dead = await self._dead_ranks(round_)
            if dead & missing:
                self._finish(
                    round_,
                    ("error", "FailedPreconditionError", f"job checkpoint {number}: rank(s) "
                     f"{sorted(dead & missing)} died before calling checkpoint()"),
                )  # fmt: skip
                return
            await asyncio.sleep(min(_DEATH_POLL, max(0.0, round_.deadline - loop.time())))

    async def _dead_ranks(self, round_: _Round) -> set[int]:
        dead: set[int] = set()
        for handle in list(round_.queues.values()):
            try:
                status = await handle.lease_status.remote()
            except Exception:  # a queue gone is the cut's problem, not the watch's
                continue
            for client in status["dead"]:
                rank = client.partition("-")[0]
                if rank.isdigit():
                    dead.add(int(rank))
        return dead

    async def _cut(self, round_: _Round) -> None:
        names = sorted(round_.queues)
        try:
            replies = await asyncio.gather(
                *(round_.queues[name].job_snapshot.remote() for name in names)
            )
        except Exception as exc:  # a queue's actor died: every rank learns it
            self._finish(
                round_,
                ("error", "FailedPreconditionError",
                 f"job checkpoint: a shared queue's actor failed: {type(exc).__name__}"),
            )  # fmt: skip
            return
        snapshots = {}
        for name, reply in zip(names, replies, strict=True):
            if reply[0] != "ok":
                self._finish(round_, reply)
                return
            snapshots[name] = reply[1]
        tree = {
            "format": JOB_FORMAT,
            "world_size": round_.world_size,
            "queues": snapshots,
            "ranks": [round_.parts[r] for r in range(round_.world_size)],
        }
        self._finish(round_, ("ok", tree))

    @staticmethod
    def _tell_queues(round_: _Round, number: int, missing: list[int]) -> None:
        for handle in list(round_.queues.values()):
            with contextlib.suppress(Exception):  # a queue gone is the cut's problem
                handle.checkpoint_wanted.remote(number, missing)

    def _finish(self, round_: _Round, result: tuple[Any, ...]) -> None:
        if round_.result is None:
            round_.result = result
            round_.done.set()
            if round_.told:
                self._tell_queues(round_, round_.number, [])
            if round_.watcher is not None and round_.watcher is not asyncio.current_task():
                round_.watcher.cancel()
