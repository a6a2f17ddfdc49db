"""Compression types and a bounded streaming decompressor for record files.

TensorFlow compresses a whole record file as one deflate stream (SPEC §4.3): ``"ZLIB"`` is
the RFC 1950 zlib wrapper, ``"GZIP"`` the RFC 1952 gzip wrapper, both with window bits 15.
Records are framed inside the decompressed stream.

:class:`Decompressor` is sans-I/O like the framers: feed it compressed chunks, get
decompressed pieces. Each call produces at most ``max_output`` bytes and keeps the rest of
its input for later (``pending``), so a small chunk of a "zip bomb" never expands into
gigabytes at once. A stream that ends cleanly may be followed by another one (concatenated
gzip members, as newer TensorFlow reads them; the same is accepted for zlib streams).
"""

from __future__ import annotations

import enum
import re
import zlib
from typing import Final

from .._errors import DataLossError, InvalidArgumentError

__all__ = [
    "DEFAULT_MAX_OUTPUT",
    "Decompressor",
    "TFRecordCompressionType",
    "compression_name",
    "compression_hint",
    "parse_compression_type",
    "sniff_compression",
    "wbits_for",
]

#: Largest decompressed piece produced per call: big enough that the per-call overhead
#: vanishes, small enough that a pathological ratio cannot exhaust memory.
DEFAULT_MAX_OUTPUT: Final = 4 << 20

_ZLIB_ERROR = re.compile(r"Error (-?\d+) while decompressing data:?\s*(.*)")


class TFRecordCompressionType(enum.IntEnum):
    """Compression of a whole TFRecord file, as ``tf.io.TFRecordCompressionType``.

    Wherever a ``compression_type`` is taken, these members, their names as strings in any
    case (``"ZLIB"``, ``"GZIP"``, ``""``) and ``None`` are accepted; anything else raises
    :class:`~asyncreader.InvalidArgumentError`.
    """

    NONE = 0
    ZLIB = 1
    GZIP = 2


_BY_NAME: Final = {
    "": TFRecordCompressionType.NONE,
    "NONE": TFRecordCompressionType.NONE,
    "ZLIB": TFRecordCompressionType.ZLIB,
    "GZIP": TFRecordCompressionType.GZIP,
}


def parse_compression_type(
    value: str | int | TFRecordCompressionType | None, *, name: str = "compression_type"
) -> TFRecordCompressionType:
    """Return the compression type that ``value`` names.

    Readers, :func:`~asyncreader.tf_record_iterator` and :class:`~asyncreader.TFRecordWriter`
    all take the same values. TensorFlow's reader ops log an unknown string and read the
    file uncompressed, so ``"gzip"`` or ``"BZIP2"`` there surfaces later as corrupt data;
    here it is an error at once (a deliberate difference, SPEC §11 Q11).

    Args:
        value: ``None``, ``""``, ``"NONE"``, ``"ZLIB"``, ``"GZIP"`` (any case), or a
            :class:`TFRecordCompressionType` / its integer value.
        name: The argument's name, for the error message (``encoding`` for
            :class:`~asyncreader.FixedLengthRecordReader`).

    Returns:
        The member.

    Raises:
        InvalidArgumentError: if ``value`` names no compression type.
    """
    if value is None:
        return TFRecordCompressionType.NONE
    if isinstance(value, TFRecordCompressionType):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            return TFRecordCompressionType(value)
        except ValueError:
            pass
    elif isinstance(value, str):
        found = _BY_NAME.get(value.upper())
        if found is not None:
            return found
    raise InvalidArgumentError(f"{name} must be None, '', 'ZLIB' or 'GZIP', not {value!r}")


