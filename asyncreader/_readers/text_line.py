"""TextLineReader: one record per line of a text file (SPEC §3.7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .._errors import InvalidArgumentError
from .._records.framer import DEFAULT_MAX_RECORD_BYTES, check_max_record_bytes
from .._records.lines import LineFramer
from .framed import FramedReader

if TYPE_CHECKING:
    from .._error_policy import OnError
    from .._records.framer import Framer

__all__ = ["TextLineReader"]


class TextLineReader(FramedReader):
    """A reader that outputs the lines of a file, split on ``\\n``.

    One ``\\r`` ending a line is removed (CRLF files read like LF files); a final line needs
    no terminator and a file ending in ``\\n`` has no extra empty line. Keys are
    ``b"<work>:<line number>"``, 1-based, counting skipped header lines too.

    Args:
        skip_header_lines: Lines to skip at the start of every file.
        name: The reader's name in messages.
        on_error: What to do with bad input: ``\"raise\"`` (the default, as
            TensorFlow), ``\"skip\"`` or an :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).
        max_record_bytes: The longest line read (default 256 MiB, see
            ``DEFAULT_MAX_RECORD_BYTES`` in ``asyncreader._records``). A longer line
            raises :class:`~asyncreader.ResourceExhaustedError` naming the file, line and
            offset as soon as that many bytes of it are held, so a file without newlines
            cannot take memory without bound; ``on_error="skip"`` skips just that line when
            its end was read, else the rest of the file.

    Raises:
        InvalidArgumentError: ``skip_header_lines must be >= 0 not <n>``, or a
            ``max_record_bytes`` below 1.
    """

    _first_key: ClassVar[int] = 1
    _consecutive_keys: ClassVar[bool] = True

    def __init__(
        self,
        skip_header_lines: int = 0,
        name: str | None = None,
        *,
        on_error: OnError = None,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        shared_name: str | None = None,
        container: str | None = None,
    ) -> None:
        # shared_name / container are consumed by SharedResourceMeta before __init__ runs;
        # they are named here so that type checkers accept them.
        del shared_name, container
        if isinstance(skip_header_lines, bool) or not isinstance(skip_header_lines, int):
            raise InvalidArgumentError(
                f"skip_header_lines must be an integer, not {skip_header_lines!r}"
            )
        if skip_header_lines < 0:
            raise InvalidArgumentError(f"skip_header_lines must be >= 0 not {skip_header_lines}")
        super().__init__(name, on_error=on_error)
        self.skip_header_lines = skip_header_lines
        #: The longest line read.
        self.max_record_bytes = check_max_record_bytes(max_record_bytes)

    def _config(self) -> dict[str, object]:
        return {"skip_header_lines": self.skip_header_lines}

    def _new_framer(self, work: bytes, position: int, key: int, size: int | None) -> Framer:
        return LineFramer(
            skip_header_lines=self.skip_header_lines,
            first_line=key,
            start_offset=position,
            work_item=work,
            max_record_bytes=self.max_record_bytes,
        )
