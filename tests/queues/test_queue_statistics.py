"""statistics() and repr() of every queue type."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._queues.statistics import QueueStatistics

if TYPE_CHECKING:
    from collections.abc import Callable

    from asyncreader._queues.base import QueueBase

pytestmark = pytest.mark.anyio

# name -> (build(capacity), element i)
KINDS: dict[str, tuple[Callable[[int], QueueBase], Callable[[int], Any]]] = {
    "fifo": (lambda cap: ar.FIFOQueue(cap, name="q"), lambda i: i),
    "shuffle": (lambda cap: ar.RandomShuffleQueue(cap, 0, seed=1, name="q"), lambda i: i),
    "padding": (
        lambda cap: ar.PaddingFIFOQueue(cap, ["int64"], [[None]], name="q"),
        lambda i: (np.arange(i % 3 + 1),),
    ),
    "priority": (
        lambda cap: ar.PriorityQueue(cap, ["int64"], [[]], name="q"),
        lambda i: (i, i),
    ),
}


@pytest.fixture(params=sorted(KINDS))
def kind(request: pytest.FixtureRequest) -> tuple[Callable[[int], QueueBase], Callable[[int], Any]]:
    return KINDS[request.param]


@pytest.mark.both_backends
async def test_statistics_count_and_track_the_peak(
    kind: tuple[Callable[[int], QueueBase], Callable[[int], Any]],
) -> None:
    build, element = kind
    q = build(4)
    assert q.statistics() == QueueStatistics(0, 4, False, 0, 0, 0, 0, 0)
    for i in range(3):
        await q.enqueue(element(i))
    await q.dequeue()
    await q.enqueue(element(3))
    await q.dequeue_many(2)
    assert q.statistics() == QueueStatistics(
        size=1,
        capacity=4,
        closed=False,
        tasks_waiting_enqueue=0,
        tasks_waiting_dequeue=0,
        peak_size=3,
        total_enqueued=4,
        total_dequeued=3,
    )
    await q.close()
    assert q.statistics().closed
    assert repr(q).startswith(f"<{type(q).__name__} 'q' size=1 capacity=4 closed=True")


async def test_statistics_are_immutable() -> None:
    stats = ar.FIFOQueue(1).statistics()
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.size = 3  # type: ignore[misc]


@pytest.mark.both_backends
async def test_statistics_and_repr_show_blocked_tasks_on_each_side(
    kind: tuple[Callable[[int], QueueBase], Callable[[int], Any]],
) -> None:
    build, element = kind
    q = build(1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue)
            tg.start_soon(q.dequeue)
            await anyio.wait_all_tasks_blocked()
            stats = q.statistics()
            assert (stats.tasks_waiting_enqueue, stats.tasks_waiting_dequeue) == (0, 2)
            assert "waiting_enqueue=0 waiting_dequeue=2" in repr(q)
            await q.enqueue(element(0))
            await q.enqueue(element(1))
        async with anyio.create_task_group() as tg:
            await q.enqueue(element(2))
            tg.start_soon(q.enqueue, element(3))
            await anyio.wait_all_tasks_blocked()
            stats = q.statistics()
            assert (stats.size, stats.tasks_waiting_enqueue, stats.tasks_waiting_dequeue) == (
                1,
                1,
                0,
            )
            await q.dequeue()
            await q.dequeue()
    stats = q.statistics()
    assert (stats.total_enqueued, stats.total_dequeued, stats.peak_size) == (4, 4, 1)


@pytest.mark.both_backends
async def test_peak_counts_elements_put_back_after_a_refill() -> None:
    # A dequeue_many takes what is there and waits. It is cancelled, and before it runs
    # to withdraw, the queue refills; then it puts its elements back, so the queue holds
    # more than ever before (more than its capacity), which the peak must show.
    q = ar.FIFOQueue(2)
    await q.enqueue_many([1, 2])
    scope = anyio.CancelScope()

    async def take() -> None:
        with scope:
            await q.dequeue_many(3)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(take)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            scope.cancel()
            await q.enqueue_many([3, 4])  # fits at once: no scheduling point before it lands
    assert scope.cancelled_caught
    stats = q.statistics()
    assert stats.size == 4
    assert stats.peak_size == 4
    assert (stats.total_enqueued, stats.total_dequeued) == (4, 0)
    assert await q.dequeue_many(4) == [1, 2, 3, 4]


class _Clock:
    """A stand-in for the queues' clock: ``monotonic()`` moves when told."""

    def __init__(self) -> None:
        self.now = 100.0

    def monotonic(self) -> float:
        return self.now


@pytest.mark.both_backends
async def test_seconds_blocked_count_waits_on_each_side_and_never_go_back(
    kind: tuple[Callable[[int], QueueBase], Callable[[int], Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncreader._queues import base

    clock = _Clock()
    monkeypatch.setattr(base, "_monotonic", clock.monotonic)
    build, element = kind
    q = build(1)
    seen: list[float] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue)
            tg.start_soon(q.dequeue)
            await anyio.wait_all_tasks_blocked()
            clock.now += 2.0
            # Two dequeues blocked for 2 s each, counted while they still wait.
            stats = q.statistics()
            assert (stats.seconds_blocked_dequeue, stats.seconds_blocked_enqueue) == (4.0, 0.0)
            seen.append(stats.seconds_blocked_dequeue)
            await q.enqueue(element(0))
            # Woken but not yet run: still counted, so the total does not drop.
            seen.append(q.statistics().seconds_blocked_dequeue)
            await anyio.wait_all_tasks_blocked()
            clock.now += 1.0
            seen.append(q.statistics().seconds_blocked_dequeue)
            await q.enqueue(element(1))
        clock.now += 10.0  # nobody waits: the totals stay
        stats = q.statistics()
        assert stats.seconds_blocked_dequeue == 5.0  # 2 + (2 + 1)
        seen.append(stats.seconds_blocked_dequeue)
        assert seen == sorted(seen)
        await q.enqueue(element(2))
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue, element(3))
            await anyio.wait_all_tasks_blocked()
            clock.now += 0.5
            assert q.statistics().seconds_blocked_enqueue == 0.5
            await q.dequeue()
        assert q.statistics().seconds_blocked_enqueue == 0.5
        assert q.statistics().seconds_blocked_dequeue == 5.0
