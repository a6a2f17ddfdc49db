"""Framing speed: records/s and GB/s of the framers against a plain ``bytes`` copy.

Run: ``python benchmarks/framing.py [--mb 64] [--chunk-kib 1024]``

Each case frames an in-memory file fed in fixed-size chunks (as the readers feed them) and
prints its throughput next to copying the same (decompressed) chunks once, the reference
measured in the same run, so the ratio says how close framing comes to raw memory
bandwidth. GB/s counts decompressed bytes. The ``segments`` columns frame the same chunks
in segment mode (``decode_segments``: buffers with offsets, no object per record), as
``read_batch`` does; ``--no-segments`` leaves them out. Times are process CPU time (best
of three), so other load on the machine disturbs the figures less.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import os
import random
import time
import zlib
from typing import TYPE_CHECKING

from asyncreader._records.fixed_length import FixedLengthFramer
from asyncreader._records.lines import LineFramer
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

if TYPE_CHECKING:
    from collections.abc import Callable


def best_of(fn: Callable[[], int], repeat: int = 3) -> tuple[float, int]:
    best = float("inf")
    count = 0
    for _ in range(repeat):
        start = time.process_time()
        count = fn()
        best = min(best, time.process_time() - start)
    return best, count


def chunked(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def frame_all(
    make: Callable[[], object], chunks: list[bytes], segments: bool = False
) -> Callable[[], int]:
    if segments:
        return frame_segments(make, chunks)

    def run() -> int:
        framer = make()
        n = 0
        for chunk in chunks:
            n += len(framer.decode(chunk)[0])  # type: ignore[attr-defined]
            while framer.pending:  # type: ignore[attr-defined]
                n += len(framer.decode(b"")[0])  # type: ignore[attr-defined]
        return n + len(framer.finish()[0])  # type: ignore[attr-defined]

    return run


def frame_segments(make: Callable[[], object], chunks: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        framer = make()
        n = 0
        for chunk in chunks:
            n += len(framer.decode_segments(chunk))  # type: ignore[attr-defined]
            while framer.pending:  # type: ignore[attr-defined]
                n += len(framer.decode_segments(b""))  # type: ignore[attr-defined]
        return n + len(framer.finish_segments())  # type: ignore[attr-defined]

    return run


def copy_all(chunks: list[bytes]) -> Callable[[], int]:
    def run() -> int:
        for chunk in chunks:
            bytes(memoryview(chunk)[1:])
        return 0

    return run


def tfrecord_file(size: int, total: int, vary: bool = False) -> bytes:
    rng = random.Random(0)
    pool = [rng.randbytes(size) for _ in range(64)]
    parts: list[bytes] = []
    n = 0
    while n < total:
        payload = pool[len(parts) % 64]
        if vary:
            payload = payload[: rng.randint(size * 9 // 10, size)]
        parts += frame_record(payload)
        n += len(payload) + 16
    return b"".join(parts)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=64, help="file size per case (MB)")
    parser.add_argument("--chunk-kib", type=int, default=1024, help="chunk size (KiB)")
    parser.add_argument(
        "--no-segments", action="store_true", help="leave out the segment-mode columns"
    )
    args = parser.parse_args()
    total = args.mb << 20
    chunk = args.chunk_kib << 10

    rng = random.Random(1)
    text = b"\n".join(rng.randbytes(40).hex().encode() for _ in range(total // 81))
    fixed = os.urandom(total)
    # (name, bytes fed, the decompressed stream they stand for, framer factory)
    cases: list[tuple[str, bytes, bytes, Callable[[], object]]] = []
    for size in (100, 102400):
        data = tfrecord_file(size, total)
        cases.append((f"TFRecord {size} B", data, data, TFRecordFramer))
        cases.append(
            (f"TFRecord {size} B, no CRC", data, data, lambda: TFRecordFramer(verify_crc=False))
        )
    data = tfrecord_file(100, total, vary=True)
    cases.append(("TFRecord 90-100 B", data, data, TFRecordFramer))
    small = tfrecord_file(100, total // 4)
    for kind, pack in (("GZIP", gzip.compress), ("ZLIB", zlib.compress)):
        factory = functools.partial(TFRecordFramer, compression_type=kind)
        cases.append((f"TFRecord 100 B, {kind}", pack(small, 6), small, factory))
    cases.append(("lines 80 B", text, text, LineFramer))
    cases.append(("fixed 100 B", fixed, fixed, lambda: FixedLengthFramer(100)))
    half = fixed[: total // 2]
    cases.append(("fixed 100 B hop 50", half, half, lambda: FixedLengthFramer(100, hop_bytes=50)))
    cases.append(
        ("fixed 3072 B + header", fixed, fixed, lambda: FixedLengthFramer(3072, header_bytes=16))
    )

    segments = not args.no_segments
    print(f"chunks of {args.chunk_kib} KiB; ratio = framing GB/s / copy GB/s of the same chunks")
    head = f"{'case':28s} {'records/s':>12s} {'GB/s':>8s} {'copy GB/s':>10s} {'ratio':>7s}"
    if segments:
        head += f" {'segments rec/s':>15s} {'GB/s':>8s}"
    print(head)
    for name, fed, stream, make in cases:
        chunks = chunked(fed, chunk)
        t, n = best_of(frame_all(make, chunks))
        tc, _ = best_of(copy_all(chunked(stream, chunk)))
        size = len(stream)
        line = (
            f"{name:28s} {n / t:12,.0f} {size / t / 1e9:8.2f} {size / tc / 1e9:10.2f} {tc / t:7.2f}"
        )
        if segments:
            ts, ns = best_of(frame_all(make, chunks, segments=True))
            assert ns == n, (name, ns, n)
            line += f" {ns / ts:15,.0f} {size / ts / 1e9:8.2f}"
        print(line)


if __name__ == "__main__":
    main()
