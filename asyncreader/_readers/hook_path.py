"""The hook path: how ``read`` and ``read_up_to`` go on past the read-ahead buffer.

``ReaderBase.read`` and ``read_up_to`` serve records from the read-ahead buffer without
the lock; when it runs dry they take the lock and land here. :class:`HookPath` loops over
the reader's steps: take or resume a work item, serve what waits in the buffer, finish a
work item that ended, and otherwise read on through the hooks (``read_one``, or
``read_many`` when a subclass defines it), checking what each returned. A record is never
handed to a caller being cancelled: it goes back to the buffer (:meth:`SavedState._put_back
<asyncreader._readers.saved_state.SavedState._put_back>`) for the next call.

The buffered file readers (:mod:`~asyncreader._readers.buffered`) override
:meth:`~HookPath._read_on` and :meth:`~HookPath._read_on_many` to read a record run into
the buffer instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from anyio.lowlevel import checkpoint_if_cancelled

from .._errors import AsyncReaderError

if TYPE_CHECKING:
    from .base import ReadManyResult
    from .buffer import ReadAheadBuffer
    from .work import WorkQueue

__all__ = ["HookPath"]


class HookPath:
    """The locked part of ``read`` and ``read_up_to``, and the checked hook calls."""

    # The reader state it reads and writes (see ReaderBase).
    _buffer: ReadAheadBuffer
    _work: bytes
    _started: int
    _finished: int
    _produced: int
    _errors: int
    _resume: bytes | None
    _deferred: Exception | None
    _has_read_many: ClassVar[bool]

    if TYPE_CHECKING:

        @property
        def display_name(self) -> str: ...

        async def _call(self, hook: str, *args: Any) -> Any: ...
        def _raise_deferred(self) -> None: ...
        async def _take_work(self, queue: WorkQueue) -> None: ...
        async def _resume_work(self) -> None: ...
        async def _finish_work(self) -> None: ...
        def _skip(self, exc: AsyncReaderError, *, rest: bool) -> bool: ...
        def _mark(self) -> tuple[Any, int]: ...
        def _put_back(
            self, keys: list[bytes], values: list[bytes], mark: tuple[Any, int]
        ) -> None: ...
        def _note_pending(self, kind: str, *info: Any) -> bool: ...

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
