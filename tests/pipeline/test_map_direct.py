"""ar.map with one call at a time, a cheap plain fn and an async callable source: once the
calls run inline, the consumer pulls the source and calls fn itself (no hand-off through the
worker task). Order, cancellation, checkpoints, errors, statistics, stops and the way back to
worker threads must be exactly those of the worker path."""

from __future__ import annotations

import random
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.anyio


def counter(n: int, *, fail_at: int | None = None, jitter: float = 0.0) -> Callable[[], Any]:
    """An async callable returning 0 .. n-1, then raising OutOfRangeError; cancel-safe (its
    state moves only after its last await). ``fail_at``: raise DataLossError there instead."""
    state = {"next": 0}
    rng = random.Random(3)

    async def next_example() -> int:
        if jitter:
            await anyio.sleep(rng.random() * jitter)
        else:
            await anyio.lowlevel.checkpoint()
        i = state["next"]
        if i == fail_at:
            raise ar.DataLossError(f"bad example {i}")
        if i >= n:
            raise ar.OutOfRangeError("no more examples")
        state["next"] = i + 1
        return i

    return next_example


def spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


class Where:
    """Notes, per example, the task that called fn on the event loop (``None``: a thread)."""

    def __init__(self) -> None:
        self.loop_thread = threading.get_ident()
        self.log: list[tuple[int, int | None]] = []

    def note(self, x: int) -> None:
        on_loop = threading.get_ident() == self.loop_thread
        self.log.append((x, anyio.get_current_task().id if on_loop else None))

    def inline(self) -> list[int]:
        return [x for x, task in self.log if task is not None]

    def by(self, task: int) -> list[int]:
        return [x for x, t in self.log if t == task]


def me() -> int:
    return anyio.get_current_task().id


@pytest.mark.both_backends
@pytest.mark.parametrize("ordered", [True, False])
async def test_the_consumer_calls_a_cheap_fn_itself_in_order(ordered: bool) -> None:
    where = Where()

    def negate(x: int) -> int:
        where.note(x)
        return -x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(negate, counter(300), 1, ordered=ordered)
            out = [x async for x in stage]
            stats = stage.statistics()
    assert out == [-i for i in range(300)]
    assert sorted(x for x, _ in where.log) == list(range(300))  # each called once
    # Past the probe on threads, the calls ran inline, all in the consuming task.
    assert not [x for x in where.inline() if x < 8]
    assert len(where.inline()) > 150
    assert where.by(me()) == where.inline()
    assert stats.calls_inline == len(where.inline())
    assert (stats.examples_fetched, stats.results_taken) == (300, 300)
    assert stats.calls_in_flight == stats.results_waiting == stats.consumers_waiting == 0


@pytest.mark.both_backends
async def test_cancelled_takes_lose_and_duplicate_nothing() -> None:
    rng = random.Random(11)
    where = Where()

    def negate(x: int) -> int:
        where.note(x)
        return -x

    out: list[int] = []
    cancelled = 0
    with anyio.fail_after(20):
        async with ar.Coordinator():
            # The source waits a little on each call, so takes are cancelled in it.
            stage = ar.map(negate, counter(300, jitter=0.0005), 1)
            while True:
                with anyio.move_on_after(rng.random() * 0.003) as scope:
                    try:
                        out.append(await stage())
                    except ar.OutOfRangeError:
                        break
                cancelled += scope.cancelled_caught
            stats = stage.statistics()
    assert cancelled > 10
    assert out == [-i for i in range(300)]
    assert len(where.by(me())) > 50
    assert stats.examples_fetched == stats.results_taken == 300


@pytest.mark.both_backends
async def test_two_consumers_share_the_calls_without_loss_or_duplicates() -> None:
    def negate(x: int) -> int:
        return -x

    taken: dict[str, list[int]] = {"a": [], "b": []}
    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(negate, counter(300, jitter=0.0005), 1)

            async def consume(name: str) -> None:
                async for x in stage:
                    taken[name].append(-x)

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume, "a")
                tg.start_soon(consume, "b")
            assert stage.statistics().calls_inline > 100
    assert taken["a"]
    assert taken["b"]
    assert sorted(taken["a"] + taken["b"]) == list(range(300))
    assert taken["a"] == sorted(taken["a"])
    assert taken["b"] == sorted(taken["b"])


