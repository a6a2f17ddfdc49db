from __future__ import annotations

import gc
from typing import Any, ClassVar

import anyio
import anyio.lowlevel
import pytest

import asyncreader as ar
from asyncreader._runtime import context
from asyncreader._runtime.resources import SharedResource

pytestmark = pytest.mark.anyio


class _Resource(SharedResource):
    """A minimal tracked resource that records being closed."""

    _resource_kind: ClassVar[str] = "test-resource"

    def __init__(self, size: int = 1, fail: bool = False) -> None:
        self.size = size
        self.fail = fail
        self.closed = 0

    def _shared_config(self) -> dict[str, object]:
        return {"size": self.size}

    async def _session_close(self) -> None:
        self.closed += 1
        if self.fail:
            raise OSError("could not release")


async def _forever(log: list[str]) -> None:
    try:
        await anyio.sleep_forever()
    finally:
        log.append("task ended")


@pytest.mark.both_backends
async def test_session_is_current_and_owns_a_current_coordinator() -> None:
    assert context.current_session() is None
    async with ar.Session() as sess:
        assert context.current_session() is sess
        assert context.current_coordinator() is sess.coord
        assert isinstance(sess.resources, ar.ResourceMgr)
    assert context.current_session() is None
    assert context.current_coordinator() is None
    assert sess.closed
    assert sess.coord.joined


@pytest.mark.both_backends
async def test_leaving_closes_tracked_queues_and_stops_tasks() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            q = ar.FIFOQueue(4)
            await q.enqueue(1)
            sess.start_soon(_forever, log)
            await anyio.wait_all_tasks_blocked()
            assert sess.statistics().resources_tracked == 1
    assert log == ["task ended"]
    assert q.is_closed()
    assert q.size() == 1  # closing keeps the elements
    assert sess.statistics().resources_tracked == 0


@pytest.mark.both_backends
async def test_blocked_operations_in_other_tasks_end_with_clear_errors() -> None:
    errors: list[BaseException] = []

    async def call(fn: Any, *args: Any) -> None:
        try:
            await fn(*args)
        except ar.AsyncReaderError as exc:
            errors.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            async with ar.Session() as sess:
                empty = ar.FIFOQueue(1)
                full = ar.FIFOQueue(1)
                await full.enqueue("x")
                tg.start_soon(call, empty.dequeue)
                tg.start_soon(call, full.enqueue, "y")
                await anyio.wait_all_tasks_blocked()
            await anyio.wait_all_tasks_blocked()
    assert sess.closed
    kinds = sorted(type(e).__name__ for e in errors)
    assert kinds == ["OutOfRangeError", "QueueClosedError"]


@pytest.mark.both_backends
async def test_shared_name_gives_the_same_queue_within_a_session() -> None:
    async with ar.Session() as sess:
        a = ar.FIFOQueue(4, shared_name="q")
        b = ar.FIFOQueue(4, shared_name="q")
        assert a is b
        assert sess.resources.lookup(None, "q") is a
        assert sess.resources.names() == [("queue", "q")]
        with pytest.raises(ar.InvalidArgumentError, match="capacity"):
            ar.FIFOQueue(8, shared_name="q")
        other = ar.FIFOQueue(4, shared_name="q", container="other")
        assert other is not a
    # The session's manager is cleared when it ends.
    assert sess.resources.containers() == []
    assert a.is_closed()
    assert other.is_closed()


async def test_different_sessions_do_not_share() -> None:
    async with ar.Session() as one, ar.Session() as two:
        inner = ar.FIFOQueue(4, shared_name="q")
        assert two.resources.lookup(None, "q") is inner
        with pytest.raises(ar.NotFoundError):
            one.resources.lookup(None, "q")
    async with ar.Session():
        assert ar.FIFOQueue(4, shared_name="q") is not inner


async def test_close_is_idempotent_and_a_closed_session_cannot_be_used() -> None:
    sess = ar.Session()
    with anyio.fail_after(10):
        async with sess:
            res = _Resource()
        assert res.closed == 1
        await sess.close()
        assert res.closed == 1
        message = r"^Attempted to use a closed Session\.$"
        with pytest.raises(ar.FailedPreconditionError, match=message):
            await sess.__aenter__()
        with pytest.raises(ar.FailedPreconditionError, match=message):
            sess.start_soon(anyio.sleep, 0)
        with pytest.raises(ar.FailedPreconditionError, match=message):
            await sess.run(anyio.sleep, 0)
    assert repr(sess).startswith("<Session closed")


async def test_close_inside_the_block() -> None:
    log: list[str] = []
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            q = ar.FIFOQueue(1)
            sess.start_soon(_forever, log)
            await anyio.wait_all_tasks_blocked()
            await sess.close()
            assert log == ["task ended"]
            assert q.is_closed()
            assert sess.closed
            with pytest.raises(ar.FailedPreconditionError, match="closed Session"):
                ar.FIFOQueue(1)  # building a resource needs an open session
            await sess.close()


async def test_close_from_a_task_of_the_session() -> None:
    log: list[str] = []

    async def shut_down(sess: ar.Session) -> None:
        await sess.close()
        log.append("closed")

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            q = ar.FIFOQueue(1)
            sess.start_soon(_forever, log)
            sess.start_soon(shut_down, sess)
    assert sorted(log) == ["closed", "task ended"]
    assert q.is_closed()


