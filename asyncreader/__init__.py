"""asyncreader: TensorFlow 1.x's queue-based input pipeline for async Python.

Readers take work items (file paths, URLs) from async queues and produce ``(key, value)``
records; queues carry work and examples between stages; queue runners and a coordinator run
the stages as tasks and stop them cleanly; producers, batchers and decoders complete the
pipeline. Everything runs on anyio, under asyncio or trio.

Everything public is importable from here: ``import asyncreader as ar``.
"""

# Layers, lowest first. A module imports only from its own package or from a lower layer,
# also under TYPE_CHECKING and inside functions (tests/test_layers.py checks every import
# against this list). What a lower layer needs from a higher one is a protocol it defines:
# the runtime's Checkpointable and Stage, the queues' re-readable record source.
#
#   1. _errors, _typing, _yields, _messages
#                    the exception tree, shared types, the yield budget, values in messages
#   2. errors, _error_policy       the public errors module, the skip-or-raise policy
#   3. _io           the I/O executor, filesystems, CRC32C
#   4. _records      TFRecord, line and fixed-length framing (sans-I/O); RecordBatch;
#                    writer, iterators
#   5. _decoders     decode_raw, decode_csv, parse_example
#   6. _runtime      coordinator, queue runner, session, resources, checkpoints
#   7. _queues       FIFO, random-shuffle, padding, priority queues; record references
#   8. _readers      the reader protocol and the readers of each format
#   9. _pipeline     input producers, batching and parallel map
#  10. _distributed  queues shared across processes on Ray (Ray imported lazily)
#  11. cifar10       the CIFAR-10 format, TensorFlow's input functions, synthetic data
#  11. _observe      metrics (Prometheus, OpenTelemetry) and the live page of a pipeline
#  12. _demo         the training run of ``asyncreader demo``
#  13. _cli          the command line
#  14. __main__      ``python -m asyncreader``: runs the command line
#
# No ``from __future__ import annotations`` and no plain module imports here: every name
# this module binds is either in ``__all__`` or private, so ``dir(asyncreader)`` shows only
# the public surface.
import contextlib as _contextlib

from . import errors as errors

# --- decoders ---
from ._decoders.csv import decode_csv as decode_csv
from ._decoders.example import (
    parse_example as parse_example,
)
from ._decoders.example import (
    parse_single_example as parse_single_example,
)
from ._decoders.example_proto import Example as Example
from ._decoders.example_proto import Feature as Feature
from ._decoders.example_proto import Features as Features
from ._decoders.features import FixedLenFeature as FixedLenFeature
from ._decoders.features import SparseTensorValue as SparseTensorValue
from ._decoders.features import VarLenFeature as VarLenFeature
from ._decoders.policy import DecodeErrors as DecodeErrors
from ._decoders.raw import decode_raw as decode_raw
from ._distributed.cluster import RayCluster as RayCluster
from ._distributed.remote_queue import RemoteQueue as RemoteQueue
from ._error_policy import DeadLetter as DeadLetter
from ._error_policy import ErrorPolicy as ErrorPolicy
from ._errors import (
    AlreadyExistsError as AlreadyExistsError,
)
from ._errors import (
    AsyncReaderError as AsyncReaderError,
)
from ._errors import (
    DataLossError as DataLossError,
)
from ._errors import (
    FailedPreconditionError as FailedPreconditionError,
)
from ._errors import (
    InvalidArgumentError as InvalidArgumentError,
)
from ._errors import (
    NotFoundError as NotFoundError,
)
from ._errors import (
    OutOfRangeError as OutOfRangeError,
)
from ._errors import (
    QueueClosedError as QueueClosedError,
)
from ._errors import (
    ResourceExhaustedError as ResourceExhaustedError,
)
from ._io.executor import set_io_threads as set_io_threads
from ._io.filesystem import set_remote_timeouts as set_remote_timeouts
from ._io.remote import set_remote_reading as set_remote_reading
from ._observe import PrometheusCollector as PrometheusCollector
from ._observe import instrument_opentelemetry as instrument_opentelemetry
from ._observe import metrics_app as metrics_app
from ._observe import serve_metrics as serve_metrics

# --- pipeline ---
from ._pipeline.batcher import (
    Batcher as Batcher,
)
from ._pipeline.batcher import (
    BatcherStatistics as BatcherStatistics,
)
from ._pipeline.batching import (
    batch as batch,
)
from ._pipeline.batching import (
    batch_join as batch_join,
)
from ._pipeline.batching import (
    maybe_batch as maybe_batch,
)
from ._pipeline.batching import (
    maybe_batch_join as maybe_batch_join,
)
from ._pipeline.batching import (
    maybe_shuffle_batch as maybe_shuffle_batch,
)
from ._pipeline.batching import (
    maybe_shuffle_batch_join as maybe_shuffle_batch_join,
)
from ._pipeline.batching import (
    shuffle_batch as shuffle_batch,
)
from ._pipeline.batching import (
    shuffle_batch_join as shuffle_batch_join,
)
from ._pipeline.input_producer import (
    ProducerStatistics as ProducerStatistics,
)
from ._pipeline.map import MapStage as MapStage
from ._pipeline.map import MapStatistics as MapStatistics
from ._pipeline.map import map as map
from ._pipeline.patterns import (
    match_filenames_once as match_filenames_once,
)
from ._pipeline.producers import (
    input_producer as input_producer,
)
from ._pipeline.producers import (
    limit_epochs as limit_epochs,
)
from ._pipeline.producers import (
    range_input_producer as range_input_producer,
)
from ._pipeline.producers import (
    slice_input_producer as slice_input_producer,
)
from ._pipeline.producers import (
    string_input_producer as string_input_producer,
)
from ._pipeline.tensors import to_jax as to_jax
from ._pipeline.tensors import to_torch as to_torch
from ._pipeline.tensors import torch_batches as torch_batches
from ._queues.fifo import FIFOQueue as FIFOQueue
from ._queues.padding import PaddingFIFOQueue as PaddingFIFOQueue
from ._queues.priority import PriorityQueue as PriorityQueue
from ._queues.random_shuffle import RandomShuffleQueue as RandomShuffleQueue
from ._queues.record_refs import RecordRefs as RecordRefs

