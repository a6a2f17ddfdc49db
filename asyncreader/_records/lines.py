"""Sans-I/O text line framing, as ``TextLineReader`` splits files (SPEC §3.7).

* Lines end at ``\\n`` only. One ``\\r`` just before the ``\\n`` is removed, so CRLF files
  read like LF files; any other ``\\r`` is kept.
* The last line needs no terminator, and a file ending in ``\\n`` has no extra empty line.
  One ``\\r`` ending the file is removed too; a final unterminated line that is *only*
  ``\\r`` is dropped (TensorFlow's quirk).
* Empty lines in the middle are records (``b""``).
* Keys are 1-based physical line numbers. Header lines are skipped by the framer
  (``skip_header_lines``) and still counted, so with one header line the first record's
  key is 2. Running out of input while skipping is not an error.

See :mod:`asyncreader._records.framer` for the chunk contract. Every byte sequence is some
lines; the only error is a line longer than ``max_record_bytes``
(:class:`~asyncreader.ResourceExhaustedError`), raised as soon as that many bytes of it are
held, so a file without newlines cannot take memory without bound.

In segment mode (:meth:`~asyncreader._records.framer.Framer.decode_segments`) numpy finds
a chunk's newlines (``np.flatnonzero(chunk == 10)``) and trims the ``\r`` before them in
one vectorised step: the lines are one segment over the chunk, plus a one-record segment
for a line carried over from earlier chunks.
"""

from __future__ import annotations

from typing import NoReturn

import numpy as np

from .._errors import InvalidArgumentError, ResourceExhaustedError
from .compression import TFRecordCompressionType
from .framer import (
    DEFAULT_MAX_RECORD_BYTES,
    Framer,
    check_max_record_bytes,
    too_long_message,
)

__all__ = ["LineFramer"]