def sniff_compression(head: bytes) -> TFRecordCompressionType | None:
    """Return the compression that a file starting with ``head`` looks like, or ``None``.

    GZIP files start with the magic bytes ``1f 8b``; ZLIB streams with a two-byte header
    whose method is deflate and whose 16-bit value is a multiple of 31 (RFC 1950). Only a
    hint for error messages: an uncompressed file can start like a zlib header by chance.
    """
    if head[:2] == b"\x1f\x8b":
        return TFRecordCompressionType.GZIP
    if (
        len(head) >= 2
        and head[0] & 0x0F == 8
        and head[0] >> 4 <= 7
        and (head[0] << 8 | head[1]) % 31 == 0
    ):
        return TFRecordCompressionType.ZLIB
    return None


def compression_hint(head: bytes, given: TFRecordCompressionType, argument: str) -> str:
    """Return ``" (looks GZIP-compressed: use compression_type='GZIP')"`` (or the like) when
    ``head``, a file's first bytes, suggests another compression than ``given``; else ``""``.

    ``argument`` is the option's name (``compression_type`` or ``encoding``).
    """
    looks = sniff_compression(head)
    if looks is None or looks is given:
        if given is TFRecordCompressionType.NONE or looks is given:
            return ""
        return f" (does not look {given.name}-compressed: is {argument} right?)"
    return f" (looks {looks.name}-compressed: use {argument}={looks.name!r})"


def compression_name(kind: TFRecordCompressionType) -> str:
    """Return TensorFlow's string for ``kind``: ``""``, ``"ZLIB"`` or ``"GZIP"``."""
    return "" if kind is TFRecordCompressionType.NONE else kind.name


def wbits_for(kind: TFRecordCompressionType) -> int:
    """Return zlib's ``wbits`` for ``kind`` (15 for zlib, 31 for gzip).

    Raises:
        InvalidArgumentError: if ``kind`` is ``NONE``.
    """
    if kind is TFRecordCompressionType.ZLIB:
        return 15
    if kind is TFRecordCompressionType.GZIP:
        return 31
    raise InvalidArgumentError("no window bits for an uncompressed stream")


