"""What watching a pipeline costs: records/s with and without a metrics scraper.

Runs the same pipeline (text files -> ``TextLineReader.read_up_to`` -> ``batch`` with
``enqueue_many=True`` -> a consumer) for a fixed number of records, alternately alone and
with a task that scrapes ``/metrics`` of :func:`asyncreader.metrics_app` every
``--interval`` seconds (0.1 s by default: 150 times Prometheus's default scrape interval,
so an upper bound). Prints, for each, records/s and the process's CPU time per million
records (the median of ``--repeat`` interleaved runs; CPU time is what other programs on a
shared machine disturb least), the overhead of each, and the cost of one scrape.

    python benchmarks/metrics_overhead.py [--records 400000] [--interval 0.1]
                                          [--repeat 5] [--backend asyncio]

``--one-run alone|watched --scrape-every-batches N`` runs the pipeline once, scraping
after every N batches instead of on a timer, for instruction counts that do not depend
on timing (``valgrind --tool=callgrind python benchmarks/metrics_overhead.py --one-run
...``): the difference between the two, over the scrapes taken, is one scrape's cost.

Queues also time their blocked waits (two clock reads per wait, never per element) whether
or not anything scrapes; ``benchmarks/queues.py``'s ``handoff`` case, where every
operation waits, shows that cost.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

import asyncreader as ar

FILES = 8
LINES_PER_FILE = 50_000
READ = 512
BATCH = 256


async def _get(app: Any, path: str) -> bytes:
    parts: list[bytes] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        if message["type"] == "http.response.body":
            parts.append(message["body"])

    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    await app(scope, receive, send)
    return b"".join(parts)


async def run_once(
    paths: list[str], records: int, interval: float | None, every_batches: int = 0
) -> tuple[float, float, int]:
    """Return (records/s, CPU seconds per million records, scrapes) for one run."""
    scrapes = 0
    async with ar.Session() as sess, anyio.create_task_group() as tg:
        files = ar.string_input_producer(paths, num_epochs=None, shuffle=False)
        reader = ar.TextLineReader()

        async def lines() -> Any:
            return await reader.read_batch(files, READ)

        batches = ar.batch(lines, batch_size=BATCH, capacity=4 * BATCH, enqueue_many=True)
        if interval is not None:
            app = ar.metrics_app(sess)

            async def scrape() -> None:
                nonlocal scrapes
                while True:
                    await anyio.sleep(interval)
                    await _get(app, "/metrics")
                    scrapes += 1

            tg.start_soon(scrape)
        start, cpu = time.perf_counter(), time.process_time()
        seen = taken = 0
        app_now = ar.metrics_app(sess) if every_batches else None
        while seen < records:
            _, values = await batches.dequeue()
            seen += len(values)
            taken += 1
            if app_now is not None and taken % every_batches == 0:
                await _get(app_now, "/metrics")
                scrapes += 1
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        tg.cancel_scope.cancel()
        sess.coord.request_stop()
    return seen / elapsed, cpu / seen * 1e6, scrapes


async def scrape_cost(paths: list[str], count: int = 200) -> float:
    """Microseconds per /metrics scrape of the running pipeline (5 stages)."""
    async with ar.Session() as sess:
        files = ar.string_input_producer(paths, num_epochs=None, shuffle=False)
        reader = ar.TextLineReader()

        async def lines() -> Any:
            return await reader.read_batch(files, READ)

        batches = ar.batch(lines, batch_size=BATCH, capacity=4 * BATCH, enqueue_many=True)
        await batches.dequeue()
        app = ar.metrics_app(sess)
        start = time.perf_counter()
        for _ in range(count):
            await _get(app, "/metrics")
        cost = (time.perf_counter() - start) / count * 1e6
        sess.coord.request_stop()
    return cost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    parser.add_argument("--one-run", choices=["alone", "watched"])
    parser.add_argument("--scrape-every-batches", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for i in range(FILES):
            path = Path(tmp, f"lines-{i}.txt")
            path.write_text("".join(f"record {i}-{j} of the file\n" for j in range(LINES_PER_FILE)))
            paths.append(str(path))
        if args.one_run:
            every = args.scrape_every_batches if args.one_run == "watched" else 0
            _, _, taken = anyio.run(
                run_once, paths, args.records, None, every, backend=args.backend
            )
            print(f"{args.one_run}: {args.records:,} records, {taken} scrapes")
            return
        runs: dict[str, list[tuple[float, float, int]]] = {"alone": [], "watched": []}
        for _ in range(args.repeat):  # interleaved, so drift in the machine hits both
            for name, interval in (("alone", None), ("watched", args.interval)):
                runs[name].append(
                    anyio.run(run_once, paths, args.records, interval, backend=args.backend)
                )
        cost = anyio.run(scrape_cost, paths, backend=args.backend)
    rate = {k: statistics.median(r[0] for r in v) for k, v in runs.items()}
    cpu = {k: statistics.median(r[1] for r in v) for k, v in runs.items()}
    scrapes = sum(r[2] for r in runs["watched"])
    print(f"backend {args.backend}, {args.records:,} records per run, {args.repeat} runs each")
    print(f"{'':24} {'records/s':>12} {'CPU s per 1M records':>22}")
    print(f"{'alone':24} {rate['alone']:12,.0f} {cpu['alone']:22.3f}")
    label = f"scraped every {args.interval:g} s"
    print(f"{label:24} {rate['watched']:12,.0f} {cpu['watched']:22.3f}  ({scrapes} scrapes)")
    print(
        f"overhead: {100 * (rate['alone'] - rate['watched']) / rate['alone']:+.2f} % records/s, "
        f"{100 * (cpu['watched'] - cpu['alone']) / cpu['alone']:+.2f} % CPU per record"
    )
    print(f"one /metrics scrape (5 stages): {cost:,.0f} us in the event loop")
    print(
        f"at Prometheus's default 15 s interval: {100 * cost / 15e6:.4f} % of the loop's time; "
        f"every {args.interval:g} s: {100 * cost / (args.interval * 1e6):.2f} %"
    )


if __name__ == "__main__":
    main()
