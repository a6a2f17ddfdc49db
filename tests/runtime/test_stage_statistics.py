"""Session.stage_statistics() / Coordinator.stage_statistics(): which stage is stalled."""

from __future__ import annotations

import dataclasses
import gc
from typing import TYPE_CHECKING

import anyio
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from asyncreader._runtime.stages import StageStatistics

pytestmark = pytest.mark.anyio


def _by_name(stages: tuple[StageStatistics, ...], kind: str) -> dict[str, StageStatistics]:
    return {s.name: s for s in stages if s.kind == kind}


@pytest.mark.both_backends
async def test_queues_report_which_side_is_blocked() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            _idle = ar.FIFOQueue(4, name="idle")  # kept alive: sessions track weakly
            starved = ar.FIFOQueue(4, name="starved")
            full = ar.FIFOQueue(1, name="full")
            closed = ar.FIFOQueue(1, name="closed")
            stuck = ar.PriorityQueue(2, ["int64"], [[]], name="stuck")
            await closed.close()
            await full.enqueue(0)
            await stuck.enqueue((1, 1))
            async with anyio.create_task_group() as tg:
                tg.start_soon(starved.dequeue)
                tg.start_soon(starved.dequeue)
                tg.start_soon(full.enqueue, 1)
                tg.start_soon(stuck.dequeue_many, 3)  # more than fits: never satisfied
                tg.start_soon(stuck.enqueue, (2, 2))
                tg.start_soon(stuck.enqueue, (3, 3))
                await anyio.wait_all_tasks_blocked()
                queues = _by_name(sess.stage_statistics(), "queue")
                assert list(queues) == ["idle", "starved", "full", "closed", "stuck"]
                summary = {
                    name: (s.state, s.tasks_blocked_enqueue, s.tasks_blocked_dequeue, s.blocked)
                    for name, s in queues.items()
                }
                assert summary == {
                    "idle": ("idle", 0, 0, False),
                    "starved": ("starved", 0, 2, True),
                    "full": ("full", 1, 0, True),
                    "closed": ("closed", 0, 0, False),
                    "stuck": ("deadlocked", 1, 1, True),
                }
                # The same snapshot, but for the time blocked, which grows meanwhile.
                earlier, later = queues["full"].statistics, full.statistics()
                assert 0 <= earlier.seconds_blocked_enqueue <= later.seconds_blocked_enqueue
                assert dataclasses.replace(earlier, seconds_blocked_enqueue=0.0) == (
                    dataclasses.replace(later, seconds_blocked_enqueue=0.0)
                )
                tg.cancel_scope.cancel()


async def test_a_woken_waiter_is_not_reported_blocked() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            q = ar.FIFOQueue(1)
            tg.start_soon(q.dequeue)
            await anyio.wait_all_tasks_blocked()
            await q.enqueue(1)  # wakes the dequeue, which has not run yet
            (stage,) = sess.stage_statistics()
            assert stage.statistics.tasks_waiting_dequeue == 1
            assert (stage.state, stage.tasks_blocked_dequeue) == ("idle", 0)


@pytest.mark.both_backends
async def test_a_dequeue_many_woken_for_part_of_its_batch_is_still_starved() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            q = ar.FIFOQueue(8)
            tg.start_soon(q.dequeue_many, 4)
            await anyio.wait_all_tasks_blocked()
            # Wakes the dequeue_many, which has not run yet: it will take one element and
            # wait for three more.
            await q.enqueue(1)
            (stage,) = sess.stage_statistics()
            assert (stage.state, stage.tasks_blocked_dequeue) == ("starved", 1)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            (stage,) = sess.stage_statistics()
            assert (stage.state, stage.tasks_blocked_dequeue) == ("starved", 1)
            # Woken with its batch complete, it is about to run: not blocked.
            await q.enqueue_many([2, 3, 4])
            (stage,) = sess.stage_statistics()
            assert (stage.state, stage.tasks_blocked_dequeue) == ("idle", 0)
            tg.cancel_scope.cancel()