# --- queues ---
from ._queues.statistics import QueueStatistics as QueueStatistics

# --- readers ---
from ._readers.base import ReaderBase as ReaderBase
from ._readers.base import ReaderStatistics as ReaderStatistics
from ._readers.database import SQLiteReader as SQLiteReader
from ._readers.fixed_length import FixedLengthRecordReader as FixedLengthRecordReader
from ._readers.identity import IdentityReader as IdentityReader
from ._readers.postgres import PostgresReader as PostgresReader
from ._readers.table_work import table_shards as table_shards
from ._readers.text_line import TextLineReader as TextLineReader
from ._readers.tfrecord import TFRecordReader as TFRecordReader
from ._readers.whole_file import WholeFileReader as WholeFileReader

# --- records ---
from ._records.batch import RecordBatch as RecordBatch
from ._records.compression import TFRecordCompressionType as TFRecordCompressionType
from ._records.iterator import (
    async_tf_record_iterator as async_tf_record_iterator,
)
from ._records.iterator import (
    tf_record_iterator as tf_record_iterator,
)
from ._records.writer import TFRecordWriter as TFRecordWriter
from ._records.writer import WriterStatistics as WriterStatistics

# --- runtime ---
from ._runtime.coordinator import Coordinator as Coordinator
from ._runtime.coordinator import CoordinatorStatistics as CoordinatorStatistics
from ._runtime.queue_runner import QueueRunner as QueueRunner
from ._runtime.queue_runner import QueueRunnerStatistics as QueueRunnerStatistics
from ._runtime.resources import ResourceMgr as ResourceMgr
from ._runtime.session import Session as Session
from ._runtime.session import SessionStatistics as SessionStatistics
from ._runtime.stages import StageStatistics as StageStatistics

__version__ = "0.1.0"

__all__ = [
    "errors",
    "AlreadyExistsError",
    "async_tf_record_iterator",
    "AsyncReaderError",
    "batch",
    "batch_join",
    "Batcher",
    "BatcherStatistics",
    "Coordinator",
    "CoordinatorStatistics",
    "DataLossError",
    "DeadLetter",
    "DecodeErrors",
    "decode_csv",
    "decode_raw",
    "ErrorPolicy",
    "Example",
    "FailedPreconditionError",
    "Feature",
    "Features",
    "FIFOQueue",
    "FixedLenFeature",
    "FixedLengthRecordReader",
    "IdentityReader",
    "input_producer",
    "instrument_opentelemetry",
    "InvalidArgumentError",
    "limit_epochs",
    "map",
    "MapStage",
    "MapStatistics",
    "match_filenames_once",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "metrics_app",
    "NotFoundError",
    "OutOfRangeError",
    "PaddingFIFOQueue",
    "parse_example",
    "parse_single_example",
    "PostgresReader",
    "PriorityQueue",
    "ProducerStatistics",
    "PrometheusCollector",
    "QueueClosedError",
    "QueueRunner",
    "QueueRunnerStatistics",
    "QueueStatistics",
    "RandomShuffleQueue",
    "range_input_producer",
    "ReaderBase",
    "ReaderStatistics",
    "RecordBatch",
    "RecordRefs",
    "ResourceExhaustedError",
    "ResourceMgr",
    "Session",
    "RayCluster",
    "RemoteQueue",
    "serve_metrics",
    "SessionStatistics",
    "set_io_threads",
    "set_remote_reading",
    "set_remote_timeouts",
    "shuffle_batch",
    "shuffle_batch_join",
    "slice_input_producer",
    "SparseTensorValue",
    "SQLiteReader",
    "StageStatistics",
    "string_input_producer",
    "table_shards",
    "TextLineReader",
    "tf_record_iterator",
    "to_jax",
    "to_torch",
    "torch_batches",
    "TFRecordCompressionType",
    "TFRecordReader",
    "TFRecordWriter",
    "VarLenFeature",
    "WholeFileReader",
    "WriterStatistics",
]


def _fix_module_names() -> None:
    """Show public objects as ``asyncreader.X`` in reprs, tracebacks and pickles."""
    for name in __all__:
        obj = globals()[name]
        module = getattr(obj, "__module__", "")
        if module.startswith("asyncreader._"):
            with _contextlib.suppress(AttributeError, TypeError):  # e.g. typing aliases
                obj.__module__ = __name__


_fix_module_names()
del _fix_module_names
