"""ReaderBase: TensorFlow's reader protocol on anyio (SPEC §3).

A reader takes *work items* (file paths, URLs) from a queue, one at a time, and produces
``(key, value)`` records from them. Subclasses describe a format through hooks:

* ``on_work_started(work)``: a work item was dequeued (open the file, skip a header). An
  error abandons the item: it is not counted and the next read takes a new one.
* ``read_one()``: return one record ``(key, value)``, a last record
  ``(key, value, True)``, or ``None`` at the end of the work item.
* ``read_many(n)`` (optional): return ``(keys, values, at_end)`` with at most ``n``
  records; the default calls ``read_one``.
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
Closing the reader meanwhile discards the outcome: the thread closes the files it opened
when it returns.

The built-in file readers use a faster internal path (:mod:`~asyncreader._readers.buffered`):
each executor hop reads a block of megabytes and frames it whole, and the parsed records
wait in the read-ahead buffer (:mod:`~asyncreader._readers.buffer`), from which ``read``
and ``read_up_to`` are served on the event loop without a thread hop. Records still in the
buffer are not yet *produced*: they are not counted, and saved state resumes at the first
of them. Record keys are :mod:`~asyncreader._readers.keys`'s; state bytes and their checks
are :mod:`~asyncreader._readers.state`'s.

:class:`ReaderBase` shows its public protocol first (hooks, verbs, identity and statistics,
lifecycle), then the machinery behind it: locking, work items, the hook path, where saved
state resumes, abandoned hook calls, and the small protocols through which the runtime
(checkpoints, stage statistics) and :class:`~asyncreader.RecordRefs` see a reader.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import inspect
import warnings
from abc import ABC
from typing import TYPE_CHECKING, Any, ClassVar, Final, Self, TypeAlias, TypeVar

import anyio
from anyio.lowlevel import checkpoint, checkpoint_if_cancelled

from .._error_policy import MAX_DEAD_LETTERS, DeadLetter, ErrorPolicy, OnError, as_policy
from .._errors import (
    AsyncReaderError,
    FailedPreconditionError,
    InvalidArgumentError,
)
from .._io.executor import IoCall, run_io_abandoning
from .._runtime.checkpoint import RestoredWork, check_taken_work
from .._runtime.resources import SharedResource
from .._runtime.stages import StageState, StageStatistics
from .._yields import yield_budget
from .buffer import ReadAheadBuffer
from .keys import RecordKeys
from .reread import ReaderRecords
from .state import (
    SKIP,
    ReaderState,
    check_skip,
    encode_native,
    encode_tf_proto,
    from_checkpoint,
    in_progress_tree,
    parse_state,
)
from .work import WorkQueue, check_work_queue, work_item_bytes

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

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
#: What ``read_many`` returns: ``(keys, values, at_end)``.
ReadManyResult: TypeAlias = tuple[list[bytes], list[bytes], bool]

#: How long shielded cleanup (closing a finished work item's file, dropping an abandoned
#: item's state) waits for its thread before abandoning it.
_SHIELD_GRACE: Final = 2.0

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


class ReaderBase(RecordKeys, SharedResource, ABC):
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
        shared_name, container: Share the reader under this name and container in the
            current Session's resources (see ``ResourceMgr``).
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
            ``(keys, values, at_end)``: at least one record or ``at_end`` true.
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
            await checkpoint()
        buffer = self._buffer
        i = buffer.pos
        if i < buffer.n and not self._lock.locked():
            # Served from the read-ahead buffer: no lock, no thread hop.
            buffer.pos = i + 1
            self._produced += 1
            return buffer.keys[i], buffer.values[i]
        return await self._locked(self._read_locked, queue)

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
            await checkpoint()
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
        return await self._locked(self._read_up_to_locked, queue, num_records)

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
                    # A call that is merely slow is let finish, so that its files are
                    # closed when aclose returns; one blocked for good is left to close
                    # them itself when it returns.
                    with anyio.move_on_after(_CLOSE_GRACE):
                        await pending.call.wait()
                if pending is None or not pending.call.discard():
                    await self._drop_work_state()

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
        self._epoch += 1
        self._buffer.clear()

    def _raise_deferred(self) -> None:
        exc, self._deferred = self._deferred, None
        if exc is not None:
            raise exc

    # -- work items ------------------------------------------------------------------------

    async def _take_work(self, queue: WorkQueue) -> None:
        check_work_queue(queue, self.display_name)
        while True:
            item = await queue.dequeue()
            work = work_item_bytes(item)
            check_taken_work(queue, work)  # a restored queue's strings may not be trusted
            self._work = work
            self._buffer.clear()
            try:
                await self._call("on_work_started", work)
            except BaseException as exc:
                if self._note_pending("start"):
                    raise  # the next operation takes the outcome of the open
                if isinstance(exc, Exception):
                    self._errors += 1
                await self._abandon()
                if isinstance(exc, AsyncReaderError) and self._skip(exc, rest=True):
                    continue
                raise
            self._started += 1
            return

    def _skip(self, exc: AsyncReaderError, *, rest: bool) -> bool:
        """Note bad input the policy skips; return ``False`` when the error must be raised.

        ``rest``: the rest of the work item is skipped (not just one record). Contract
        errors of a reader subclass (plain :class:`AsyncReaderError`) are never skipped.
        """
        policy = self._policy
        if not policy.skip or type(exc) is AsyncReaderError:
            return False
        self._skipped += 1
        record = None if exc.record is None else self._work + b":" + str(exc.record).encode()
        self._dead.append(DeadLetter(self._work, record, exc, rest))
        reason = policy.exceeded(self._skipped, self._produced)
        if reason is not None:
            exc.add_note(f"{self.display_name}: {reason} (see dead_letters)")
            return False
        return True

    async def _finish_work(self) -> None:
        self._buffer.clear()
        # Shielded: once a work item's last record is in hand the file is closed, however
        # the caller is cancelled meanwhile (the hook is short; a thread blocked past the
        # grace period is abandoned and closes the file when it returns).
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + _SHIELD_GRACE
            try:
                await self._call("on_work_finished")
            except Exception:
                self._errors += 1
                raise
            finally:
                self._finished = self._started
        if scope.cancelled_caught:
            self._needs_reset = True  # the next operation closes what is still open

    async def _abandon(self) -> None:
        if self._pending is not None:
            # A hook's thread still works on the state: the next operation drops it.
            self._needs_reset = True
            return
        await self._drop_work_state()

    async def _drop_work_state(self) -> None:
        """Run ``reset_state`` and close the files: shielded, but never waiting for good."""
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + _SHIELD_GRACE
            try:
                await self._call("reset_state")
            finally:
                if self._pending is None and self._must_close_files():
                    await self._run_blocking(self._close_files)
        if scope.cancelled_caught:
            self._needs_reset = True  # the next operation tries again

    async def _resume_work(self) -> None:
        """Reopen a work item restored in progress and seek to the saved position."""
        extra = self._resume
        assert extra is not None
        try:
            await self._call("on_work_started", self._work)
            await self._restore_position(extra)
        except BaseException as exc:
            if self._note_pending("resume"):
                raise  # the next read resumes from the same point
            if isinstance(exc, Exception):
                self._errors += 1
            # As for a work item that failed to start: it is abandoned.
            self._started = self._finished
            self._resume = None
            await self._abandon()
            raise
        self._resume = None

    async def _restore_position(self, extra: bytes) -> None:
        """Seek the reopened work item to the position ``extra`` saved: the hook's own
        extra state, then records skipped past it."""
        (skip,) = SKIP.unpack_from(extra)
        await self._call("restore_extra", extra[SKIP.size :])
        await self._skip_records(skip)

    async def _skip_records(self, skip: int) -> None:
        """Read and drop ``skip`` records of the current work item (delivered before the
        state was saved)."""
        while skip > 0:
            if self._has_read_many:
                keys, _, at_end = await self._read_many_hook(skip)
                skip -= len(keys)
            else:
                key, _, at_end = await self._read_one_hook()
                skip -= key is not None
            if at_end:
                break

    # -- the hook path (the buffered path overrides _read_on and _read_on_many) ------------

    async def _read_locked(self, queue: WorkQueue) -> tuple[bytes, bytes]:
        self._raise_deferred()
        buffer = self._buffer
        while True:
            i = buffer.pos
            if i < buffer.n:
                # The read-ahead buffer, or records a cancelled call put back.
                buffer.pos = i + 1
                self._produced += 1
                return buffer.keys[i], buffer.values[i]
            if self._finished >= self._started:
                await self._take_work(queue)
            elif self._resume is not None:
                await self._resume_work()
            if buffer.pos < buffer.n:
                continue
            if buffer.at_end:
                # The last run, or the records an abandoned call read, ended the item.
                await self._finish_work()
                continue
            record = await self._read_on()
            if record is not None:
                return record

    async def _read_on(self) -> tuple[bytes, bytes] | None:
        """Read on in the current work item for :meth:`read`: return the next record, or
        ``None`` when there is none to return (the work item ended, or the records went to
        the read-ahead buffer)."""
        mark = self._mark()
        try:
            key, value, at_end = await self._read_one_hook()
        except BaseException as exc:
            if self._note_pending("records", "read_one", 1, mark) or not isinstance(
                exc, AsyncReaderError
            ):
                raise

            if not self._skip(exc, rest=True):
                raise
            key = value = None  # the rest of the work item is skipped
        if key is None or value is None:
            await self._finish_work()
            return None
        self._produced += 1
        try:
            # Never hand a record to a caller being cancelled: it would be lost.
            await checkpoint_if_cancelled()
        except BaseException:
            self._put_back([key], [value], mark)
            raise
        if at_end:
            try:
                await self._finish_work()
            except Exception as exc:
                self._deferred = exc
        return key, value

    async def _read_up_to_locked(self, queue: WorkQueue, n: int) -> tuple[list[bytes], list[bytes]]:
        keys: list[bytes] = []
        values: list[bytes] = []
        mark: tuple[Any, int] = (None, 0)
        self._raise_deferred()
        buffer = self._buffer
        try:
            while len(keys) < n:
                i = buffer.pos
                avail = buffer.n - i
                if avail:
                    # The read-ahead buffer, or records a cancelled call put back.
                    if not keys:
                        mark = self._mark()
                    take = min(avail, n - len(keys))
                    if not keys and take == buffer.n:
                        keys, values = buffer.keys, buffer.values
                    else:
                        keys += buffer.keys[i : i + take]
                        values += buffer.values[i : i + take]
                    buffer.pos = i + take
                    self._produced += take
                    continue
                if self._finished >= self._started:
                    if keys:
                        # Records put back end where their work item ended.
                        break
                    await self._take_work(queue)
                elif self._resume is not None:
                    await self._resume_work()
                if buffer.pos < buffer.n:
                    continue
                if buffer.at_end:
                    # The last run, or the records an abandoned call read, ended the item.
                    if keys:
                        await checkpoint_if_cancelled()
                    await self._finish_work()
                    if keys:
                        return keys, values
                    continue
                if not keys:
                    mark = self._mark()
                more = await self._read_on_many(n - len(keys), (mark[0], mark[1] + len(keys)))
                if more is None:
                    continue
                got_k, got_v, at_end = more
                self._produced += len(got_k)
                keys += got_k
                values += got_v
                if at_end:
                    if keys:
                        await checkpoint_if_cancelled()
                    await self._finish_work()
                    if keys:
                        return keys, values
            # Never hand records to a caller being cancelled: they would be lost.
            await checkpoint_if_cancelled()
        except Exception as exc:
            if not keys:
                raise
            # Deliver the records gathered before the error (TensorFlow drops them); the
            # next call raises it.
            self._deferred = exc
        except BaseException:
            # Cancelled: the records go back to the buffer for the next call.
            if keys and self._finished < self._started:
                self._put_back(keys, values, mark)
            raise
        return keys, values

    async def _read_on_many(self, n: int, mark: tuple[Any, int]) -> ReadManyResult | None:
        """Read on in the current work item for :meth:`read_up_to`: return up to ``n``
        records, ``(keys, values, at_end)``, or ``None`` when the records went to the
        read-ahead buffer instead. ``mark`` is where the first of them starts."""
        try:
            if self._has_read_many:
                got_k, got_v, at_end = await self._read_many_hook(n)
            else:
                key, value, at_end = await self._read_one_hook()
                got_k = [] if key is None else [key]
                got_v = [] if value is None else [value]
        except BaseException as exc:
            hook = "read_many" if self._has_read_many else "read_one"
            if self._note_pending("records", hook, n, mark):
                raise
            if not isinstance(exc, AsyncReaderError) or not self._skip(exc, rest=True):
                raise
            got_k, got_v, at_end = [], [], True  # the rest is skipped
        return got_k, got_v, at_end

    async def _read_one_hook(self) -> tuple[bytes | None, bytes | None, bool]:
        try:
            result = await self._call("read_one")
        except AsyncReaderError:
            self._errors += 1
            raise
        return self._check_one(result)

    def _check_one(self, result: Any) -> tuple[bytes | None, bytes | None, bool]:
        """Check what ``read_one`` returned; return ``(key, value, at_end)``."""
        if result is None:
            return None, None, True
        if type(result) is tuple and len(result) in (2, 3):
            key, value = result[0], result[1]
            at_end = bool(result[2]) if len(result) == 3 else False
            if isinstance(key, bytes) and isinstance(value, bytes):
                return key, value, at_end
        raise self._contract_error("read_one", result)

    async def _read_many_hook(self, n: int) -> tuple[list[bytes], list[bytes], bool]:
        try:
            result = await self._call("read_many", n)
        except AsyncReaderError:
            self._errors += 1
            raise
        return self._check_many(result, n)

    def _check_many(self, result: Any, n: int) -> tuple[list[bytes], list[bytes], bool]:
        """Check what ``read_many(n)`` returned."""
        if type(result) is tuple and len(result) == 3:
            keys, values, at_end = result
            if (
                isinstance(keys, list)
                and isinstance(values, list)
                and len(keys) == len(values) <= n
                and (keys or at_end)
            ):
                return keys, values, bool(at_end)
        raise self._contract_error("read_many", result)

    def _contract_error(self, hook: str, result: object) -> AsyncReaderError:
        return AsyncReaderError(
            f"{hook}() for {self.display_name} must return "
            + (
                "(key, value), (key, value, at_end) or None (at end)"
                if hook == "read_one"
                else "(keys, values, at_end) with 1..n records or at_end true"
            )
            + f", not {result!r:.200}",
            work_item=self._work,
        )

    # -- where saved state resumes ---------------------------------------------------------

    def _mark(self) -> tuple[Any, int]:
        """Where the next record comes from, to put records back to (see :meth:`_put_back`):
        a hook reader's extra state and how many records past it."""
        buffer = self._buffer
        if buffer.pos < buffer.n:
            return self._pushback_extra, self._pushback_base + buffer.pos
        in_progress = self._finished < self._started
        return (self.serialize_extra() if in_progress else None), 0

    def _put_back(self, keys: list[bytes], values: list[bytes], mark: tuple[Any, int]) -> None:
        """Return records a failed or cancelled call had taken to the front of the buffer.

        ``mark`` is :meth:`_mark` from when the call took its first record: saved state
        then resumes at the first record put back.
        """
        self._buffer.put_back(keys, values)
        self._produced -= len(keys)
        restart, skip = mark
        self._rewind(restart, skip)

    def _rewind(self, mark: Any, skip: int) -> None:
        """Make saved state restart at ``mark``, ``skip`` records on (from :meth:`_mark`)."""
        self._pushback_extra, self._pushback_base = mark, skip

    def _start_state(self) -> bytes:
        """Return the extra state of the current work item's first record."""
        return SKIP.pack(0) + self.serialize_extra()

    def _position_state(self) -> bytes:
        """Return the extra state of the next undelivered record of the work item in
        progress (a hook reader: records skipped past the hook's own extra state)."""
        buffer = self._buffer
        if self._pushback_extra is not None and buffer.pos < buffer.n:
            # Records put back wait in the buffer: resume before them, skipping those
            # already delivered from it.
            return SKIP.pack(self._pushback_base + buffer.pos) + self._pushback_extra
        return SKIP.pack(0) + self.serialize_extra()

    def _native_state(self) -> bytes:
        """Return the state in asyncreader's format, with the work item in progress."""
        in_progress = self._finished < self._started
        started = self._started
        if self._opening():
            # The work item just dequeued is still being opened by an abandoned call: save
            # it as started, at its first record, so that a restore does not lose it.
            started += 1
            extra = self._start_state()
        elif not in_progress:
            extra = b""
        elif self._resume is not None:
            extra = self._resume
        else:
            extra = self._position_state()
        state = ReaderState(started, self._finished, self._produced, self._work, extra)
        return encode_native(type(self).__name__, state)

    def _restore(self, state: object, *, native: bool) -> None:
        """Restore ``state``; ``native``: in asyncreader's format whatever the reader."""
        self._check_open()
        if self._lock.locked():
            raise FailedPreconditionError(
                f"cannot restore the state of {self.display_name} while it is reading"
            )
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise InvalidArgumentError(f"Reader state must be bytes, not {type(state).__name__}")
        data = bytes(state)
        try:
            parsed = self._parse_state(data, native=native)
        except InvalidArgumentError:
            self._reset_sync()
            self._needs_reset = True
            raise
        self._reset_sync()
        self._needs_reset = True
        self._started = parsed.work_started
        self._finished = parsed.work_finished
        self._produced = parsed.num_records_produced
        self._work = parsed.current_work
        if parsed.work_finished < parsed.work_started:
            self._resume = parsed.extra

    def _parse_state(self, data: bytes, *, native: bool = False) -> ReaderState:
        return parse_state(
            data,
            kind=type(self).__name__,
            reader=self.display_name,
            tf_format=self._tf_state and not native,
            check_extra=self._check_extra,
        )

    def _check_extra(self, extra: bytes) -> None:
        """Validate the extra state of a restored in-progress work item (on the loop)."""
        check_skip(extra)

    def _opening(self) -> bool:
        """Whether an abandoned call still opens the work item just dequeued."""
        pending = self._pending
        return pending is not None and pending.kind == "start" and pending.epoch == self._epoch

    # -- abandoned hook calls --------------------------------------------------------------

    async def _run_blocking(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(*args)`` on the I/O executor; a cancellation abandons a blocked thread.

        An abandoned call is noted in ``_pending``: the hook's objects must not be touched
        until it returns. The caller's handler says what its outcome means (``kind``); the
        next operation waits for it and applies it (:meth:`_resolve_pending`).
        """
        call = IoCall(functools.partial(fn, *args), self._release_abandoned)
        try:
            return await run_io_abandoning(call)
        except BaseException:
            if call.abandoned:
                self._pending = _Pending(call, self._epoch)
                self._abandoned_total += 1
            raise

    def _note_pending(self, kind: str, *info: Any) -> bool:
        """Say what the outcome of the call just abandoned (if any) means; the innermost
        handler speaks. Return whether a call was abandoned."""
        pending = self._pending
        if pending is None:
            return False
        if pending.kind is None:
            pending.kind, pending.info = kind, info
        return True

    def _release_abandoned(self) -> None:
        """Drop what an abandoned, discarded hook left (on its thread, once it returned)."""
        try:
            if "reset_state" not in self._async_hooks:
                self.reset_state()
        finally:
            if self._must_close_files():
                self._close_files()

    async def _resolve_pending(self, *, apply: bool = True) -> None:
        """Wait (cancellably) for an abandoned hook call, then apply its outcome (unless
        ``apply`` is false: the caller drops the work item anyway)."""
        pending = self._pending
        if pending is None:
            return
        await pending.call.wait()
        self._pending = None
        if not apply or pending.epoch != self._epoch or pending.kind is None:
            # Dropped, restored since (its state is gone), or nothing to apply.
            self._needs_reset = self._needs_reset or not apply
            return
        await self._apply_pending(pending.kind, pending.call, pending.info)

    async def _apply_pending(self, kind: str, call: IoCall[Any], info: tuple[Any, ...]) -> None:
        """Apply the outcome of an abandoned hook call of ``kind`` (see :class:`_Pending`)."""
        if kind == "start":
            try:
                call.outcome()
            except Exception as exc:
                self._errors += 1
                await self._abandon()
                if isinstance(exc, AsyncReaderError) and self._skip(exc, rest=True):
                    return
                raise
            self._started += 1
        elif kind == "resume":
            # Stopped part-way: drop what it did; the next read resumes from the start.
            await self._abandon()
        elif kind == "records":
            hook, n, mark = info
            try:
                if hook == "read_one":
                    key, value, at_end = self._check_one(call.outcome())
                    keys = [] if key is None or value is None else [key]
                    values = [] if key is None or value is None else [value]
                else:
                    keys, values, at_end = self._check_many(call.outcome(), n)
            except AsyncReaderError as exc:
                self._errors += 1
                if not self._skip(exc, rest=True):
                    raise
                keys, values, at_end = [], [], True  # the rest is skipped
            if self._buffer.pos >= self._buffer.n:
                self._buffer.clear()
                self._pushback_extra, self._pushback_base = mark
            self._buffer_more(keys, values, at_end)

    def _buffer_more(self, keys: list[bytes], values: list[bytes], at_end: bool) -> None:
        """Append records an abandoned call read to the (undelivered) buffer."""
        dropped = self._buffer.append(keys, values, at_end)
        if dropped:
            # The delivered head of the buffer is gone; saved state still counts it.
            self._drop_delivered(dropped)

    def _drop_delivered(self, n: int) -> None:
        """The buffer's first ``n`` records, delivered, were dropped: the mark of its first
        record moves past them."""
        self._pushback_base += n

    # -- files (built-in readers) ----------------------------------------------------------

    def _close_files(self) -> None:
        """Close whatever files are open (on a worker thread)."""

    def _has_open_files(self) -> bool:
        return False

    def _must_close_files(self) -> bool:
        """Whether dropping the work item's state must close files (on a worker thread)."""
        return self._has_open_files()

    # -- protocols of the runtime (checkpoints, stage statistics) and of RecordRefs --------

    def _checkpoint_save(self) -> Any:
        if self._tf_state and (self._finished < self._started or self._opening()):
            # TensorFlow's format cannot hold a work item in progress (its restore refuses
            # one): a session checkpoint saves it in asyncreader's format, so that the
            # restored reader retries that item instead of losing it.
            self._check_open()
            return in_progress_tree(self._native_state())
        return self.serialize_state()

    def _checkpoint_restore(self, tree: Any) -> None:
        data, native = from_checkpoint(tree, tf_state=self._tf_state)
        self._restore(data, native=native)

    def _checkpoint_work_items(self, tree: Any) -> RestoredWork | None:
        """Return the work item a session checkpoint's tree would make the reader read
        (``None`` for none, or for a tree that is not a state of this reader: the restore
        rejects it)."""
        data, native = from_checkpoint(tree, tf_state=self._tf_state)
        if not isinstance(data, bytes):
            return None
        try:
            work = self._parse_state(data, native=native).current_work
        except InvalidArgumentError:
            return None
        return RestoredWork((work,)) if work else None

    def _stage_statistics(self) -> StageStatistics:
        """Where the reader's reads are, for the runtime's stage statistics."""
        stats = self.statistics()
        # Reads that went past the buffered fast path, each in a cancel scope of the reader
        # (waiting for its lock or running). Without a work item they wait for the work queue.
        active = len(self._scopes)
        waiting_work = active if stats.current_work is None else 0
        busy = active - waiting_work
        state: StageState
        if stats.closed:
            state = "closed"
        elif waiting_work:
            state = "waiting_for_work"
        elif busy:
            state = "reading"
        else:
            state = "idle"
        return StageStatistics("reader", self.name, state, 0, waiting_work, busy, stats)

    def _record_source(self) -> ReaderRecords | None:
        """Return what reads this reader's records again from their keys, or ``None`` when
        it cannot (the ``RereadableReader`` protocol of :class:`~asyncreader.RecordRefs`)."""
        return ReaderRecords(self) if self._rereadable else None

    def _reread(self, work: bytes, wanted: list[int]) -> list[bytes]:
        """Return the values of records ``wanted`` (sorted, distinct) of ``work``.

        Does not touch the reader's own state. Blocks when :attr:`_reread_blocks`.

        Raises:
            NotFoundError: the file is gone.
            DataLossError: a record is corrupt or not in the file.
        """
        raise NotImplementedError


@dataclasses.dataclass(slots=True)
class _Pending:
    """A hook call a cancelled operation abandoned (see ``ReaderBase._run_blocking``).

    ``kind`` says how the next operation applies its outcome: ``"start"`` (the work item
    just dequeued was being opened), ``"resume"``, ``"fill"`` (a record run),
    ``"skip_bad"`` (``info``: the framing error), ``"records"`` (``info``: the hook, how
    many records were asked for, and the mark of the first); ``None``: nothing to apply.
    """

    call: IoCall[Any]
    epoch: int
    kind: str | None = None
    info: tuple[Any, ...] = ()
