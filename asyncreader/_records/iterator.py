"""Iterate over the payloads of a TFRecord file, as ``tf.compat.v1.io.tf_record_iterator``.

:func:`tf_record_iterator` is the synchronous TF1 API. :func:`async_tf_record_iterator` is
its ``async for`` twin: each block is read (and decompressed and framed) on the shared I/O
executor, so the event loop never blocks. Both read the file in large blocks and frame them
with :class:`~asyncreader._records.tfrecord.TFRecordFramer`; records before a corrupt one
are yielded, then :class:`~asyncreader.DataLossError` is raised.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, BinaryIO

import anyio
import anyio.lowlevel

from .._errors import InvalidArgumentError, map_io_errors
from .._io.executor import IoCall, run_io, run_io_abandoning
from . import files
from .compression import TFRecordCompressionType, parse_compression_type
from .framer import DEFAULT_MAX_RECORD_BYTES, check_max_record_bytes
from .tfrecord import TFRecordFramer

if TYPE_CHECKING:
    from types import TracebackType
    from typing import Self

    from .files import PathArg

__all__ = [
    "AsyncTFRecordIterator",
    "TFRecordIterator",
    "async_tf_record_iterator",
    "tf_record_iterator",
]


class _Source:
    """A file plus its framer: the blocking part shared by both iterators."""

    __slots__ = ("file", "framer", "path", "read_size")

    def __init__(
        self,
        path: PathArg,
        kind: TFRecordCompressionType,
        verify_crc: bool,
        read_size: int,
        max_record_bytes: int,
    ) -> None:
        self.path = path
        self.read_size = read_size
        self.file: BinaryIO | None = None
        self.framer = TFRecordFramer(
            compression_type=kind,
            verify_crc=verify_crc,
            work_item=files.display_path(path),
            max_record_bytes=max_record_bytes,
        )

    def open(self) -> None:
        self.file = files.open_for_reading(self.path)
        # Bounds the lengths headers may declare (ignored for a compressed file).
        with map_io_errors(self.framer.work_item):
            self.framer.stream_size = os.fstat(self.file.fileno()).st_size

    def next_block(self) -> list[bytes] | None:
        """Return the next non-empty list of payloads, or ``None`` at the end of the file.

        The file is closed when this raises; later calls raise the same error.
        """
        try:
            return self._next_block()
        except BaseException:
            self.close()
            raise

    def _next_block(self) -> list[bytes] | None:
        framer = self.framer
        while True:
            if framer.pending:
                _, values = framer.decode(b"")
            elif self.file is None:
                if framer.error is not None:
                    raise framer.error
                return None
            else:
                with map_io_errors(framer.work_item):
                    chunk = self.file.read(self.read_size)
                if chunk:
                    _, values = framer.decode(chunk)
                else:
                    self.close()
                    _, values = framer.finish()
                    if not values:
                        return None
            if values:
                return values

    def close(self) -> None:
        file, self.file = self.file, None
        if file is not None:
            file.close()


class TFRecordIterator:
    """A synchronous iterator over a TFRecord file's payloads.

    Returned by :func:`tf_record_iterator`. The file closes at the end of iteration, on
    :meth:`close` or when leaving a ``with`` block.
    """

    __slots__ = ("_i", "_source", "_values")

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._values: list[bytes] = []
        self._i = 0

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> bytes:
        i = self._i
        if i < len(self._values):
            self._i = i + 1
            return self._values[i]
        values = self._source.next_block()
        if values is None:
            self._values = []
            raise StopIteration
        self._values = values
        self._i = 1
        return values[0]

    def close(self) -> None:
        """Close the file; iteration then ends. Closing twice does nothing."""
        self._source.close()
        self._source.framer = TFRecordFramer()
        self._values = []

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __del__(self) -> None:
        # Like TensorFlow's iterator, abandoning it part-way just releases the file.
        self._source.close()

    def __repr__(self) -> str:
        return f"<TFRecordIterator {self._source.framer!r}>"


class AsyncTFRecordIterator:
    """An ``async for`` iterator over a TFRecord file's payloads.

    Returned by :func:`async_tf_record_iterator`. The file is opened by the first step, on
    a worker thread; it closes at the end of iteration, on :meth:`aclose` or when leaving an
    ``async with`` block.

    A cancelled step returns at once, even if its thread is blocked (a named pipe with no
    writer, a stalled mount): the thread is abandoned. The next step waits for it
    (cancellably) and takes what it read, so no record is lost; :meth:`aclose` meanwhile
    leaves the thread to close the file when it returns.
    """

    __slots__ = ("_closed", "_i", "_opened", "_pending", "_source", "_values")

    def __init__(self, source: _Source) -> None:
        self._source = source
        self._values: list[bytes] = []
        self._i = 0
        self._opened = False
        self._closed = False
        # A step a cancellation abandoned, whose thread may still use the source.
        self._pending: IoCall[list[bytes] | None] | None = None

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        i = self._i
        if i < len(self._values):
            # Records already in memory: a cancellation point but no thread hop.
            await anyio.lowlevel.checkpoint_if_cancelled()
            self._i = i + 1
            return self._values[i]
        if self._closed:
            raise StopAsyncIteration
        pending = self._pending
        if pending is not None:
            await pending.wait()
            self._pending = None
            values = pending.outcome()
        else:
            call = IoCall(self._step, self._source.close)
            try:
                values = await run_io_abandoning(call)
            except BaseException:
                if call.abandoned:
                    self._pending = call
                raise
        if values is None:
            self._values = []
            raise StopAsyncIteration
        self._values = values
        self._i = 1
        return values[0]

    def _step(self) -> list[bytes] | None:
        """Open the file on the first step, then read the next block (on a worker thread)."""
        if not self._opened:
            self._opened = True
            self._source.open()
        return self._source.next_block()

    async def aclose(self) -> None:
        """Close the file on a worker thread; iteration then ends. Idempotent.

        A step's thread still blocked is not waited for: it closes the file when it
        returns.
        """
        self._values = []
        self._closed = self._opened = True
        pending, self._pending = self._pending, None
        if pending is not None and pending.discard():
            return  # its thread closes the file
        with anyio.CancelScope(shield=True):
            await run_io(self._source.close)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"<AsyncTFRecordIterator {self._source.framer!r}>"


def tf_record_iterator(
    path: PathArg,
    compression_type: str | TFRecordCompressionType | None = None,
    *,
    verify_crc: bool = True,
    read_size: int = files.READ_SIZE,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> TFRecordIterator:
    """Return an iterator over the payloads of the TFRecord file at ``path``.

    The file is opened now; it is read ``read_size`` bytes at a time.

    Args:
        path: A local path.
        compression_type: ``None``/``""``, ``"ZLIB"``, ``"GZIP"`` or a
            :class:`TFRecordCompressionType`.
        verify_crc: Check every record's checksums.
        read_size: Bytes read from the file per block.
        max_record_bytes: The longest payload read (default 256 MiB,
            ``DEFAULT_MAX_RECORD_BYTES`` in ``asyncreader._records``): a header
            declaring more raises :class:`~asyncreader.ResourceExhaustedError` before any
            of the record is buffered or inflated. A header declaring more than is left in
            an uncompressed file raises ``DataLossError`` (``truncated record``) at once.

    Returns:
        A :class:`TFRecordIterator` (also a context manager).

    Raises:
        InvalidArgumentError: for an unknown ``compression_type``, ``read_size`` < 1 or
            ``max_record_bytes`` < 1.
        NotFoundError: if the file does not exist.
        DataLossError: while iterating, at a corrupt or truncated record (``corrupted
            record at <offset>``, ``truncated record at <offset>``) or a broken
            compressed stream (``inflate() failed ...``).
        ResourceExhaustedError: while iterating, at a record over ``max_record_bytes``.
    """
    source = _make_source(path, compression_type, verify_crc, read_size, max_record_bytes)
    source.open()
    return TFRecordIterator(source)


def async_tf_record_iterator(
    path: PathArg,
    compression_type: str | TFRecordCompressionType | None = None,
    *,
    verify_crc: bool = True,
    read_size: int = files.READ_SIZE,
    max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
) -> AsyncTFRecordIterator:
    """Return an ``async for`` iterator over the payloads of the TFRecord file at ``path``.

    Nothing blocks the event loop: the file is opened by the first step and every block
    is read and framed on the shared I/O executor.

    Args:
        path: A local path.
        compression_type: ``None``/``""``, ``"ZLIB"``, ``"GZIP"`` or a
            :class:`TFRecordCompressionType`.
        verify_crc: Check every record's checksums.
        read_size: Bytes read from the file per block.
        max_record_bytes: The longest payload read, as for :func:`tf_record_iterator`.

    Returns:
        An :class:`AsyncTFRecordIterator` (also an async context manager).

    Raises:
        InvalidArgumentError: for an unknown ``compression_type``, ``read_size`` < 1 or
            ``max_record_bytes`` < 1.
        NotFoundError: from the first step, if the file does not exist.
        DataLossError: while iterating, as for :func:`tf_record_iterator`.
        ResourceExhaustedError: while iterating, at a record over ``max_record_bytes``.
    """
    return AsyncTFRecordIterator(
        _make_source(path, compression_type, verify_crc, read_size, max_record_bytes)
    )


def _make_source(
    path: PathArg,
    compression_type: str | TFRecordCompressionType | None,
    verify_crc: bool,
    read_size: int,
    max_record_bytes: int,
) -> _Source:
    kind = parse_compression_type(compression_type)
    if read_size < 1:
        raise InvalidArgumentError(f"read_size must be >= 1, not {read_size}")
    return _Source(path, kind, verify_crc, read_size, check_max_record_bytes(max_record_bytes))
