"""ar.map speed: CSV read + decode against tf.data, and the stage's own overhead.

Run: ``python benchmarks/map.py [--scale 1.0] [--dir DIR] [--rounds 5]`` (with a Python
that has TensorFlow for the tf.data rows).

The script writes a CSV file of ``2,000,000 * scale`` lines (an int, two floats, an int),
reads it once to warm the page cache, then times, best of three wall-clock runs on asyncio:

* **CSV read + decode.** tf.data's ``TextLineDataset(path).batch(1024).map(decode_csv,
  num_parallel_calls=AUTOTUNE)`` (the reference), against ``ar.map(decode,
  lambda: reader.read_batch(files, 1024), num_parallel_calls=2)`` where ``decode`` is
  ``ar.decode_csv`` on the RecordBatch, taken with ``async for``; and, for comparison, the
  same decode done in the source itself (on the event loop, no map stage).
* **Overhead over batches.** The pipeline ``read_batch(1024)`` -> ``decode_csv`` ->
  ``async for`` with and without an ``ar.map(identity, ..., 1)`` stage between the two
  (``identity`` a plain function, which the stage finds cheap and calls inline on the
  event loop after its first few calls on threads; the source being an async callable,
  the consumer then pulls it and calls ``identity`` itself, with no hand-off through the
  stage's worker task); the same stage with ``inline=False``
  (a round trip to a worker thread per batch); and, as the floor such a round trip cannot
  go below, the same pipeline with one bare ``anyio.to_thread.run_sync(identity, batch)``
  in the source. These four run interleaved, ``--rounds`` times each (in a balanced order:
  each in each place and after each other equally often; a garbage collection before each
  run), and are compared by their medians: on a shared machine the load changes from one
  run to the next by more than the difference measured.
* **Per-example overhead.** 20,000 single examples (ints) through ``ar.map(identity, ...)``
  (plain function, ``num_parallel_calls`` 1 and 4; inline, and with ``inline=False`` on
  worker threads), against a loop of ``await anyio.to_thread.run_sync(identity, x)``, the
  least a thread hop per example costs; and a coroutine ``identity`` (no thread) against a
  loop that only awaits it.

``--breakdown`` runs only the overhead rows without and with the identity stage and prints,
per batch, what the wall time hides: the event loop's iterations, the results worker
threads hand back to it, the loop thread's CPU time, and the time of the consumer's takes
outside the source (the stage's own code as it runs in the pipeline, caches and all).
``--one-run`` runs one pipeline once, for an instruction count under callgrind;
``takes-none`` / ``takes-stage`` take from an in-memory source instead (one thread, so the
counts are exact).

Bars (the script exits 1 if one is missed): CSV through ``ar.map(..., 2)`` >= 1.5x tf.data
(tf.data's time over ours); the identity stage over 1024-example batches adds < 5% to
the pipeline without it.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    import numpy as np

DEFAULTS: list[list[Any]] = [[0], [0.0], [0.0], [0]]
BATCH = 1024


def csv_file(path: Path, lines: int) -> None:
    chunk = b"".join(b"%d,%d.25,%d.5,%d\n" % (i, i % 977, i % 13, i * 7) for i in range(100_000))
    with path.open("wb") as f:
        for _ in range(lines // 100_000):
            f.write(chunk)


def best_of(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def decode(records: ar.RecordBatch) -> list[np.ndarray]:
    return ar.decode_csv(records, DEFAULTS)


def identity(x: Any) -> Any:
    return x


async def _csv_map(path: Path, parallel: int, executor: Any) -> int:
    count = 0
    async with ar.Coordinator():
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        reader = ar.TextLineReader()
        stage = ar.map(decode, lambda: reader.read_batch(files, BATCH), parallel, executor=executor)
        count = sum([len(cols[0]) async for cols in stage])
    return count


async def _csv_inline(
    path: Path, with_identity_stage: bool, hop: bool = False, inline: Any = "auto"
) -> int:
    n = 0
    async with ar.Coordinator():
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        reader = ar.TextLineReader()

        async def decoded() -> list[np.ndarray]:
            return decode(await reader.read_batch(files, BATCH))

        async def hopped() -> list[np.ndarray]:
            return await anyio.to_thread.run_sync(identity, await decoded())

        source: Any = hopped if hop else decoded
        if with_identity_stage:
            source = ar.map(identity, decoded, 1, inline=inline)
        while True:
            try:
                cols = await source()
            except ar.OutOfRangeError:
                break
            n += len(cols[0])
    return n


def tf_csv_run(path: Path) -> Callable[[], int] | None:
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf
    except ImportError:
        return None
    defaults = [[0], [0.0], [0.0], [0]]

    def run() -> int:
        dataset = (
            tf.data.TextLineDataset(str(path))
            .batch(BATCH)
            .map(lambda x: tf.io.decode_csv(x, defaults), num_parallel_calls=tf.data.AUTOTUNE)
        )
        return sum(int(cols[0].shape[0]) for cols in dataset)

    return run


async def _numbers(n: int) -> AsyncIterator[int]:
    for i in range(n):
        yield i


async def _per_example_map(n: int, parallel: int, coroutine: bool, inline: Any = "auto") -> int:
    async def aidentity(x: int) -> int:
        return x

    fn: Any = aidentity if coroutine else identity
    count = 0
    async with ar.Coordinator():
        stage = ar.map(fn, _numbers(n), parallel, inline=inline)
        count = len([x async for x in stage])
    return count


async def _per_example_to_thread(n: int) -> int:
    out = [await anyio.to_thread.run_sync(identity, x) async for x in _numbers(n)]
    return len(out)


async def _per_example_await(n: int) -> int:
    async def aidentity(x: int) -> int:
        await anyio.lowlevel.checkpoint()  # what the stage's own take costs at the least
        return x

    out = [await aidentity(x) async for x in _numbers(n)]
    return len(out)


def _ratio(reference: float | None, seconds: float) -> str:
    return "-" if reference is None else f"{reference / seconds:.2f}x"


def _round_order(n: int, r: int) -> list[int]:
    """Round ``r``'s order of ``n`` runs: over ``n`` rounds (two for an odd ``n``) each run
    is in each place, and follows each other run, equally often (a Williams design). Merely
    reversing the order every round left some runs always after the same few others: of
    four, the stage after no stage or after the thread-hopping stage, no stage only after
    itself or the stage."""
    first = [0]
    for i in range(1, n):
        first.append((i + 1) // 2 if i % 2 else n - i // 2)
    order = [(x + r) % n for x in first]
    if n % 2 and (r // n) % 2:
        order.reverse()
    return order


def interleaved(runs: dict[str, Callable[[], int]], rounds: int, expected: int) -> dict[str, float]:
    """Median seconds of each run, the runs taking turns (in a balanced order, see
    ``_round_order``, a collection before each); each must count ``expected`` lines."""
    names = list(runs)
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in (names[i] for i in _round_order(len(names), r)):
            # Each run starts from the same garbage-collector state: the cycles a previous
            # run left (loops, tasks, stages) are not collected on another run's time.
            gc.collect()
            start = time.perf_counter()
            count = runs[name]()
            times[name].append(time.perf_counter() - start)
            assert count == expected, (name, count)
    return {name: statistics.median(seconds) for name, seconds in times.items()}


def run_all(tmp: Path, scale: float, rounds: int = 5) -> int:
    lines = max(100_000, int(2_000_000 * scale) // 100_000 * 100_000)
    path = tmp / "rows.csv"
    csv_file(path, lines)
    path.read_bytes()
    failures = 0
    rows: list[tuple[str, float]] = []

    def timed(what: str, run: Callable[[], int]) -> float:
        seconds, count = best_of(run)
        assert count == lines, (what, count)
        rows.append((what, seconds))
        return seconds

    print(f"CSV read + decode, {lines:,} lines, batches of {BATCH}")
    tf_run = tf_csv_run(path)
    tf_s = None if tf_run is None else timed("tf.data batch.map(AUTOTUNE)", tf_run)
    map2 = float("inf")
    for parallel, executor in ((1, "thread"), (2, "thread"), (2, "process")):
        seconds = timed(
            f"ar.map(decode, read_batch, {parallel}, {executor})",
            lambda p=parallel, e=executor: anyio.run(_csv_map, path, p, e),  # type: ignore[misc]
        )
        if parallel == 2:
            map2 = min(map2, seconds)
    medians = interleaved(
        {
            "decode in the source (no map)": lambda: anyio.run(_csv_inline, path, False),
            "same + ar.map(identity, 1)": lambda: anyio.run(_csv_inline, path, True),
            "same + ar.map(identity, 1, inline=False)": lambda: anyio.run(
                _csv_inline, path, True, False, False
            ),
            "same + to_thread hop (no map)": lambda: anyio.run(_csv_inline, path, False, True),
        },
        rounds,
        lines,
    )
    rows.extend((f"{what} (median)", seconds) for what, seconds in medians.items())
    inline, staged, threaded, hopped = medians.values()
    print(f"| {'pipeline':<47} | {'seconds':>8} | {'M lines/s':>9} | tf.data time / ours |")
    print(f"|{'-' * 49}|{'-' * 10}|{'-' * 11}|{'-' * 21}|")
    for what, seconds in rows:
        speed = lines / seconds / 1e6
        print(f"| {what:<47} | {seconds:8.3f} | {speed:9.2f} | {_ratio(tf_s, seconds):>19} |")
    if tf_s is not None:
        ok = tf_s / map2 >= 1.5
        failures += not ok
        print(f"bar: ar.map(..., 2) vs tf.data {tf_s / map2:.2f}x (>= 1.5): {_verdict(ok)}")
    else:
        print("TensorFlow not importable: no tf.data reference")
    overhead = staged / inline - 1
    ok = overhead < 0.05
    failures += not ok
    per_batch = (staged - inline) / (lines / BATCH) * 1e6
    print(
        f"bar: identity stage over {BATCH}-example batches adds {overhead:+.1%} "
        f"({per_batch:.1f} us per batch) (< 5%): {_verdict(ok)}"
    )
    for what, seconds in (
        ("the stage with inline=False", threaded),
        ("one bare to_thread hop per batch", hopped),
    ):
        us = (seconds - inline) / (lines / BATCH) * 1e6
        print(
            f"     for reference, {what} adds {seconds / inline - 1:+.1%} ({us:.1f} us per batch)"
        )

    n = 20_000
    print(f"\nPer-example overhead, {n:,} single examples, identity fn")

    def per_example(run: Callable[[], int]) -> float:
        return best_of(run)[0] / n * 1e6

    to_thread = per_example(lambda: anyio.run(_per_example_to_thread, n))
    awaited = per_example(lambda: anyio.run(_per_example_await, n))
    results = [
        ("plain fn", "await anyio.to_thread.run_sync (loop)", to_thread, to_thread),
        *(
            (
                "plain fn",
                f"ar.map(identity, src, {p})",
                per_example(lambda p=p: anyio.run(_per_example_map, n, p, False)),  # type: ignore[misc]
                to_thread,
            )
            for p in (1, 4)
        ),
        *(
            (
                "plain fn",
                f"ar.map(identity, src, {p}, inline=False)",
                per_example(lambda p=p: anyio.run(_per_example_map, n, p, False, False)),  # type: ignore[misc]
                to_thread,
            )
            for p in (1, 4)
        ),
        ("async fn", "await identity(x) (loop)", awaited, awaited),
        *(
            (
                "async fn",
                f"ar.map(aidentity, src, {p})",
                per_example(lambda p=p: anyio.run(_per_example_map, n, p, True)),  # type: ignore[misc]
                awaited,
            )
            for p in (1, 4)
        ),
    ]
    print(f"| {'fn':<8} | {'how':<46} | {'us/example':>10} | {'vs loop':>7} |")
    print(f"|{'-' * 10}|{'-' * 48}|{'-' * 12}|{'-' * 9}|")
    for kind, how, us, ref in results:
        print(f"| {kind:<8} | {how:<46} | {us:10.2f} | {us / ref:6.2f}x |")
    return failures


def one_run(what: str, scale: float, given: str | None) -> None:
    """One pipeline of the overhead rows, for ``valgrind --tool=callgrind``: instruction
    counts do not depend on the machine's load, and two scales give the cost per batch
    (the difference of the slopes) apart from the cost of starting up."""
    # Under callgrind every call runs some 50 times slower, so an identity call could
    # pass the inline threshold and send the stage back to threads: keep it inline.
    import asyncreader._pipeline.map as map_module

    map_module._INLINE_BELOW = 1.0  # type: ignore[misc]
    if what.startswith("takes-"):
        takes = int(200_000 * scale)
        assert anyio.run(_takes, takes, what == "takes-stage") == takes
        return
    lines = max(100_000, int(2_000_000 * scale) // 100_000 * 100_000)
    for tmp in _tmpdir(given):
        path = tmp / f"rows-{lines}.csv"
        if not path.exists():
            csv_file(path, lines)
        count = anyio.run(_csv_inline, path, what == "stage")
        assert count == lines, count


class _CountingLoop(asyncio.SelectorEventLoop):
    """An event loop that counts its iterations and the callbacks other threads hand it
    (a worker thread's result coming back is one)."""

    turns = 0
    handoffs = 0

    def _run_once(self) -> None:
        _CountingLoop.turns += 1
        super()._run_once()  # type: ignore[misc]

    def call_soon_threadsafe(
        self, callback: Callable[..., object], *args: object, context: Any = None
    ) -> asyncio.Handle:
        _CountingLoop.handoffs += 1
        return super().call_soon_threadsafe(callback, *args, context=context)


async def _csv_timed(path: Path, with_identity_stage: bool, spent: list[int]) -> int:
    """The overhead rows' pipeline, noting in ``spent`` the nanoseconds of the source's
    calls and of the consumer's takes (equal without a stage)."""
    n = 0
    clock = time.perf_counter_ns
    async with ar.Coordinator():
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        reader = ar.TextLineReader()

        async def decoded() -> list[np.ndarray]:
            start = clock()
            try:
                return decode(await reader.read_batch(files, BATCH))
            finally:
                spent[0] += clock() - start

        source: Any = ar.map(identity, decoded, 1) if with_identity_stage else decoded
        while True:
            start = clock()
            try:
                cols = await source()
            except ar.OutOfRangeError:
                break
            finally:
                spent[1] += clock() - start
            n += len(cols[0])
    return n


def breakdown(tmp: Path, scale: float, rounds: int) -> None:
    """Where the identity stage's time goes: per batch, without and with the stage, the
    event loop's iterations, the results worker threads hand back, the loop thread's CPU
    time, and the time of the consumer's takes outside the source (the stage's own code,
    as it runs in the pipeline); medians of ``rounds`` interleaved runs."""
    lines = max(100_000, int(2_000_000 * scale) // 100_000 * 100_000)
    path = tmp / "rows.csv"
    if not path.exists():
        csv_file(path, lines)
    path.read_bytes()
    batches = lines / BATCH
    rows: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
    for r in range(rounds):
        for staged in (False, True) if r % 2 == 0 else (True, False):
            gc.collect()
            _CountingLoop.turns = _CountingLoop.handoffs = 0
            spent = [0, 0]
            cpu, start = time.thread_time(), time.perf_counter()
            count = anyio.run(
                _csv_timed, path, staged, spent, backend_options={"loop_factory": _CountingLoop}
            )
            wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
            assert count == lines, count
            rows[staged].append(
                (
                    wall,
                    cpu,
                    _CountingLoop.turns / batches,
                    _CountingLoop.handoffs / batches,
                    (spent[1] - spent[0]) / batches / 1e3,
                )
            )
    print(f"{lines:,} lines, {batches:.0f} batches of {BATCH}, medians of {rounds} rounds")
    print(
        f"| {'pipeline':<26} | {'wall s':>6} | {'loop CPU s':>10} | {'loop turns':>10} "
        f"| {'hand-offs':>9} | {'take - source':>13} |"
    )
    print(f"|{'-' * 28}|{'-' * 8}|{'-' * 12}|{'-' * 12}|{'-' * 11}|{'-' * 15}|")
    for staged, what in ((False, "decode in the source"), (True, "same + ar.map(identity, 1)")):
        wall, cpu, turns, handoffs, own = (
            statistics.median(row[i] for row in rows[staged]) for i in range(5)
        )
        print(
            f"| {what:<26} | {wall:6.3f} | {cpu:10.3f} | {turns:10.3f} | {handoffs:9.3f} "
            f"| {own:10.1f} us |"
        )


async def _takes(n: int, with_identity_stage: bool) -> int:
    """``n`` takes of the same example from an in-memory async callable, with or without
    the identity stage: one thread, so an instruction count is exact, and its difference is
    what the stage's own code costs a take."""
    left = n
    example = [0]

    async def source() -> list[int]:
        nonlocal left
        if not left:
            raise ar.OutOfRangeError("end")
        left -= 1
        return example

    count = 0
    async with ar.Coordinator():
        take: Any = ar.map(identity, source, 1) if with_identity_stage else source
        while True:
            try:
                await take()
            except ar.OutOfRangeError:
                break
            count += 1
    return count


def _verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def _tmpdir(given: str | None) -> Iterator[Path]:
    if given:
        path = Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="asyncreader-bench-") as tmp:
        yield Path(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="data size factor")
    parser.add_argument("--dir", help="where to write the data (default: a temporary dir)")
    parser.add_argument(
        "--rounds", type=int, default=5, help="interleaved runs of the overhead rows (median)"
    )
    parser.add_argument(
        "--one-run",
        choices=["none", "stage", "takes-none", "takes-stage"],
        help="run one overhead pipeline (no stage, or the inline identity stage) once and "
        "exit, for an instruction count under callgrind; takes-*: 200,000 * scale takes "
        "from an in-memory source instead of the CSV pipeline (no threads: exact counts)",
    )
    parser.add_argument(
        "--breakdown",
        action="store_true",
        help="only the overhead rows without and with the identity stage: loop iterations, "
        "thread hand-offs, loop-thread CPU and the stage's own time per batch",
    )
    args = parser.parse_args()
    if args.breakdown:
        for tmp in _tmpdir(args.dir):
            breakdown(tmp, args.scale, args.rounds)
        return
    if args.one_run:
        one_run(args.one_run, args.scale, args.dir)
        return
    print(f"Python {sys.version.split()[0]}, asyncreader map, asyncio")
    failures = 0
    for tmp in _tmpdir(args.dir):
        failures = run_all(tmp, args.scale, args.rounds)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
