"""The hook path: how ``read``, ``read_up_to`` and ``read_batch`` go on past the
read-ahead buffer.

``ReaderBase.read``, ``read_up_to`` and ``read_batch`` serve records from the read-ahead
buffer without the lock; when it runs dry they take the lock and land here.
``read_up_to`` and ``read_batch`` share one loop (:meth:`HookPath._gather_locked`) and
differ only in what they gather into: lists or a batch. :class:`HookPath` loops over
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

from typing import TYPE_CHECKING, Any, ClassVar, TypeAlias

from anyio.lowlevel import checkpoint_if_cancelled

from .._errors import AsyncReaderError
from .._records.batch import RecordBatch
from .buffer import join_batches

if TYPE_CHECKING:
    from .buffer import ReadAheadBuffer
    from .work import WorkQueue

__all__ = ["HookPath", "Records", "as_lists", "count_of"]


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
        def _drop_delivered(self, n: int) -> None: ...

    async def _read_locked(self, queue: WorkQueue) -> tuple[bytes, bytes]:
        self._raise_deferred()
        buffer = self._buffer
        while True:
            if buffer.batch is not None:
                self._unbatch()
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
            if buffer.waiting:
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
        gather = _Lists()
        await self._gather_locked(queue, n, gather)
        return gather.keys, gather.values

    async def _read_batch_locked(self, queue: WorkQueue, n: int) -> RecordBatch:
        gather = _Batches()
        await self._gather_locked(queue, n, gather)
        return gather.result()

    async def _gather_locked(self, queue: WorkQueue, n: int, gather: _Gather) -> None:
        """Gather up to ``n`` records of one work item into ``gather``: the loop shared by
        ``read_up_to`` (lists) and ``read_batch`` (a batch)."""
        mark: tuple[Any, int] = (None, 0)
        self._raise_deferred()
        buffer = self._buffer
        try:
            while gather.count < n:
                avail = gather.waiting(self)
                if avail:
                    # The read-ahead buffer, or records a cancelled call put back.
                    if not gather.count:
                        mark = self._mark()
                    take = min(avail, n - gather.count)
                    gather.take(buffer, take)
                    self._produced += take
                    continue
                if self._finished >= self._started:
                    if gather.count:
                        # Records put back end where their work item ended.
                        break
                    await self._take_work(queue)
                elif self._resume is not None:
                    await self._resume_work()
                if buffer.waiting:
                    continue
                if buffer.at_end:
                    # The last run, or the records an abandoned call read, ended the item.
                    if gather.count:
                        await checkpoint_if_cancelled()
                    await self._finish_work()
                    if gather.count:
                        return
                    continue
                if not gather.count:
                    mark = self._mark()
                more = await self._read_on_many(
                    n - gather.count, (mark[0], mark[1] + gather.count), gather.batch
                )
                if more is None:
                    continue
                records, at_end = more
                self._produced += gather.add(records, self._work)
                if at_end:
                    if gather.count:
                        await checkpoint_if_cancelled()
                    await self._finish_work()
                    if gather.count:
                        return
            # Never hand records to a caller being cancelled: they would be lost.
            await checkpoint_if_cancelled()
        except Exception as exc:
            if not gather.count:
                raise
            # Deliver the records gathered before the error (TensorFlow drops them); the
            # next call raises it.
            self._deferred = exc
        except BaseException:
            # Cancelled: the records go back to the buffer for the next call.
            if gather.count and self._finished < self._started:
                keys, values = gather.lists()
                self._put_back(keys, values, mark)
            raise

    async def _read_on_many(
        self, n: int, mark: tuple[Any, int], batch: bool
    ) -> tuple[Records, bool] | None:
        """Read on in the current work item for :meth:`read_up_to` and ``read_batch``:
        return up to ``n`` records and whether the work item ends with them, or ``None``
        when the records went to the read-ahead buffer instead (``batch``: as a batch).
        ``mark`` is where the first of them starts."""
        try:
            if self._has_read_many:
                records, at_end = await self._read_many_hook(n)
            else:
                key, value, at_end = await self._read_one_hook()
                records = ([], []) if key is None or value is None else ([key], [value])
        except BaseException as exc:
            hook = "read_many" if self._has_read_many else "read_one"
            if self._note_pending("records", hook, n, mark):
                raise
            if not isinstance(exc, AsyncReaderError) or not self._skip(exc, rest=True):
                raise
            records, at_end = ([], []), True  # the rest is skipped
        return records, at_end

    def _unbatch(self) -> None:
        """Hold the buffer's waiting batch records as lists (for ``read``/``read_up_to``)."""
        dropped = self._buffer.unbatch()
        if dropped:
            self._drop_delivered(dropped)

    def _batch_buffer(self) -> None:
        """Hold the buffer's waiting list records as a batch (for ``read_batch``)."""
        dropped = self._buffer.to_batch(self._work)
        if dropped:
            self._drop_delivered(dropped)

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

    async def _read_many_hook(self, n: int) -> tuple[Records, bool]:
        try:
            result = await self._call("read_many", n)
        except AsyncReaderError:
            self._errors += 1
            raise
        return self._check_many(result, n)

    def _check_many(self, result: Any, n: int) -> tuple[Records, bool]:
        """Check what ``read_many(n)`` returned: ``(keys, values, at_end)`` or
        ``(batch, at_end)``; return ``(records, at_end)``."""
        if type(result) is tuple and len(result) == 3:
            keys, values, at_end = result
            if (
                isinstance(keys, list)
                and isinstance(values, list)
                and len(keys) == len(values) <= n
                and (keys or at_end)
            ):
                return (keys, values), bool(at_end)
        elif type(result) is tuple and len(result) == 2:
            batch, at_end = result
            if isinstance(batch, RecordBatch) and len(batch) <= n and (len(batch) or at_end):
                return batch, bool(at_end)
        raise self._contract_error("read_many", result)

    def _contract_error(self, hook: str, result: object) -> AsyncReaderError:
        return AsyncReaderError(
            f"{hook}() for {self.display_name} must return "
            + (
                "(key, value), (key, value, at_end) or None (at end)"
                if hook == "read_one"
                else "(keys, values, at_end) or (RecordBatch, at_end) with 1..n records or "
                "at_end true"
            )
            + f", not {result!r:.200}",
            work_item=self._work,
        )


