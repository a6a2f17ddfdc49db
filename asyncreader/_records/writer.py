"""``TFRecordWriter``: write TFRecord files that TensorFlow reads unchanged.

Records are framed (SPEC §4.1) into an in-memory buffer and written out in large blocks;
with ``"ZLIB"`` or ``"GZIP"`` the whole file is one compressed stream, finished by
:meth:`TFRecordWriter.close`. Uncompressed output is byte-identical to TensorFlow's writer.

The sync verbs (``write``, ``write_many``, ``flush``, ``close``) block; the async ones
(``awrite``, ``awrite_many``, ``aflush``, ``aclose``) buffer on the event loop and compress
and write on the shared I/O executor, never blocking the loop.
"""

from __future__ import annotations

import contextlib
import dataclasses
import struct
import warnings
import zlib
from typing import TYPE_CHECKING, BinaryIO, Final

import anyio
import anyio.lowlevel

from .._errors import FailedPreconditionError, InvalidArgumentError, map_io_errors
from .._io.crc import crc32c
from .._io.executor import run_io
from . import files
from .compression import TFRecordCompressionType, parse_compression_type, wbits_for

if TYPE_CHECKING:
    from collections.abc import Iterable
    from types import TracebackType
    from typing import Self

    from .files import PathArg

__all__ = ["TFRecordWriter", "WriterStatistics"]

#: Buffered bytes that trigger a write: big blocks, bounded memory.
DEFAULT_BUFFER_SIZE: Final = 4 << 20
_DELTA: Final = 0xA282EAD8
_U32: Final = 0xFFFFFFFF
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")
# zlib settings of TensorFlow's ZlibOutputBuffer (memLevel 9, default level and strategy).
_MEM_LEVEL: Final = 9
# Header cache size: record lengths repeat, so headers are computed once per length.
_HEADER_CACHE: Final = 1024

_NO_FLUSH: Final = 0
_SYNC_FLUSH: Final = 1
_FINISH: Final = 2


@dataclasses.dataclass(frozen=True, slots=True)
class WriterStatistics:
    """A snapshot of a :class:`TFRecordWriter`.

    Attributes:
        records_written: Records accepted so far.
        bytes_written: Framed (uncompressed) bytes accepted so far.
        bytes_buffered: Framed bytes accepted but not yet handed to the file.
        closed: Whether the writer is closed.
    """

    records_written: int
    bytes_written: int
    bytes_buffered: int
    closed: bool


