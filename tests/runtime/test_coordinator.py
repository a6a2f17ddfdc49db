from __future__ import annotations

import sys

import anyio
import anyio.lowlevel
import pytest

import asyncreader as ar
from asyncreader._runtime import context

pytestmark = pytest.mark.anyio


async def _forever(log: list[str], label: str = "task") -> None:
    try:
        await anyio.sleep_forever()
    finally:
        log.append(f"{label} ended")


@pytest.mark.both_backends
async def test_leaving_the_block_waits_for_tasks_without_a_stop() -> None:
    done: list[int] = []
    gate = anyio.Event()

    async def worker(i: int) -> None:
        await gate.wait()
        done.append(i)

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            for i in range(3):
                coord.start_soon(worker, i)
            await anyio.wait_all_tasks_blocked()
            assert coord.statistics().tasks_running == 3
            gate.set()
    assert sorted(done) == [0, 1, 2]
    assert coord.joined
    assert not coord.should_stop()
    assert coord.statistics().tasks_running == 0


@pytest.mark.both_backends
async def test_coordinator_is_current_in_the_block_and_its_tasks() -> None:
    seen: list[object] = []

    async def look() -> None:
        seen.append(context.current_coordinator())

    assert context.current_coordinator() is None
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            assert context.current_coordinator() is coord
            coord.start_soon(look)
            async with ar.Coordinator() as inner:
                assert context.current_coordinator() is inner
            assert context.current_coordinator() is coord
    assert seen == [coord]
    assert context.current_coordinator() is None


@pytest.mark.both_backends
async def test_stop_request_cancels_blocked_tasks_but_not_the_body() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.start_soon(_forever, log)
            await anyio.wait_all_tasks_blocked()
            coord.request_stop()
            await anyio.wait_all_tasks_blocked()
            assert log == ["task ended"]
            assert coord.should_stop()
            # A clean stop leaves the body running: it may still await.
            await anyio.lowlevel.checkpoint()
            log.append("body finished")
    assert log == ["task ended", "body finished"]


@pytest.mark.both_backends
async def test_task_error_is_reraised_as_itself_and_cancels_the_body() -> None:
    log: list[str] = []
    boom = KeyError("boom")

    async def fail() -> None:
        await anyio.lowlevel.checkpoint()
        raise boom

    with anyio.fail_after(10):
        with pytest.raises(KeyError) as info:  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(_forever, log)
                coord.start_soon(fail)
                try:
                    await anyio.sleep_forever()
                finally:
                    log.append("body cancelled")
    assert info.value is boom
    assert sorted(log) == ["body cancelled", "task ended"]
    assert coord.should_stop()


async def test_task_error_keeps_cause_and_context() -> None:
    async def fail() -> None:
        try:
            raise OSError("disk")
        except OSError as exc:
            try:
                raise LookupError("inner")
            except LookupError:
                raise ValueError("outer") from exc

    with anyio.fail_after(10):
        with pytest.raises(ValueError, match="outer") as info:
            async with ar.Coordinator() as coord:
                coord.start_soon(fail)
    assert isinstance(info.value.__cause__, OSError)
    assert isinstance(info.value.__context__, LookupError)
    assert not isinstance(info.value, BaseExceptionGroup)


async def test_first_error_wins() -> None:
    first, second = RuntimeError("first"), RuntimeError("second")

    async def fail_later() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            raise second

    with anyio.fail_after(10):
        with pytest.raises(RuntimeError, match="first"):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(fail_later)
                await anyio.wait_all_tasks_blocked()
                coord.request_stop(first)
    coord.request_stop(ar.OutOfRangeError("late clean stop is ignored"))


async def test_plain_stop_then_error_keeps_no_error() -> None:
    # As in TensorFlow: only the first stop request can record an error.
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.request_stop()
            coord.request_stop(RuntimeError("ignored"))
    coord.raise_requested_exception()


@pytest.mark.both_backends
@pytest.mark.parametrize("exc_type", [ar.OutOfRangeError, ar.QueueClosedError])
async def test_clean_stop_types_stop_without_an_error(exc_type: type[Exception]) -> None:
    log: list[str] = []

    async def end() -> None:
        await anyio.lowlevel.checkpoint()
        raise exc_type("end of input")

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.start_soon(_forever, log)
            coord.start_soon(end)
    assert coord.should_stop()
    assert log == ["task ended"]
    assert coord.statistics().exception is None