class _AsyncHookReader(ar.ReaderBase):
    """A reader whose records wait for an event (a coroutine hook, on the event loop)."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.release = anyio.Event()

    async def on_work_started(self, work: bytes) -> None:
        pass  # on the loop: the item has started as soon as it was taken

    async def read_one(self) -> tuple[bytes, bytes, bool]:
        await self.release.wait()
        return b"k", b"v", True


@pytest.mark.both_backends
async def test_readers_report_waiting_for_work_or_reading() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            work = ar.FIFOQueue(None, name="work")
            waiting = _AsyncHookReader("waiting")
            reading = _AsyncHookReader("reading")
            _idle = _AsyncHookReader("idle")
            closed = _AsyncHookReader("closed")
            await closed.aclose()
            async with anyio.create_task_group() as tg:
                tg.start_soon(waiting.read, work)
                await anyio.wait_all_tasks_blocked()
                await work.enqueue("item")
                tg.start_soon(reading.read, work)
                await anyio.wait_all_tasks_blocked()
                # The first read took the item; it now waits for its record.
                stages = sess.stage_statistics()
                readers = {
                    n: (s.state, s.tasks_busy, s.tasks_blocked_dequeue)
                    for n, s in _by_name(stages, "reader").items()
                }
                assert readers == {
                    "waiting": ("reading", 1, 0),
                    "reading": ("waiting_for_work", 0, 1),
                    "idle": ("idle", 0, 0),
                    "closed": ("closed", 0, 0),
                }
                assert _by_name(stages, "queue")["work"].state == "starved"
                tg.cancel_scope.cancel()


@pytest.mark.both_backends
async def test_runners_report_running_full_or_idle() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            full_q = ar.FIFOQueue(1, name="full-q")
            busy_q = ar.FIFOQueue(1, name="busy-q")
            gate = anyio.Event()

            async def fill() -> None:
                await full_q.enqueue(1)

            async def produce_slowly() -> None:
                await gate.wait()
                await busy_q.enqueue(1)

            full_runner = ar.QueueRunner(full_q, [fill, fill])
            busy_runner = ar.QueueRunner(busy_q, [produce_slowly])
            full_runner.start()
            busy_runner.start()
            await anyio.wait_all_tasks_blocked()
            stages = coord.stage_statistics()
            assert [(s.kind, s.name, s.state) for s in stages] == [
                ("runner", "full-q", "full"),
                ("queue", "full-q", "full"),
                ("runner", "busy-q", "running"),
                ("queue", "busy-q", "idle"),
            ]
            assert (stages[0].tasks_blocked_enqueue, stages[0].tasks_busy) == (2, 0)
            assert (stages[2].tasks_blocked_enqueue, stages[2].tasks_busy) == (0, 1)
            coord.request_stop()
    stages = coord.stage_statistics()
    assert [(s.name, s.state) for s in stages if s.kind == "runner"] == [
        ("full-q", "idle"),
        ("busy-q", "idle"),
    ]
    with pytest.raises(dataclasses.FrozenInstanceError):
        stages[0].state = "running"  # type: ignore[misc]


async def test_session_lists_runner_queues_it_did_not_build_once() -> None:
    outside = ar.FIFOQueue(1, name="outside")
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            inside = ar.FIFOQueue(1, name="inside")

            async def op() -> None:
                await anyio.sleep_forever()

            ar.QueueRunner(outside, [op]).start()
            ar.QueueRunner(inside, [op]).start()
            await anyio.wait_all_tasks_blocked()
            stages = sess.stage_statistics()
            assert [(s.kind, s.name) for s in stages] == [
                ("queue", "inside"),
                ("runner", "outside"),
                ("queue", "outside"),
                ("runner", "inside"),
            ]
            assert stages[1].state == "running"
            sess.coord.request_stop()


async def test_coordinator_holds_its_runners_weakly() -> None:
    coord = ar.Coordinator()
    with anyio.fail_after(10):
        async with coord:

            async def op() -> None:
                raise ar.OutOfRangeError("done")

            ar.QueueRunner(ar.FIFOQueue(1), [op]).start()
    gc.collect()
    assert coord.stage_statistics() == ()
