from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel
import pytest
from queue_util import dequeue_all

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

pytestmark = pytest.mark.anyio


def _counter(queue: ar.FIFOQueue, limit: int | None = None) -> Callable[[], Awaitable[None]]:
    """An enqueue op putting 0, 1, 2, ... into ``queue``, then raising OutOfRangeError."""
    state = {"next": 0}

    async def enqueue_next() -> None:
        value = state["next"]
        if limit is not None and value >= limit:
            raise ar.OutOfRangeError("epochs exhausted")
        state["next"] = value + 1
        await queue.enqueue(value)

    return enqueue_next


def test_missing_queue_or_ops() -> None:
    q = ar.FIFOQueue(1)
    with pytest.raises(ar.InvalidArgumentError, match=r"^Must provide queue and enqueue_ops\.$"):
        ar.QueueRunner(None, [_counter(q)])
    with pytest.raises(ValueError, match="Must provide queue and enqueue_ops"):
        ar.QueueRunner(q, [])
    with pytest.raises(ValueError, match="Must provide queue and enqueue_ops"):
        ar.QueueRunner(q, None)


def test_argument_types() -> None:
    q = ar.FIFOQueue(1)
    with pytest.raises(TypeError, match="enqueue_ops must be async callables"):
        ar.QueueRunner(q, [42])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="close_op must be an async callable"):
        ar.QueueRunner(q, [_counter(q)], close_op=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must be a tuple of exception classes"):
        ar.QueueRunner(q, [_counter(q)], queue_closed_exception_types=[ar.OutOfRangeError])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="must not be empty"):
        ar.QueueRunner(q, [_counter(q)], queue_closed_exception_types=())


async def test_start_needs_a_coordinator() -> None:
    q = ar.FIFOQueue(1, name="work")
    qr = ar.QueueRunner(q, [_counter(q)])
    with pytest.raises(ar.FailedPreconditionError, match="QueueRunner 'work' needs a Coordinator"):
        qr.start()
    assert qr.statistics().tasks_running == 0


@pytest.mark.both_backends
async def test_runner_fills_the_queue_and_closes_it_at_end_of_input() -> None:
    q = ar.FIFOQueue(2)
    qr = ar.QueueRunner(q, [_counter(q, limit=5)])
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            qr.start()
            assert await dequeue_all(q) == [0, 1, 2, 3, 4]
    # No stop was needed: the runner ended by itself and closed the queue.
    assert not coord.should_stop()
    assert q.is_closed()
    assert qr.statistics().closed_queue
    assert qr.exceptions_raised == []


async def test_only_the_last_task_closes_the_queue() -> None:
    q = ar.FIFOQueue(10)
    release = anyio.Event()

    async def ends_at_once() -> None:
        raise ar.OutOfRangeError("no input")

    async def ends_later() -> None:
        await release.wait()
        raise ar.QueueClosedError("input queue closed")

    qr = ar.QueueRunner(q, [ends_at_once, ends_later])
    with anyio.fail_after(10):
        async with ar.Coordinator():
            qr.start()
            await anyio.wait_all_tasks_blocked()
            assert not q.is_closed()
            assert qr.statistics().tasks_running == 1
            release.set()
    assert q.is_closed()


@pytest.mark.both_backends
async def test_stop_request_wakes_blocked_producer_and_closes_queue() -> None:
    q = ar.FIFOQueue(1)
    qr = ar.QueueRunner(q, [_counter(q)])
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            qr.start()
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_enqueue == 1
            coord.request_stop()
            await anyio.wait_all_tasks_blocked()
            assert q.is_closed()
            assert coord.statistics().tasks_running == 0
            # What was enqueued stays available, then the end of input shows.
            assert await dequeue_all(q) == [0]
    assert qr.statistics().tasks_running == 0


@pytest.mark.both_backends
async def test_stop_reaches_a_task_blocked_in_a_dequeue() -> None:
    q = ar.FIFOQueue(1)
    log: list[str] = []

    async def consumer() -> None:
        try:
            await q.dequeue()
        finally:
            log.append("consumer ended")

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_dequeue == 1
            coord.request_stop()
            await anyio.wait_all_tasks_blocked()
            assert log == ["consumer ended"]
            assert q.statistics().tasks_waiting_dequeue == 0


@pytest.mark.both_backends
async def test_op_error_stops_the_coordinator_and_comes_out_as_itself() -> None:
    q = ar.FIFOQueue(4)
    err = ar.DataLossError("corrupted record at 12", work_item="a.tfrecord", record=3)

    async def broken() -> None:
        await anyio.lowlevel.checkpoint()
        raise err

    qr = ar.QueueRunner(q, [broken, _counter(q)])
    with anyio.fail_after(10):
        with pytest.raises(ar.DataLossError) as info:  # noqa: PT012
            async with ar.Coordinator():
                qr.start()
                await dequeue_all(q)  # ends when the stop closes the queue
    assert info.value is err
    assert qr.exceptions_raised == [err]
    assert q.is_closed()
    assert not qr.statistics().closed_queue  # closed by the stop, not by end of input


