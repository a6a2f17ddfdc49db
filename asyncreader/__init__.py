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
# --- queues ---
# --- readers ---
# --- records ---
# --- decoders ---
# --- pipeline ---
