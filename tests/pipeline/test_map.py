"""ar.map: order, back-pressure, errors, cancellation, checkpoints, executors, composition."""

from __future__ import annotations

import os
import random
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        await anyio.lowlevel.checkpoint()
        yield i


def counter(n: int) -> Callable[[], Any]:
    """An async callable returning 0 .. n-1, then raising OutOfRangeError."""
    state = {"next": 0}

    async def next_example() -> int:
        await anyio.lowlevel.checkpoint()
        i = state["next"]
        if i >= n:
            raise ar.OutOfRangeError("no more examples")
        state["next"] = i + 1
        return i

    return next_example


def jittery_square(x: int) -> int:
    """A plain fn whose calls finish out of order."""
    time.sleep(random.random() * 0.002)
    return x * x


def negate(x: int) -> int:
    """A module-level fn, so worker processes can unpickle it."""
    return -x


def pid_of(_: object) -> int:
    return os.getpid()


def sleep_for(seconds: float) -> None:
    time.sleep(seconds)


def parse_int(text: str) -> int:
    return int(text)


# -- order and executors -----------------------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("parallel", [1, 4])
async def test_ordered_results_keep_the_source_order(parallel: int) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(jittery_square, numbers(200), parallel)
            out = [x async for x in stage]
    assert out == [i * i for i in range(200)]


@pytest.mark.both_backends
async def test_a_coroutine_fn_is_awaited_with_calls_overlapping() -> None:
    running = 0
    peak = 0

    async def slow_double(x: int) -> int:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await anyio.sleep(0.005 * (x % 3))
        running -= 1
        return 2 * x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            out = [x async for x in ar.map(slow_double, counter(60), 3)]
    assert out == [2 * i for i in range(60)]
    assert peak == 3  # num_parallel_calls calls in flight, never more


@pytest.mark.both_backends
async def test_unordered_results_come_as_they_finish_and_none_is_lost() -> None:
    async def finish_later_for_small(x: int) -> int:
        await anyio.sleep(0.02 if x % 4 == 0 else 0)
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            out = [x async for x in ar.map(finish_later_for_small, numbers(40), 4, ordered=False)]
    assert sorted(out) == list(range(40))
    assert out != list(range(40))  # the slow ones were overtaken


@pytest.mark.both_backends
@pytest.mark.parametrize("inline", ["auto", False])
async def test_a_plain_fn_runs_on_worker_threads_not_on_the_loop(inline: Any) -> None:
    # With inline="auto" the first calls (the probe) run on threads all the same.
    loop_thread = threading.get_ident()
    count = 8 if inline else 200
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(lambda _: threading.get_ident(), numbers(count), 2, inline=inline)
            threads = [t async for t in stage]
    assert len(threads) == count
    assert loop_thread not in threads
    assert stage.statistics().calls_inline == 0


@pytest.mark.both_backends
async def test_the_process_executor_runs_fn_in_worker_processes_and_shuts_them_down() -> None:
    with anyio.fail_after(60):
        async with ar.Coordinator():
            stage = ar.map(negate, numbers(50), 2, executor="process")
            assert [x async for x in stage] == [-i for i in range(50)]
            pids = set()
            stage = ar.map(pid_of, numbers(20), 2, executor="process")
            pids = {p async for p in stage}
            assert os.getpid() not in pids
        await _wait_gone(pids)


async def _wait_gone(pids: set[int]) -> None:
    """Wait until no process in ``pids`` is alive (they are shut down, not leaked)."""
    with anyio.fail_after(10):
        while True:
            alive = set()
            for pid in pids:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    continue
                alive.add(pid)
            if not alive:
                return
            await anyio.sleep(0.02)