async def test_queue_closed_types_can_follow_tensorflow() -> None:
    q = ar.FIFOQueue(1)

    async def enqueue_into_closed() -> None:
        raise ar.QueueClosedError("Queue 'q' is closed.")

    qr = ar.QueueRunner(
        q, [enqueue_into_closed], queue_closed_exception_types=(ar.OutOfRangeError,)
    )
    assert qr.queue_closed_exception_types == (ar.OutOfRangeError,)
    # An error for the runner (it does not close the queue) ...
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            qr.start()
        assert len(qr.exceptions_raised) == 1
        assert not qr.statistics().closed_queue
        # ... which a coordinator with TensorFlow's clean types reports too.
        tf_coord = ar.Coordinator(clean_stop_exception_types=(ar.OutOfRangeError,))
        with pytest.raises(ar.QueueClosedError, match="is closed"):
            async with tf_coord:
                qr.start()
    assert coord.should_stop()


async def test_starting_again_while_running_starts_nothing() -> None:
    q = ar.FIFOQueue(1, name="work")
    qr = ar.QueueRunner(q, [_counter(q, limit=3)])
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            names = qr.start()
            assert names == [
                "QueueRunner-work-0-enqueue_next",
                "QueueRunner-work-close_on_stop",
            ]
            await anyio.wait_all_tasks_blocked()
            assert qr.start() == []
            assert qr.statistics().tasks_running == 1
            assert "QueueRunner-work-0-enqueue_next" in coord.statistics().task_names
            assert await dequeue_all(q) == [0, 1, 2]


async def test_restart_after_the_tasks_ended_clears_exceptions() -> None:
    q = ar.FIFOQueue(4)
    calls = {"n": 0}

    async def fails_once() -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("first run fails")
        raise ar.OutOfRangeError("done")

    qr = ar.QueueRunner(q, [fails_once])
    with anyio.fail_after(10):
        with pytest.raises(RuntimeError):
            async with ar.Coordinator():
                qr.start()
        assert len(qr.exceptions_raised) == 1
        async with ar.Coordinator():
            assert len(qr.start()) == 2
    assert qr.exceptions_raised == []


async def test_custom_close_and_cancel_ops() -> None:
    q = ar.FIFOQueue(1)
    log: list[str] = []

    async def close_op() -> None:
        log.append("close")
        await q.close()

    async def cancel_op() -> None:
        log.append("cancel")
        raise RuntimeError("ignored, as in TensorFlow")

    async def ends() -> None:
        raise ar.OutOfRangeError("done")

    with anyio.fail_after(10):
        async with ar.Coordinator():
            ar.QueueRunner(q, [ends], close_op=close_op, cancel_op=cancel_op).start()
        assert log == ["close"]
        assert q.is_closed()

        q2 = ar.FIFOQueue(1)
        async with ar.Coordinator() as coord:
            ar.QueueRunner(q2, [_counter(q2)], close_op=close_op, cancel_op=cancel_op).start()
            await anyio.wait_all_tasks_blocked()
            coord.request_stop()
    assert log == ["close", "cancel"]
    assert not q2.is_closed()


@pytest.mark.both_backends
@pytest.mark.parametrize("close_op", ["default", "custom"])
async def test_a_close_error_is_ignored(close_op: str) -> None:
    q = ar.FIFOQueue(1)
    await q.close()
    # So the default close_op, a plain close, fails when the runner ends:
    with pytest.raises(ar.QueueClosedError, match="already closed"):
        await q.close()
    calls: list[str] = []

    async def failing_close() -> None:
        calls.append("close")
        raise RuntimeError("close failed")

    async def ends() -> None:
        raise ar.OutOfRangeError("done")

    qr = ar.QueueRunner(q, [ends], close_op=failing_close if close_op == "custom" else None)
    # As in TensorFlow, the failed close is ignored: no error, no stop request, and the
    # runner counts the queue as closed by it.
    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            qr.start()
    assert calls == (["close"] if close_op == "custom" else [])
    assert not coord.should_stop()
    assert qr.exceptions_raised == []
    assert qr.statistics().closed_queue
    assert qr.statistics().tasks_running == 0


