"""ReaderBase: TensorFlow's reader protocol on anyio (SPEC §3).

A reader takes *work items* (file paths, URLs) from a queue, one at a time, and produces
``(key, value)`` records from them. Subclasses describe a format through hooks:

* ``on_work_started(work)``: a work item was dequeued (open the file, skip a header). An
  error abandons the item: it is not counted and the next read takes a new one.
* ``read_one()``: return one record ``(key, value)``, a last record
  ``(key, value, True)``, or ``None`` at the end of the work item.
* ``read_many(n)`` (optional): return ``(keys, values, at_end)`` with at most ``n``
  records, or ``(batch, at_end)`` with ``batch`` a :class:`~asyncreader.RecordBatch` of at
  most ``n`` records (either way at least one record unless ``at_end``); the default calls
  ``read_one``.
* ``on_work_finished()``: the work item is done (close the file).
* ``reset_state()``: drop everything about the current work item.
* ``serialize_extra()`` / ``restore_extra(extra)``: the reader-specific part of its state.

A hook written as a plain function runs on the shared I/O executor (worker threads, see
:func:`~asyncreader.set_io_threads`), so it may block; one written as a coroutine function is
awaited on the event loop. This is decided once per class. The reader holds a lock while a
hook runs, so one reader never runs two hooks at once (TensorFlow's reader mutex).

A cancelled call never waits for a plain hook's thread: the thread is *abandoned* (a named
pipe with no writer or a server that never answers would pin it for good). Until it
returns, the reader runs no other hook: its next operation first waits for it,
cancellably, then takes its outcome as the cancelled call would have (records it read go to
the buffer, undelivered; an error is raised), so nothing is lost or delivered twice.
Closing the reader meanwhile discards the outcome and interrupts what the thread waits on
where that can be done (a remote file's requests, their retries included): the thread
returns at once, or when its blocking call does, and closes the files it opened.

The built-in file readers use a faster internal path (:mod:`~asyncreader._readers.buffered`):
each executor hop reads a block of megabytes and frames it whole, and the parsed records
wait in the read-ahead buffer (:mod:`~asyncreader._readers.buffer`), from which ``read``,
``read_up_to`` and ``read_batch`` are served on the event loop without a thread hop (for
``read_batch`` the block is framed into a :class:`~asyncreader.RecordBatch`, with no
object per record). Records still in the
buffer are not yet *produced*: they are not counted, and saved state resumes at the first
of them. Record keys are :mod:`~asyncreader._readers.keys`'s; state bytes and their checks
are :mod:`~asyncreader._readers.state`'s.

This module holds the protocol itself: :class:`ReaderBase`'s hooks, verbs, identity and
statistics, lifecycle and locking. The machinery behind the verbs lives in mixins, one
concern each, that :class:`ReaderBase` inherits: the hook path past the buffer
(:mod:`~asyncreader._readers.hook_path`), work items
(:mod:`~asyncreader._readers.work_items`), where saved state resumes
(:mod:`~asyncreader._readers.saved_state`), abandoned hook calls
(:mod:`~asyncreader._readers.abandoned`), and the protocols through which the runtime
(checkpoints, stage statistics) and :class:`~asyncreader.RecordRefs` see a reader
(:mod:`~asyncreader._readers.runtime_protocols`).
"""

from __future__ import annotations

import collections
import dataclasses
import inspect
import warnings
from abc import ABC
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, TypeAlias, TypeVar

import anyio
import anyio.lowlevel

from .._error_policy import MAX_DEAD_LETTERS, DeadLetter, ErrorPolicy, OnError, as_policy
from .._errors import FailedPreconditionError, InvalidArgumentError
from .._io.blocks import block_pool
from .._io.executor import run_detached
from .._runtime.resources import SharedResource
from .._yields import yield_budget
from .abandoned import AbandonedCalls
from .buffer import ReadAheadBuffer, join_batches
from .hook_path import HookPath
from .keys import RecordKeys
from .reserved import check_subclass
from .runtime_protocols import RuntimeProtocols
from .saved_state import SavedState
from .state import ReaderState, encode_tf_proto
from .work import LeasedWork, WorkQueue
from .work_items import WorkItems

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._records.batch import RecordBatch
    from .abandoned import _Pending