def test_bad_arguments_raise_invalid_argument() -> None:
    async def main() -> None:
        async with ar.Coordinator():

            async def gen() -> AsyncIterator[int]:
                yield 1

            async def coro_fn(x: int) -> int:
                return x

            with pytest.raises(ar.InvalidArgumentError, match="num_parallel_calls"):
                ar.map(negate, counter(1), 0)
            with pytest.raises(ar.InvalidArgumentError, match="num_parallel_calls"):
                ar.map(negate, counter(1), True)
            with pytest.raises(ar.InvalidArgumentError, match="executor"):
                ar.map(negate, counter(1), executor="fork")  # type: ignore[call-overload]
            with pytest.raises(ar.InvalidArgumentError, match="callable fn"):
                ar.map(3, counter(1))  # type: ignore[call-overload]
            with pytest.raises(ar.InvalidArgumentError, match="async generator function"):
                ar.map(negate, gen)
            with pytest.raises(ar.InvalidArgumentError, match="async callable or an async"):
                ar.map(negate, [1, 2])
            with pytest.raises(ar.InvalidArgumentError, match="plain function"):
                ar.map(coro_fn, counter(1), executor="process")
            with pytest.raises(ar.InvalidArgumentError, match="does not pickle"):
                ar.map(lambda x: x, counter(1), executor="process")
            with pytest.raises(ar.InvalidArgumentError, match="on_error"):
                ar.map(negate, counter(1), on_error="ignore")  # type: ignore[call-overload]
            for inline in ("always", True, 0, None):
                with pytest.raises(ar.InvalidArgumentError, match="inline must be"):
                    ar.map(negate, counter(1), inline=inline)  # type: ignore[call-overload]

    anyio.run(main)
    with pytest.raises(ar.FailedPreconditionError, match="Coordinator"):
        anyio.run(lambda: _map_outside())


async def _map_outside() -> None:
    ar.map(negate, counter(1))


# -- inline calls --------------------------------------------------------------------------


def spin(seconds: float) -> None:
    """Run long without a blocking call (a sleep on the loop would trip blockbuster)."""
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def where_called(loop_thread: int, log: list[tuple[int, bool]]) -> Callable[[int], int]:
    """A cheap fn noting, per example, whether it ran on the event loop's thread."""

    def fn(x: int) -> int:
        log.append((x, threading.get_ident() == loop_thread))
        return -x

    return fn


@pytest.mark.both_backends
@pytest.mark.parametrize("parallel", [1, 4])
async def test_a_cheap_fn_runs_on_the_loop_after_the_probe(parallel: int) -> None:
    log: list[tuple[int, bool]] = []
    fn = where_called(threading.get_ident(), log)
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(fn, numbers(200), parallel)
            out = [x async for x in stage]
            stats = stage.statistics()
    assert out == [-i for i in range(200)]
    assert sorted(x for x, _ in log) == list(range(200))  # each example called once
    on_loop = [x for x, inline in log if inline]
    # The probe: the first calls run on threads; then (barring noise) the rest inline.
    assert not [x for x in on_loop if x < 8]
    assert len(on_loop) > 100
    assert stats.calls_inline == len(on_loop)
    assert stats.executor == "thread"


@pytest.mark.both_backends
async def test_a_fn_that_turns_slow_goes_back_to_worker_threads() -> None:
    log: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()

    def slow_from_60(x: int) -> int:
        log.append((x, threading.get_ident() == loop_thread))
        if x >= 60:
            spin(0.002)
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            out = [x async for x in ar.map(slow_from_60, numbers(100), 2)]
    assert out == list(range(100))
    assert any(inline for x, inline in log if x < 60)
    # The first slow call may have run inline, held the loop up once; no other did.
    assert sum(inline for x, inline in log if x >= 60) <= 1
    assert not any(inline for x, inline in log if x >= 62)


@pytest.mark.both_backends
async def test_a_fn_that_blocks_now_and_then_holds_the_loop_up_once_per_window() -> None:
    # Every tenth call blocks: after the first inline call that blocked, the stage needs 16
    # cheap calls in a row before it tries the loop again, which this fn never gives.
    log: list[tuple[int, bool]] = []
    loop_thread = threading.get_ident()

    def blocks_every_tenth(x: int) -> int:
        log.append((x, threading.get_ident() == loop_thread))
        if x % 10 == 9:
            spin(0.002)
        return x

    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(blocks_every_tenth, numbers(300), 1)
            out = [x async for x in stage]
            stats = stage.statistics()
    assert out == list(range(300))
    blocked_on_loop = [x for x, inline in log if inline and x % 10 == 9]
    assert len(blocked_on_loop) == 1
    assert 1 <= stats.calls_inline <= 2


