"""Sans-I/O record framing (TFRecord, lines, fixed-length records) and compression.

The framers (:class:`TFRecordFramer`, :class:`LineFramer`, :class:`FixedLengthFramer`)
turn chunks of a file into ``(keys, values)`` without doing any I/O themselves; readers feed
them from worker threads. Their shared contract is described in :mod:`.framer`.
:class:`TFRecordWriter` and :func:`tf_record_iterator` are the public TFRecord file API.
"""

from __future__ import annotations

from .compression import Decompressor, TFRecordCompressionType, parse_compression_type
from .fixed_length import FixedLengthFramer
from .framer import DEFAULT_MAX_RECORD_BYTES, Framer, FramerStatistics
from .iterator import (
    AsyncTFRecordIterator,
    TFRecordIterator,
    async_tf_record_iterator,
    tf_record_iterator,
)
from .lines import LineFramer
from .tfrecord import TFRecordFramer, frame_record
from .writer import TFRecordWriter, WriterStatistics

__all__ = [
    "DEFAULT_MAX_RECORD_BYTES",
    "AsyncTFRecordIterator",
    "Decompressor",
    "FixedLengthFramer",
    "Framer",
    "FramerStatistics",
    "LineFramer",
    "TFRecordCompressionType",
    "TFRecordFramer",
    "TFRecordIterator",
    "TFRecordWriter",
    "WriterStatistics",
    "async_tf_record_iterator",
    "frame_record",
    "parse_compression_type",
    "tf_record_iterator",
]