async def test_close_without_entering() -> None:
    sess = ar.Session()
    await sess.close()
    assert sess.closed


@pytest.mark.both_backends
async def test_errors_come_out_as_themselves_and_resources_still_close() -> None:
    err = ar.DataLossError("corrupted record at 12", work_item="a.tfrecord")

    async def fail() -> None:
        await anyio.lowlevel.checkpoint()
        raise err

    with anyio.fail_after(10):
        with pytest.raises(ar.DataLossError) as info:  # noqa: PT012
            async with ar.Session() as sess:
                res = _Resource()
                sess.start_soon(fail)
                await anyio.sleep_forever()
    assert info.value is err
    assert res.closed == 1


async def test_body_error_propagates() -> None:
    with pytest.raises(KeyError, match="body"):  # noqa: PT012
        async with ar.Session():
            res = _Resource()
            raise KeyError("body")
    assert res.closed == 1


async def test_resource_close_error_is_reported_when_nothing_else_is() -> None:
    with pytest.raises(OSError, match="could not release"):  # noqa: PT012
        async with ar.Session():
            bad = _Resource(fail=True)
            good = _Resource()
    assert bad.closed == good.closed == 1

    with pytest.raises(KeyError):  # noqa: PT012
        async with ar.Session():
            _keep = _Resource(fail=True)
            raise KeyError("this one wins")


async def test_resources_are_tracked_weakly() -> None:
    async with ar.Session() as sess:
        kept = _Resource()
        _Resource()  # nothing keeps this one
        gc.collect()
        assert sess.statistics().resources_tracked == 1
    assert kept.closed == 1


async def test_shared_resources_stay_alive_in_the_session() -> None:
    async with ar.Session() as sess:
        _Resource(size=2, shared_name="r")  # type: ignore[call-arg]
        gc.collect()
        assert sess.statistics().resources_tracked == 1
        again = _Resource(size=2, shared_name="r")  # type: ignore[call-arg]
        with pytest.raises(ar.InvalidArgumentError, match="has size 2 but requested size was 3"):
            _Resource(size=3, shared_name="r")  # type: ignore[call-arg]
    assert again.closed == 1


async def test_objects_without_weak_references_are_tracked_strongly() -> None:
    class Slotted:
        __slots__ = ("closed",)

        def __init__(self) -> None:
            self.closed = False

        async def _session_close(self) -> None:
            self.closed = True

    async with ar.Session() as sess:
        context.track(Slotted())
        context.track(object.__new__(object))  # nothing to close: skipped
        assert sess.statistics().resources_tracked == 2


@pytest.mark.both_backends
async def test_run_awaits_in_the_session() -> None:
    async def build() -> ar.FIFOQueue:
        assert context.current_session() is sess
        return ar.FIFOQueue(2, shared_name="made-in-run")

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            outside: list[ar.FIFOQueue] = []

            async def handler() -> None:
                outside.append(await sess.run(build))

            async with anyio.create_task_group() as tg:
                tg.start_soon(handler)
            assert outside[0] is sess.resources.lookup(None, "made-in-run")
            assert context.current_session() is sess
    assert outside[0].is_closed()


@pytest.mark.both_backends
async def test_run_is_cancelled_when_the_session_closes() -> None:
    errors: list[BaseException] = []

    async def handler(sess: ar.Session) -> None:
        try:
            await sess.run(anyio.sleep_forever)
        except ar.FailedPreconditionError as exc:
            errors.append(exc)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg, ar.Session() as sess:
            tg.start_soon(handler, sess)
            await anyio.wait_all_tasks_blocked()
            assert sess.statistics().calls_running == 1
    assert [str(e) for e in errors] == ["The Session was closed while this call was running."]
    assert sess.statistics().calls_running == 0


async def test_run_propagates_errors() -> None:
    async def fail() -> None:
        raise ar.NotFoundError("no such file: x")

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            with pytest.raises(ar.NotFoundError, match="no such file"):
                await sess.run(fail)


async def test_entering_twice_fails() -> None:
    async with ar.Session() as sess:
        with pytest.raises(ar.FailedPreconditionError, match="already running"):
            await sess.__aenter__()


async def test_statistics_and_repr() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            q = ar.FIFOQueue(1)
            stats = sess.statistics()
            assert not stats.closed
            assert stats.resources_tracked == 1
            assert stats.calls_running == 0
            assert stats.coordinator.tasks_running == 0
            assert repr(sess).startswith("<Session running resources=1 coord=<Coordinator running")
    assert q.is_closed()
    assert ar.Session().__repr__().startswith("<Session idle")


async def test_grace_period_and_clean_types_reach_the_coordinator() -> None:
    async def polite() -> None:
        await sess.coord.wait_for_stop()
        await anyio.lowlevel.checkpoint()

    with anyio.fail_after(10):
        with pytest.raises(ar.QueueClosedError):  # noqa: PT012
            async with ar.Session(
                stop_grace_period=None, clean_stop_exception_types=(ar.OutOfRangeError,)
            ) as sess:
                sess.start_soon(polite)
                raise ar.QueueClosedError("Queue 'q' is closed.")
