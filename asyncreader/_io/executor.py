"""The shared I/O executor: worker threads under one capacity limiter per event loop.

TensorFlow hands every reader's blocking work to a thread pool so that a read waiting on
disk never blocks unrelated ops. asyncreader does the same with anyio worker threads; the
limiter bounds how many run at once across all readers of an event loop. It lives in a
:class:`anyio.lowlevel.RunVar` because a limiter belongs to one event loop.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypeVar, TypeVarTuple, Unpack

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from .._errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["get_io_limiter", "io_threads", "run_io", "set_io_threads"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Default size: enough to overlap a few files' reads on a small machine without
#: oversubscribing the GIL-bound parsing that follows each read.
DEFAULT_IO_THREADS = 8

_io_threads = DEFAULT_IO_THREADS
_limiter: RunVar[anyio.CapacityLimiter] = RunVar("asyncreader_io_limiter")


def set_io_threads(n: int) -> None:
    """Set how many worker threads the shared I/O executor may use at once.

    Applies to every event loop: a loop that already has a limiter is resized now, others
    get the new size when they first read.

    Args:
        n: The number of threads, at least 1.

    Raises:
        InvalidArgumentError: if ``n`` is smaller than 1.
    """
    global _io_threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"io threads must be an integer >= 1, not {n!r}")
    _io_threads = n
    try:
        limiter = _limiter.get()
    except (LookupError, RuntimeError):
        return
    limiter.total_tokens = n


def io_threads() -> int:
    """Return the configured size of the shared I/O executor."""
    return _io_threads


def get_io_limiter() -> anyio.CapacityLimiter:
    """Return the current event loop's I/O limiter, creating it on first use."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(_io_threads)
        _limiter.set(limiter)
        return limiter


async def run_io(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run blocking ``func(*args)`` on the shared I/O executor and return its result.

    Cancellation waits for the running call to return (it is never abandoned), so the
    object it works on is left consistent and no thread outlives its caller. Keep calls
    chunk-sized so that this wait stays short.
    """
    return await anyio.to_thread.run_sync(func, *args, limiter=get_io_limiter())