@pytest.mark.both_backends
async def test_inline_false_keeps_every_call_on_worker_threads() -> None:
    log: list[tuple[int, bool]] = []
    fn = where_called(threading.get_ident(), log)
    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(fn, numbers(100), 1, inline=False)
            assert [x async for x in stage] == [-i for i in range(100)]
    assert not any(inline for _, inline in log)
    assert stage.statistics().calls_inline == 0


@pytest.mark.both_backends
async def test_inline_calls_keep_the_error_policy_and_dead_letters() -> None:
    def fail_on_multiples_of_50(x: int) -> int:
        if x % 50 == 49:
            raise ZeroDivisionError(f"boom {x}")
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(fail_on_multiples_of_50, numbers(150), 2, on_error="skip")
            out = [x async for x in stage]
            stats = stage.statistics()
            # The default policy raises in order, naming the example, and goes on.
            raising = ar.map(fail_on_multiples_of_50, numbers(60), 2)
            assert [await raising() for _ in range(49)] == list(range(49))
            with pytest.raises(ar.InvalidArgumentError, match="example 49: ZeroDivisionError"):
                await raising()
            assert await raising() == 50
            assert raising.statistics().calls_inline > 0
            await raising.aclose()
    assert out == [x for x in range(150) if x % 50 != 49]
    assert [d.index for d in stage.dead_letters] == [49, 99, 149]
    assert stats.calls_inline > 0
    assert stats.errors_skipped == 3


@pytest.mark.both_backends
@pytest.mark.parametrize("parallel", [1, 3])
async def test_a_checkpoint_mid_stream_of_inline_calls_restores_exactly(parallel: int) -> None:
    # parallel=1: the consumer calls fn itself (test_map_direct.py); 3: the workers do.
    with anyio.fail_after(20):
        async with ar.Session(deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 120), parallel)
            head = [await stage() for _ in range(50)]
            assert stage.statistics().calls_inline > (20 if parallel == 1 else 0)
            checkpoint = await sess.checkpoint()
            rest = [x async for x in stage]
        assert head + rest == [-i for i in range(120)]
        async with ar.Session(restore=checkpoint, deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 120), parallel)
            assert [x async for x in stage] == rest


@pytest.mark.both_backends
async def test_cancelled_takes_of_inline_calls_lose_and_duplicate_nothing() -> None:
    rng = random.Random(7)
    out: list[int] = []
    cancelled = 0
    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(negate, numbers(400), 4)
            while True:
                with anyio.move_on_after(rng.random() * 0.0005) as scope:
                    try:
                        out.append(await stage())
                    except ar.OutOfRangeError:
                        break
                cancelled += scope.cancelled_caught
            assert stage.statistics().calls_inline > 0
    assert out == [-i for i in range(400)]


@pytest.mark.both_backends
async def test_a_stop_while_calls_run_inline_ends_the_stage_promptly() -> None:
    async def endless() -> AsyncIterator[int]:
        i = 0
        while True:
            await anyio.lowlevel.checkpoint()
            yield i
            i += 1

    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            stage = ar.map(negate, endless(), 2)
            assert [await stage() for _ in range(100)] == [-i for i in range(100)]
            assert stage.statistics().calls_inline > 0
            coord.request_stop()
            leftover = 0
            while True:
                try:
                    await stage()
                except ar.OutOfRangeError:
                    break
                leftover += 1
            assert leftover <= 2  # results made before the stop, at most one per slot


# -- back-pressure and statistics --------------------------------------------------------


@pytest.mark.both_backends
async def test_at_most_num_parallel_calls_results_wait_unconsumed() -> None:
    fetched = 0

    async def source() -> int:
        nonlocal fetched
        await anyio.lowlevel.checkpoint()
        fetched += 1
        return fetched

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            stage = ar.map(negate, source, 3)
            assert await stage() == -1
            await anyio.sleep(0.05)  # let the workers run as far as they may
            stats = stage.statistics()
            assert stats.results_waiting == 3
            assert stats.calls_in_flight == 0
            assert stats.workers_waiting == 3
            assert fetched == 4  # 1 taken + 3 waiting
            assert stage._stage_statistics().state == "full"
            coord.request_stop()


