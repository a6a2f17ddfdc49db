"""The waiter algorithm shared by every queue type (SPEC §2.3, §2.4).

A queue keeps two arrival-ordered lists of blocked *attempts*: the enqueue side (enqueue,
enqueue_many and a plain close) and the dequeue side (dequeue, dequeue_many, dequeue_up_to).
Only the attempt at the head of a side may act, which gives TensorFlow's strict arrival
order and head-of-line blocking.

Invariant: elements only ever move in the task that asked for them. A blocked attempt is
*woken* when the head of its side can make progress; it then changes the queue itself,
synchronously, in its own task. Nothing is ever handed to a task that is about to be
cancelled, so cancellation can only strike while an attempt is waiting, and then the attempt
simply withdraws: a cancelled enqueue keeps what it inserted in earlier rounds and inserts
nothing more; a cancelled dequeue puts what it already took back at the front, in order.

The common, non-blocking case takes a fast path that allocates nothing and does not yield.
To stay cooperative, every :data:`YIELD_INTERVAL`-th operation on a queue yields first
(passes a scheduling point where pending cancellation is delivered; see
:mod:`asyncreader._yields`).

Beside this module: the attempts and their wakeups (:mod:`.attempts`), the batched
dequeues (:mod:`.batched`), how a queue saves and restores itself (:mod:`.checkpointing`)
and what ``statistics()`` returns (:mod:`.statistics`). Each queue type supplies its storage
(:mod:`.fifo`, :mod:`.random_shuffle`, :mod:`.padding`, :mod:`.priority`).
"""

from __future__ import annotations

import contextlib
import itertools
import sys
from collections import deque
from time import monotonic as _monotonic
from typing import TYPE_CHECKING, Any, ClassVar, Generic, SupportsIndex

import anyio
import anyio.lowlevel

from .._errors import (
    InvalidArgumentError,
    OutOfRangeError,
    QueueClosedError,
)
from .._runtime import input_waits
from .._runtime.checkpoint import current_stage
from .._runtime.resources import SharedResource
from .._runtime.stages import StageState, StageStatistics
from .._typing import ElementT
from .._yields import yield_budget
from .attempts import BATCH, CLOSE, ENQUEUE, SINGLE, Attempt, new_wakeup
from .batched import BatchedDequeue
from .checkpointing import QueueCheckpointing
from .elements import as_int
from .record_refs import RecordRefsArg, RefLayout, as_record_refs
from .statistics import QueueStatistics

if TYPE_CHECKING:
    from collections.abc import Callable

    from .elements import TypedCodec, UntypedCodec

__all__ = ["YIELD_INTERVAL", "QueueBase", "QueueStatistics"]

#: How many operations on one queue may complete without a scheduling point (the queue's
#: yield budget). asyncio.Queue never yields on its fast path; trio's channels always do. A
#: yield costs about as much as five fast-path round trips, so one in every 256 operations
#: adds about 4% to the round trip, while bounding how long a busy producer or consumer
#: holds the event loop (well under a millisecond) and how late it notices a cancellation.
YIELD_INTERVAL = 256

_UNBOUNDED = sys.maxsize

_PENDING: Any = object()


def _normalize_capacity(capacity: SupportsIndex | None) -> int:
    if capacity is None:
        return _UNBOUNDED
    value = as_int(capacity)
    if value is None:
        raise InvalidArgumentError(f"capacity must be an int or None, got {capacity!r}")
    return _UNBOUNDED if value < 0 else value