#: What a read on returns: ``(keys, values)`` lists, or a batch.
Records: TypeAlias = "tuple[list[bytes], list[bytes]] | RecordBatch"


def as_lists(records: Records) -> tuple[list[bytes], list[bytes]]:
    """``records`` as ``(keys, values)`` lists."""
    if isinstance(records, RecordBatch):
        return records.keys(), records.tolist()
    return records


def count_of(records: Records) -> int:
    """How many records ``records`` holds."""
    return len(records) if isinstance(records, RecordBatch) else len(records[0])


class _Gather:
    """Where :meth:`HookPath._gather_locked` puts the records it gathers."""

    __slots__ = ()
    #: Whether a buffered reader should read on in batches.
    batch: ClassVar[bool] = False

    @property
    def count(self) -> int:
        """How many records are gathered."""
        raise NotImplementedError

    def waiting(self, reader: HookPath) -> int:
        """Bring the buffer's waiting records to this gatherer's kind; return how many."""
        raise NotImplementedError

    def take(self, buffer: ReadAheadBuffer, take: int) -> None:
        """Take the buffer's next ``take`` records."""
        raise NotImplementedError

    def add(self, records: Records, work: bytes) -> int:
        """Add records read on from work item ``work``; return how many."""
        raise NotImplementedError

    def lists(self) -> tuple[list[bytes], list[bytes]]:
        """The records gathered, as ``(keys, values)`` (to put them back)."""
        raise NotImplementedError


class _Lists(_Gather):
    """Gathers ``read_up_to``'s lists."""

    __slots__ = ("keys", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []

    @property
    def count(self) -> int:
        return len(self.keys)

    def waiting(self, reader: HookPath) -> int:
        buffer = reader._buffer
        if buffer.batch is not None:
            reader._unbatch()
        return buffer.n - buffer.pos

    def take(self, buffer: ReadAheadBuffer, take: int) -> None:
        i = buffer.pos
        if not self.keys and take == buffer.n:
            self.keys, self.values = buffer.keys, buffer.values
        else:
            self.keys += buffer.keys[i : i + take]
            self.values += buffer.values[i : i + take]
        buffer.pos = i + take

    def add(self, records: Records, work: bytes) -> int:
        keys, values = as_lists(records)
        self.keys += keys
        self.values += values
        return len(keys)

    def lists(self) -> tuple[list[bytes], list[bytes]]:
        return self.keys, self.values


class _Batches(_Gather):
    """Gathers ``read_batch``'s batch: a part per run; records a hook returned as lists
    are collected and joined into one part at once (not a batch per hook call)."""

    __slots__ = ("_count", "_keys", "_values", "_work", "parts")
    batch: ClassVar[bool] = True

    def __init__(self) -> None:
        self.parts: list[RecordBatch] = []
        self._count = 0
        self._keys: list[bytes] = []
        self._values: list[bytes] = []
        self._work: bytes | None = None

    @property
    def count(self) -> int:
        return self._count

    def waiting(self, reader: HookPath) -> int:
        buffer = reader._buffer
        if buffer.pos < buffer.n:
            reader._batch_buffer()
        return buffer.waiting

    def take(self, buffer: ReadAheadBuffer, take: int) -> None:
        self._flush()
        self.parts.append(buffer.take_batch(take))
        self._count += take

    def add(self, records: Records, work: bytes) -> int:
        if isinstance(records, RecordBatch):
            self._flush()
            count = len(records)
            if count:
                self.parts.append(records)
        else:
            keys, values = records
            count = len(keys)
            self._keys += keys
            self._values += values
            self._work = work
        self._count += count
        return count

    def _flush(self) -> None:
        if self._keys:
            self.parts.append(RecordBatch.from_records(self._keys, self._values, work=self._work))
            self._keys, self._values = [], []

    def result(self) -> RecordBatch:
        """The records gathered, as one batch."""
        self._flush()
        return join_batches(self.parts)

    def lists(self) -> tuple[list[bytes], list[bytes]]:
        return as_lists(self.result())