@pytest.mark.both_backends
async def test_stage_statistics_list_the_map_stage() -> None:
    release = anyio.Event()

    async def blocked(x: int) -> int:
        await release.wait()
        return x

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            stage = ar.map(blocked, counter(10), 2, name="decode")
            await anyio.sleep(0.02)
            (record,) = [s for s in sess.stage_statistics() if s.kind == "map"]
            assert record.name == "decode"
            assert record.state == "running"
            assert record.tasks_busy == 2
            assert record.statistics.calls_in_flight == 2
            release.set()
            assert [x async for x in stage] == list(range(10))
            (record,) = [s for s in sess.stage_statistics() if s.kind == "map"]
            assert record.state == "closed"
            assert record.statistics.results_taken == 10
            assert "decode" in repr(stage)


# -- errors --------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_an_fn_error_is_raised_in_order_naming_the_example_and_then_it_goes_on() -> None:
    def fail_on_3(x: int) -> int:
        if x == 3:
            raise ZeroDivisionError("boom")
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(fail_on_3, numbers(6), 3)
            got = [await stage() for _ in range(3)]
            with pytest.raises(
                ar.InvalidArgumentError, match="example 3: ZeroDivisionError: boom"
            ) as info:
                await stage()
            assert isinstance(info.value.__cause__, ZeroDivisionError)
            got += [x async for x in stage]
    assert got == [0, 1, 2, 4, 5]


@pytest.mark.both_backends
async def test_an_fn_error_names_the_work_item_and_record_of_a_reader_key() -> None:
    def decode(example: tuple[bytes, bytes]) -> int:
        return int(example[1])

    async def records() -> AsyncIterator[tuple[bytes, bytes]]:
        for i, value in enumerate([b"1", b"x", b"3"]):
            await anyio.lowlevel.checkpoint()
            yield b"data.txt:%d" % (i + 1), value

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(decode, records(), 2)
            assert await stage() == 1
            with pytest.raises(ar.InvalidArgumentError) as info:
                await stage()
    assert info.value.work_item == b"data.txt"
    assert info.value.record == b"data.txt:2"
    assert "'data.txt'" in str(info.value)


@pytest.mark.both_backends
async def test_an_end_of_input_error_from_fn_does_not_end_the_stream() -> None:
    def out_of_range(x: int) -> int:
        if x == 1:
            raise ar.OutOfRangeError("not the end")
        return x

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(out_of_range, numbers(3), 2)
            assert await stage() == 0
            with pytest.raises(ar.InvalidArgumentError, match="OutOfRangeError"):
                await stage()
            assert await stage() == 2


@pytest.mark.both_backends
async def test_a_library_error_from_fn_keeps_its_class() -> None:
    def lossy(x: tuple[bytes, int]) -> int:
        raise ar.DataLossError("truncated")

    async def keyed() -> AsyncIterator[tuple[bytes, int]]:
        yield b"f.rec:7", 1

    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(ar.DataLossError, match="truncated") as info:
                await ar.map(lossy, keyed())()
    assert info.value.work_item == b"f.rec"


@pytest.mark.both_backends
async def test_the_skip_policy_drops_failed_examples_into_dead_letters() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            texts = iter(["1", "x", "3", "", "5"])

            async def source() -> str:
                await anyio.lowlevel.checkpoint()
                try:
                    return next(texts)
                except StopIteration:
                    raise ar.OutOfRangeError("end") from None

            stage = ar.map(parse_int, source, 2, on_error="skip")
            out = [x async for x in stage]
    assert out == [1, 3, 5]
    letters = stage.dead_letters
    assert [d.index for d in letters] == [1, 3]
    assert all(isinstance(d.error, ar.InvalidArgumentError) for d in letters)
    assert letters[0].work_item == b""
    assert letters[0].record is None
    assert stage.statistics().errors_skipped == 2


@pytest.mark.both_backends
async def test_the_skip_policy_raises_past_its_limit() -> None:
    policy = ar.ErrorPolicy(skip=True, max_errors=1)
    stages: list[ar.MapStage[int]] = []

    def make() -> ar.MapStage[int]:
        stages.append(ar.map(parse_int, _strings(["a", "2", "b", "4"]), 1, on_error=policy))
        return stages[0]

    with pytest.raises(ar.InvalidArgumentError, match="more than 1") as info:
        await _drain(make)
    assert "'b'" in str(info.value)
    assert len(stages[0].dead_letters) == 2