class Decompressor:
    """Streaming, memory-bounded inflation of a ZLIB or GZIP stream.

    Call :meth:`decompress` with each compressed chunk (``b""`` to continue while
    :attr:`pending`), then :meth:`finish` at end of input.

    Args:
        kind: ``ZLIB`` or ``GZIP``.
        max_output: The most bytes one :meth:`decompress` call returns.
        work_item: Named in errors.

    Raises:
        InvalidArgumentError: if ``kind`` is ``NONE`` or ``max_output`` < 1.
    """

    __slots__ = (
        "_d",
        "_error",
        "_head",
        "_input_bytes",
        "_max_output",
        "_output_bytes",
        "_started",
        "_stream_at",
        "_stream_out",
        "_streams",
        "_wbits",
        "kind",
    )

    def __init__(
        self,
        kind: TFRecordCompressionType,
        *,
        max_output: int = DEFAULT_MAX_OUTPUT,
        work_item: str | bytes | None = None,
    ) -> None:
        if max_output < 1:
            raise InvalidArgumentError(f"max_output must be >= 1, not {max_output}")
        self._wbits = wbits_for(kind)
        #: ``ZLIB`` or ``GZIP``.
        self.kind = kind
        # The input's first bytes, to say what a stream that fails at once looks like.
        self._head = b""
        self._d = zlib.decompressobj(self._wbits)
        self._max_output = max_output
        self._input_bytes = 0
        self._output_bytes = 0
        # Whether the current stream has consumed any input (an empty file is no stream).
        self._started = False
        # Input offset where the current stream starts, and how many streams ended before.
        self._stream_at = 0
        self._stream_out = 0
        self._streams = 0
        # An error hit after output was produced in the same call: raised by the next call.
        self._error: DataLossError | None = None
        del work_item  # errors are raised by the framer, which knows the record

    @property
    def pending(self) -> bool:
        """Whether input is buffered that a ``decompress(b"")`` call would turn into output."""
        return (
            bool(self._d.unconsumed_tail)
            or (self._d.eof and bool(self._d.unused_data))
            or self._error is not None
        )

    @property
    def input_bytes(self) -> int:
        """Compressed bytes fed so far."""
        return self._input_bytes

    @property
    def output_bytes(self) -> int:
        """Decompressed bytes produced so far."""
        return self._output_bytes

    @property
    def head(self) -> bytes:
        """The first two bytes of input (fewer while fewer were fed)."""
        return self._head

    def decompress(self, chunk: bytes | bytearray | memoryview) -> bytes:
        """Feed ``chunk`` and return up to ``max_output`` decompressed bytes.

        Args:
            chunk: The next compressed bytes (may be empty).

        Returns:
            Decompressed bytes; possibly empty although :attr:`pending` is true only when
            nothing more can be produced without more input.

        Raises:
            DataLossError: ``inflate() failed with error <code>: <message>`` when the stream
                is corrupt; for bytes after the end of a stream that start no new one
                (trailing garbage), the message and ``offset`` give where they start in the
                input. When the error comes after output in the same call, that output is
                returned first (:attr:`pending` is then true) and the next call raises.
        """
        if self._error is not None:
            raise self._error
        if len(self._head) < 2:
            self._head = (self._head + bytes(chunk[:2]))[:2]
        self._input_bytes += len(chunk)
        d = self._d
        if d.eof:
            data = d.unused_data + bytes(chunk)
            if not data:
                return b""
            self._next_stream(self._input_bytes - len(data))
            d = self._d
        else:
            data = d.unconsumed_tail + bytes(chunk) if d.unconsumed_tail else bytes(chunk)
        if data:
            self._started = True
        out: list[bytes] = []
        room = self._max_output
        while True:
            try:
                piece = d.decompress(data, room)
            except zlib.error as exc:
                error = self._stream_error(exc)
                if not any(out):
                    raise error from exc
                # Hand over what inflated before the damage (say, records of a complete
                # stream followed by garbage) and raise on the next call.
                error.__cause__ = exc
                self._error = error
                break
            out.append(piece)
            room -= len(piece)
            self._stream_out += len(piece)
            if not d.eof or not d.unused_data or room <= 0:
                break
            # Another member follows (concatenated gzip files, as newer TensorFlow reads).
            data = d.unused_data
            self._next_stream(self._input_bytes - len(data))
            d = self._d
        result = b"".join(out) if len(out) > 1 else out[0]
        self._output_bytes += len(result)
        return result

    def finish(self) -> None:
        """Check that the input ended at the end of a compressed stream.

        Raises:
            DataLossError: ``truncated compressed stream`` when the input stopped inside a
                stream, or ``inflate() failed ...`` when the remaining input is corrupt.
        """
        if self._error is not None:
            raise self._error
        d = self._d
        if self._started and not d.eof:
            try:
                # Let zlib report a corrupt tail before calling the stream truncated.
                d.flush()
            except zlib.error as exc:
                raise self._stream_error(exc) from exc
            raise DataLossError(
                f"truncated compressed stream after {self._input_bytes} bytes of input"
            )

    def _next_stream(self, at: int) -> None:
        """Start a new stream at input offset ``at``, after one that ended cleanly."""
        self._d = zlib.decompressobj(self._wbits)
        self._started = False
        self._stream_at = at
        self._stream_out = 0
        self._streams += 1

    def _stream_error(self, exc: zlib.error) -> DataLossError:
        error = _inflate_error(exc)
        if self._streams and not self._stream_out:
            # Bytes after a complete stream that are no stream themselves: name where
            # they start, so the good part of the file can be told from the rest.
            at = self._stream_at
            return DataLossError(
                f"{error.message}: trailing garbage at byte {at} of the file, after the "
                "end of the compressed stream",
                offset=at,
            )
        return error

    def __repr__(self) -> str:
        return (
            f"<Decompressor wbits={self._wbits} in={self._input_bytes} "
            f"out={self._output_bytes} pending={self.pending}>"
        )


def _inflate_error(exc: zlib.error) -> DataLossError:
    text = str(exc)
    match = _ZLIB_ERROR.match(text)
    if match:
        return DataLossError(f"inflate() failed with error {match[1]}: {match[2]}")
    return DataLossError(f"inflate() failed: {text}")