class TFRecordWriter:
    """Write records to a TFRecord file, as ``tf.io.TFRecordWriter``.

    The file is created (or truncated) on first use: the first write or flush, entering a
    ``with`` / ``async with`` block, or closing. Constructing the writer touches nothing,
    so it may be built on the event loop.

    The async methods write on the shared I/O executor and, unlike reads, are not
    abandoned when cancelled: a cancelled write or close waits for its thread, so that the
    file is never left half-written by a thread nobody waits for. The path is one the
    program chose to write, not input from elsewhere; don't point it at a named pipe or
    a mount that may stall.

    Usage::

        with ar.TFRecordWriter("train.tfrecord") as w:
            w.write(b"one")
        async with ar.TFRecordWriter("train.tfrecord.gz", "GZIP") as w:
            await w.awrite(b"one")

    Args:
        path: A local path (``str``, ``bytes`` or ``os.PathLike``).
        compression_type: ``None``/``""``, ``"ZLIB"``, ``"GZIP"`` or a
            :class:`TFRecordCompressionType`.
        compression_level: zlib level 0-9 (-1, the default, is zlib's default, 6).
        buffer_size: Framed bytes buffered before they are written out.

    Raises:
        InvalidArgumentError: for an unknown ``compression_type``, a level outside -1..9 or
            a ``buffer_size`` below 1.
    """

    __slots__ = (
        "__weakref__",
        "_buffer_size",
        "_closed",
        "_compression",
        "_compressor",
        "_file",
        "_headers",
        "_level",
        "_lock",
        "_parts",
        "_path",
        "_pending",
        "_records",
        "_written",
    )

    def __init__(
        self,
        path: PathArg,
        compression_type: str | TFRecordCompressionType | None = None,
        *,
        compression_level: int = -1,
        buffer_size: int = DEFAULT_BUFFER_SIZE,
    ) -> None:
        # Set first so that __del__ works whatever fails below.
        self._closed = True
        self._file: BinaryIO | None = None
        self._compression = parse_compression_type(compression_type)
        if not -1 <= compression_level <= 9:
            raise InvalidArgumentError(
                f"compression_level must be between -1 and 9, not {compression_level}"
            )
        if buffer_size < 1:
            raise InvalidArgumentError(f"buffer_size must be >= 1, not {buffer_size}")
        self._path = path
        self._level = compression_level
        self._buffer_size = buffer_size
        self._compressor: zlib._Compress | None = None
        self._parts: list[bytes] = []
        self._pending = 0
        self._records = 0
        self._written = 0
        self._headers: dict[int, bytes] = {}
        self._lock = anyio.Lock()
        self._closed = False

    # -- sync verbs -------------------------------------------------------------------

    def write(self, record: bytes | bytearray | memoryview | str) -> None:
        """Append one record.

        Args:
            record: The payload; ``str`` is encoded as UTF-8.

        Raises:
            FailedPreconditionError: if the writer is closed.
            TypeError: if ``record`` is not bytes-like or ``str``.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        self._check_open()
        self._append(record)
        if self._pending >= self._buffer_size:
            self._write_out(self._take(), _NO_FLUSH)

    def write_many(self, records: Iterable[bytes | bytearray | memoryview | str]) -> None:
        """Append many records; faster than calling :meth:`write` for each.

        Raises:
            FailedPreconditionError: if the writer is closed.
            TypeError: if a record is not bytes-like or ``str``.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        self._check_open()
        for record in records:
            self._append(record)
            if self._pending >= self._buffer_size:
                self._write_out(self._take(), _NO_FLUSH)

    def flush(self) -> None:
        """Write everything buffered to the file (compressed streams: a zlib sync flush).

        Raises:
            FailedPreconditionError: if the writer is closed.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        self._check_open()
        self._write_out(self._take(), _SYNC_FLUSH)

    def close(self) -> None:
        """Write what is buffered, finish the compressed stream and close the file.

        Closing twice does nothing. The writer is closed even when the final write fails.

        Raises:
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        if self._closed:
            return
        self._closed = True
        try:
            self._write_out(self._take(), _FINISH)
        finally:
            self._close_file()

    def __enter__(self) -> Self:
        self._check_open()
        self._write_out([], _NO_FLUSH)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- async verbs ------------------------------------------------------------------

    async def awrite(self, record: bytes | bytearray | memoryview | str) -> None:
        """Append one record; write the buffer out on a worker thread when it is full.

        A cancellation point. It yields to the event loop only when the buffer is written
        out; batch with :meth:`awrite_many` for the best speed. If cancelled while the
        buffer is being written, the record stays accepted (it is written by the next
        flush or close).

        Raises:
            FailedPreconditionError: if the writer is closed.
            TypeError: if ``record`` is not bytes-like or ``str``.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        self._append(record)
        if self._pending >= self._buffer_size:
            await self._adrain(_NO_FLUSH)

    async def awrite_many(self, records: Iterable[bytes | bytearray | memoryview | str]) -> None:
        """Append many records, writing full buffers out on worker threads.

        Raises:
            FailedPreconditionError: if the writer is closed.
            TypeError: if a record is not bytes-like or ``str``.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        await anyio.lowlevel.checkpoint_if_cancelled()
        self._check_open()
        for record in records:
            self._append(record)
            if self._pending >= self._buffer_size:
                await self._adrain(_NO_FLUSH)

    async def aflush(self) -> None:
        """Write everything buffered to the file on a worker thread.

        Raises:
            FailedPreconditionError: if the writer is closed.
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        self._check_open()
        await self._adrain(_SYNC_FLUSH)

    async def aclose(self) -> None:
        """Close the writer (see :meth:`close`) with the I/O on a worker thread.

        The file is closed even if this is cancelled; closing twice does nothing.

        Raises:
            NotFoundError: if the file cannot be created because its directory is missing.
        """
        if self._closed:
            await anyio.lowlevel.checkpoint()
            return
        self._closed = True
        with anyio.CancelScope(shield=True):
            try:
                await self._adrain(_FINISH)
            finally:
                if self._file is not None:
                    await run_io(self._close_file)

    async def __aenter__(self) -> Self:
        self._check_open()
        await self._adrain(_NO_FLUSH)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- introspection ----------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the writer is closed."""
        return self._closed

    @property
    def path(self) -> PathArg:
        """The file written."""
        return self._path

    def statistics(self) -> WriterStatistics:
        """Return a snapshot of the writer's progress."""
        return WriterStatistics(
            records_written=self._records,
            bytes_written=self._written,
            bytes_buffered=self._pending,
            closed=self._closed,
        )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        kind = self._compression.name
        return (
            f"<TFRecordWriter {self._path!r} {kind} {state} records={self._records} "
            f"buffered={self._pending}>"
        )

    def __del__(self) -> None:
        if self._closed:
            return
        warnings.warn(
            f"unclosed {self!r}: call close() or aclose(), or use a with block",
            ResourceWarning,
            stacklevel=2,
            source=self,
        )
        # Nothing could report a failure from a finaliser.
        with contextlib.suppress(Exception):
            self.close()

    # -- internals --------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(
                "Writer is closed.", work_item=files.display_path(self._path)
            )

    def _append(self, record: bytes | bytearray | memoryview | str) -> None:
        if isinstance(record, str):
            record = record.encode()
        elif not isinstance(record, bytes):
            if not isinstance(record, bytearray | memoryview):
                raise TypeError(f"a record must be bytes-like or str, not {type(record).__name__}")
            record = bytes(record)
        n = len(record)
        header = self._headers.get(n)
        if header is None:
            length = _U64LE.pack(n)
            c = crc32c(length)
            header = length + _U32LE.pack((((c >> 15) | (c << 17)) + _DELTA) & _U32)
            if len(self._headers) >= _HEADER_CACHE:
                self._headers.clear()
            self._headers[n] = header
        c = crc32c(record)
        self._parts += (header, record, _U32LE.pack((((c >> 15) | (c << 17)) + _DELTA) & _U32))
        self._pending += n + 16
        self._written += n + 16
        self._records += 1

    def _take(self) -> list[bytes]:
        parts = self._parts
        self._parts = []
        self._pending = 0
        return parts

    def _write_out(self, parts: list[bytes], mode: int) -> None:
        """Open the file if needed, compress and write ``parts``. Runs on any thread."""
        display = files.display_path(self._path)
        if self._file is None:
            self._file = files.open_for_writing(self._path)
            if self._compression is not TFRecordCompressionType.NONE:
                self._compressor = zlib.compressobj(
                    self._level, zlib.DEFLATED, wbits_for(self._compression), _MEM_LEVEL
                )
        data = b"".join(parts)
        with map_io_errors(display):
            if self._compressor is not None:
                data = self._compressor.compress(data)
                if mode == _SYNC_FLUSH:
                    data += self._compressor.flush(zlib.Z_SYNC_FLUSH)
                elif mode == _FINISH:
                    data += self._compressor.flush(zlib.Z_FINISH)
            view = memoryview(data)
            while view:
                # A raw file may write less than asked.
                view = view[self._file.write(view) or 0 :]

    async def _adrain(self, mode: int) -> None:
        async with self._lock:
            # Taken under the lock, so buffers reach the file in the order written and a
            # caller cancelled while waiting leaves its records buffered.
            parts = self._take()
            await run_io(self._write_out, parts, mode)

    def _close_file(self) -> None:
        file, self._file = self._file, None
        self._compressor = None
        if file is not None:
            with map_io_errors(files.display_path(self._path)):
                file.close()