def _tracked_numbers(
    sess: ar.Session, n: int, gate: dict[int, anyio.Event] | None = None
) -> Callable[[], Any]:
    """A checkpointed async callable source of 0 .. n-1; ``gate[i]``: wait for it at ``i``."""
    state = {"next": 0}
    sess.track_state("numbers", lambda: state["next"], lambda v: state.update(next=v))

    async def next_example() -> int:
        await anyio.lowlevel.checkpoint()
        if gate and state["next"] in gate:
            await gate[state["next"]].wait()
        if state["next"] >= n:
            raise ar.OutOfRangeError("no more examples")
        state["next"] += 1
        return state["next"] - 1

    return next_example


def negate(x: int) -> int:
    return -x


@pytest.mark.both_backends
async def test_a_checkpoint_while_the_consumer_waits_in_the_source_restores_exactly() -> None:
    # The consumer holds nothing while it waits in the source: the checkpoint does not wait
    # for it, and the example it gets afterwards is the one a restore starts with.
    gate = {50: anyio.Event()}
    with anyio.fail_after(20):
        async with ar.Session(deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 120, gate), 1)
            head = [await stage() for _ in range(50)]
            assert stage.statistics().calls_inline > 20
            got: list[int] = []

            async def take_one() -> None:
                got.append(await stage())

            async with anyio.create_task_group() as tg:
                tg.start_soon(take_one)
                await anyio.wait_all_tasks_blocked()
                stats = stage.statistics()
                assert (stats.consumers_waiting, stats.calls_in_flight) == (1, 0)
                (listed,) = [s for s in sess.stage_statistics() if s.kind == "map"]
                assert listed.state == "starved"
                checkpoint = await sess.checkpoint()
                gate[50].set()
            rest = got + [x async for x in stage]
        assert head + rest == [-i for i in range(120)]
        async with ar.Session(restore=checkpoint, deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 120), 1)
            assert [x async for x in stage] == rest


@pytest.mark.both_backends
async def test_errors_keep_the_policy_and_dead_letters() -> None:
    where = Where()

    def fail_on_49s(x: int) -> int:
        where.note(x)
        if x % 50 == 49:
            raise ZeroDivisionError(f"boom {x}")
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(fail_on_49s, counter(150), 1, on_error="skip")
            out = [x async for x in stage]
            stats = stage.statistics()
            # The default policy raises in order, naming the example, and goes on.
            raising = ar.map(fail_on_49s, counter(60), 1)
            assert [await raising() for _ in range(49)] == list(range(49))
            with pytest.raises(ar.InvalidArgumentError, match="example 49: ZeroDivisionError"):
                await raising()
            assert await raising() == 50
            await raising.aclose()
    assert out == [x for x in range(150) if x % 50 != 49]
    assert [d.index for d in stage.dead_letters] == [49, 99, 149]
    assert stats.errors_skipped == 3
    assert stats.examples_fetched == 150
    assert stats.results_taken == 147
    # The failing calls that ran in the consumer went through the same policy (on a loaded
    # machine the probe on threads may still have been running at 49).
    assert {49, 99, 149} & set(where.by(me()))


@pytest.mark.both_backends
async def test_a_source_error_comes_after_the_results_before_it_and_stays() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(negate, counter(300, fail_at=100), 1)
            assert [await stage() for _ in range(100)] == [-i for i in range(100)]
            assert stage.statistics().calls_inline > 50
            for _ in range(2):
                with pytest.raises(ar.DataLossError, match="bad example 100"):
                    await stage()
            assert stage.statistics().closed


@pytest.mark.both_backends
async def test_a_fn_that_turns_slow_goes_back_to_threads_and_cheap_again_comes_back() -> None:
    where = Where()

    def slow_from_60_to_99(x: int) -> int:
        where.note(x)
        if 60 <= x < 100:
            spin(0.002)
        return -x

    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(slow_from_60_to_99, counter(300), 1)
            out = [x async for x in stage]
            stats = stage.statistics()
    assert out == [-i for i in range(300)]
    assert sorted(x for x, _ in where.log) == list(range(300))
    inline = where.inline()
    assert [x for x in inline if x < 60]
    # The first slow call may have run inline, held the loop up once; no other did.
    assert len([x for x in inline if 60 <= x < 100]) <= 1
    assert not [x for x in inline if 61 <= x < 100]
    # Cheap again: after a doubled probe on threads, the consumer calls fn itself again.
    assert len([x for x in where.by(me()) if x >= 100]) > 100
    assert stats.calls_inline == len(inline)