class LineFramer(Framer):
    """Turn chunks of a text file into ``(line numbers, lines)``.

    Args:
        skip_header_lines: Lines at the start of the file to drop (still counted in keys).
        first_line: The number of the first line fed (resuming mid-file: the ``next_key``
            saved earlier); lines numbered up to ``skip_header_lines`` are still dropped.
        start_offset: The stream offset of the first byte fed, so that :attr:`position`
            is a file offset.
        work_item: The file, named in errors.
        max_record_bytes: The longest line accepted (without its ``\n``). A longer one
            fails with :class:`~asyncreader.ResourceExhaustedError` once more than this
            many bytes of it are held; the lines before it are returned first.

    Raises:
        InvalidArgumentError: ``skip_header_lines must be >= 0 not <n>``, or a
            ``first_line`` below 1, a negative ``start_offset`` or a ``max_record_bytes``
            below 1.
    """

    __slots__ = ("_limit", "_line", "_partial", "_partial_len", "_pos", "_skip_lines")

    def __init__(
        self,
        *,
        skip_header_lines: int = 0,
        first_line: int = 1,
        start_offset: int = 0,
        work_item: str | bytes | None = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
    ) -> None:
        self._limit = check_max_record_bytes(max_record_bytes)
        if skip_header_lines < 0:
            raise InvalidArgumentError(f"skip_header_lines must be >= 0 not {skip_header_lines}")
        if first_line < 1:
            raise InvalidArgumentError(f"first_line must be >= 1, not {first_line}")
        if start_offset < 0:
            raise InvalidArgumentError(f"start_offset must be >= 0, not {start_offset}")
        super().__init__(compression=TFRecordCompressionType.NONE, skip=0, work_item=work_item)
        self._skip_lines = skip_header_lines
        self._line = first_line
        self._pos = start_offset
        self._partial: list[bytes] = []
        self._partial_len = 0

    @property
    def position(self) -> int:
        """Stream offset of the start of the next line."""
        return self._pos

    @property
    def next_key(self) -> int:
        """Line number of the next line."""
        return self._line

    def __repr__(self) -> str:
        return (
            f"<LineFramer next_line={self._line} position={self._pos} "
            f"records={self._records} buffered={self._partial_len}>"
        )

    def _buffered(self) -> int:
        return self._partial_len

    def _frame(self, data: bytes, keys: list[int], values: list[bytes]) -> None:
        if self._out is not None:
            self._frame_segments(data, keys, values)
            return
        # One split of the whole chunk; its last piece is the unterminated rest. Cutting the
        # chunk first would copy it.
        lines = data.split(b"\n")
        rest = lines.pop()
        limit = self._limit
        if not lines:
            if self._partial_len + len(data) > limit:
                self._too_long(None, keys)
            # A list, so a long line fed in many chunks is joined once.
            self._partial.append(data)
            self._partial_len += len(data)
            return
        # A line within the chunk can only be over the limit when the chunk is (rare).
        if (
            self._partial_len + len(lines[0]) > limit
            or len(rest) > limit
            or (len(data) > limit and max(map(len, lines)) > limit)
        ):
            self._frame_to_long_line(data, lines, rest, keys, values)
        self._pos += self._partial_len + len(data) - len(rest)
        if self._partial:
            self._partial.append(lines[0])
            lines[0] = b"".join(self._partial)
        self._partial = [rest] if rest else []
        self._partial_len = len(rest)
        # A line ends in "\r" only if the chunk holds one, or the first line, joined with
        # the carried part, ends in it.
        if b"\r" in data or lines[0][-1:] == b"\r":
            lines = [line[:-1] if line[-1:] == b"\r" else line for line in lines]
        self._emit(lines, keys, values)

    def _frame_segments(self, data: bytes, keys: list[int], values: list[bytes]) -> None:
        """Segment mode of :meth:`_frame`: newlines found and ``\r`` trimmed by numpy."""
        out = self._out
        assert out is not None
        array = out.view(data)
        ends = np.flatnonzero(array == 10)
        count = len(ends)
        limit = self._limit
        if not count:
            if self._partial_len + len(data) > limit:
                self._too_long(None, keys)
            self._partial.append(data)
            self._partial_len += len(data)
            return
        rest = len(data) - int(ends[-1]) - 1
        starts = np.empty(count, np.int64)
        starts[0] = 0
        starts[1:] = ends[:-1] + 1
        if (
            self._partial_len + int(ends[0]) > limit
            or rest > limit
            or (len(data) > limit and int((ends - starts).max()) > limit)
        ):
            # Rare: frame the lines before the long one, then fail (as list mode does).
            lines = bytes(data).split(b"\n")
            tail = lines.pop()
            self._frame_to_long_line(data, lines, tail, keys, values)
        self._pos += self._partial_len + len(data) - rest
        first = self._line
        self._line = first + count
        drop = max(self._skip_lines - first + 1, 0)
        if self._partial:
            # The line carried over from earlier chunks: joined, its own segment.
            self._partial.append(data[: ends[0]])
            head = b"".join(self._partial)
            if drop:
                drop -= 1
            else:
                out.add_values((first,), [head[:-1] if head[-1:] == b"\r" else head])
            starts = starts[1:]
            ends = ends[1:]
            first += 1
        self._partial = [data[len(data) - rest :]] if rest else []
        self._partial_len = rest
        if drop:
            starts = starts[drop:]
            ends = ends[drop:]
            first += drop
        if len(starts):
            # One "\r" before the "\n" is not part of the line (the line may be empty).
            lengths = ends - starts
            lengths -= (array[ends - 1] == 13) & (lengths > 0)
            out.add(data, starts, lengths, range(first, first + len(starts)))

    def _frame_to_long_line(
        self, data: bytes, lines: list[bytes], rest: bytes, keys: list[int], values: list[bytes]
    ) -> NoReturn:
        """Frame the lines of ``data`` before the first one over the limit, then fail."""
        limit = self._limit
        cut = 0  # where the long line starts in ``data``
        for i, line in enumerate(lines):
            if len(line) + (self._partial_len if i == 0 else 0) > limit:
                break
            cut += len(line) + 1
        else:
            i = len(lines)  # the unterminated rest
        if cut:
            self._frame(data[:cut], keys, values)
        if i == len(lines):
            self._too_long(None, keys)
        self._too_long(self._partial_len + len(lines[i]), keys)

    def _too_long(self, length: int | None, keys: list[int]) -> NoReturn:
        """Fail at the line that starts at :attr:`position`: ``length`` is its length when
        its end was seen (the reader can then skip just that line), else ``None``."""
        line, at = self._line, self._pos
        if length is not None:
            after = at + length + 1
            self._skip_to = (after, line + 1)
        self._partial = []
        self._partial_len = 0
        message = too_long_message(f"line {line} at {at}", length, self._limit)
        self._fail(
            ResourceExhaustedError(message, work_item=self.work_item, record=line, offset=at),
            keys,
        )

    def _emit(self, lines: list[bytes], keys: list[int], values: list[bytes]) -> None:
        first = self._line
        self._line = first + len(lines)
        drop = self._skip_lines - first + 1
        if drop > 0:
            if drop >= len(lines):
                return
            lines = lines[drop:]
            first += drop
        if self._out is not None:
            self._out.add_values(range(first, first + len(lines)), lines)
            return
        keys.extend(range(first, first + len(lines)))
        values.extend(lines)

    def _finish(self, keys: list[int], values: list[bytes]) -> None:
        if not self._partial:
            return
        last = b"".join(self._partial)
        self._partial = []
        self._partial_len = 0
        self._pos += len(last)
        if last[-1:] == b"\r":
            last = last[:-1]
            if not last:
                # TensorFlow's quirk: a final unterminated line of only "\r" is no record.
                self._line += 1
                return
        self._emit([last], keys, values)
