"""Type variables of the public generic classes.

They default to ``Any`` (PEP 696), so a plain ``ar.Batcher`` or ``ar.FIFOQueue`` in user
code stays valid under ``mypy --strict``, while ``ar.Batcher[tuple[np.ndarray, np.ndarray]]``
states what the batches are.
"""

import sys
from typing import Any

if sys.version_info >= (3, 13):
    from typing import TypeVar
else:  # TypeVar defaults arrived in Python 3.13
    from typing_extensions import TypeVar

__all__ = ["BatchT", "ElementT"]

#: What a :class:`~asyncreader.Batcher` hands out: one batch.
BatchT = TypeVar("BatchT", default=Any)
#: What a queue's ``dequeue()`` hands out: one element.
ElementT = TypeVar("ElementT", default=Any)