async def test_custom_clean_stop_types_follow_tensorflow() -> None:
    async def enqueue_into_closed() -> None:
        raise ar.QueueClosedError("Queue 'q' is closed.")

    with anyio.fail_after(10):
        with pytest.raises(ar.QueueClosedError, match="is closed"):
            async with ar.Coordinator(clean_stop_exception_types=(ar.OutOfRangeError,)) as coord:
                coord.start_soon(enqueue_into_closed)


async def test_invalid_arguments() -> None:
    with pytest.raises(TypeError, match="exception classes"):
        ar.Coordinator(clean_stop_exception_types=(ar.OutOfRangeError, "nope"))  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="stop_grace_period must be >= 0"):
        ar.Coordinator(stop_grace_period=-1)


@pytest.mark.both_backends
async def test_body_error_stops_tasks_and_propagates() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        with pytest.raises(ZeroDivisionError):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(_forever, log)
                await anyio.wait_all_tasks_blocked()
                _ = 1 / 0
    assert log == ["task ended"]
    assert isinstance(coord.statistics().exception, ZeroDivisionError)


async def test_body_clean_exception_propagates_as_itself() -> None:
    err = ar.OutOfRangeError("FIFOQueue 'q' is closed and has insufficient elements")
    with anyio.fail_after(10):
        with pytest.raises(ar.OutOfRangeError) as info:
            async with ar.Coordinator():
                raise err
    assert info.value is err


async def test_recorded_error_wins_over_the_body_error_it_caused() -> None:
    cause = ar.DataLossError("corrupted record at 12", work_item="a.tfrecord")
    with anyio.fail_after(10):
        with pytest.raises(ar.DataLossError):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.request_stop(cause)
                # The body reacts to the failure with an error of its own.
                raise ar.OutOfRangeError("queue closed")


@pytest.mark.both_backends
async def test_keyboard_interrupt_from_the_body_comes_first() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        with pytest.raises(KeyboardInterrupt):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(_forever, log)
                await anyio.wait_all_tasks_blocked()
                raise KeyboardInterrupt
    assert log == ["task ended"]


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_system_exit_from_a_task_wins_over_a_recorded_error() -> None:
    # asyncio hands SystemExit raised in a task straight to the event loop; trio does not.
    async def leave() -> None:
        raise SystemExit(3)

    async def fail() -> None:
        raise RuntimeError("recorded")

    with anyio.fail_after(10):
        with pytest.raises(SystemExit):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(fail)
                coord.start_soon(leave)
                await anyio.sleep_forever()


@pytest.mark.both_backends
async def test_outer_cancellation_is_not_swallowed() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        with anyio.CancelScope() as outer:
            async with ar.Coordinator() as coord:
                coord.start_soon(_forever, log)
                await anyio.wait_all_tasks_blocked()
                outer.cancel()
                await anyio.sleep_forever()
            pytest.fail("the cancellation was swallowed")  # pragma: no cover
    assert outer.cancelled_caught
    assert log == ["task ended"]
    assert coord.should_stop()


async def test_recorded_error_wins_over_outer_cancellation() -> None:
    async def fail_on_cancel() -> None:
        try:
            await anyio.sleep_forever()
        except anyio.get_cancelled_exc_class():
            raise RuntimeError("cleanup failed") from None

    with anyio.fail_after(10):
        with anyio.CancelScope() as outer, pytest.raises(RuntimeError, match="cleanup failed"):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(fail_on_cancel)
                await anyio.wait_all_tasks_blocked()
                outer.cancel()
                await anyio.sleep_forever()


@pytest.mark.both_backends
async def test_wait_for_stop() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            assert await coord.wait_for_stop(timeout=0) is False

            async def stopper() -> None:
                coord.request_stop()

            coord.start_soon(stopper)
            assert await coord.wait_for_stop() is True
            assert await coord.wait_for_stop(timeout=0) is True


async def test_stop_on_exception_reports_and_suppresses() -> None:
    coord = ar.Coordinator()
    with coord.stop_on_exception():
        raise ar.OutOfRangeError("done")
    assert coord.should_stop()
    assert coord.statistics().exception is None

    coord.clear_stop()
    err = ValueError("bad")
    with coord.stop_on_exception():
        raise err
    assert coord.statistics().exception is err
    with pytest.raises(ValueError, match="bad"):
        coord.raise_requested_exception()


async def test_stop_on_exception_lets_cancellation_through() -> None:
    with anyio.fail_after(10):
        with anyio.CancelScope() as scope:
            async with ar.Coordinator() as coord:
                with coord.stop_on_exception():
                    scope.cancel()
                    await anyio.lowlevel.checkpoint()
    assert scope.cancelled_caught


