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

See :mod:`asyncreader._records._framer` for the chunk contract. A line framer never fails:
every byte sequence is some lines.
"""

from __future__ import annotations

from .._errors import InvalidArgumentError
from ._framer import Framer
from .compression import TFRecordCompressionType

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

    Raises:
        InvalidArgumentError: ``skip_header_lines must be >= 0 not <n>``, or a
            ``first_line`` below 1 or a negative ``start_offset``.
    """

    __slots__ = ("_line", "_partial", "_partial_len", "_pos", "_skip_lines")

    def __init__(
        self,
        *,
        skip_header_lines: int = 0,
        first_line: int = 1,
        start_offset: int = 0,
        work_item: str | bytes | None = None,
    ) -> None:
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
        # One split of the whole chunk; its last piece is the unterminated rest. Cutting the
        # chunk first would copy it.
        lines = data.split(b"\n")
        rest = lines.pop()
        if not lines:
            # A list, so a long line fed in many chunks is joined once.
            self._partial.append(data)
            self._partial_len += len(data)
            return
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

    def _emit(self, lines: list[bytes], keys: list[int], values: list[bytes]) -> None:
        first = self._line
        self._line = first + len(lines)
        drop = self._skip_lines - first + 1
        if drop > 0:
            if drop >= len(lines):
                return
            lines = lines[drop:]
            first += drop
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
