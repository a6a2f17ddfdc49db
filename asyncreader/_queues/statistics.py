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
        seconds_blocked_enqueue: Seconds that enqueue-side attempts have spent blocked so
            far, summed over attempts (those blocked now count up to now): its rate is the
            average number of tasks waiting for room.
        seconds_blocked_dequeue: The same for dequeue-side attempts: its rate is the
            average number of tasks waiting for elements.
    """

    size: int
    capacity: int | None
    closed: bool
    tasks_waiting_enqueue: int
    tasks_waiting_dequeue: int
    peak_size: int
    total_enqueued: int
    total_dequeued: int
    seconds_blocked_enqueue: float = 0.0
    seconds_blocked_dequeue: float = 0.0
