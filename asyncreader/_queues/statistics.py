"""``QueueStatistics``: what a queue's ``statistics()`` returns."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["QueueStatistics"]


@dataclass(frozen=True)
class QueueStatistics:
    """A snapshot of a queue's state, as returned by ``statistics()``.

    Attributes:
        size: Elements stored (not counting those held by a partial ``dequeue_many``).
        capacity: Maximum elements stored, ``None`` when unbounded.
        closed: Whether the queue is closed.
        tasks_waiting_enqueue: Blocked enqueue-side attempts (enqueues and plain closes).
        tasks_waiting_dequeue: Blocked dequeue-side attempts.
        peak_size: The largest ``size`` seen so far.
        total_enqueued: Elements inserted so far.
        total_dequeued: Elements delivered to dequeuers so far.
    """

    size: int
    capacity: int | None
    closed: bool
    tasks_waiting_enqueue: int
    tasks_waiting_dequeue: int
    peak_size: int
    total_enqueued: int
    total_dequeued: int