class QueueBase(QueueCheckpointing, BatchedDequeue, SharedResource, Generic[ElementT]):
    """Behaviour common to every queue type; subclasses supply the storage.

    Storage hooks: :attr:`_buf` (anything with ``len``), the callables :attr:`_push` (one
    element), :attr:`_push_list` and :attr:`_pop` (one element), and the methods
    :meth:`_pop_list` and :meth:`_put_back`. :attr:`_hold` is how many elements must stay
    stored while the queue is open (RandomShuffleQueue's ``min_after_dequeue``);
    :attr:`_atomic_many` makes batched dequeues all-or-nothing while open (PriorityQueue).

    A subclass builds its codec from its own arguments and passes it here with ``capacity``,
    ``name`` and ``record_refs``. Its constructor also declares ``shared_name=`` and
    ``container=``, only so that its signature shows them: :class:`SharedResourceMeta`
    takes them before ``__init__`` runs, so they always arrive as ``None``.
    """

    _resource_kind: ClassVar[str] = "queue"
    #: Sessions save queues built in them in their checkpoints under this kind.
    _checkpoint_kind: ClassVar[str] = "queue"
    #: The type name TensorFlow quotes in enqueue and single-dequeue messages.
    _kind_name: ClassVar[str] = "Queue"
    #: The type name quoted in dequeue_many / dequeue_up_to messages.
    _kind_name_many: ClassVar[str] = "Queue"
    _atomic_many: bool = False
    _counter: ClassVar[itertools.count[int]] = itertools.count(1)

    _buf: Any
    # Set per instance to bound methods of the storage, so the fast path makes one call.
    _push: Callable[[Any], None]
    _push_list: Callable[[list[Any]], None]
    _pop: Callable[[], Any]

    def __init__(
        self,
        capacity: SupportsIndex | None,
        codec: TypedCodec | UntypedCodec,
        name: str | None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        self._cap = _normalize_capacity(capacity)
        self._codec = codec
        self._typed = codec.typed
        if name is not None and not isinstance(name, str):
            raise InvalidArgumentError(f"name must be a str, got {name!r}")
        self._given_name = name
        self._auto_name = f"{type(self).__name__}_{next(QueueBase._counter)}"
        self._closed = False
        self._hold = 0
        self._enqueuers: deque[Attempt] = deque()
        self._dequeuers: deque[Attempt] = deque()
        self._yield_due = yield_budget(YIELD_INTERVAL)
        self._peak = 0
        self._total_in = 0
        self._total_out = 0
        # Seconds blocked by attempts that finished waiting, on each side.
        self._blocked_in = 0.0
        self._blocked_out = 0.0
        # Reader records in the elements are saved as references (see RecordRefs).
        refs = as_record_refs(record_refs)
        self._refs = None if refs is None else RefLayout(refs, self._codec, self.name)

    # -- attributes --------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's name, quoted in its error messages.

        The ``name=`` given at construction, else the ``shared_name``, else a process-unique
        ``"<Kind>_<n>"``.
        """
        return self._given_name or self._shared_name or self._auto_name

    @property
    def capacity(self) -> int | None:
        """Maximum number of stored elements; ``None`` when unbounded."""
        return None if self._cap == _UNBOUNDED else self._cap

    @property
    def dtypes(self) -> list[Any] | None:
        """The component dtypes (numpy dtypes; ``object`` for strings), or ``None`` if untyped."""
        d = self._codec.dtypes
        return None if d is None else list(d)

    @property
    def shapes(self) -> list[tuple[int | None, ...]] | None:
        """The component shapes (``None`` for an unknown dimension), or ``None`` if not given."""
        s = self._codec.shapes
        return None if s is None else list(s)

    @property
    def names(self) -> list[str] | None:
        """The component names, or ``None`` when elements are not dicts."""
        n = self._codec.names
        return None if n is None else list(n)

    def size(self) -> int:
        """Return the number of stored elements.

        Elements already taken by a ``dequeue_many`` that is still waiting for more are
        not counted, as in TensorFlow.
        """
        return len(self._buf)

    def is_closed(self) -> bool:
        """Return whether the queue is closed (a queued plain close counts once it ran)."""
        return self._closed

    def statistics(self) -> QueueStatistics:
        """Return a snapshot of the queue's state."""
        return QueueStatistics(
            size=len(self._buf),
            capacity=self.capacity,
            closed=self._closed,
            tasks_waiting_enqueue=len(self._enqueuers),
            tasks_waiting_dequeue=len(self._dequeuers),
            peak_size=self._peak,
            total_enqueued=self._total_in,
            total_dequeued=self._total_out,
            seconds_blocked_enqueue=self._seconds_blocked(self._enqueuers, self._blocked_in),
            seconds_blocked_dequeue=self._seconds_blocked(self._dequeuers, self._blocked_out),
        )

    def _seconds_blocked(self, side: deque[Attempt], done: float) -> float:
        """Seconds ``side``'s attempts have waited: ``done`` plus those waiting now."""
        if side:
            now = _monotonic()
            done += sum(now - w.since for w in side if w.since)
        return done

    def _blocked(self) -> tuple[int, int]:
        """Return how many enqueue-side and dequeue-side attempts are blocked right now.

        Unlike ``statistics()``, attempts already woken (about to run) are not counted,
        so a snapshot taken between a wakeup and its task running shows no false stall.
        A woken ``dequeue_many`` that will take what is there and wait again still counts:
        taking elements one by one as they arrive, it is starved all along.
        O(waiters): for diagnostics, never the hot path.
        """
        return (
            sum(1 for w in self._enqueuers if not w.woken),
            sum(1 for w in self._dequeuers if not w.woken or self._still_short(w)),
        )

    def _still_short(self, w: Attempt) -> bool:
        """Whether woken dequeue ``w``, still in its wait, will find too few elements."""
        if not w.since or self._closed:
            return False
        return len(self._buf) - self._hold < w.need - len(w.taken)

    def _stage_statistics(self) -> StageStatistics:
        """Where the queue's tasks are, for the runtime's stage statistics."""
        stats = self.statistics()
        enq, deq = self._blocked()
        state: StageState
        if enq and deq:
            state = "deadlocked"
        elif enq:
            state = "full"
        elif deq:
            state = "starved"
        else:
            state = "closed" if stats.closed else "idle"
        return StageStatistics("queue", self.name, state, enq, deq, 0, stats)

    def __repr__(self) -> str:
        cap = "unbounded" if self._cap == _UNBOUNDED else str(self._cap)
        return (
            f"<{type(self).__name__} {self.name!r} size={len(self._buf)} capacity={cap} "
            f"closed={self._closed} waiting_enqueue={len(self._enqueuers)} "
            f"waiting_dequeue={len(self._dequeuers)}>"
        )

    # -- SharedResource ----------------------------------------------------------------------

    def _shared_config(self) -> dict[str, object]:
        config: dict[str, object] = {"capacity": self.capacity}
        config.update(self._codec.config())
        return config

    async def _session_close(self) -> None:
        await self.close(cancel_pending_enqueues=True)

    # -- storage hooks -----------------------------------------------------------------------

    def _pop_list(self, k: int) -> list[Any]:
        raise NotImplementedError

    def _put_back(self, elems: list[Any]) -> None:
        raise NotImplementedError

    def _stored_rows(self, taken: list[Any]) -> list[Any]:
        """Return the stored elements, with ``taken`` put back, in the order that
        :attr:`_push_list` must insert them to rebuild the storage (FIFO storage)."""
        return taken + list(self._buf)

    # -- errors ------------------------------------------------------------------------------

    def _closed_error(self) -> QueueClosedError:
        return QueueClosedError(f"{self._kind_name} '{self.name}' is closed.")

    def _insufficient(self, requested: int, size: int, many: bool) -> OutOfRangeError:
        kind = self._kind_name_many if many else self._kind_name
        return OutOfRangeError(
            f"{kind} '{self.name}' is closed and has insufficient elements "
            f"(requested {requested}, current size {size})"
        )

    # -- wakeups -----------------------------------------------------------------------------

    def _notify(self) -> None:
        """Wake the head attempt of each side if it can now make progress."""
        if self._enqueuers and self._enqueuers[0].ghost:
            self._run_ghosts()
        if self._enqueuers:
            w = self._enqueuers[0]
            if not w.woken and (w.kind == CLOSE or self._closed or len(self._buf) < self._cap):
                w.woken = True
                w.event.set()  # type: ignore[union-attr]
        if self._dequeuers:
            w = self._dequeuers[0]
            if not w.woken and self._dequeue_ready(w):
                w.woken = True
                w.event.set()  # type: ignore[union-attr]

    def _dequeue_ready(self, w: Attempt) -> bool:
        if self._closed:
            return True
        if self._atomic_many:
            return len(self._buf) - self._hold >= w.need - len(w.taken)
        return len(self._buf) > self._hold

    def _set_closed(self) -> None:
        self._closed = True
        self._hold = 0

    async def _wait(self, w: Attempt) -> None:
        event = w.event = new_wakeup()
        w.woken = False
        # Time blocked is measured per wait, never per element: two clock reads beside a
        # wakeup and a task switch.
        w.since = since = _monotonic()
        # A watched task (a ranked session's acknowledging task) blocked taking elements
        # out waits for input: see input_waits.
        waiter = input_waits.enter() if input_waits.watched and w.kind >= SINGLE else None
        try:
            stage = current_stage()
            if stage is None:
                await event.wait()
                return
            # A stage task blocked here holds nothing but ``w``: a checkpoint may be taken.
            with stage.blocked(self, w, dequeue=w.kind in (SINGLE, BATCH)):
                await event.wait()
        finally:
            input_waits.leave(waiter)
            w.since = 0.0
            if w.kind >= SINGLE:  # dequeues (SINGLE, BATCH); REREAD never waits
                self._blocked_out += _monotonic() - since
            else:
                self._blocked_in += _monotonic() - since

    def _enqueue_waits(self, count: int) -> bool:
        """Whether an enqueue of ``count`` elements would wait for room right now."""
        return not self._closed and (bool(self._enqueuers) or len(self._buf) + count > self._cap)

    def _note_inserted(self, count: int) -> None:
        self._total_in += count
        size = len(self._buf)
        if size > self._peak:
            self._peak = size

    # -- enqueue -----------------------------------------------------------------------------

    async def enqueue(self, vals: Any) -> None:
        """Add one element, waiting while the queue is full.

        Args:
            vals: The element: any object for an untyped queue; for a typed queue a tuple
                of components, a dict keyed by ``names``, or the bare value of a
                one-component queue. A :class:`~asyncreader.RecordBatch` may be a string
                component (a vector of its records), never the whole element of a typed
                queue: it is a batch, for :meth:`enqueue_many`.

        Raises:
            InvalidArgumentError: the element does not match dtypes / shapes / names
                (nothing is enqueued).
            QueueClosedError: the queue is closed, or was closed with
                ``cancel_pending_enqueues=True`` while this call waited.
        """
        elem = self._codec.encode_one(vals) if self._typed else vals
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if not self._enqueuers:
            if self._closed:
                raise self._closed_error()
            if len(self._buf) < self._cap:
                self._push(elem)
                self._total_in += 1
                if len(self._buf) > self._peak:
                    self._peak = len(self._buf)
                if self._dequeuers:
                    self._notify()
                return
        await self._enqueue_slow([elem])

    def enqueue_nowait(self, vals: Any) -> None:
        """Add one element if there is room right now and no enqueue is waiting.

        Raises:
            anyio.WouldBlock: the queue is full or earlier enqueues are waiting.
            InvalidArgumentError: as for :meth:`enqueue`.
            QueueClosedError: the queue is closed.
        """
        elem = self._codec.encode_one(vals) if self._typed else vals
        if self._enqueuers:
            raise anyio.WouldBlock
        if self._closed:
            raise self._closed_error()
        if len(self._buf) >= self._cap:
            raise anyio.WouldBlock
        self._push(elem)
        self._note_inserted(1)
        if self._dequeuers:
            self._notify()

    async def enqueue_many(self, vals: Any) -> None:
        """Add a batch of elements, inserting progressively as room frees.

        Not atomic (as in TensorFlow): as many elements as fit are inserted at once and
        are visible to consumers; the rest follow as room frees, ahead of every later
        enqueue. The batch may be larger than the capacity. If the call is cancelled
        part-way, what it inserted stays and nothing is inserted twice. An empty batch
        returns at once, even on a closed queue.

        Args:
            vals: For an untyped queue, a sequence of elements. For a typed queue, the
                components (tuple / dict / bare value) each stacked along axis 0.
                A :class:`~asyncreader.RecordBatch` (from ``read_batch``) is a string
                component holding its records; given as the whole of ``vals`` it is the
                two components ``(keys, values)``, exactly what ``read_up_to`` returns
                (an untyped queue gets one ``(key, value)`` tuple per record). Either
                way it becomes ``bytes`` in one bulk conversion.

        Raises:
            InvalidArgumentError: the batch does not match dtypes / shapes / names, or the
                components' batch sizes differ, or a whole RecordBatch is given to a queue
                whose elements are not two components (nothing is enqueued).
            QueueClosedError: the queue is closed, or was closed with
                ``cancel_pending_enqueues=True`` while this call waited (elements inserted
                before that stay).
        """
        items = self._codec.encode_many(vals)
        if not items:
            return
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if not self._enqueuers:
            if self._closed:
                raise self._closed_error()
            if len(self._buf) + len(items) <= self._cap:
                self._push_list(items)
                self._note_inserted(len(items))
                if self._dequeuers:
                    self._notify()
                return
        await self._enqueue_slow(items)

    def enqueue_many_nowait(self, vals: Any) -> None:
        """Add a whole batch if it fits right now (all or nothing).

        Raises:
            anyio.WouldBlock: the batch does not fit or earlier enqueues are waiting.
            InvalidArgumentError: as for :meth:`enqueue_many`.
            QueueClosedError: the queue is closed (and the batch is not empty).
        """
        items = self._codec.encode_many(vals)
        if not items:
            return
        if self._enqueuers:
            raise anyio.WouldBlock
        if self._closed:
            raise self._closed_error()
        if len(self._buf) + len(items) > self._cap:
            raise anyio.WouldBlock
        self._push_list(items)
        self._note_inserted(len(items))
        if self._dequeuers:
            self._notify()

    async def _enqueue_slow(self, items: list[Any]) -> None:
        w = Attempt(ENQUEUE)
        w.items = items
        self._enqueuers.append(w)
        try:
            while True:
                if self._enqueuers and self._enqueuers[0] is w and self._run_enqueue(w):
                    return
                await self._wait(w)
                if w.error is not None:
                    raise w.error
        except BaseException:
            self._withdraw(self._enqueuers, w)
            raise

    def _run_enqueue(self, w: Attempt) -> bool:
        """Let head attempt ``w`` make progress; return True when it completed."""
        if self._closed:
            self._enqueuers.popleft()
            self._notify()
            raise self._closed_error()
        room = self._cap - len(self._buf)
        if room > 0:
            items, pos = w.items, w.pos
            end = min(len(items), pos + room)
            if pos == 0 and end == len(items):
                self._push_list(items)
            else:
                self._push_list(items[pos:end])
            self._note_inserted(end - pos)
            w.pos = end
            if end == len(items):
                self._enqueuers.popleft()
                self._notify()
                return True
            if self._dequeuers:
                self._notify()
        return False

    def _return_dequeued(self, result: Any, *, many: bool) -> None:
        """Put back at the front what a dequeue returned to a caller that never got it.

        A queue hosted for other processes calls this when a remote dequeue is withdrawn
        after it completed (the caller was cancelled while the result travelled): the
        elements go back as a cancelled local ``dequeue_many`` puts back its own.
        """
        if self._typed:
            elems = self._codec.encode_many(result) if many else [self._codec.encode_one(result)]
        else:
            elems = list(result) if many else [result]
        if not elems:
            return
        self._put_back(elems)
        self._total_out -= len(elems)
        if len(self._buf) > self._peak:
            self._peak = len(self._buf)
        self._notify()

    def _withdraw(self, side: deque[Attempt], w: Attempt) -> None:
        """Remove a finished, failed or cancelled attempt and pass any wakeup on."""
        with contextlib.suppress(ValueError):  # already removed
            side.remove(w)
        if w.taken:
            taken, w.taken = w.taken, []
            self._put_back(taken)
            # Put back while others refilled the queue, it may exceed its former peak.
            if len(self._buf) > self._peak:
                self._peak = len(self._buf)
        self._notify()

    # -- close -------------------------------------------------------------------------------

    async def close(self, cancel_pending_enqueues: bool = False) -> None:
        """Close the queue: no more enqueues; dequeues drain what is left, then fail.

        A plain close queues behind enqueues that are already waiting, as in TensorFlow:
        it takes effect once they have finished. With ``cancel_pending_enqueues=True`` it
        takes effect at once, fails every waiting enqueue (and waiting plain close) with
        :class:`QueueClosedError`, never raises, and never waits, so it also works from
        cleanup code whose scope is cancelled.

        Args:
            cancel_pending_enqueues: Close immediately and fail pending enqueues.

        Raises:
            QueueClosedError: a plain close found the queue already closed (TensorFlow's
                ``Queue '<name>' is already closed.``), or a waiting plain close was
                overtaken by ``close(cancel_pending_enqueues=True)``.
        """
        if cancel_pending_enqueues:
            self._set_closed()
            waiting = list(self._enqueuers)
            self._enqueuers.clear()
            for w in waiting:
                w.error = QueueClosedError("Enqueue operation was cancelled")
                if w.event is not None:
                    w.woken = True
                    w.event.set()
            self._notify()
            return
        if not self._enqueuers:
            self._run_close()
            return
        w = Attempt(CLOSE)
        self._enqueuers.append(w)
        try:
            while True:
                if self._enqueuers and self._enqueuers[0] is w:
                    self._enqueuers.popleft()
                    self._run_close()
                    self._notify()
                    return
                await self._wait(w)
                if w.error is not None:
                    raise w.error
        except BaseException:
            self._withdraw(self._enqueuers, w)
            raise

    def _run_close(self) -> None:
        if self._closed:
            raise QueueClosedError(f"Queue '{self.name}' is already closed.")
        self._set_closed()
        self._notify()

    # -- dequeue -----------------------------------------------------------------------------

    async def dequeue(self) -> ElementT:
        """Remove and return one element, waiting while the queue is empty.

        Returns:
            The element: the object itself for an untyped queue; for a typed queue the bare
            value of a one-component queue, a tuple of components, or a dict by ``names``.

        Raises:
            OutOfRangeError: the queue is closed and empty.
        """
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if not self._dequeuers:
            if len(self._buf) > self._hold:
                elem = self._pop()
                self._total_out += 1
                if self._enqueuers:
                    self._notify()
                # Typed as the element type the queue was declared with (Any by default).
                out: ElementT = self._codec.decode_one(elem) if self._typed else elem
                return out
            if self._closed:
                raise self._insufficient(1, len(self._buf), many=False)
        taken = await self._dequeue_slow(1, SINGLE)
        out = self._codec.decode_one(taken[0]) if self._typed else taken[0]
        return out

    def dequeue_nowait(self) -> ElementT:
        """Remove and return one element if one can be taken right now.

        Raises:
            anyio.WouldBlock: no element can be taken now or earlier dequeues are waiting.
            OutOfRangeError: the queue is closed and empty.
        """
        if self._dequeuers:
            raise anyio.WouldBlock
        if len(self._buf) > self._hold:
            elem = self._pop()
            self._total_out += 1
            if self._enqueuers:
                self._notify()
            out: ElementT = self._codec.decode_one(elem) if self._typed else elem
            return out
        if self._closed:
            raise self._insufficient(1, len(self._buf), many=False)
        raise anyio.WouldBlock

    async def _dequeue_slow(self, n: int, kind: int, *, up_to: bool = False) -> list[Any]:
        w = Attempt(kind)
        w.need = n
        w.up_to = up_to
        self._dequeuers.append(w)
        try:
            while True:
                if self._dequeuers and self._dequeuers[0] is w:
                    result = self._run_dequeue(w)
                    if result is not _PENDING:
                        return result  # type: ignore[no-any-return]
                await self._wait(w)
        except BaseException:
            self._withdraw(self._dequeuers, w)
            raise

    def _run_dequeue(self, w: Attempt) -> Any:
        """Let head attempt ``w`` make progress; return its elements or ``_PENDING``."""
        buf = self._buf
        size = len(buf)
        missing = w.need - len(w.taken)
        if self._closed:
            if size >= missing or (w.up_to and size + len(w.taken) > 0):
                w.taken.extend(self._pop_list(min(size, missing)))
                return self._complete(w)
            self._dequeuers.popleft()
            raise self._insufficient(missing, size, many=w.kind != SINGLE)
        available = size - self._hold
        if self._atomic_many and available < missing:
            return _PENDING
        if available > 0:
            w.taken.extend(self._pop_list(min(available, missing)))
            if len(w.taken) == w.need:
                return self._complete(w)
            if self._enqueuers:
                self._notify()
        return _PENDING

    def _complete(self, w: Attempt) -> list[Any]:
        self._dequeuers.popleft()
        taken, w.taken = w.taken, []
        self._total_out += len(taken)
        self._notify()
        return taken