async def _drain(make: Callable[[], Any]) -> list[Any]:
    """Iterate what ``make()`` builds in a fresh Coordinator; an error leaves the block."""
    out: list[Any] = []
    with anyio.fail_after(10):
        async with ar.Coordinator():
            out.extend([x async for x in make()])
    return out


async def _strings(items: list[str]) -> AsyncIterator[str]:
    for item in items:
        await anyio.lowlevel.checkpoint()
        yield item


@pytest.mark.both_backends
async def test_a_source_error_comes_after_the_results_before_it_and_stays() -> None:
    async def broken() -> AsyncIterator[int]:
        yield 1
        yield 2
        raise ar.DataLossError("bad file", work_item="f")

    with anyio.fail_after(10):
        async with ar.Coordinator():
            stage = ar.map(negate, broken(), 3)
            assert [await stage(), await stage()] == [-1, -2]
            for _ in range(2):
                with pytest.raises(ar.DataLossError, match="bad file"):
                    await stage()


@pytest.mark.both_backends
async def test_an_fn_error_in_a_batch_pipeline_stops_the_coordinator() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="example 1"):
        await _drain(lambda: ar.batch(ar.map(parse_int, _strings(["1", "x", "3"]), 2), 2))


# -- cancellation --------------------------------------------------------------------------


@pytest.mark.both_backends
@pytest.mark.parametrize("ordered", [True, False])
async def test_cancelling_takes_at_random_points_loses_and_duplicates_nothing(
    ordered: bool,
) -> None:
    rng = random.Random(4)

    async def jitter(x: int) -> int:
        await anyio.sleep(rng.random() * 0.002)
        return x

    out: list[int] = []
    cancelled = 0
    with anyio.fail_after(20):
        async with ar.Coordinator():
            stage = ar.map(jitter, numbers(300), 4, ordered=ordered)
            while True:
                with anyio.move_on_after(rng.random() * 0.002) as scope:
                    try:
                        out.append(await stage())
                    except ar.OutOfRangeError:
                        break
                cancelled += scope.cancelled_caught
    assert cancelled > 10
    assert (out if ordered else sorted(out)) == list(range(300))


@pytest.mark.both_backends
async def test_a_stop_does_not_wait_for_a_slow_thread_fn() -> None:
    started = threading.Event()

    def slow(x: int) -> int:
        started.set()
        time.sleep(2)
        return x

    begin = time.monotonic()
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            stage = ar.map(slow, numbers(10), 2)
            await anyio.to_thread.run_sync(started.wait)
            coord.request_stop()
            with pytest.raises(ar.OutOfRangeError, match="stopped"):
                await stage()
    assert time.monotonic() - begin < 1.5


@pytest.mark.both_backends
async def test_a_stop_terminates_worker_processes_in_a_slow_call() -> None:
    pids: set[int] = set()
    with anyio.fail_after(30):
        async with ar.Coordinator():
            stage = ar.map(pid_of, numbers(2), 2, executor="process")
            pids = {p async for p in stage}
        # time.sleep in a worker process: a stop must not wait the minute out.
        begin = time.monotonic()
        async with ar.Coordinator() as coord:
            slow = ar.map(sleep_for, _floats([60.0, 60.0]), 2, executor="process")
            await anyio.sleep(0.5)
            assert slow._pool is not None
            workers = set(slow._pool.pids())
            coord.request_stop()
        assert time.monotonic() - begin < 10
    await _wait_gone(pids | workers)


async def _floats(items: list[float]) -> AsyncIterator[float]:
    for item in items:
        yield item


@pytest.mark.both_backends
async def test_aclose_stops_the_stage_and_later_takes_end() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            async with ar.map(negate, counter(10**9), 2) as stage:
                assert await stage() == 0
            assert stage.statistics().closed
            with pytest.raises(ar.OutOfRangeError, match="closed"):
                await stage()
            await stage.aclose()  # idempotent


