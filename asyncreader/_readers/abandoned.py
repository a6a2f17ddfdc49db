"""Abandoned hook calls: a cancelled call never waits for a blocked hook thread.

A plain (blocking) hook runs on the I/O executor. When the call is cancelled while its
thread is blocked (a named pipe with no writer, a server that never answers), the thread is
*abandoned*: the call returns at once and :class:`AbandonedCalls` notes it as pending.
Until that thread returns the reader runs no other hook (it works on the reader's file and
framer); the next operation first waits for it, cancellably, then applies its outcome as
the cancelled call would have: a work item counted as started, records put in the buffer
undelivered, an error raised. So nothing is lost or delivered twice. A restore or reset
meanwhile makes the outcome stale (it is dropped); closing the reader discards it, and the
thread then closes the files it opened itself (:meth:`AbandonedCalls._release_abandoned`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from .._errors import AsyncReaderError
from .._io.executor import IoCall, run_io_abandoning
from .hook_path import as_lists

if TYPE_CHECKING:
    from collections.abc import Callable

    from .buffer import ReadAheadBuffer
    from .hook_path import Records

__all__ = ["AbandonedCalls"]

T = TypeVar("T")


class AbandonedCalls:
    """Running blocking hooks so that a cancellation abandons them, and applying the
    outcome of an abandoned one."""

    # The reader state it reads and writes (see ReaderBase).
    _buffer: ReadAheadBuffer
    _started: int
    _errors: int
    _pushback_extra: bytes | None
    _pushback_base: int
    _needs_reset: bool
    _pending: _Pending | None
    _abandoned_total: int
    _epoch: int
    _async_hooks: ClassVar[frozenset[str]]

    if TYPE_CHECKING:

        def reset_state(self) -> Any: ...
        def _must_close_files(self) -> bool: ...
        def _close_files(self) -> None: ...
        async def _abandon(self) -> None: ...
        def _skip(self, exc: AsyncReaderError, *, rest: bool) -> bool: ...
        def _check_one(self, result: Any) -> tuple[bytes | None, bytes | None, bool]: ...
        def _check_many(self, result: Any, n: int) -> tuple[Records, bool]: ...

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
        if not apply or pending.epoch != self._epoch:
            # Its outcome will be dropped: end its remote requests (retries too) now
            # rather than wait for them.
            pending.call.interrupt()
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
                    records, at_end = self._check_many(call.outcome(), n)
                    keys, values = as_lists(records)
            except AsyncReaderError as exc:
                self._errors += 1
                if not self._skip(exc, rest=True):
                    raise
                keys, values, at_end = [], [], True  # the rest is skipped
            if not self._buffer.waiting:
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
