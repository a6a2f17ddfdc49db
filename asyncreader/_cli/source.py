"""Record files for ``inspect`` and ``convert``: open, detect compression and format, frame.

A file (local path or URL) is opened through the readers' own filesystem layer and framed
by the readers' own framers (:class:`~asyncreader._records.TFRecordFramer`,
:class:`~asyncreader._records.LineFramer`, :class:`~asyncreader._records.FixedLengthFramer`),
a multi-MiB block at a time, with the next block read on a thread while the current one is
framed. What comes out is one :class:`Chunk` per block: the records' lengths as one array,
and their bytes only when the caller needs them.

Compression is detected from the first bytes: the GZIP magic ``1f 8b 08``, or a ZLIB header
(RFC 1950), each confirmed by inflating the start of the file; a file whose first bytes are
a valid uncompressed TFRecord header is uncompressed whatever else they look like. The
extension (``.gz``, ``.zz``/``.zlib``) is only a hint: a report notes when it disagrees.
"""

from __future__ import annotations

import dataclasses
import os
import struct
import zlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Final, TypeAlias

import numpy as np

from .._errors import DataLossError
from .._io.crc import crc32c
from .._io.filesystem import READ_BLOCK, open_work_item
from .._records.compression import (
    Decompressor,
    TFRecordCompressionType,
    sniff_compression,
    wbits_for,
)
from .._records.fixed_length import FixedLengthFramer
from .._records.lines import LineFramer
from .._records.tfrecord import TFRecordFramer

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from .._io.filesystem import RandomAccessFile
    from .._records.batch import Segment
    from .._records.framer import Framer

__all__ = [
    "Chunk",
    "CommandError",
    "FixedLayout",
    "Source",
    "chunks",
    "detect_compression",
    "open_source",
]

NONE: Final = TFRecordCompressionType.NONE
GZIP: Final = TFRecordCompressionType.GZIP
ZLIB: Final = TFRecordCompressionType.ZLIB

#: Names for ``--compression`` on the command line.
COMPRESSION_NAMES: Final = {"none": NONE, "gzip": GZIP, "zlib": ZLIB}

_COMPRESSED_SUFFIXES: Final = {".gz": GZIP, ".gzip": GZIP, ".zz": ZLIB, ".zlib": ZLIB}
_FORMAT_SUFFIXES: Final = {
    ".tfrecord": "tfrecord",
    ".tfrecords": "tfrecord",
    ".tfrec": "tfrecord",
    ".tfr": "tfrecord",
    ".txt": "text",
    ".text": "text",
    ".csv": "text",
    ".tsv": "text",
    ".jsonl": "text",
    ".ndjson": "text",
    ".log": "text",
    ".bin": "fixed",
}
_HEADER = struct.Struct("<QI")
# How much of the start of a file the detection looks at (decompressed when compressed).
_PROBE: Final = 64 << 10


class CommandError(Exception):
    """Bad input the user can act on: the message says what was found and what to do."""


@dataclasses.dataclass(frozen=True, slots=True)
class FixedLayout:
    """The layout of a fixed-length record file (``--record-bytes`` and friends)."""

    record_bytes: int
    header_bytes: int = 0
    footer_bytes: int = 0


@dataclasses.dataclass(slots=True)
class Source:
    """An open record file, its detected compression and format.

    Attributes:
        name: The path or URL as given.
        format: ``"tfrecord"``, ``"text"``, ``"fixed"`` or ``"empty"`` (no bytes at all).
        compression: The compression in use.
        detected: The compression the first bytes show (``None`` for an empty file).
        hint: The compression the name's extension suggests, if any.
        file: The open file.
        head: The first block read (for detection), until :func:`chunks` frames it.
        size: The file's size in bytes, when known.
    """

    name: str
    format: str
    compression: TFRecordCompressionType
    detected: TFRecordCompressionType | None
    hint: TFRecordCompressionType | None
    size: int | None
    file: RandomAccessFile
    head: bytes

    def close(self) -> None:
        """Close the file."""
        self.file.close()


@dataclasses.dataclass(frozen=True, slots=True)
class Chunk:
    """The records framed from one block of a file.

    Attributes:
        lengths: Each record's length in bytes, in file order (``int64``).
        values: The records themselves, when asked for.
        keys: Each record's key (TFRecord: header offset; text: line number; fixed: index).
        input_bytes: Bytes of the file consumed for this chunk.
    """

    lengths: np.ndarray
    values: list[bytes] | None
    keys: np.ndarray
    input_bytes: int


