"""Errors raised by asyncreader (also re-exported at the top level).

See ``asyncreader._errors`` for the tree and when each one is raised.
"""

from __future__ import annotations

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
