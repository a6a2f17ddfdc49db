"""asyncreader: TensorFlow 1.x's queue-based input pipeline for async Python.

Readers take work items (file paths, URLs) from async queues and produce ``(key, value)``
records; queues carry work and examples between stages; queue runners and a coordinator run
the stages as tasks and stop them cleanly; producers, batchers and decoders complete the
pipeline. Everything runs on anyio, under asyncio or trio.

Everything public is importable from here: ``import asyncreader as ar``.
"""

from __future__ import annotations

from . import errors as errors
from ._errors import (
    AlreadyExistsError as AlreadyExistsError,
    AsyncReaderError as AsyncReaderError,
    DataLossError as DataLossError,
    FailedPreconditionError as FailedPreconditionError,
    InvalidArgumentError as InvalidArgumentError,
    NotFoundError as NotFoundError,
    OutOfRangeError as OutOfRangeError,
    QueueClosedError as QueueClosedError,
    ResourceExhaustedError as ResourceExhaustedError,
)
from ._io.executor import set_io_threads as set_io_threads
from ._runtime.resources import ResourceMgr as ResourceMgr

# --- runtime ---
from ._runtime.coordinator import Coordinator as Coordinator
from ._runtime.queue_runner import QueueRunner as QueueRunner
from ._runtime.session import Session as Session
# --- queues ---
from ._queues.fifo import FIFOQueue as FIFOQueue
from ._queues.padding import PaddingFIFOQueue as PaddingFIFOQueue
from ._queues.priority import PriorityQueue as PriorityQueue
from ._queues.random_shuffle import RandomShuffleQueue as RandomShuffleQueue
# --- readers ---
from ._readers.base import ReaderBase as ReaderBase
from ._readers.fixed_length import FixedLengthRecordReader as FixedLengthRecordReader
from ._readers.identity import IdentityReader as IdentityReader
from ._readers.text_line import TextLineReader as TextLineReader
from ._readers.tfrecord import TFRecordReader as TFRecordReader
from ._readers.whole_file import WholeFileReader as WholeFileReader
# --- records ---
from ._records.compression import TFRecordCompressionType as TFRecordCompressionType
from ._records.iterator import (
    async_tf_record_iterator as async_tf_record_iterator,
    tf_record_iterator as tf_record_iterator,
)
from ._records.writer import TFRecordWriter as TFRecordWriter
# --- decoders ---
from ._decoders.csv import decode_csv as decode_csv
from ._decoders.example import (
    Example as Example,
    Feature as Feature,
    Features as Features,
    FixedLenFeature as FixedLenFeature,
    SparseTensorValue as SparseTensorValue,
    VarLenFeature as VarLenFeature,
    parse_example as parse_example,
    parse_single_example as parse_single_example,
)
from ._decoders.raw import decode_raw as decode_raw
# --- pipeline ---
from ._pipeline.batching import (
    Batcher as Batcher,
    batch as batch,
    batch_join as batch_join,
    maybe_batch as maybe_batch,
    maybe_batch_join as maybe_batch_join,
    maybe_shuffle_batch as maybe_shuffle_batch,
    maybe_shuffle_batch_join as maybe_shuffle_batch_join,
    shuffle_batch as shuffle_batch,
    shuffle_batch_join as shuffle_batch_join,
)
from ._pipeline.producers import (
    input_producer as input_producer,
    limit_epochs as limit_epochs,
    range_input_producer as range_input_producer,
    slice_input_producer as slice_input_producer,
    string_input_producer as string_input_producer,
)