__all__ = [
    "ReadManyResult",
    "ReadOneResult",
    "ReaderBase",
    "ReaderStatistics",
    "WorkQueue",
]

T = TypeVar("T")

#: Fast-path reads between two scheduling points (the reader's yield budget): often enough
#: that a consumer served from the buffer lets other tasks run, rarely enough that
#: ``read()`` stays in microseconds.
_YIELD_INTERVAL: Final = 64

#: What ``read_one`` returns: a record, a last record, or ``None`` at the end.
ReadOneResult: TypeAlias = "tuple[bytes, bytes] | tuple[bytes, bytes, bool] | None"
#: What ``read_many`` returns: ``(keys, values, at_end)`` or ``(batch, at_end)``.
ReadManyResult: TypeAlias = "tuple[list[bytes], list[bytes], bool] | tuple[RecordBatch, bool]"

#: How long closing a reader waits for a hook thread a cancelled call abandoned.
_CLOSE_GRACE: Final = 0.5

_HOOKS: Final = (
    "on_work_started",
    "read_one",
    "read_many",
    "on_work_finished",
    "reset_state",
    "restore_extra",
)


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderStatistics:
    """A snapshot of a reader's progress.

    Attributes:
        records_produced: Records delivered (``num_records_produced()``).
        work_units_completed: Work items finished (``num_work_units_completed()``).
        work_units_started: Work items started.
        bytes_read: Bytes read from files (compressed bytes for a compressed file).
        errors: Errors the reader's hooks raised.
        current_work: The work item in progress, or ``None``.
        buffered: Records read ahead and not yet delivered.
        closed: Whether :meth:`ReaderBase.aclose` was called.
        errors_skipped: Bad records and work items skipped under ``on_error`` (see
            :attr:`ReaderBase.dead_letters`).
        abandoned_threads: Worker threads running a hook of this reader that a cancelled
            call abandoned and that have not returned yet (0 or 1; the reader's next
            operation waits for it). They do not count against the I/O executor's limit.
        abandoned_total: Hook calls of this reader abandoned so far.
    """

    records_produced: int
    work_units_completed: int
    work_units_started: int
    bytes_read: int
    errors: int
    current_work: bytes | None
    buffered: int
    closed: bool
    errors_skipped: int = 0
    abandoned_threads: int = 0
    abandoned_total: int = 0


