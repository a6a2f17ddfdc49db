"""Examples per second through ``shuffle_batch``: one example per call vs chunks of 128.

Feeds the same arrays (a float32 feature vector and an int64 label per example) through
``asyncreader.shuffle_batch`` twice — once with a source returning one example per call,
once with ``enqueue_many=True`` and a source returning 128 examples per call — and through
a plain numpy reference that concatenates the same chunks, permutes them and slices
batches. Prints examples/s and the ratio to the reference, all measured in this run.

    python benchmarks/batching.py [--examples 200000] [--features 32] [--backend asyncio]
                                  [--repeat 3]
"""

from __future__ import annotations

import argparse
import time
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable

CHUNK = 128
BATCH = 128


def make_data(n: int, features: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, features), dtype=np.float32), np.arange(n, dtype=np.int64)


def numpy_reference(x: np.ndarray, y: np.ndarray) -> int:
    """Concatenate the chunks, permute, and slice batches: the work without a pipeline."""
    xs = np.concatenate([x[i : i + CHUNK] for i in range(0, len(x), CHUNK)])
    ys = np.concatenate([y[i : i + CHUNK] for i in range(0, len(y), CHUNK)])
    perm = np.random.default_rng(1).permutation(len(xs))
    xs, ys = xs[perm], ys[perm]
    seen = 0
    for start in range(0, len(xs), BATCH):
        seen += len(ys[start : start + BATCH])
        _ = xs[start : start + BATCH]
    return seen


def single_source(x: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    position = 0

    async def next_example() -> tuple[np.ndarray, np.int64]:
        nonlocal position
        i = position
        if i >= len(y):
            raise ar.OutOfRangeError("end of data")
        position = i + 1
        return x[i], y[i]

    return next_example


def chunk_source(x: np.ndarray, y: np.ndarray) -> Callable[[], Any]:
    position = 0

    async def next_chunk() -> tuple[np.ndarray, np.ndarray]:
        nonlocal position
        i = position
        if i >= len(y):
            raise ar.OutOfRangeError("end of data")
        position = i + CHUNK
        return x[i : i + CHUNK], y[i : i + CHUNK]

    return next_chunk


async def through_shuffle_batch(source: Callable[[], Any], enqueue_many: bool) -> int:
    seen = 0
    async with ar.Coordinator():
        batcher = ar.shuffle_batch(
            source,
            BATCH,
            capacity=8192,
            min_after_dequeue=4096,
            seed=1,
            enqueue_many=enqueue_many,
            allow_smaller_final_batch=True,
        )
        async for _, labels in batcher:
            seen += len(labels)
    return seen


def timed(fn: Callable[[], int], repeat: int) -> tuple[float, int]:
    """Return the best time of ``repeat`` runs and the examples counted."""
    best, count = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        count = fn()
        best = min(best, time.perf_counter() - start)
    return best, count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=200_000)
    parser.add_argument("--features", type=int, default=32)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    x, y = make_data(args.examples, args.features)

    def run(source: Callable[[], Any], enqueue_many: bool) -> int:
        return anyio.run(through_shuffle_batch, source, enqueue_many, backend=args.backend)

    rows = [
        ("numpy concatenate + permute", timed(lambda: numpy_reference(x, y), args.repeat)),
        (
            "shuffle_batch, chunks of 128",
            timed(lambda: run(chunk_source(x, y), True), args.repeat),
        ),
        (
            "shuffle_batch, single examples",
            timed(lambda: run(single_source(x, y), False), args.repeat),
        ),
    ]
    reference = rows[0][1][1] / rows[0][1][0]
    print(
        f"{args.examples} examples x {args.features} float32 features + int64 label, "
        f"batch {BATCH}, backend {args.backend}, best of {args.repeat}"
    )
    print(f"{'method':<34}{'examples/s':>14}{'vs numpy':>12}")
    for name, (seconds, count) in rows:
        assert count == args.examples, (name, count)
        rate = count / seconds
        print(f"{name:<34}{rate:>14,.0f}{rate / reference:>11.3f}x")


if __name__ == "__main__":
    main()