@pytest.mark.both_backends
async def test_a_stop_ends_a_take_waiting_in_the_source_promptly() -> None:
    never = anyio.Event()
    state = {"next": 0}

    async def stalls_at_100() -> int:
        if state["next"] == 100:
            await never.wait()
        state["next"] += 1
        return state["next"] - 1

    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            stage = ar.map(negate, stalls_at_100, 1)
            assert [await stage() for _ in range(100)] == [-i for i in range(100)]
            assert stage.statistics().calls_inline > 50

            async def stop_soon() -> None:
                await anyio.sleep(0.05)
                coord.request_stop()

            async with anyio.create_task_group() as tg:
                tg.start_soon(stop_soon)
                with pytest.raises(ar.OutOfRangeError, match="was stopped"):
                    await stage()
            with pytest.raises(ar.OutOfRangeError):
                await stage()


@pytest.mark.both_backends
async def test_aclose_ends_a_take_waiting_in_the_source() -> None:
    never = anyio.Event()
    state = {"next": 0}

    async def stalls_at_20() -> int:
        if state["next"] == 20:
            await never.wait()
        state["next"] += 1
        return state["next"] - 1

    with anyio.fail_after(5):
        async with ar.Coordinator():
            stage = ar.map(negate, stalls_at_20, 1)
            assert [await stage() for _ in range(20)] == [-i for i in range(20)]
            async with anyio.create_task_group() as tg:

                async def close_soon() -> None:
                    await anyio.wait_all_tasks_blocked()
                    await stage.aclose()

                tg.start_soon(close_soon)
                with pytest.raises(ar.OutOfRangeError, match="closed"):
                    await stage()
            assert stage.statistics().closed


@pytest.mark.both_backends
async def test_an_async_iterator_source_stays_with_the_worker_task() -> None:
    # A cancellation inside an async generator ends it, so the consumer never pulls one
    # itself: a cancelled take leaves the generator to the worker task, as before.
    rng = random.Random(5)
    where = Where()

    def negate(x: int) -> int:
        where.note(x)
        return -x

    async def numbers(n: int) -> Any:
        for i in range(n):
            await anyio.sleep(rng.random() * 0.0004)
            yield i

    out: list[int] = []
    cancelled = 0
    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(negate, numbers(300), 1)
            while True:
                with anyio.move_on_after(rng.random() * 0.0004) as scope:
                    try:
                        out.append(await stage())
                    except ar.OutOfRangeError:
                        break
                cancelled += scope.cancelled_caught
    assert cancelled > 10
    assert out == [-i for i in range(300)]
    assert len(where.inline()) > 50
    assert where.by(me()) == []


@pytest.mark.both_backends
async def test_a_take_in_a_cancelled_scope_pulls_nothing() -> None:
    pulled: list[int] = []
    source = counter(100)

    async def noting() -> int:
        x: int = await source()
        pulled.append(x)
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(negate, noting, 1)
            assert [await stage() for _ in range(50)] == [-i for i in range(50)]
            assert stage.statistics().calls_inline > 20
            with anyio.CancelScope() as scope:
                scope.cancel()
                await stage()
            assert scope.cancelled_caught
            assert len(pulled) == 50
            assert [x async for x in stage] == [-i for i in range(50, 100)]


class Abort(BaseException):
    """Not an answer of fn (as KeyboardInterrupt is not): the example must not be lost."""


@pytest.mark.both_backends
async def test_a_base_exception_in_the_consumers_call_keeps_the_example_for_the_worker() -> None:
    where = Where()
    aborted: list[int] = []
    consumer = me()

    def negate_aborting_once(x: int) -> int:
        where.note(x)
        # The tenth call the consumer makes itself (on a loaded machine the probe on
        # threads can take longer than a fixed number of examples).
        if not aborted and where.by(consumer).count(x) and len(where.by(consumer)) == 10:
            aborted.append(x)
            raise Abort
        return -x

    out: list[int] = []
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(negate_aborting_once, counter(300), 1)
            while not aborted:
                try:
                    out.append(await stage())
                except Abort:
                    break
            assert aborted
            stats = stage.statistics()
            # The example stays in the stage, to be called again: fetched, not taken.
            assert (stats.examples_fetched, stats.results_taken) == (len(out) + 1, len(out))
            out += [x async for x in stage]
            stats = stage.statistics()
    assert out == [-i for i in range(300)]
    (x,) = aborted
    calls = [task for y, task in where.log if y == x]
    assert len(calls) == 2  # called again, once
    assert calls[0] == consumer  # first by the consumer itself
    assert (stats.examples_fetched, stats.results_taken) == (300, 300)
