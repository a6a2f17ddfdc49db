"""Readers: async resources that turn work items into (key, value) records."""

from __future__ import annotations

from .base import ReaderBase, ReaderStatistics
from .fixed_length import FixedLengthRecordReader
from .identity import IdentityReader
from .text_line import TextLineReader
from .tfrecord import TFRecordReader
from .whole_file import WholeFileReader

__all__ = [
    "FixedLengthRecordReader",
    "IdentityReader",
    "ReaderBase",
    "ReaderStatistics",
    "TFRecordReader",
    "TextLineReader",
    "WholeFileReader",
]
