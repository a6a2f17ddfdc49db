"""Work items in a reader: taking one, finishing it, abandoning it, resuming it.

:mod:`~asyncreader._readers.work` says what a work item is (the queue protocol, the bytes a
dequeued element becomes); :class:`WorkItems` is what a reader does with one (SPEC §3):
take a new one only when none is in progress, abandon one that fails to start, finish one
whose last record was read (closing its file), and reopen one restored in progress at the
saved record.
Bad input the reader's ``on_error`` policy skips is noted here too (:meth:`WorkItems._skip`).

Closing files and dropping a work item's state run shielded, with a grace period, so that
a cancelled caller neither leaks a file nor waits for good on a blocked thread.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Final, TypeVar

import anyio

from .._error_policy import DeadLetter
from .._errors import AsyncReaderError, InvalidArgumentError
from .._runtime.checkpoint import check_taken_work
from .hook_path import count_of
from .state import SKIP
from .work import check_work_queue, next_work_hints, work_item_bytes

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from .._error_policy import ErrorPolicy
    from .._records.batch import RecordBatch
    from .abandoned import _Pending
    from .buffer import ReadAheadBuffer
    from .hook_path import Records
    from .state import ReaderState
    from .work import LeasedWork, WorkQueue

__all__ = ["OPEN_AHEAD", "WorkItems"]

T = TypeVar("T")

#: How long shielded cleanup (closing a finished work item's file, dropping an abandoned
#: item's state) waits for its thread before abandoning it.
_SHIELD_GRACE: Final = 2.0
#: The most work items after the current one that a reader opens ahead (remote files);
#: they share one read-ahead window, so small files are opened further ahead than large.
OPEN_AHEAD: Final = 8


class WorkItems:
    """Taking, finishing, abandoning and resuming a reader's work items."""

    #: Whether the reader opens its next work items ahead (remote files): taking an item
    #: from a FIFO queue then notes the (up to :data:`OPEN_AHEAD`) ones after it in
    #: ``_work_hints`` (they stay queued).
    _opens_ahead: ClassVar[bool] = False
    _work_hints: tuple[bytes, ...] = ()

    # The reader state it reads and writes (see ReaderBase).
    _buffer: ReadAheadBuffer
    _policy: ErrorPolicy
    _dead: deque[DeadLetter]
    _skipped: int
    _work: bytes
    _started: int
    _finished: int
    _produced: int
    _errors: int
    _resume: bytes | None
    _needs_reset: bool
    _pending: _Pending | None
    _taken: bytes | None
    _taken_lease: LeasedWork | None
    _skip_keys: set[bytes] | None
    _has_read_many: ClassVar[bool]

    if TYPE_CHECKING:

        @property
        def display_name(self) -> str: ...

        async def _call(self, hook: str, *args: Any) -> Any: ...
        def _note_pending(self, kind: str, *info: Any) -> bool: ...
        def _must_close_files(self) -> bool: ...
        def _close_files(self) -> None: ...
        async def _run_blocking(self, fn: Callable[..., T], *args: Any) -> T: ...
        async def _read_one_hook(self) -> tuple[bytes | None, bytes | None, bool]: ...
        async def _read_many_hook(self, n: int) -> tuple[Records, bool]: ...
        def _parse_state(self, data: bytes, *, native: bool = False) -> ReaderState: ...

    async def _take_work(self, queue: WorkQueue) -> None:
        check_work_queue(queue, self.display_name)
        take = getattr(queue, "take_work", None)  # a leasing queue (see LeasedWork)
        while True:
            leased: LeasedWork | None = None
            if self._taken is not None:
                # Dequeued by a call cancelled before its hook ran: start it now.
                work, self._taken = self._taken, None
                leased, self._taken_lease = self._taken_lease, None
            else:
                if take is not None:
                    leased = await take(self)
                    item = leased.item
                else:
                    item = await queue.dequeue()
                    if self._opens_ahead:
                        # The files after this one, for on_work_started to open ahead.
                        self._work_hints = tuple(next_work_hints(queue, OPEN_AHEAD))
                work = work_item_bytes(item)
                check_taken_work(queue, work)  # a restored queue's strings may not be trusted
            self._set_skip(None)  # keys skipped in the previous item: none in this one
            self._work = work
            self._buffer.clear()
            if leased is not None and leased.position is not None:
                await self._resume_leased(work, leased)
                return
            try:
                await self._call("on_work_started", work)
            except BaseException as exc:
                if self._note_pending("start"):
                    raise  # the next operation takes the outcome of the open
                if not isinstance(exc, Exception):
                    # Cancelled before the hook ran (an abandoned one is pending above):
                    # the item is out of the queue, so the next take starts it.
                    self._taken = work
                    self._taken_lease = leased
                    raise
                self._errors += 1
                await self._abandon()
                if isinstance(exc, AsyncReaderError) and self._skip(exc, rest=True):
                    continue
                raise
            self._started += 1
            if leased is not None:
                self._set_skip(leased.skip)
            return

    async def _resume_leased(self, work: bytes, leased: LeasedWork) -> None:
        """Start a leased item at the position another reader reported for it."""
        assert leased.position is not None
        parsed = self._parse_state(leased.position, native=True)
        if parsed.work_finished >= parsed.work_started or parsed.current_work != work:
            raise InvalidArgumentError(
                f"{self.display_name}: the position of leased work item {work!r} is not "
                "a state with that item in progress"
            )
        self._started += 1
        self._resume = parsed.extra
        await self._resume_work()
        self._set_skip(leased.skip)

    def _set_skip(self, skip: set[bytes] | None) -> None:
        """Skip the records whose keys are in ``skip`` (removing each as it is skipped).

        While keys are to be skipped, the instance's own ``read``, ``read_up_to`` and
        ``read_batch`` shadow the class's, so the verbs of every other reader (and this
        one, otherwise) keep their fast paths untouched; the call that took the item
        filters its records in the verbs' locked path.
        """
        own = vars(self)
        if skip:
            self._skip_keys = skip
            own["read"] = self._read_skipping
            own["read_up_to"] = self._read_up_to_skipping
            own["read_batch"] = self._read_batch_skipping
        elif self._skip_keys is not None:
            self._skip_keys = None
            for verb in ("read", "read_up_to", "read_batch"):
                own.pop(verb, None)

    def _unskipped(self, keys: list[bytes]) -> list[int] | None:
        """The indices of ``keys`` not to skip (``None``: all of them); counts the rest as
        not produced."""
        skip = self._skip_keys
        if not skip or skip.isdisjoint(keys):
            return None
        kept = []
        for i, key in enumerate(keys):
            if key in skip:
                skip.discard(key)
            else:
                kept.append(i)
        self._produced -= len(keys) - len(kept)
        return kept

    async def _read_skipping(self, queue: WorkQueue) -> tuple[bytes, bytes]:
        read = type(self).read  # type: ignore[attr-defined]
        while True:
            key, value = await read(self, queue)
            if self._unskipped([key]) is None:
                return key, value

    async def _read_up_to_skipping(
        self, queue: WorkQueue, num_records: int
    ) -> tuple[list[bytes], list[bytes]]:
        read_up_to = type(self).read_up_to  # type: ignore[attr-defined]
        while True:
            keys, values = await read_up_to(self, queue, num_records)
            kept = self._unskipped(keys)
            if kept is None:
                return keys, values
            if kept:
                return [keys[i] for i in kept], [values[i] for i in kept]

    async def _read_batch_skipping(self, queue: WorkQueue, max_records: int) -> RecordBatch:
        read_batch = type(self).read_batch  # type: ignore[attr-defined]
        while True:
            batch: RecordBatch = await read_batch(self, queue, max_records)
            kept = self._unskipped(batch.keys())
            if kept is None:
                return batch
            if kept:
                return batch.take(kept)

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

    async def _drop_work_state(self) -> bool:
        """Run ``reset_state`` and close the files: shielded, but never waiting for good.

        Returns:
            Whether both were done within the grace (otherwise the next operation tries
            again, or a hook call given up on still runs: ``_pending``).
        """
        with anyio.CancelScope(shield=True) as scope:
            scope.deadline = anyio.current_time() + _SHIELD_GRACE
            try:
                await self._call("reset_state")
            finally:
                if self._pending is None and self._must_close_files():
                    await self._run_blocking(self._close_files)
        if scope.cancelled_caught:
            self._needs_reset = True  # the next operation tries again
            return False
        return self._pending is None

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
                records, at_end = await self._read_many_hook(skip)
                skip -= count_of(records)
            else:
                key, _, at_end = await self._read_one_hook()
                skip -= key is not None
            if at_end:
                break