def _split_suffixes(name: str) -> tuple[TFRecordCompressionType | None, str | None]:
    """The compression and format the file's name suggests."""
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    root, ext = os.path.splitext(base)
    compression = _COMPRESSED_SUFFIXES.get(ext)
    if compression is not None:
        root, ext = os.path.splitext(root)
    return compression, _FORMAT_SUFFIXES.get(ext)


def _is_tfrecord_header(data: bytes) -> bool:
    """Whether ``data`` starts with a TFRecord header whose length checksum matches."""
    if len(data) < _HEADER.size:
        return False
    masked: int = _HEADER.unpack_from(data)[1]
    c = crc32c(data[:8])
    return masked == ((((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _inflate_start(head: bytes, kind: TFRecordCompressionType) -> bytes | None:
    """The first decompressed bytes of ``head`` under ``kind``, or ``None`` if it is no
    such stream."""
    try:
        return zlib.decompressobj(wbits_for(kind)).decompress(head[: 4 * _PROBE], _PROBE)
    except zlib.error:
        return None


def detect_compression(head: bytes) -> TFRecordCompressionType:
    """The compression of a file that starts with ``head`` (see the module docstring)."""
    if not head or _is_tfrecord_header(head):
        return NONE
    if head[:3] == b"\x1f\x8b\x08":
        return GZIP  # gzip's magic and its only method, deflate
    if sniff_compression(head) is ZLIB and _inflate_start(head, ZLIB) is not None:
        return ZLIB  # a two-byte header matches by chance once in ~500: inflate to be sure
    return NONE


def _describe(kind: TFRecordCompressionType) -> str:
    return "uncompressed" if kind is NONE else f"{kind.name}-compressed"


def _looks_like_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        # A multi-byte character cut at the end of the probe is still text.
        return exc.start >= len(data) - 3 and exc.reason == "unexpected end of data"
    return True


def open_source(
    name: str,
    *,
    format: str = "auto",
    compression: str = "auto",
    layout: FixedLayout | None = None,
) -> Source:
    """Open ``name`` and work out its compression and format.

    Args:
        name: A local path or a URL.
        format: ``"auto"``, ``"tfrecord"``, ``"text"`` or ``"fixed"``.
        compression: ``"auto"``, ``"none"``, ``"gzip"`` or ``"zlib"``.
        layout: The record layout of a fixed-length file.

    Raises:
        CommandError: the given compression is not what the file has, the format cannot be
            told, or a fixed-length file has no ``layout``.
        NotFoundError: the file does not exist.
        FailedPreconditionError: it cannot be read (or its URL scheme is not supported).
    """
    f = open_work_item(name)
    try:
        head = f.read(READ_BLOCK)
        detected = detect_compression(head) if head else None
        if compression == "auto":
            kind = detected if detected is not None else NONE
        else:
            kind = COMPRESSION_NAMES[compression]
            if detected is not None and detected is not kind:
                raise CommandError(
                    f"{name}: --compression {compression} was given, but the file is "
                    f"{_describe(detected)} (detected from its first bytes); pass "
                    f"--compression {detected.name.lower()} or leave --compression out"
                )
        fmt = _detect_format(name, head, kind, format, layout)
        return Source(name, fmt, kind, detected, _split_suffixes(name)[0], f.size, f, head)
    except BaseException:
        f.close()
        raise


def _detect_format(
    name: str,
    head: bytes,
    kind: TFRecordCompressionType,
    format: str,
    layout: FixedLayout | None,
) -> str:
    if format == "fixed" and layout is None:
        raise CommandError(f"{name}: a fixed-length file needs --record-bytes N")
    if format != "auto":
        return format
    if not head:
        return "empty"
    _, suggested = _split_suffixes(name)
    if layout is not None:
        return "fixed"
    if suggested == "fixed":
        raise CommandError(
            f"{name}: looks like a fixed-length record file (.bin): pass --record-bytes N "
            "(and --header-bytes / --footer-bytes if it has them)"
        )
    if suggested is not None:
        return suggested
    start = head[:_PROBE] if kind is NONE else _inflate_start(head, kind) or b""
    if _is_tfrecord_header(start):
        return "tfrecord"
    if _looks_like_text(start):
        return "text"
    raise CommandError(
        f"{name}: unknown format: not a TFRecord file (no valid record header at byte 0 of "
        f"the {'' if kind is NONE else 'decompressed '}data) and not text; pass --format "
        "tfrecord, text or fixed (with --record-bytes N)"
    )


def _framer(source: Source, verify: bool, layout: FixedLayout | None) -> Framer:
    if source.format == "tfrecord":
        return TFRecordFramer(
            verify_crc=verify,
            compression_type=source.compression,
            work_item=source.name,
            stream_size=source.size if source.compression is NONE else None,
        )
    if source.format == "fixed":
        assert layout is not None
        return FixedLengthFramer(
            layout.record_bytes,
            layout.header_bytes,
            layout.footer_bytes,
            encoding=source.compression.name if source.compression is not NONE else None,
            work_item=source.name,
        )
    return LineFramer(work_item=source.name)


def chunks(
    source: Source,
    *,
    values: bool,
    verify: bool = True,
    layout: FixedLayout | None = None,
    on_framer: Callable[[Framer], None] | None = None,
) -> Iterator[Chunk]:
    """Frame ``source`` block by block.

    Args:
        source: The open file (from :func:`open_source`).
        values: Whether each chunk carries the records' bytes (else only their lengths,
            framed in segment mode with no Python object per record).
        verify: Check TFRecord checksums.
        layout: The layout of a fixed-length file.
        on_framer: Called with the framer before the first block (to read its position).

    Yields:
        One :class:`Chunk` per block that completes records (and one for the end).

    Raises:
        DataLossError: at a corrupt record or stream, after the chunks before it; its
            ``offset`` names the bad record's byte offset.
    """
    if source.format == "empty":
        return
    framer = _framer(source, verify, layout)
    if on_framer is not None:
        on_framer(framer)
    # Text goes through the line framer uncompressed: inflate it here first.
    inflate = (
        Decompressor(source.compression)
        if source.format == "text" and source.compression is not NONE
        else None
    )

    def frame(data: bytes, last: bool) -> Iterator[_Framed]:
        pieces = [data] if inflate is None else _inflated(inflate, data, last, source.name)
        for piece in pieces:
            yield _frame(framer, piece, values)
            while framer.pending:
                yield _frame(framer, b"", values)
        if last:
            yield _finish(framer, values)

    with ThreadPoolExecutor(1, thread_name_prefix="asyncreader-cli-read") as pool:
        block, source.head = source.head, b""
        while True:
            # A short read means the end of the file: the next block is read meanwhile.
            last = len(block) < READ_BLOCK
            ahead = None if last else pool.submit(source.file.read, READ_BLOCK)
            used = len(block)
            for lengths, vals, keys in frame(block, last):
                yield Chunk(lengths, vals, keys, used)
                used = 0
            if ahead is None:
                return
            block = ahead.result()


_Framed: TypeAlias = "tuple[np.ndarray, list[bytes] | None, np.ndarray]"


def _inflated(inflate: Decompressor, data: bytes, last: bool, name: str) -> list[bytes]:
    try:
        pieces = [inflate.decompress(data)]
        while inflate.pending:
            pieces.append(inflate.decompress(b""))
        if last:
            inflate.finish()
    except DataLossError as exc:
        offset = exc.offset if exc.offset is not None else inflate.input_bytes
        raise DataLossError(exc.message, work_item=name, offset=offset) from exc
    return pieces


def _frame(framer: Framer, data: bytes, values: bool) -> _Framed:
    if values:
        keys, records = framer.decode(data)
        return _lengths(records), records, np.asarray(keys, np.int64)
    framed = framer.decode_segments(data)
    return _segment_lengths(framed.segments), None, framed.keys


def _finish(framer: Framer, values: bool) -> _Framed:
    if values:
        keys, records = framer.finish()
        return _lengths(records), records, np.asarray(keys, np.int64)
    framed = framer.finish_segments()
    return _segment_lengths(framed.segments), None, framed.keys


def _lengths(records: list[bytes]) -> np.ndarray:
    return np.fromiter(map(len, records), np.int64, len(records))


def _segment_lengths(segments: list[Segment]) -> np.ndarray:
    if not segments:
        return np.empty(0, np.int64)
    return np.concatenate([s.lengths for s in segments])
