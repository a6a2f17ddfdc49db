"""Errors raised by asyncreader (also re-exported at the top level).

See :mod:`asyncreader._errors` for the tree and when each one is raised.
"""

from __future__ import annotations

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

__all__ = [
    "AlreadyExistsError",
    "AsyncReaderError",
    "DataLossError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "QueueClosedError",
    "ResourceExhaustedError",
]

for _name in __all__:
    globals()[_name].__module__ = "asyncreader.errors"
del _name