# -- composition ---------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_map_feeds_batch_shuffle_batch_and_batch_join() -> None:
    def pair(x: int) -> tuple[int, np.ndarray]:
        return x, np.full(2, x, dtype=np.int64)

    with anyio.fail_after(20):
        async with ar.Coordinator():
            b = ar.batch(ar.map(pair, numbers(20), 3), 5)
            ids = [list(i) async for i, _ in b]
            assert ids == [list(range(s, s + 5)) for s in range(0, 20, 5)]

        async with ar.Coordinator():
            s = ar.shuffle_batch(
                ar.map(pair, numbers(40), 2), 8, capacity=20, min_after_dequeue=5, seed=1
            )
            seen = [int(i) async for ids_, _ in s for i in ids_]
            assert sorted(seen) == list(range(40))

        async with ar.Coordinator():
            j = ar.batch_join(
                [ar.map(pair, numbers(10), 2), ar.map(pair, _offset(numbers(10), 100), 2)],
                4,
                allow_smaller_final_batch=True,
            )
            joined = [int(i) async for ids_, _ in j for i in ids_]
            assert sorted(joined) == [*range(10), *range(100, 110)]


async def _offset(source: AsyncIterator[int], k: int) -> AsyncIterator[int]:
    async for x in source:
        yield x + k