@pytest.mark.both_backends
@pytest.mark.parametrize("cancel_op", ["default", "custom"])
@pytest.mark.parametrize("stop", ["request_stop", "error", "cancelled"])
async def test_a_cancel_error_after_a_stop_is_ignored(cancel_op: str, stop: str) -> None:
    q = ar.FIFOQueue(1)
    calls: list[str] = []

    async def failing_cancel() -> None:
        calls.append("cancel")
        raise RuntimeError("cancel failed")

    async def closed_twice(cancel_pending_enqueues: bool = False) -> None:
        calls.append("close")
        raise ar.QueueClosedError("Queue is already closed.")

    if cancel_op == "default":  # the default cancel_op is the queue's close, failing
        q.close = closed_twice  # type: ignore[method-assign]
    qr = ar.QueueRunner(
        q, [_counter(q)], cancel_op=failing_cancel if cancel_op == "custom" else None
    )
    cause = ValueError("the reason for the stop")
    raised: list[BaseException] = []
    # As in TensorFlow (_close_on_stop logs and ignores it), the failed cancel is ignored:
    # the coordinator's block ends as the stop says, without it; the runner does not list
    # it (exceptions_raised holds its enqueue ops' errors).
    with anyio.fail_after(5):
        with anyio.CancelScope() as outer:
            try:
                async with ar.Coordinator() as coord:
                    qr.start()
                    await anyio.wait_all_tasks_blocked()
                    if stop == "cancelled":  # the block is cancelled: the watcher closes
                        outer.cancel()
                        await anyio.sleep_forever()
                    coord.request_stop(cause if stop == "error" else None)
                    await anyio.sleep(0.05)  # the watcher's cancel runs
            except Exception as exc:
                raised.append(exc)
    assert raised == ([cause] if stop == "error" else [])
    assert calls == (["cancel"] if cancel_op == "custom" else ["close"])
    assert outer.cancelled_caught == (stop == "cancelled")
    assert qr.exceptions_raised == []
    assert qr.statistics().tasks_running == 0
    assert not qr.statistics().closed_queue


@pytest.mark.both_backends
async def test_an_op_that_never_blocks_does_not_starve_the_loop() -> None:
    calls = {"n": 0}

    async def busy() -> None:
        calls["n"] += 1  # no await at all

    q = ar.FIFOQueue(1)
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            ar.QueueRunner(q, [busy]).start()
            while calls["n"] < 100:
                await anyio.lowlevel.checkpoint()
            coord.request_stop()
    assert calls["n"] >= 100


async def test_runner_stops_when_the_coordinator_is_cancelled() -> None:
    q = ar.FIFOQueue(1)
    with anyio.fail_after(10):
        with anyio.CancelScope() as outer:
            async with ar.Coordinator():
                ar.QueueRunner(q, [_counter(q)]).start()
                await anyio.wait_all_tasks_blocked()
                outer.cancel()
                await anyio.sleep_forever()
    assert outer.cancelled_caught
    assert q.is_closed()


async def test_runner_in_a_session_ends_with_it() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            q = ar.FIFOQueue(2, name="examples")
            qr = ar.QueueRunner(q, [_counter(q), _counter(q)])
            qr.start()  # in the session's coordinator
            await anyio.wait_all_tasks_blocked()
            assert sess.coord.statistics().tasks_running == 3
            assert await q.dequeue() == 0
    assert sess.coord.statistics().tasks_running == 0
    assert q.is_closed()


async def test_name_statistics_and_repr() -> None:
    q = ar.FIFOQueue(1, name="records")
    qr = ar.QueueRunner(q, [_counter(q), _counter(q)])
    assert qr.name == "records"
    assert qr.queue is q
    assert len(qr.enqueue_ops) == 2
    stats = qr.statistics()
    assert stats == ar._runtime.queue_runner.QueueRunnerStatistics(
        name="records", enqueue_ops=2, tasks_running=0, exceptions_raised=0, closed_queue=False
    )
    assert repr(qr) == "<QueueRunner 'records' enqueue_ops=2 running=0 exceptions=0>"

    class Plain:
        async def close(self, cancel_pending_enqueues: bool = False) -> None:
            pass

    assert ar.QueueRunner(Plain(), [_counter(q)]).name == "Plain"


@pytest.mark.both_backends
async def test_an_op_that_never_blocks_still_lets_other_tasks_run() -> None:
    """The runner yields every YIELD_INTERVAL steps even when its op never does."""
    from asyncreader._runtime.queue_runner import YIELD_INTERVAL

    steps = 0
    total = 20 * YIELD_INTERVAL

    async def never_blocks() -> None:
        nonlocal steps
        if steps >= total:
            raise ar.OutOfRangeError("done")
        steps += 1

    q = ar.FIFOQueue(1)
    qr = ar.QueueRunner(q, [never_blocks])
    seen: list[int] = []
    with anyio.fail_after(10):
        async with ar.Coordinator():
            qr.start()
            while steps < total:
                await anyio.lowlevel.checkpoint()
                seen.append(steps)
    gaps = [b - a for a, b in zip([0, *seen], seen, strict=False)]
    # Without the yields, the first look would only come after all the steps.
    assert len(seen) >= total // (2 * YIELD_INTERVAL)
    assert max(gaps) <= 2 * YIELD_INTERVAL
