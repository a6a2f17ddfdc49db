"""TFRecordReader: the records of TFRecord files (SPEC §3.7, §4)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._records.compression import (
    TFRecordCompressionType,
    compression_name,
    parse_compression_type,
)
from .._records.framer import DEFAULT_MAX_RECORD_BYTES, check_max_record_bytes
from .._records.tfrecord import TFRecordFramer
from .framed import FramedReader

if TYPE_CHECKING:
    from .._error_policy import OnError
    from .._records.framer import Framer

__all__ = ["TFRecordReader"]


class TFRecordReader(FramedReader):
    """A reader that outputs the records of TFRecord files, checking both CRCs.

    Keys are ``b"<work>:<offset>"``, the offset of the record's header in the
    (decompressed) stream. A corrupt record raises :class:`~asyncreader.DataLossError`
    naming the file and offset, after the good records before it were delivered; the work
    item then stays in progress (every read fails) until :meth:`reset`. 1 to 11 bytes left
    at the end of a file are ignored, as TensorFlow does.

    Args:
        compression_type: ``None`` or ``""`` (uncompressed), ``"ZLIB"`` or ``"GZIP"``, in
            any case, as :class:`~asyncreader.TFRecordWriter` takes them (or a
            :class:`~asyncreader.TFRecordCompressionType`). Other values raise
            :class:`~asyncreader.InvalidArgumentError` (TensorFlow reads the file
            uncompressed instead, and fails later on the compressed bytes).
        name: The reader's name in messages.
        on_error: What to do with bad input: ``\"raise\"`` (the default, as
            TensorFlow), ``\"skip\"`` or an :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).
        max_record_bytes: The longest payload read (default 256 MiB, see
            ``DEFAULT_MAX_RECORD_BYTES`` in ``asyncreader._records``). A header
            declaring more raises :class:`~asyncreader.ResourceExhaustedError` naming the
            file, offset, length and limit, before any of the record is buffered or
            inflated; ``on_error="skip"`` skips just that record. A header declaring more
            than is left in an uncompressed file of known size raises
            :class:`~asyncreader.DataLossError` (``truncated record at <offset>``) at once.

    Raises:
        InvalidArgumentError: for an unknown ``compression_type`` or a
            ``max_record_bytes`` below 1.
    """

    def __init__(
        self,
        compression_type: str | TFRecordCompressionType | None = None,
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
        self._compression = parse_compression_type(compression_type)
        #: The longest payload read.
        self.max_record_bytes = check_max_record_bytes(max_record_bytes)
        super().__init__(name, on_error=on_error)

    @property
    def compression_type(self) -> str:
        """``""``, ``"ZLIB"`` or ``"GZIP"``."""
        return compression_name(self._compression)

    def _config(self) -> dict[str, object]:
        return {"compression_type": self.compression_type}

    def _new_framer(self, work: bytes, position: int, key: int, size: int | None) -> Framer:
        return TFRecordFramer(
            compression_type=self._compression,
            start_offset=position,
            work_item=work,
            max_record_bytes=self.max_record_bytes,
            stream_size=size,
        )

    def _position_of(self, key: int) -> int | None:
        return key  # a record's key is its offset

    def _seek_target(self, position: int, key: int) -> int | None:
        return position if self._compression is TFRecordCompressionType.NONE else None
