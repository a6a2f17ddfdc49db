"""Soak: stream a multi-GB dataset through the full pipeline and watch memory over time.

Run: ``python benchmarks/soak.py [--minutes 3] [--gb 2] [--readers 4] [--dir DIR]``
(``--minutes 30`` is the stress setting).

The script writes ``--gb`` of TFRecord files (CIFAR-sized records: a label byte and a
32x32x3 image, 3,073 bytes), then runs, for ``--minutes`` of wall time::

    string_input_producer(files, num_epochs=None)       # endless epochs, reshuffled
      -> shuffle_batch_join of --readers TFRecordReaders  # read_up_to chunks
      -> decode_raw + random flip                         # vectorised per chunk
      -> RandomShuffleQueue -> dequeue_many(128)
      -> an async consumer

and samples this process's resident set size (RSS) every second. After a warm-up (the
first fifth of the run, at least 10 s) the RSS must stay within 5% of its median: memory is
bounded by the queue capacities, not by how much data has gone through. The table reports
RSS over time, throughput, and the bound that the queue capacities imply.

Exit status 1 when the RSS is not flat, so the script can gate a stress run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio
import numpy as np

import asyncreader as ar
from asyncreader._io.filesystem import READ_BLOCK

RECORD_BYTES = 3073
IMAGE_SHAPE = (32, 32, 3)
BATCH = 128
CHUNK = 512
FILE_BYTES = 256 << 20


def write_dataset(folder: Path, total_bytes: int, seed: int = 0) -> list[str]:
    """Write TFRecord files of random CIFAR-sized records until ``total_bytes`` are on disk."""
    rng = np.random.default_rng(seed)
    # One block of distinct records, reused with a varying label: writing stays fast
    # while every record's payload (and so its CRC) still differs.
    block = rng.integers(0, 256, size=(1024, RECORD_BYTES), dtype=np.uint8)
    per_file = max(1, FILE_BYTES // (RECORD_BYTES + 16))
    files: list[str] = []
    written = 0
    while written < total_bytes:
        path = folder / f"soak-{len(files):04d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for i in range(per_file):
                row = block[i % len(block)]
                row[0] = (i + len(files)) % 10
                writer.write(row.tobytes())
        written += path.stat().st_size
        files.append(str(path))
    return files


def rss_bytes() -> int:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def queue_bound_bytes(capacity: int, readers: int) -> int:
    """Bytes the pipeline's buffers can hold at once: the shuffle queue and a batch being
    dequeued, and per reader task its read-ahead (one read block, raw and framed into
    records) and one decoded chunk."""
    example = RECORD_BYTES - 1 + 4  # uint8 image + int32 label
    per_reader = 2 * READ_BLOCK + CHUNK * (RECORD_BYTES + example)
    return (capacity + BATCH) * example + readers * per_reader


async def soak(files: list[str], seconds: float, readers: int, capacity: int) -> dict[str, Any]:
    samples: list[tuple[float, int, int]] = []
    consumed = 0
    baseline = rss_bytes()
    async with ar.Session() as sess:
        filename_queue = ar.string_input_producer(files, seed=0)

        def reader_task(seed: int) -> Any:
            reader = ar.TFRecordReader()
            rng = np.random.default_rng(seed)

            async def read_chunk() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
                _keys, values = await reader.read_up_to(filename_queue, CHUNK)
                raw = ar.decode_raw(values, np.uint8)
                labels = raw[:, 0].astype(np.int32)
                images = raw[:, 1:].reshape(-1, *IMAGE_SHAPE)
                flip = rng.random(len(images)) < 0.5
                images[flip] = images[flip, :, ::-1]
                return images, labels

            return read_chunk

        batches = ar.shuffle_batch_join(
            [reader_task(seed) for seed in range(readers)],
            batch_size=BATCH,
            capacity=capacity,
            min_after_dequeue=capacity // 2,
            enqueue_many=True,
            seed=0,
        )
        start = time.perf_counter()
        next_sample = start
        checksum = 0
        while (now := time.perf_counter()) - start < seconds:
            _images, labels = await batches.dequeue()
            consumed += len(labels)
            checksum += int(labels.sum())
            if now >= next_sample:
                samples.append((now - start, rss_bytes(), consumed))
                next_sample += 1.0
        elapsed = time.perf_counter() - start
        sess.coord.request_stop()
    return {
        "samples": samples,
        "consumed": consumed,
        "elapsed": elapsed,
        "checksum": checksum,
        "baseline": baseline,
    }


def report(result: dict[str, Any], bound: int, data_bytes: int) -> bool:
    samples: list[tuple[float, int, int]] = result["samples"]
    elapsed: float = result["elapsed"]
    warm = max(10.0, elapsed / 5)
    steady = [rss for t, rss, _ in samples if t >= warm]
    print("| t (s) | RSS (MB) | examples | examples/s |")
    print("|------:|---------:|---------:|-----------:|")
    step = max(1, len(samples) // 20)
    last_t, last_n = 0.0, 0
    for t, rss, n in samples[::step]:
        rate = (n - last_n) / (t - last_t) if t > last_t else 0.0
        print(f"| {t:5.0f} | {rss / 2**20:8.1f} | {n:8d} | {rate:10,.0f} |")
        last_t, last_n = t, n
    rate = result["consumed"] / elapsed
    gb = result["consumed"] * RECORD_BYTES / 1e9
    print()
    print(
        f"- streamed {result['consumed']:,} examples ({gb:.1f} GB of records, dataset "
        f"{data_bytes / 1e9:.1f} GB) in {elapsed:.0f} s: {rate:,.0f} examples/s"
    )
    print(
        f"- RSS before the pipeline started: {result['baseline'] / 2**20:.0f} MB; "
        f"buffers the queue capacities and readers allow: {bound / 2**20:.0f} MB"
    )
    if len(steady) < 3:
        print(f"- too short to judge flatness (warm-up is {warm:.0f} s); run longer")
        return True
    median = statistics.median(steady)
    spread = max(abs(max(steady) - median), abs(median - min(steady))) / median
    flat = spread <= 0.05
    print(
        f"- RSS after {warm:.0f} s warm-up: median {median / 2**20:.1f} MB, min "
        f"{min(steady) / 2**20:.1f}, max {max(steady) / 2**20:.1f} "
        f"({spread:.1%} from the median; bar 5%): {'flat' if flat else 'NOT FLAT'}"
    )
    return flat


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--minutes", type=float, default=3.0, help="how long to stream")
    parser.add_argument("--gb", type=float, default=2.0, help="dataset size to write")
    parser.add_argument("--readers", type=int, default=4, help="reader tasks")
    parser.add_argument("--capacity", type=int, default=20_000, help="shuffle queue capacity")
    parser.add_argument("--dir", help="where to write the data (default: a temporary dir)")
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        t0 = time.perf_counter()
        files = write_dataset(Path(tmp), int(args.gb * 1e9))
        data_bytes = sum(os.path.getsize(f) for f in files)
        print(
            f"wrote {len(files)} files, {data_bytes / 1e9:.1f} GB, in "
            f"{time.perf_counter() - t0:.0f} s; streaming for {args.minutes:g} min "
            f"({args.readers} readers, {args.backend})\n"
        )
        result = anyio.run(
            soak, files, args.minutes * 60, args.readers, args.capacity, backend=args.backend
        )
    flat = report(result, queue_bound_bytes(args.capacity, args.readers), data_bytes)
    return 0 if flat else 1


if __name__ == "__main__":
    raise SystemExit(main())
