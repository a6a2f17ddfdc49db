"""Where a reader's saved state resumes, and restoring it.

A reader's state (:meth:`ReaderBase.serialize_state
<asyncreader.ReaderBase.serialize_state>`) must resume at the first record not yet
delivered. Records may wait undelivered in the read-ahead buffer: records a cancelled or
failed call put back, or (the buffered file readers) the rest of a record run. So the state
of a work item in progress is a restart point plus how many records past it the next
undelivered one is: for a hook reader, the hook's extra state from before the buffer's
first record (:meth:`SavedState._mark`) and a count of records to skip.

:class:`SavedState` keeps that restart point as records are taken and put back, builds the
state bytes (their layout and checks are :mod:`~asyncreader._readers.state`'s) and restores
them. The buffered readers (:mod:`~asyncreader._readers.buffered`) override the restart
point with a position in the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import FailedPreconditionError, InvalidArgumentError
from .state import SKIP, ReaderState, check_skip, encode_native, parse_state

if TYPE_CHECKING:
    import anyio

    from .abandoned import _Pending
    from .buffer import ReadAheadBuffer

__all__ = ["SavedState"]


class SavedState:
    """The restart point of a reader's next undelivered record; saving and restoring it."""

    # The reader state it reads and writes (see ReaderBase).
    _buffer: ReadAheadBuffer
    _lock: anyio.Lock
    _work: bytes
    _started: int
    _finished: int
    _produced: int
    _resume: bytes | None
    _pushback_extra: bytes | None
    _pushback_base: int
    _needs_reset: bool
    _pending: _Pending | None
    _taken: bytes | None
    _epoch: int
    _tf_state: ClassVar[bool]

    if TYPE_CHECKING:

        @property
        def display_name(self) -> str: ...

        def serialize_extra(self) -> bytes: ...
        def _check_open(self) -> None: ...
        def _reset_sync(self) -> None: ...

    def _mark(self) -> tuple[Any, int]:
        """Where the next record comes from, to put records back to (see :meth:`_put_back`):
        a hook reader's extra state and how many records past it."""
        buffer = self._buffer
        if buffer.waiting:
            return self._pushback_extra, self._pushback_base + buffer.delivered
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
        if self._pushback_extra is not None and buffer.waiting:
            # Records put back wait in the buffer: resume before them, skipping those
            # already delivered from it.
            return SKIP.pack(self._pushback_base + buffer.delivered) + self._pushback_extra
        return SKIP.pack(0) + self.serialize_extra()

    def _native_state(self) -> bytes:
        """Return the state in asyncreader's format, with the work item in progress."""
        in_progress = self._finished < self._started
        started = self._started
        if self._opening():
            # The work item just dequeued is not started yet (an abandoned call still opens
            # it, or a cancelled call took it before opening it): save it as started, at
            # its first record, so that a restore does not lose it.
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
        """Whether the work item just dequeued is not started yet: an abandoned call still
        opens it, or a call cancelled before opening it left it for the next one."""
        if self._taken is not None:
            return True
        pending = self._pending
        return pending is not None and pending.kind == "start" and pending.epoch == self._epoch