@pytest.mark.both_backends
async def test_map_over_read_batch_decodes_record_batches(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("".join(f"{i},{i * 0.5}\n" for i in range(1000)))

    def decode(records: ar.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
        a, b = ar.decode_csv(records, [[0], [0.0]])
        return a, b

    with anyio.fail_after(20):
        async with ar.Coordinator():
            files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
            reader = ar.TextLineReader()
            stage = ar.map(decode, lambda: reader.read_batch(files, 128), 2)
            batches = ar.batch(stage, 256, enqueue_many=True, allow_smaller_final_batch=True)
            ids = np.concatenate([a async for a, _ in batches])
    assert ids.tolist() == list(range(1000))


# -- checkpoints -------------------------------------------------------------------------


def _write_lines(tmp_path: Path, files: int, lines: int) -> list[str]:
    paths = []
    for f in range(files):
        path = tmp_path / f"part-{f}.txt"
        path.write_text("".join(f"{f * 1000 + i}\n" for i in range(lines)))
        paths.append(str(path))
    return paths


def _slow_parse(example: tuple[bytes, bytes]) -> tuple[bytes, int]:
    # Slow on some records, so that calls are in flight when a checkpoint is taken.
    value = int(example[1])
    if value % 5 == 0:
        time.sleep(0.01)
    return example[0], value


async def _pipeline(
    paths: list[str], *, restore: bytes | None, take: int | None, parallel: int
) -> tuple[list[int], bytes | None, int]:
    """Batches of ids; after ``take`` batches, a checkpoint (and the calls then in flight)."""
    ids: list[int] = []
    checkpoint = None
    in_flight = 0
    with anyio.fail_after(30):
        async with ar.Session(restore=restore, deterministic=True) as sess:
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.TextLineReader()
            stage = ar.map(_slow_parse, lambda: reader.read(files), parallel)
            batches = ar.batch(stage, 7, allow_smaller_final_batch=True)
            n = 0
            async for _, values in batches:
                ids.extend(int(v) for v in values)
                n += 1
                if n == take:
                    in_flight = stage.statistics().calls_in_flight
                    checkpoint = await sess.checkpoint()
                    break
    return ids, checkpoint, in_flight


@pytest.mark.both_backends
@pytest.mark.parametrize("take", [1, 3, 6])
async def test_a_restored_checkpoint_continues_exactly(tmp_path: Path, take: int) -> None:
    paths = _write_lines(tmp_path, 3, 20)
    everything, _, _ = await _pipeline(paths, restore=None, take=None, parallel=4)
    assert (
        sorted(everything)
        == everything
        == sorted(f * 1000 + i for f in range(3) for i in range(20))
    )
    head, checkpoint, _ = await _pipeline(paths, restore=None, take=take, parallel=4)
    assert checkpoint is not None
    tail, _, _ = await _pipeline(paths, restore=checkpoint, take=None, parallel=4)
    assert head + tail == everything


async def test_a_checkpoint_saves_calls_in_flight_and_a_restore_runs_them_again() -> None:
    release = threading.Event()
    calls: list[int] = []

    def held(x: int) -> int:
        calls.append(x)
        if x >= 2:
            release.wait(5)
        return x * 10

    def tracked_counter(sess: ar.Session, n: int) -> Callable[[], Any]:
        """A counter whose position the session saves (as a reader's would be)."""
        state = {"next": 0}
        sess.track_state("counter", lambda: state["next"], lambda v: state.update(next=v))

        async def next_example() -> int:
            await anyio.lowlevel.checkpoint()
            if state["next"] >= n:
                raise ar.OutOfRangeError("no more examples")
            state["next"] += 1
            return state["next"] - 1

        return next_example

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            stage = ar.map(held, tracked_counter(sess, 6), 3)
            assert await stage() == 0
            await anyio.sleep(0.05)
            stats = stage.statistics()
            assert (stats.results_waiting, stats.calls_in_flight) == (1, 2)
            # Not waiting for the calls in flight: they are saved as their examples.
            with anyio.fail_after(2):
                checkpoint = await sess.checkpoint()
            release.set()
            rest = [x async for x in stage]
    assert rest == [10, 20, 30, 40, 50]

    calls.clear()
    with anyio.fail_after(10):
        async with ar.Session(restore=checkpoint) as sess:
            stage = ar.map(held, tracked_counter(sess, 6), 3)
            restored = [x async for x in stage]
    assert restored == rest
    # 1 was saved as its result (not called again); 2 and 3 were in flight and run again.
    assert sorted(calls) == [2, 3, 4, 5]


async def test_a_checkpoint_of_another_stage_is_refused() -> None:
    async with ar.Session() as sess:
        stage = ar.map(negate, counter(3), name="a")
        await stage()
        checkpoint = await sess.checkpoint()
        await stage.aclose()
    with pytest.raises(ar.InvalidArgumentError, match="does not fit"):
        async with ar.Session(restore=checkpoint):
            ar.map(negate, counter(3), name="b")


async def test_unordered_is_refused_in_a_deterministic_session() -> None:
    async with ar.Session(deterministic=True):
        with pytest.raises(ar.InvalidArgumentError, match="ordered=True"):
            ar.map(negate, counter(3), 2, ordered=False)


@pytest.mark.both_backends
async def test_a_checkpoint_settles_while_the_source_waits_for_work() -> None:
    # One worker is blocked in the reader's wait for a work item, the others wait their
    # turn to fetch: none of them holds anything, so the checkpoint need not wait.
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            work = ar.FIFOQueue(4)
            reader = ar.WholeFileReader()
            stage = ar.map(negate, lambda: reader.read(work), 3)
            await anyio.sleep(0.05)
            checkpoint = await sess.checkpoint(timeout=2)
            await stage.aclose()
    assert checkpoint


def _tracked_numbers(sess: ar.Session, n: int) -> Callable[[], Any]:
    state = {"next": 0}
    sess.track_state("numbers", lambda: state["next"], lambda v: state.update(next=v))

    async def next_example() -> int:
        await anyio.lowlevel.checkpoint()
        if state["next"] >= n:
            raise ar.OutOfRangeError("no more examples")
        state["next"] += 1
        return state["next"] - 1

    return next_example


@pytest.mark.both_backends
@pytest.mark.parametrize("executor", ["thread", "process"])
async def test_a_restore_continues_exactly_with_either_executor(executor: Any) -> None:
    with anyio.fail_after(60):
        async with ar.Session(deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 30), 3, executor=executor)
            head = [await stage() for _ in range(7)]
            checkpoint = await sess.checkpoint()
            rest = [x async for x in stage]
        assert head + rest == [-i for i in range(30)]
        async with ar.Session(restore=checkpoint, deterministic=True) as sess:
            stage = ar.map(negate, _tracked_numbers(sess, 30), 3, executor=executor)
            assert [x async for x in stage] == rest


@pytest.mark.both_backends
async def test_an_fn_error_in_a_worker_process_is_raised_in_order() -> None:
    with anyio.fail_after(60):
        async with ar.Coordinator():
            stage = ar.map(parse_int, _strings(["1", "x", "3"]), 2, executor="process")
            assert await stage() == 1
            with pytest.raises(ar.InvalidArgumentError, match="example 1: ValueError") as info:
                await stage()
            assert isinstance(info.value.__cause__, ValueError)
            assert await stage() == 3
