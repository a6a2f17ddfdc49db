"""The framer contract shared by the TFRecord, line and fixed-length framers.

A *framer* is a synchronous, event-loop-free object that turns chunks of a file into
records. Readers read large chunks on worker threads and hand them over; the framer keeps
whatever partial record a chunk ends with until the next one arrives::

    framer = TFRecordFramer(work_item=path)
    for chunk in chunks:
        keys, values = framer.decode(chunk)        # records completed by this chunk
        while framer.pending:                     # compressed input: bounded pieces
            more_keys, more_values = framer.decode(b"")
    keys, values = framer.finish()                # end of input

Contract:

* ``decode(chunk) -> (keys, values)`` returns the integer *keys* and ``bytes`` *values*
  of every record completed by the input so far (for compressed input: by the next piece of
  at most ``max_output`` decompressed bytes; :attr:`Framer.pending` then says whether a
  ``decode(b"")`` would produce more before new input is needed).
* ``finish() -> (keys, values)`` returns what the end of input completes and checks that
  the input did not stop in the middle of a record (or of a compressed stream). It drains
  any pending compressed input first.
* ``position`` is the stream offset (in the decompressed stream) where the next record
  starts; ``next_key`` is that record's key. To resume later, a reader seeks an uncompressed
  file to ``position`` and feeds a fresh framer built with the matching start argument
  (``TFRecordFramer(start_offset=...)``, ``LineFramer(first_line=..., start_offset=...)``,
  ``FixedLengthFramer(start_index=...)``). A compressed file cannot be seeked: it is fed again
  from its first byte and the fresh framer, given the same start argument, inflates and
  discards everything before ``position``.
* ``decode_segments(chunk) -> Framed`` and ``finish_segments() -> Framed`` are the *segment
  mode* of ``decode`` and ``finish``: the same records, keys, positions, errors and
  statistics, but as :class:`Framed`, buffers with offsets (record ``i`` of a segment is
  ``buffer[starts[i] : starts[i] + lengths[i]]``), with no Python object per record. A
  buffer is a read-only view of the ``bytes`` chunk fed (no copy), or of a piece the framer
  joined (a record carried across chunks, the lines of a rare path) or inflated. A reader
  uses one mode per framer; the two share the framer's state, so switching between calls
  gives the same records, but nothing needs it.
* Errors are :class:`~asyncreader.DataLossError` (and :class:`~asyncreader.OutOfRangeError`
  for a fixed-length file shorter than its header) carrying ``work_item=``, ``record=`` (the
  key of the record concerned) and ``offset=``. When records were completed before the error
  in the same call, the call returns them and the error is raised by the next call. After
  an error the framer raises that same error from every call (a reader keeps the work item
  in progress, SPEC §3.3).
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, ClassVar, Final, NoReturn, TypeAlias

import numpy as np

from .._errors import AsyncReaderError, DataLossError, InvalidArgumentError
from .batch import IntArray, Segment
from .compression import (
    DEFAULT_MAX_OUTPUT,
    Decompressor,
    TFRecordCompressionType,
    compression_hint,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "Chunk",
    "Framed",
    "Framer",
    "FramerStatistics",
    "Records",
]

#: The longest record (TFRecord payload, text line) a reader buffers unless told otherwise:
#: 256 MiB. Real records are far smaller (a ``tf.train.Example`` is usually kilobytes, and
#: protobuf parsers long refused messages over 64 MiB by default), so this leaves four times
#: that for unusual data, while a corrupt or hostile length (a "decompression bomb"
#: declaring 2**62 bytes) fails after buffering at most this much instead of exhausting
#: memory. Pass ``max_record_bytes=`` to a reader or iterator to raise or lower it.
DEFAULT_MAX_RECORD_BYTES: Final = 256 << 20

#: What a framer accepts: ``bytes`` is used without copying; other buffers are copied once.
Chunk: TypeAlias = bytes | bytearray | memoryview
#: ``(keys, values)`` as returned by ``decode`` and ``finish``.
Records: TypeAlias = tuple[list[int], list[bytes]]


_U8: Final = np.dtype(np.uint8)
_I64: Final = np.dtype(np.int64)


@dataclasses.dataclass(frozen=True, slots=True)
class Framed:
    """The records of one ``decode_segments`` or ``finish_segments`` call.

    Attributes:
        keys: The records' keys (the ints ``decode`` gives), in file order, as ``int64``.
        segments: The records, segment after segment, in file order: record ``i`` of a
            segment is ``buffer[starts[i] : starts[i] + lengths[i]]``.
    """

    keys: IntArray
    segments: list[Segment]

    def __len__(self) -> int:
        return len(self.keys)

    def tolist(self) -> list[bytes]:
        """Return the records as ``bytes`` (one object per record: for tests and debugging)."""
        return [
            s.buffer[start : start + length].tobytes()
            for s in self.segments
            for start, length in zip(s.starts.tolist(), s.lengths.tolist(), strict=True)
        ]


class _Segments:
    """Where a segment-mode call collects records: segments and key pieces."""

    __slots__ = ("count", "keys", "last", "segments")

    def __init__(self) -> None:
        self.count = 0
        self.keys: list[range | IntArray] = []
        self.segments: list[Segment] = []
        # The last buffer viewed, so consecutive runs in one chunk share one array.
        self.last: tuple[bytes, np.ndarray] | None = None

    def __len__(self) -> int:
        return self.count

    def view(self, buf: bytes) -> np.ndarray:
        """Return a read-only ``uint8`` array over ``buf`` (no copy)."""
        last = self.last
        if last is not None and last[0] is buf:
            return last[1]
        array = np.frombuffer(buf, _U8)
        self.last = (buf, array)
        return array

    def add(self, buf: bytes, starts: object, lengths: object, keys: range | IntArray) -> None:
        """Add records ``buf[starts[i] : starts[i] + lengths[i]]`` under ``keys``."""
        if not len(keys):
            return
        self.segments.append(
            Segment(
                self.view(buf),
                np.asarray(starts, _I64),
                np.asarray(lengths, _I64),
            )
        )
        self.keys.append(keys)
        self.count += len(keys)

    def add_values(self, keys: Sequence[int], values: list[bytes]) -> None:
        """Add records given as ``bytes`` (rare paths), joined once into one buffer."""
        if not values:
            return
        lengths = np.fromiter(map(len, values), _I64, len(values))
        starts = np.zeros(len(values), _I64)
        np.cumsum(lengths[:-1], out=starts[1:])
        self.add(b"".join(values), starts, lengths, np.asarray(keys, _I64))

    def framed(self) -> Framed:
        segments: list[Segment] = []
        for s in self.segments:
            if segments and segments[-1].buffer is s.buffer:
                # Runs framed one after the other in the same buffer: one segment.
                prev = segments[-1]
                s = Segment(
                    s.buffer,
                    np.concatenate((prev.starts, s.starts)),
                    np.concatenate((prev.lengths, s.lengths)),
                )
                segments[-1] = s
            else:
                segments.append(s)
        if not self.keys:
            keys = np.empty(0, _I64)
        elif len(self.keys) == 1 and isinstance(self.keys[0], np.ndarray):
            keys = self.keys[0]
        else:
            keys = np.concatenate(
                [
                    np.arange(k.start, k.stop, k.step, dtype=_I64) if isinstance(k, range) else k
                    for k in self.keys
                ]
            )
        return Framed(keys, segments)


def _frameable(chunk: Chunk, segments: bool) -> bytes:
    """``chunk`` as the framers take it: ``bytes``, or in segment mode a read-only byte
    ``memoryview`` as it is (a pooled read block, framed in place; records are views of
    it, so it must be one nobody can change), anything else copied to ``bytes``."""
    if type(chunk) is bytes:
        return chunk
    if segments and isinstance(chunk, memoryview) and chunk.readonly and chunk.contiguous:
        # Typed as bytes: the framers use only what the two have in common.
        return chunk.cast("B")  # type: ignore[return-value]
    return bytes(chunk)


@dataclasses.dataclass(frozen=True, slots=True)
class FramerStatistics:
    """A snapshot of a framer's progress.

    Attributes:
        records: Records produced so far.
        position: Stream offset where the next record starts.
        buffered: Bytes of a partial record held until more input arrives.
        input_bytes: Bytes fed so far (compressed bytes for a compressed stream).
        failed: Whether the framer has hit an error.
    """

    records: int
    position: int
    buffered: int
    input_bytes: int
    failed: bool


class Framer:
    """Base class of the framers: decompression, deferred errors and bookkeeping.

    Subclasses implement ``_frame(data, keys, values)`` (append the records completed by
    ``data``, raising their error through :meth:`_fail`), ``_finish(keys, values)``,
    ``_buffered()``, ``position`` and ``next_key``.
    """

    #: The option that names the compression, for hints in error messages.
    _compression_argument: ClassVar[str] = "compression_type"

    __slots__ = (
        "_decomp",
        "_error",
        "_input_bytes",
        "_out",
        "_records",
        "_skip",
        "_skip_to",
        "work_item",
    )

    def __init__(
        self,
        *,
        compression: TFRecordCompressionType,
        skip: int,
        work_item: str | bytes | None,
        max_output: int = DEFAULT_MAX_OUTPUT,
    ) -> None:
        self.work_item = work_item
        self._decomp = (
            None
            if compression is TFRecordCompressionType.NONE
            else Decompressor(compression, max_output=max_output, work_item=work_item)
        )
        # Decompressed bytes to discard before framing (resuming inside a compressed file).
        self._skip = skip if self._decomp is not None else 0
        self._error: AsyncReaderError | None = None
        # Where framing can resume after the error: (position, key) past one bad record
        # whose extent is known, or None when the damage hides where the next one starts.
        self._skip_to: tuple[int, int] | None = None
        self._input_bytes = 0
        self._records = 0
        # Where records go in segment mode (set for the duration of one call), else None.
        self._out: _Segments | None = None

    # -- public verbs -----------------------------------------------------------------

    @property
    def pending(self) -> bool:
        """Whether ``decode(b"")`` would produce more output without new input."""
        return self._decomp is not None and self._error is None and self._decomp.pending

    @property
    def skip_to(self) -> tuple[int, int] | None:
        """After an error: ``(position, key)`` of the record that follows the bad one, when
        the bad record's extent is known (so a new framer can start there); else ``None``."""
        return self._skip_to if self._error is not None else None

    @property
    def error(self) -> AsyncReaderError | None:
        """The error this framer hit (it raises it from every later call), or ``None``."""
        return self._error

    def decode(self, chunk: Chunk) -> Records:
        """Feed the next chunk and return the records it completes.

        Args:
            chunk: The next bytes of the file (compressed bytes for a compressed stream).

        Returns:
            ``(keys, values)`` of the completed records, in file order.

        Raises:
            DataLossError: when the data is corrupt (see the concrete framer).
        """
        if self._error is not None:
            raise self._error
        keys: list[int] = []
        values: list[bytes] = []
        self._decode(chunk, keys, values)
        self._records += len(keys)
        return keys, values

    def decode_segments(self, chunk: Chunk) -> Framed:
        """Feed the next chunk and return the records it completes, as segments.

        The segment mode of :meth:`decode`: the same records, keys, state and errors,
        with no Python object per record (see :class:`Framed`).

        Raises:
            DataLossError: when the data is corrupt (see the concrete framer).
        """
        if self._error is not None:
            raise self._error
        out = self._out = _Segments()
        try:
            self._decode(chunk, [], [])
        finally:
            self._out = None
        self._records += out.count
        return out.framed()

    def _decode(self, chunk: Chunk, keys: list[int], values: list[bytes]) -> None:
        self._input_bytes += len(chunk)
        try:
            if self._decomp is None:
                if chunk:
                    self._frame(_frameable(chunk, self._out is not None), keys, values)
            else:
                self._inflate(chunk, keys, values)
        except _Deferred:
            pass

    def finish(self) -> Records:
        """Signal the end of input and return the records it completes.

        Returns:
            ``(keys, values)`` of the records completed by the end of input.

        Raises:
            DataLossError: when the input ends inside a record or a compressed stream, or
                is corrupt.
        """
        if self._error is not None:
            raise self._error
        keys: list[int] = []
        values: list[bytes] = []
        self._finish_input(keys, values)
        self._records += len(keys)
        return keys, values

    def finish_segments(self) -> Framed:
        """Signal the end of input and return the records it completes, as segments.

        The segment mode of :meth:`finish` (see :meth:`decode_segments`).

        Raises:
            DataLossError: when the input ends inside a record or a compressed stream, or
                is corrupt.
        """
        if self._error is not None:
            raise self._error
        out = self._out = _Segments()
        try:
            self._finish_input([], [])
        finally:
            self._out = None
        self._records += out.count
        return out.framed()

    def _finish_input(self, keys: list[int], values: list[bytes]) -> None:
        try:
            if self._decomp is not None:
                while self._decomp.pending:
                    self._inflate(b"", keys, values)
                try:
                    self._decomp.finish()
                except DataLossError as exc:
                    self._fail(self._rebrand(exc), keys)
                if self._skip:
                    # Resuming (or skipping a record) past the end of the stream: the file
                    # is shorter than the state or the skipped record's header said.
                    end = self._decomp.output_bytes
                    self._fail(
                        DataLossError(
                            f"truncated compressed stream: it ends at byte {end} of the "
                            f"decompressed data, before offset {self.position} where "
                            "reading was to resume",
                            work_item=self.work_item,
                            record=self.next_key,
                            offset=end,
                        ),
                        keys,
                    )
            self._finish(keys, values)
        except _Deferred:
            pass

    def statistics(self) -> FramerStatistics:
        """Return a snapshot of the framer's progress."""
        return FramerStatistics(
            records=self._records,
            position=self.position,
            buffered=self._buffered(),
            input_bytes=self._input_bytes,
            failed=self._error is not None,
        )

    @property
    def position(self) -> int:
        """Stream offset where the next record starts."""
        raise NotImplementedError

    @property
    def next_key(self) -> int:
        """Key of the next record."""
        raise NotImplementedError

    # -- helpers for subclasses -------------------------------------------------------

    def _inflate(self, chunk: Chunk, keys: list[int], values: list[bytes]) -> None:
        assert self._decomp is not None
        try:
            data = self._decomp.decompress(chunk)
        except DataLossError as exc:
            self._fail(self._rebrand(exc), keys)
        if self._skip:
            if len(data) <= self._skip:
                self._skip -= len(data)
                return
            data = data[self._skip :]
            self._skip = 0
        if data:
            self._frame(data, keys, values)

    def _rebrand(self, exc: DataLossError) -> DataLossError:
        message = exc.message
        decomp = self._decomp
        if decomp is not None and decomp.output_bytes == 0:
            # Nothing inflated yet: perhaps the file is not compressed this way at all.
            message += compression_hint(decomp.head, decomp.kind, self._compression_argument)
        # The offset is where the next record starts, unless the decompressor named a
        # place in the compressed input (trailing garbage).
        offset = self.position if exc.offset is None else exc.offset
        error = DataLossError(
            message, work_item=self.work_item, record=self.next_key, offset=offset
        )
        error.__cause__ = exc.__cause__ or exc
        return error

    def _fail(self, error: AsyncReaderError, keys: list[int]) -> NoReturn:
        """Record ``error``; raise it now unless records were completed before it."""
        self._error = error
        if keys or self._out:
            raise _Deferred
        raise error

    def _frame(self, data: bytes, keys: list[int], values: list[bytes]) -> None:
        raise NotImplementedError

    def _finish(self, keys: list[int], values: list[bytes]) -> None:
        raise NotImplementedError

    def _buffered(self) -> int:
        raise NotImplementedError


def check_max_record_bytes(value: int) -> int:
    """Return ``value`` if it is a valid ``max_record_bytes``.

    Raises:
        InvalidArgumentError: unless ``value`` is an integer >= 1.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgumentError(f"max_record_bytes must be an integer, not {value!r}")
    if value < 1:
        raise InvalidArgumentError(f"max_record_bytes must be >= 1, not {value}")
    return value


def too_long_message(what: str, length: int | None, limit: int) -> str:
    """The message of a record over ``max_record_bytes``: names the limit and the way out.

    ``length`` is ``None`` when the record's end was not seen yet (a line still open).
    """
    if length is None:
        return (
            f"{what} is longer than max_record_bytes={limit} (its end is not read yet); "
            "if the file is intact, pass a larger max_record_bytes= to read it"
        )
    return (
        f"{what} is {length} bytes, over max_record_bytes={limit}; if the file is intact, "
        f"pass max_record_bytes={length} or more to read it"
    )


class _Deferred(Exception):
    """Stops framing after an error when earlier records must be returned first."""
