"""Helpers shared by the tests of every folder: filling and emptying queues.

Imported as ``from queue_util import ...``: pytest puts this folder on ``sys.path`` for
the ``conftest.py`` beside it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterable


async def work_queue(items: Iterable[object], *, close: bool = True) -> ar.FIFOQueue:
    """Return an untyped FIFOQueue holding ``items``, closed unless ``close`` is false."""
    q = ar.FIFOQueue(None)
    for item in items:
        await q.enqueue(item)
    if close:
        await q.close()
    return q


class _Dequeues(Protocol):
    async def dequeue(self) -> Any: ...


async def dequeue_all(queue: _Dequeues) -> list[Any]:
    """Dequeue one element at a time until ``queue`` is closed and empty; return them all."""
    out: list[Any] = []
    while True:
        try:
            out.append(await queue.dequeue())
        except ar.OutOfRangeError:
            return out
