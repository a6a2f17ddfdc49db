"""Work items: what a reader takes from its work queue.

A reader dequeues one work item at a time (a file path or URL) from a queue of single
strings. The queue is checked once per work item, not per record; a dequeued element
becomes the work item's bytes as TensorFlow's ``ReaderBase`` reads them (SPEC §3.2).

A queue may instead *lease* work items (a queue shared by the ranks of a job): it then has
``take_work(reader)``, which readers call in place of ``dequeue()``, and which returns a
:class:`LeasedWork`, possibly an item another process had started and left unfinished,
with where to resume it. The queue learns that the reader is done with an item from the
reader's next ``take_work`` call.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from .._errors import InvalidArgumentError

__all__ = [
    "LeasedWork",
    "LeasingQueue",
    "WorkQueue",
    "check_work_queue",
    "next_work_hints",
    "work_item_bytes",
]


class WorkQueue(Protocol):
    """What a reader needs from its work queue: ``await dequeue()`` returning a work item
    and raising :class:`~asyncreader.OutOfRangeError` when closed and empty."""

    async def dequeue(self) -> Any: ...


@dataclass(eq=False)
class LeasedWork:
    """A work item a leasing queue handed a reader, and where the reader starts in it.

    Attributes:
        item: The dequeued element (a path or URL).
        position: Reader state (``serialize_state()`` bytes of a reader of the same kind)
            with this item in progress: the reader seeks there instead of starting at the
            item's first record. ``None``: from the first record.
        skip: Keys of records of this item that were already delivered: the reader reads
            past them without returning them (each key once). The reader removes each
            key it skips, so the queue sees how many it skipped.
    """

    item: Any
    position: bytes | None = None
    skip: set[bytes] = field(default_factory=set)


class LeasingQueue(Protocol):
    """A work queue that leases its items (see the module): readers call ``take_work``."""

    async def take_work(self, reader: Any) -> LeasedWork: ...


def check_work_queue(queue: object, reader: str) -> None:
    """Check that ``queue`` can give reader ``reader`` work items.

    Raises:
        TypeError: ``queue`` has no ``dequeue`` (a list of paths is a common slip).
        InvalidArgumentError: the queue's elements have more than one component.
    """
    if not callable(getattr(queue, "dequeue", None)):
        raise TypeError(
            f"{reader} reads work items from a queue (an object with an async "
            f"dequeue(), such as FIFOQueue or string_input_producer), not a "
            f"{type(queue).__name__}"
        )
    dtypes = getattr(queue, "dtypes", None)
    if isinstance(dtypes, (list, tuple)) and len(dtypes) != 1:
        raise InvalidArgumentError(f"Expected single component queue, {reader} got {len(dtypes)}")


def work_item_bytes(item: Any) -> bytes:
    """Turn a dequeued element into the work item's bytes (SPEC §3.2)."""
    if isinstance(item, (tuple, list)):
        if len(item) != 1:
            raise InvalidArgumentError(
                f"Expected to dequeue a one-element string tensor, got {len(item)} components"
            )
        item = item[0]
    if isinstance(item, np.ndarray):
        if item.size != 1:
            raise InvalidArgumentError(
                f"Expected to dequeue a one-element string tensor, got shape {tuple(item.shape)}"
            )
        item = item.reshape(()).item()
    if isinstance(item, bytes):
        return item
    if isinstance(item, (str, os.PathLike)):
        # As the OS encodes file names: a name os.listdir or glob returned with surrogate
        # escapes (bytes that are not UTF-8) comes back as exactly those bytes.
        return os.fsencode(item)
    raise InvalidArgumentError(
        f"Expected queue with single string component, got a {type(item).__name__}"
    )


def next_work_hints(queue: Any, n: int) -> list[bytes]:
    """The (up to ``n``) work items a FIFO queue will hand out next, in order, without
    taking them; fewer when that cannot be told (another kind of queue, nothing ready, an
    element that is no work item). Hints only (another reader may take them): readers
    open those files ahead."""
    from .._queues.fifo import _DequeStorage  # queues import readers' modules

    if not isinstance(queue, _DequeStorage):
        return []
    buf = queue._buf
    hints: list[bytes] = []
    for i in range(min(n, len(buf) - queue._hold)):
        try:
            head = buf[i]
            item = queue._codec.decode_one(head) if queue._typed else head
            hints.append(work_item_bytes(item))
        except Exception:
            break
    return hints