class ReaderBase(
    HookPath,
    WorkItems,
    SavedState,
    AbandonedCalls,
    RuntimeProtocols,
    RecordKeys,
    SharedResource,
    ABC,
):
    """Base of every reader: takes work from a queue and produces ``(key, value)`` records.

    Implements TensorFlow's reader protocol (SPEC §3): work is taken only when none is in
    progress; an error leaves the work item in progress so the next read retries it; an
    error while starting a work item abandons it; empty work items are skipped;
    ``read_up_to`` returns records of one work item only. Subclasses override the hooks
    listed in the module documentation. A reader is an async resource: close it with
    :meth:`aclose` or ``async with``; a Session closes the readers made in it.

    Args:
        name: Shown in messages as ``<Kind> '<name>'``; defaults to the class name.
        on_error: What to do with bad input: ``"raise"`` (the default), ``"skip"`` or an
            :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).
    """

    _resource_kind: ClassVar[str] = "reader"
    #: Sessions save readers built in them in their checkpoints under this kind.
    _checkpoint_kind: ClassVar[str] = "reader"
    #: Whether states use TensorFlow's ``ReaderBaseState`` bytes (no work in progress).
    _tf_state: ClassVar[bool] = False
    _async_hooks: ClassVar[frozenset[str]] = frozenset()
    _has_read_many: ClassVar[bool] = False
    #: Whether :meth:`_reread` can read a record again from its key (built-in readers), so
    #: checkpoints may save queued records as references (:class:`~asyncreader.RecordRefs`).
    _rereadable: ClassVar[bool] = False
    #: Whether :meth:`_reread` blocks (it then runs on the I/O executor).
    _reread_blocks: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        check_subclass(cls)
        # Decide once per class how each hook is called.
        cls._async_hooks = frozenset(
            name for name in _HOOKS if inspect.iscoroutinefunction(getattr(cls, name))
        )
        if inspect.iscoroutinefunction(cls.serialize_extra):
            raise TypeError(
                f"{cls.__name__}.serialize_extra must be a plain function: "
                "serialize_state() is synchronous"
            )
        cls._has_read_many = cls.read_many is not ReaderBase.read_many

    def __init__(
        self,
        name: str | None = None,
        *,
        on_error: OnError = None,
        shared_name: str | None = None,
        container: str | None = None,
    ) -> None:
        # shared_name / container are consumed by SharedResourceMeta before __init__ runs;
        # they are named here so that type checkers accept them.
        del shared_name, container
        self._name = name if name is not None else type(self).__name__
        self._policy = as_policy(on_error)
        self._dead: collections.deque[DeadLetter] = collections.deque(maxlen=MAX_DEAD_LETTERS)
        self._skipped = 0
        self._lock = anyio.Lock(fast_acquire=True)
        self._work: bytes = b""
        self._started = 0
        self._finished = 0
        self._produced = 0
        self._errors = 0
        self._bytes_read = 0
        self._closed = False
        self._yield_due = yield_budget(_YIELD_INTERVAL)
        # Records read and not yet delivered (the buffered path's runs, records put back).
        self._buffer = ReadAheadBuffer()
        # Extra state of a restored, in-progress work item, applied by the next read.
        self._resume: bytes | None = None
        # Hook readers: the hook's extra state from before the records now waiting in the
        # buffer (put back by a failed or cancelled call); None when nothing waits.
        self._pushback_extra: bytes | None = None
        # ... and how many records past that state the buffer's first record is.
        self._pushback_base = 0
        # An error that followed records read_up_to returned: raised by the next call.
        self._deferred: Exception | None = None
        self._scopes: set[anyio.CancelScope] = set()
        # Set by restore_state (synchronous): hook state and files are discarded by the next
        # operation, on the executor.
        self._needs_reset = False
        # A hook call a cancelled operation abandoned: no other hook may run until it
        # returns (it works on the reader's file and framer); its outcome is then applied.
        self._pending: _Pending | None = None
        self._abandoned_total = 0
        # Counts restores and resets: an abandoned call's outcome from before is dropped.
        self._epoch = 0
        # A work item a cancelled call dequeued but did not start: the next take starts it.
        self._taken: bytes | None = None
        # ... and the lease it came with, from a leasing queue (see LeasedWork).
        self._taken_lease: LeasedWork | None = None
        # Keys of a leased item's records delivered elsewhere before: read past, not
        # returned (None: nothing to skip).
        self._skip_keys: set[bytes] | None = None

    # -- hooks (override in subclasses) ----------------------------------------------------

    def on_work_started(self, work: bytes) -> Awaitable[None] | None:
        """Prepare to read work item ``work`` (open the file, skip a header).

        Raising abandons the item: it is not counted and the next read dequeues another.
        """

    def read_one(self) -> ReadOneResult | Awaitable[ReadOneResult]:
        """Return the next record of the current work item.

        Returns:
            ``(key, value)``; ``(key, value, True)`` for a record that is also the last
            one; or ``None`` when the work item has no more records.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement read_one()")

    def read_many(self, n: int) -> ReadManyResult | Awaitable[ReadManyResult]:
        """Return up to ``n`` (>= 1) next records of the current work item.

        Returns:
            ``(keys, values, at_end)``, or ``(batch, at_end)`` with ``batch`` a
            :class:`~asyncreader.RecordBatch` (its records then need no ``bytes`` object
            each on the way to ``read_batch``): at least one record or ``at_end`` true.
        """
        raise NotImplementedError  # never called: the base uses read_one unless overridden

    def on_work_finished(self) -> Awaitable[None] | None:
        """Release what the current work item holds (close the file)."""

    def reset_state(self) -> Awaitable[None] | None:
        """Forget the current work item and everything read from it."""

    def serialize_extra(self) -> bytes:
        """Return the reader-specific part of the state (runs synchronously; keep it cheap)."""
        return b""

    def restore_extra(self, extra: bytes) -> Awaitable[None] | None:
        """Resume from ``extra`` as :meth:`serialize_extra` returned it.

        Called by the first read after :meth:`restore_state`, right after
        ``on_work_started`` has reopened the work item that was in progress.
        """

    # -- verbs -----------------------------------------------------------------------------

    def num_records_produced(self) -> int:
        """Return how many records the reader has delivered."""
        return self._produced

    def num_work_units_completed(self) -> int:
        """Return how many work items the reader has finished."""
        return self._finished

    async def read(self, queue: WorkQueue) -> tuple[bytes, bytes]:
        """Return the next record, taking work items from ``queue`` as needed.

        Args:
            queue: A queue of work items (``str``/``bytes`` paths or URLs).

        Returns:
            ``(key, value)``.

        Raises:
            OutOfRangeError: ``queue`` is closed and empty (the normal end of input).
            NotFoundError: the work item just taken does not exist; it is abandoned.
            DataLossError: the record data is corrupt; the work item stays in progress, so
                every read fails until :meth:`reset`.
            InvalidArgumentError: the queue does not hold single strings.
            TypeError: ``queue`` is not a queue (has no ``dequeue``), for example a list.
            FailedPreconditionError: the reader is closed.
            AsyncReaderError: a hook broke its contract.
        """
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        buffer = self._buffer
        i = buffer.pos
        if i < buffer.n and not self._lock.locked():
            # Served from the read-ahead buffer: no lock, no thread hop.
            buffer.pos = i + 1
            self._produced += 1
            return buffer.keys[i], buffer.values[i]
        record = await self._locked(self._read_locked, queue)
        if self._skip_keys is not None and self._unskipped([record[0]]) == []:
            return await self.read(queue)  # skipped: the leased item's own read goes on
        return record

    async def read_up_to(
        self, queue: WorkQueue, num_records: int
    ) -> tuple[list[bytes], list[bytes]]:
        """Return up to ``num_records`` records, all from one work item.

        Returns fewer when the work item ends first (and at least one record unless the
        queue is exhausted). ``num_records == 0`` returns empty lists at once.

        Cancelled part-way, the call raises and the records it had taken go back to the
        front of the reader's buffer: the next call returns them, uncounted until then, and
        state saved meanwhile resumes at the first of them.

        Args:
            queue: A queue of work items.
            num_records: The most records to return, >= 0.

        Returns:
            ``(keys, values)``, lists of equal length.

        Raises:
            OutOfRangeError: ``queue`` is closed and empty and no record was gathered.
            InvalidArgumentError: ``num_records`` is negative, or the queue does not hold
                single strings.
            TypeError: ``queue`` is not a queue (has no ``dequeue``), for example a list.
            NotFoundError: the work item just taken does not exist; it is abandoned.
            DataLossError: the record data is corrupt. When this call had already gathered
                records, it returns them and the next call raises (TensorFlow drops them but
                counts them as produced).
            FailedPreconditionError: the reader is closed.
            AsyncReaderError: a hook broke its contract.
        """
        if num_records < 0:
            raise InvalidArgumentError(f"num_records must be >= 0, not {num_records}")
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if num_records == 0:
            self._check_open()
            return [], []
        buffer = self._buffer
        i = buffer.pos
        n = buffer.n
        if n - i >= num_records and not self._lock.locked():
            j = i + num_records
            buffer.pos = j
            self._produced += num_records
            if i == 0 and j == n:
                return buffer.keys, buffer.values
            return buffer.keys[i:j], buffer.values[i:j]
        keys, values = await self._locked(self._read_up_to_locked, queue, num_records)
        if self._skip_keys is not None:
            kept = self._unskipped(keys)
            if kept == []:
                return await self.read_up_to(queue, num_records)
            if kept is not None:
                return [keys[i] for i in kept], [values[i] for i in kept]
        return keys, values

    async def read_batch(self, queue: WorkQueue, max_records: int) -> RecordBatch:
        """Return up to ``max_records`` records of one work item as a :class:`RecordBatch`.

        Reads exactly like :meth:`read_up_to` (the same records, keys, counters, state,
        errors and end-of-input rules; cancelled part-way, the records go back to the
        buffer) but hands them over as buffers, with no Python object per record: the
        built-in file readers frame whole blocks into batches. ``max_records == 0``
        returns an empty batch at once.

        Args:
            queue: A queue of work items.
            max_records: The most records to return, >= 0.

        Returns:
            The records; :meth:`RecordBatch.keys` gives their keys.

        Raises:
            OutOfRangeError: ``queue`` is closed and empty and no record was gathered.
            InvalidArgumentError: ``max_records`` is negative, or the queue does not hold
                single strings.
            TypeError: ``queue`` is not a queue (has no ``dequeue``), for example a list.
            NotFoundError: the work item just taken does not exist; it is abandoned.
            DataLossError: the record data is corrupt. When this call had already gathered
                records, it returns them and the next call raises.
            FailedPreconditionError: the reader is closed.
            AsyncReaderError: a hook broke its contract.
        """
        if max_records < 0:
            raise InvalidArgumentError(f"max_records must be >= 0, not {max_records}")
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if max_records == 0:
            self._check_open()
            return join_batches([])
        buffer = self._buffer
        batch = buffer.batch
        if (
            batch is not None
            and len(batch) - buffer.bpos >= max_records
            and not self._lock.locked()
        ):
            # Served from the read-ahead buffer: no lock, no thread hop.
            self._produced += max_records
            return buffer.take_batch(max_records)
        batch = await self._locked(self._read_batch_locked, queue, max_records)
        if self._skip_keys is not None:
            kept = self._unskipped(batch.keys())
            if kept == []:
                return await self.read_batch(queue, max_records)
            if kept is not None:
                return batch.take(kept)
        return batch

    async def reset(self) -> None:
        """Forget all progress: counters to 0, the work item in progress dropped (not put
        back in the queue), files closed.

        Raises:
            FailedPreconditionError: the reader is closed.
        """
        await self._locked(self._reset_locked)

    def serialize_state(self) -> bytes:
        """Return the reader's state as bytes, for :meth:`restore_state`.

        WholeFileReader and IdentityReader return TensorFlow's ``ReaderBaseState`` proto
        bytes. The other readers use asyncreader's versioned format, which also records
        where in the current work item the next undelivered record starts.

        Raises:
            FailedPreconditionError: the reader is closed.
        """
        self._check_open()
        if self._tf_state:
            return encode_tf_proto(
                ReaderState(self._started, self._finished, self._produced, self._work)
            )
        return self._native_state()

    def _lease_position(self) -> tuple[bytes, int] | None:
        """Return the state (asyncreader's format) and the records produced, taken at
        once, while the reader is between operations in a work item; else ``None``.

        A leasing queue reports it as the position of the item (see ``LeasedWork``).
        """
        if (
            self._closed
            or self._lock.locked()
            or self._finished >= self._started
            or self._resume is not None
            or self._pending is not None
        ):
            return None
        return self._native_state(), self._produced

    def restore_state(self, state: bytes) -> None:
        """Restore the state :meth:`serialize_state` returned.

        A fresh reader of the same kind and arguments then continues at exactly the next
        record. Unlike TensorFlow, state with a work item in progress is accepted by the
        readers that use asyncreader's format: the next read reopens the item and seeks
        (compressed files are inflated again from the start and the records before the
        position skipped). WholeFileReader and IdentityReader keep TensorFlow's rules and
        reject it (a :class:`~asyncreader.Session` checkpoint still saves and restores
        their work item in progress, in asyncreader's format).

        Args:
            state: Bytes from :meth:`serialize_state`.

        Raises:
            InvalidArgumentError: the state cannot be parsed, was written by another kind
                of reader or other arguments, has a negative counter, or (TensorFlow's
                format) has work in progress. The reader is reset then.
            FailedPreconditionError: the reader is closed, or an operation is running.
        """
        self._restore(state, native=False)

    # -- identity and statistics -----------------------------------------------------------

    @property
    def name(self) -> str:
        """The reader's name."""
        return self._name

    @property
    def display_name(self) -> str:
        """``<Kind> '<name>'``, as messages name the reader."""
        return f"{type(self).__name__} '{self._name}'"

    @property
    def on_error(self) -> ErrorPolicy:
        """What the reader does with bad input (see :class:`~asyncreader.ErrorPolicy`)."""
        return self._policy

    @property
    def dead_letters(self) -> tuple[DeadLetter, ...]:
        """The bad records and work items skipped under ``on_error``, oldest first (the
        most recent 10,000; ``statistics().errors_skipped`` counts them all)."""
        return tuple(self._dead)

    def statistics(self) -> ReaderStatistics:
        """Return a snapshot of the reader's progress."""
        return ReaderStatistics(
            records_produced=self._produced,
            work_units_completed=self._finished,
            work_units_started=self._started,
            bytes_read=self._bytes_read,
            errors=self._errors,
            current_work=self._work if self._finished < self._started else None,
            buffered=self._buffer.waiting,
            closed=self._closed,
            errors_skipped=self._skipped,
            abandoned_threads=int(self._pending is not None and self._pending.call.running),
            abandoned_total=self._abandoned_total,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        work = f" work={self._work!r}" if self._finished < self._started else ""
        return (
            f"<{type(self).__name__} {self._name!r} {state} records={self._produced} "
            f"work_units={self._finished}/{self._started}{work} buffered={self._buffer.waiting}>"
        )

    def _shared_config(self) -> dict[str, object]:
        return {"name": self._name}

    # -- resource lifecycle ----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the reader: cancel its running operations and close its files.

        Idempotent. Afterwards every verb raises :class:`~asyncreader.FailedPreconditionError`.
        The counters stay readable.
        """
        if self._closed:
            return
        self._closed = True
        self._buffer.clear()
        for scope in list(self._scopes):
            scope.cancel()
        with anyio.CancelScope(shield=True):
            async with self._lock:
                pending, self._pending = self._pending, None
                if pending is not None:
                    # Its outcome is not wanted: its remote requests end now, retries
                    # included (its thread would wait for them for the whole retry budget).
                    pending.call.interrupt()
                    # A call that is merely slow is let finish, so that its files are
                    # closed when aclose returns; one blocked for good is left to close
                    # them itself when it returns.
                    with anyio.move_on_after(_CLOSE_GRACE):
                        await pending.call.wait()
                if (pending is None or not pending.call.discard()) and not (
                    await self._drop_work_state()
                ):
                    await self._close_left_open()
        # Read blocks nothing holds any more are not kept for a reader that is gone.
        block_pool().trim()

    async def _close_left_open(self) -> None:
        """Close what dropping the work state could not within its grace (its calls did
        not start in time: the I/O threads all taken, or the machine that busy).

        A hook call given up on while it ran closes the files itself when it returns;
        otherwise a thread outside the I/O executor does, waited for up to
        :data:`_CLOSE_GRACE`: a closed reader never leaves a file open for good.
        """
        late, self._pending = self._pending, None
        if late is not None:
            late.call.interrupt()
            if late.call.discard():
                return  # its thread drops the state and closes the files when it returns
        call = run_detached(self._release_abandoned)
        with anyio.move_on_after(_CLOSE_GRACE):
            await call.wait()

    async def _session_close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        try:
            leaked = not self._closed and self._has_open_files()
        except Exception:
            return
        if leaked:
            warnings.warn(
                f"{self!r} was never closed and still has an open file",
                ResourceWarning,
                stacklevel=1,
                source=self,
            )

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(f"{self.display_name} is closed")

    # -- locking and calling hooks ---------------------------------------------------------

    async def _locked(self, fn: Callable[..., Awaitable[T]], *args: Any) -> T:
        self._check_open()
        scope = anyio.CancelScope()
        self._scopes.add(scope)
        try:
            with scope:
                async with self._lock:
                    self._check_open()
                    await self._resolve_pending(apply=fn != self._reset_locked)
                    if self._needs_reset:
                        self._needs_reset = False
                        await self._abandon()
                    return await fn(*args)
        finally:
            self._scopes.discard(scope)
        # Only aclose() cancels this scope.
        raise FailedPreconditionError(f"{self.display_name} was closed during the operation")

    async def _call(self, hook: str, *args: Any) -> Any:
        fn = getattr(self, hook)
        if hook in self._async_hooks:
            return await fn(*args)
        return await self._run_blocking(fn, *args)

    async def _reset_locked(self) -> None:
        try:
            await self._abandon()
        finally:
            self._reset_sync()

    def _reset_sync(self) -> None:
        self._deferred = None
        self._started = self._finished = self._produced = 0
        self._work = b""
        self._resume = None
        self._taken = None
        self._taken_lease = None
        self._set_skip(None)
        self._epoch += 1
        self._buffer.clear()

    def _raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    # -- files (built-in readers) ----------------------------------------------------------

    def _close_files(self) -> None:
        """Close whatever files are open (on a worker thread)."""

    def _has_open_files(self) -> bool:
        return False

    def _must_close_files(self) -> bool:
        """Whether dropping the work item's state must close files (on a worker thread)."""
        return self._has_open_files()
