"""Why the built-in readers read on anyio worker threads, not through aiofiles.

Run: ``python benchmarks/file_hops.py [--mb 256]``

Reads one file (page cache warm) to the end five ways on asyncio and reports MB/s and the
thread hops it took:

* ``reader``: ``TFRecordReader.read_batch(1024)`` over a TFRecord file of 100 KiB records
  (each batch of 100 MB held until the next, as a training loop holds it),
  the built-in path: one hop per 4 MiB block framed (several blocks per hop for large
  batches), records checked and framed too;
* ``aiofiles 4 MiB`` / ``aiofiles 64 KiB``: ``await f.read(n)`` through aiofiles until the
  end (no framing at all): one hop to asyncio's default thread pool per call;
* ``anyio.to_thread 64 KiB``: the same reads, each its own ``anyio.to_thread.run_sync`` hop;
* ``aiofiles 4 MiB + framing on the loop``: what a reader built on aiofiles would do: read
  4 MiB blocks with aiofiles and frame and checksum them (the same sans-I/O framer the
  built-in reader uses) on the event loop, which is then blocked while it does; the table
  reports the longest such block of the loop.

The built-in reader frames and checksums in the same worker-thread hop that reads, so its
event loop is never blocked for a block; aiofiles gives no speed of its own (its calls are
thread hops too) and does not run on trio.

aiofiles needs asyncio (it runs each call through ``loop.run_in_executor``); the built-in
readers run on trio too.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import aiofiles
import anyio

import asyncreader as ar
from asyncreader._records.tfrecord import frame_record


async def _reader(path: Path) -> int:
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    total = 0
    async with ar.TFRecordReader() as reader:
        while True:
            try:
                batch = await reader.read_batch(q, 1024)
            except ar.OutOfRangeError:
                return total
            total += int(batch.lengths.sum())


async def _aiofiles(path: Path, size: int) -> int:
    total = 0
    async with aiofiles.open(path, "rb") as f:
        while data := await f.read(size):
            total += len(data)
    return total


_STALL = [0.0]


async def _aiofiles_framed(path: Path) -> int:
    from asyncreader._records.tfrecord import TFRecordFramer

    framer = TFRecordFramer(work_item=str(path))
    total = 0
    async with aiofiles.open(path, "rb") as f:
        while data := await f.read(4 << 20):
            start = time.perf_counter()
            total += len(framer.decode_segments(data))
            _STALL[0] = max(_STALL[0], time.perf_counter() - start)
    framer.finish_segments()
    return total


async def _to_thread(path: Path, size: int) -> int:
    total = 0
    with open(path, "rb", buffering=0) as f:  # noqa: ASYNC230 - every read is a thread hop
        while data := await anyio.to_thread.run_sync(f.read, size):
            total += len(data)
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mb", type=int, default=256, help="file size in MB")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp, "data.tfrecord")
        record = b"".join(frame_record(bytes(100 * 1024)))
        path.write_bytes(record * (args.mb * 10))
        size = path.stat().st_size
        runs = {
            "reader read_batch(1024)": lambda: _reader(path),
            "aiofiles 4 MiB reads": lambda: _aiofiles(path, 4 << 20),
            "aiofiles 64 KiB reads": lambda: _aiofiles(path, 64 << 10),
            "anyio.to_thread 64 KiB reads": lambda: _to_thread(path, 64 << 10),
            "aiofiles 4 MiB reads + framing on the loop": lambda: _aiofiles_framed(path),
        }
        print(f"{size / 1e6:.0f} MB file, asyncio, best of 3")
        print("| method | MB/s | thread hops | ms per MB |")
        print("|---|---:|---:|---:|")
        for name, run in runs.items():
            best = float("inf")
            for _ in range(3):
                start = time.perf_counter()
                anyio.run(run, backend="asyncio")
                best = min(best, time.perf_counter() - start)
            if name.startswith("aiofiles 4 MiB"):
                hops = str(size // (4 << 20) + 1)
            elif "64 KiB" in name:
                hops = str(size // (64 << 10) + 1)
            else:
                hops = "1 per 32 MiB"
            per_mb = best * 1e3 / (size / 1e6)
            print(f"| {name} | {size / best / 1e6:,.0f} | {hops} | {per_mb:.2f} |")
        print(f"longest block of the event loop framing one 4 MiB block: {_STALL[0] * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
