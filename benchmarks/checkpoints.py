"""Checkpoint size and time of a full shuffle buffer: record payloads vs references.

Writes TFRecord files, fills a ``shuffle_batch`` of ``(key, value)`` records (queue
``--capacity`` records, deterministic mode so it is full), then measures, once with the
records saved as payloads and once with ``record_refs=reader``:

* ``checkpoint``: ``await sess.checkpoint()`` (the pause, saving, encoding) and its size;
* ``restore``: from ``Session(restore=...)`` to the first batch of the rebuilt pipeline
  (decoding the checkpoint, and for references reading the records again).

The reference is reading the buffer's bytes from the same files with plain 4 MiB reads in
the same run (page cache warm), so figures compare across machines by ratio.

    python benchmarks/checkpoints.py [--record-bytes 1024] [--capacity 20000]
                                     [--files 8] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

import anyio

import asyncreader as ar

BATCH = 64


def write_files(directory: str, files: int, records: int, size: int) -> list[str]:
    paths = []
    payload = os.urandom(size)
    for f in range(files):
        paths.append(os.path.join(directory, f"part-{f:03d}.tfrecord"))
        with ar.TFRecordWriter(paths[-1]) as w:
            for i in range(records):
                w.write(i.to_bytes(8, "little") + payload[8:])
    return paths


def raw_read(paths: list[str], limit: int) -> float:
    """Seconds to read ``limit`` bytes of the files with plain 4 MiB reads."""
    start = time.perf_counter()
    left = limit
    for path in paths:
        with open(path, "rb") as f:
            while left > 0 and (block := f.read(4 << 20)):
                left -= len(block)
    return time.perf_counter() - start


async def pipeline(
    paths: list[str], capacity: int, refs: bool, restore: bytes | None
) -> tuple[bytes | None, float, float]:
    """Return (checkpoint, seconds to checkpoint, seconds from restore to first batch)."""
    start = time.perf_counter()
    state = None
    took = 0.0
    first_batch = 0.0
    async with ar.Session(restore=restore, deterministic=True) as sess:
        files = ar.string_input_producer(paths, num_epochs=1, seed=1)
        reader = ar.TFRecordReader()

        async def records() -> Any:
            return await reader.read_up_to(files, 256)

        batches = ar.shuffle_batch(
            records,
            BATCH,
            capacity=capacity,
            min_after_dequeue=capacity - BATCH,
            seed=2,
            enqueue_many=True,
            record_refs=reader if refs else None,
        )
        await batches.dequeue()
        first_batch = time.perf_counter() - start
        if restore is None:
            t0 = time.perf_counter()
            state = await sess.checkpoint()
            took = time.perf_counter() - t0
        sess.coord.request_stop()
    return state, took, first_batch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--capacity", type=int, default=20_000)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3, help="best of this many runs")
    args = parser.parse_args()
    per_file = 2 * args.capacity // args.files + BATCH
    with tempfile.TemporaryDirectory() as tmp:
        paths = write_files(tmp, args.files, per_file, args.record_bytes)
        buffer_bytes = args.capacity * args.record_bytes
        raw = min(raw_read(paths, buffer_bytes) for _ in range(args.repeat))
        print(
            f"buffer: {args.capacity} records of {args.record_bytes} B = "
            f"{buffer_bytes / 1e6:.1f} MB; raw read of those bytes {raw * 1e3:.1f} ms"
        )
        print()
        print("| records saved as | checkpoint size | checkpoint ms | restore to 1st batch ms |")
        print("|------------------|----------------:|--------------:|------------------------:|")
        for refs in (False, True):
            best: tuple[float, float] | None = None
            state = b""
            for _ in range(args.repeat):
                saved, took, _ = anyio.run(pipeline, paths, args.capacity, refs, None)
                assert saved is not None
                _, _, restored = anyio.run(pipeline, paths, args.capacity, refs, saved)
                if best is None or took + restored < sum(best):
                    best, state = (took, restored), saved
            assert best is not None
            label = "references" if refs else "payloads"
            print(
                f"| {label:<16} | {len(state) / 1e6:12.2f} MB | {best[0] * 1e3:13.1f} "
                f"| {best[1] * 1e3:23.1f} |"
            )


if __name__ == "__main__":
    main()