async def test_clear_stop_and_reuse() -> None:
    coord = ar.Coordinator()
    coord.request_stop(RuntimeError("x"))
    with pytest.raises(RuntimeError, match="x"):
        async with coord:
            pass
    assert coord.joined
    coord.clear_stop()
    assert not coord.statistics().joined
    assert not coord.should_stop()
    coord.raise_requested_exception()  # nothing recorded any more
    ran: list[int] = []

    async def work() -> None:
        await anyio.lowlevel.checkpoint()
        ran.append(1)

    with anyio.fail_after(10):
        async with coord:
            coord.start_soon(work)
    assert ran == [1]


async def test_request_stop_after_join_raises_real_errors() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            pass
    err = RuntimeError("too late")
    with pytest.raises(RuntimeError, match="too late"):
        coord.request_stop(err)
    coord.request_stop(ar.OutOfRangeError("clean"))  # a clean stop is not an error
    try:
        raise KeyError("exc_info")
    except KeyError:
        with pytest.raises(KeyError):
            coord.request_stop(sys.exc_info())  # type: ignore[arg-type]


async def test_request_stop_accepts_exc_info() -> None:
    coord = ar.Coordinator()
    try:
        raise KeyError("k")
    except KeyError:
        coord.request_stop(sys.exc_info())  # type: ignore[arg-type]
    assert isinstance(coord.statistics().exception, KeyError)


async def test_start_soon_outside_the_block() -> None:
    coord = ar.Coordinator()
    with pytest.raises(ar.FailedPreconditionError, match="Coordinator is not running"):
        coord.start_soon(anyio.sleep, 0)
    with anyio.fail_after(10):
        async with coord:
            pass
    with pytest.raises(ar.FailedPreconditionError, match="Coordinator is not running"):
        coord.start_soon(anyio.sleep, 0)


async def test_entering_twice_at_once_fails() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            with pytest.raises(ar.FailedPreconditionError, match="already running"):
                await coord.__aenter__()


async def test_task_started_after_a_stop_is_cancelled() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.request_stop()
            coord.start_soon(_forever, log, "late")
    assert log == ["late ended"]


async def test_statistics_and_repr_name_running_tasks() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        with pytest.raises(RuntimeError, match="stalled"):  # noqa: PT012
            async with ar.Coordinator() as coord:
                coord.start_soon(_forever, log, name="reader-stage")
                coord.start_soon(_forever, log)
                await anyio.wait_all_tasks_blocked()
                stats = coord.statistics()
                assert stats.tasks_running == 2
                assert stats.task_names == ("reader-stage", "_forever")
                assert not stats.stop_requested
                assert "reader-stage" in repr(coord)
                assert repr(coord).startswith("<Coordinator running")
                with pytest.raises(AttributeError):
                    stats.tasks_running = 3  # type: ignore[misc]
                coord.request_stop(RuntimeError("stalled"))
                assert "stop_requested" in repr(coord)
    assert repr(coord).startswith("<Coordinator joined tasks=[]")


@pytest.mark.both_backends
async def test_grace_period_lets_tasks_finish_cooperatively() -> None:
    log: list[str] = []

    async def polite(coord: ar.Coordinator) -> None:
        await coord.wait_for_stop()
        await anyio.lowlevel.checkpoint()  # not cancelled during the grace period
        log.append("finished its item")

    with anyio.fail_after(10):
        async with ar.Coordinator(stop_grace_period=None) as coord:
            coord.start_soon(polite, coord)
            await anyio.wait_all_tasks_blocked()
            coord.request_stop()
    assert log == ["finished its item"]


@pytest.mark.both_backends
async def test_grace_period_then_cancels_stragglers() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        async with ar.Coordinator(stop_grace_period=0.01) as coord:
            coord.start_soon(_forever, log)
            await anyio.wait_all_tasks_blocked()
            coord.request_stop()
            assert log == []  # not cancelled at once
    assert log == ["task ended"]


async def test_grace_period_with_no_tasks_ends_at_once() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator(stop_grace_period=60) as coord:
            coord.request_stop()
    assert coord.joined


async def test_wait_for_stop_survives_clear_stop() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            woke: list[bool] = []

            async def waiter() -> None:
                woke.append(await coord.wait_for_stop())

            async with anyio.create_task_group() as tg:
                tg.start_soon(waiter)
                await anyio.wait_all_tasks_blocked()
                coord.clear_stop()
                coord.request_stop()
            assert woke == [True]


async def test_grace_period_applies_to_a_stop_requested_before_entering() -> None:
    log: list[str] = []
    coord = ar.Coordinator(stop_grace_period=0.01)
    coord.request_stop()
    with anyio.fail_after(10):
        async with coord:
            coord.start_soon(_forever, log)
    assert log == ["task ended"]
