"""Queue throughput: asyncreader's queues next to asyncio.Queue and an anyio memory stream.

Run: ``python benchmarks/queues.py [--backend asyncio|trio] [--quick]``

Measured in one run, per element, best of several interleaved repeats:

* ``single``: ``await enqueue(x)`` then ``await dequeue()`` in one task (the non-blocking
  fast path a pipeline stage hits when the queue is neither full nor empty);
* ``chunk``: ``enqueue_many`` then ``dequeue_many`` of 1024 elements, cost per element;
* ``handoff``: a producer and a consumer task through a capacity-1 queue, so every
  operation blocks and wakes the other task (the slow path).

Bars checked at the end: the single round trip costs at most 2x asyncio.Queue's, and the
chunked per-element cost is at least 20x below the single-element cost.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import numpy as np

import asyncreader as ar

CHUNK = 1024


async def _time_per(count: int, body: Callable[[], Awaitable[None]]) -> float:
    start = time.perf_counter()
    await body()
    return (time.perf_counter() - start) / count * 1e9


# -- references --------------------------------------------------------------------------------


async def asyncio_single(n: int) -> float:
    q: asyncio.Queue[int] = asyncio.Queue()

    async def body() -> None:
        for i in range(n):
            await q.put(i)
            await q.get()

    return await _time_per(n, body)


async def asyncio_handoff(n: int) -> float:
    q: asyncio.Queue[int] = asyncio.Queue(maxsize=1)

    async def producer() -> None:
        for i in range(n):
            await q.put(i)

    async def body() -> None:
        task = asyncio.ensure_future(producer())
        for _ in range(n):
            await q.get()
        await task

    return await _time_per(n, body)


async def stream_single(n: int) -> float:
    send, receive = anyio.create_memory_object_stream[int](n + 1)

    async def body() -> None:
        for i in range(n):
            await send.send(i)
            await receive.receive()

    try:
        return await _time_per(n, body)
    finally:
        send.close()
        receive.close()


async def stream_handoff(n: int) -> float:
    send, receive = anyio.create_memory_object_stream[int](1)

    async def producer() -> None:
        for i in range(n):
            await send.send(i)

    async def body() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            for _ in range(n):
                await receive.receive()

    try:
        return await _time_per(n, body)
    finally:
        send.close()
        receive.close()


# -- asyncreader queues ------------------------------------------------------------------------

Factory = Callable[[int | None], Any]


def _configs() -> dict[str, tuple[Factory, Any, Any]]:
    """name -> (factory(capacity), one element, one chunk of CHUNK elements)."""
    vec = np.arange(4, dtype=np.float32)
    typed_one = (vec, 7)
    typed_chunk = (np.tile(vec, (CHUNK, 1)), np.arange(CHUNK, dtype=np.int64))
    typed: dict[str, Any] = {"dtypes": ["float32", "int64"], "shapes": [[4], []]}
    return {
        "FIFOQueue": (lambda cap: ar.FIFOQueue(cap), 1, list(range(CHUNK))),
        "FIFOQueue typed": (lambda cap: ar.FIFOQueue(cap, **typed), typed_one, typed_chunk),
        "RandomShuffleQueue": (
            lambda cap: ar.RandomShuffleQueue(cap, 0, seed=1),
            1,
            list(range(CHUNK)),
        ),
        "RandomShuffleQueue typed": (
            lambda cap: ar.RandomShuffleQueue(cap, 0, seed=1, **typed),
            typed_one,
            typed_chunk,
        ),
    }


async def queue_single(factory: Factory, element: Any, n: int) -> float:
    q = factory(None)

    async def body() -> None:
        for _ in range(n):
            await q.enqueue(element)
            await q.dequeue()

    return await _time_per(n, body)


async def queue_chunk(factory: Factory, chunk: Any, rounds: int) -> float:
    q = factory(2 * CHUNK)

    async def body() -> None:
        for _ in range(rounds):
            await q.enqueue_many(chunk)
            await q.dequeue_many(CHUNK)

    return await _time_per(rounds * CHUNK, body)


async def queue_handoff(factory: Factory, element: Any, n: int) -> float:
    q = factory(1)

    async def producer() -> None:
        for _ in range(n):
            await q.enqueue(element)

    async def body() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            for _ in range(n):
                await q.dequeue()

    return await _time_per(n, body)


async def main(backend: str, quick: bool) -> int:
    n = 20_000 if quick else 200_000
    handoff_n = n // 10
    rounds = max(2, n // CHUNK // 2)
    repeats = 3 if quick else 5
    cases: list[tuple[str, str, Callable[[], Awaitable[float]]]] = []
    if backend == "asyncio":
        cases.append(("asyncio.Queue", "single", lambda: asyncio_single(n)))
        cases.append(("asyncio.Queue", "handoff", lambda: asyncio_handoff(handoff_n)))
    cases.append(("anyio memory stream", "single", lambda: stream_single(n)))
    cases.append(("anyio memory stream", "handoff", lambda: stream_handoff(handoff_n)))
    for name, (factory, one, chunk) in _configs().items():
        cases += [
            (name, "single", functools.partial(queue_single, factory, one, n)),
            (name, "chunk", functools.partial(queue_chunk, factory, chunk, rounds)),
            (name, "handoff", functools.partial(queue_handoff, factory, one, handoff_n)),
        ]
    # Interleave the repeats so that a change in machine load hits every case alike;
    # keep each case's best.
    best = [float("inf")] * len(cases)
    for _ in range(repeats):
        for k, (_, _, fn) in enumerate(cases):
            best[k] = min(best[k], await fn())
    rows = [(name, op, ns) for (name, op, _), ns in zip(cases, best, strict=True)]
    table = {(name, op): ns for name, op, ns in rows}
    reference = "asyncio.Queue" if backend == "asyncio" else "anyio memory stream"
    ref_single = table[(reference, "single")]

    failures: list[str] = []
    for name in _configs():
        single, many = table[(name, "single")], table[(name, "chunk")]
        if not name.endswith("typed") and single > 2 * ref_single:
            failures.append(f"{name}: single {single:.0f} ns > 2x reference {ref_single:.0f} ns")
        if many * 20 > single:
            failures.append(f"{name}: chunk {many:.1f} ns/elem not 20x below single {single:.0f}")

    print(f"backend: {backend}, python {sys.version.split()[0]}, numpy {np.__version__}")
    print(f"{'queue':<26} {'operation':<9} {'ns/elem':>9} {'vs ' + reference + ' single':>32}")
    for name, op, ns in rows:
        print(f"{name:<26} {op:<9} {ns:>9.1f} {ns / ref_single:>31.2f}x")
    print()
    for name in _configs():
        single, many = table[(name, "single")], table[(name, "chunk")]
        print(f"{name:<26} chunk is {single / many:6.1f}x cheaper per element than single")
    if failures:
        print("\nBARS MISSED:\n  " + "\n  ".join(failures))
        return 1
    print("\nall bars met (single <= 2x reference for untyped queues; chunk >= 20x cheaper)")
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--quick", action="store_true", help="fewer iterations")
    args = parser.parse_args()
    sys.exit(anyio.run(main, args.backend, args.quick, backend=args.backend))
