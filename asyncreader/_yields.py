"""The yield budget: how often a loop that may never block passes a scheduling point.

A queue operation, a buffered read or a queue runner's step can complete again and again
without waiting, and so without letting other tasks run or noticing a cancellation. Each
such loop spends one unit of a budget per step and yields (``anyio.lowlevel.checkpoint``)
when the budget runs out, then starts a full budget again::

    yield_due = yield_budget(64)
    ...
    if yield_due():
        await checkpoint()

This is scheduling only; it has nothing to do with a pipeline's saved state (its
checkpoints, see :mod:`asyncreader._runtime.checkpoint`).
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["yield_budget"]


def yield_budget(interval: int) -> Callable[[], bool]:
    """Return a callable that is true on every ``interval``-th call, false otherwise.

    The callable is a C-level iterator step, so a fast path pays about what an inline
    counter costs, which a Python-level method call would not.

    Args:
        interval: Steps per scheduling point, >= 1.
    """
    return itertools.cycle((False,) * (interval - 1) + (True,)).__next__
