"""Reader speed: each reader against plain 4 MiB file reads of the same bytes (and tf.data).

Run: ``python benchmarks/readers.py [--scale 1.0] [--dir DIR] [--big | --alloc]``

The script writes its own data files (into ``--dir``, default a temporary directory), reads
each once to warm the page cache, then times, best of three wall-clock runs:

* ``raw``: ``open(path, "rb", buffering=0)`` and ``readinto`` one warm, reused 4 MiB
  buffer until the end, the reference: the reader's MB/s divided by this is the "vs raw"
  column. (Reading into fresh ``bytes`` measured 0.6-0.9x of this: its allocator state
  moves the figure from run to run, and the reused buffer is the honest limit);
* each reader draining one file through ``read_up_to(queue, 1024)`` (lists of ``bytes``)
  and ``read_batch(queue, 1024)`` (a ``RecordBatch`` of buffers, no object per record),
  and ``read()`` once, on asyncio;
* ``python floor``: the least plain Python does to make one ``bytes`` object per record of
  the same file (4 MiB reads, records sliced, TFRecord payloads checksummed; no keys, no
  event loop). It shows what per-record objects cost against raw, and the reader's own
  overhead against it;
* the matching ``tf.data`` reader (``TFRecordDataset``, ``TextLineDataset``,
  ``FixedLengthRecordDataset``) with ``.batch(1024)`` over the same file, when TensorFlow
  imports (run the script with a Python that has it installed); its ratio is its time over
  the reader's, so above 1.00x the reader is faster. Text lines also get TensorFlow 1.x's
  ``TextLineReader.read_up_to(queue, 1024)`` in graph mode (a child process), against
  ``read_batch``.

Bars: TFRecord 100 KiB records >= 60% of raw (``read_batch``); TFRecord 100-byte records
(2M) batched >= 1.0x tf.data (GZIP too; ``read_batch``: 2x); text lines >= 5M lines/s
(``read_batch``: >= 3x tf.data and >= 10x TF1's ``TextLineReader``);
FixedLength 3,073-byte records >= 50% of raw (``read_batch``); ``read()`` < 5 us per
record in steady state. ``--big`` instead streams a 2 GB TFRecord file in a child process
with ``read_up_to(1024)`` and again with ``read_batch(1024)``, each in a child process, and
reports peak RSS and RSS sampled every 0.1 s (bar: < 200 MB, flat while streaming).
``--alloc`` instead counts the Python memory blocks one ``read_up_to`` / ``read_batch``
call leaves alive while its result is held (``sys.getallocatedblocks``), for 64, 1024 and
16384 records a call on TFRecord 100 B, text lines and FixedLength 3,073 B files:
``read_up_to`` holds two objects per record, ``read_batch`` a count that does not grow with
the number of records.
"""

from __future__ import annotations

import argparse
import functools
import gc
import gzip
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

import asyncreader as ar
from asyncreader._io.crc import crc32c_bytes
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

RAW_BLOCK = 4 << 20
#: The verb of the buffer rows.
BATCH = "read_batch"


def tfrecord_file(path: Path, payload_size: int, count: int, compression: str = "") -> None:
    """Write ``count`` records of ``payload_size`` bytes (varied content)."""
    base = os.urandom(payload_size + 256)
    header, _, _ = frame_record(base[:payload_size])
    parts: list[bytes] = []
    for i in range(count):
        payload = base[i % 256 : i % 256 + payload_size]
        parts += frame_record(payload)
    data = b"".join(parts)
    del header
    if compression == "ZLIB":
        data = zlib.compress(data, 6)
    elif compression == "GZIP":
        data = gzip.compress(data, 6)
    path.write_bytes(data)


def text_file(path: Path, lines: int) -> None:
    chunk = b"".join(b"%08d,some,csv,like,text,%d\n" % (i, i * 7) for i in range(100_000))
    reps = max(1, lines // 100_000)
    path.write_bytes(chunk * reps)


#: The raw reference's one buffer, reused by every read: warm, so the figure is the
#: honest limit of reading the file (the page cache copied into memory in cache).
_RAW_BUFFER = memoryview(bytearray(b"\1" * RAW_BLOCK))


def raw_read(path: Path) -> int:
    total = 0
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(_RAW_BUFFER):
            total += n
    return total


# The "python floor" rows: the least plain Python does to turn the same bytes into one
# ``bytes`` object per record (4 MiB reads, records sliced, TFRecord payloads checksummed;
# no keys, no reader, no event loop, no error checks). A reader's time divided by this
# shows its own overhead; the floor divided by raw shows what the per-record objects cost.


def floor_tfrecord(path: Path) -> int:
    count = 0
    carry = b""
    with open(path, "rb", buffering=0) as f:
        while block := f.read(RAW_BLOCK):
            buf = carry + block if carry else block
            p, n = 0, len(buf)
            while p + 12 <= n:
                length = int.from_bytes(buf[p : p + 8], "little")
                stop = p + 12 + length
                if stop + 4 > n:
                    break
                crc32c_bytes(buf[p + 12 : stop])
                count += 1
                p = stop + 4
            carry = buf[p:]
    return count


def floor_lines(path: Path) -> int:
    count = 0
    carry = b""
    with open(path, "rb", buffering=0) as f:
        while block := f.read(RAW_BLOCK):
            lines = (carry + block if carry else block).split(b"\n")
            carry = lines.pop()
            count += len(lines)
    return count + (1 if carry else 0)


def floor_fixed(path: Path, record_bytes: int) -> int:
    count = 0
    record = np.dtype((np.void, record_bytes))
    with open(path, "rb", buffering=0) as f:  # blocks of whole records: nothing to carry
        while block := f.read(RAW_BLOCK // record_bytes * record_bytes):
            count += len(np.frombuffer(block, dtype=record).tolist())
    return count


def best_of(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    best = float("inf")
    out = None
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


async def _drain_up_to(make: Callable[[], ar.ReaderBase], path: Path, n: int) -> int:
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    count = 0
    async with make() as reader:
        while True:
            try:
                keys, _ = await reader.read_up_to(q, n)
            except ar.OutOfRangeError:
                return count
            count += len(keys)


async def _drain_batch(make: Callable[[], ar.ReaderBase], path: Path, n: int) -> int:
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    count = 0
    async with make() as reader:
        while True:
            try:
                batch = await reader.read_batch(q, n)
            except ar.OutOfRangeError:
                return count
            count += len(batch)


async def _drain_read(make: Callable[[], ar.ReaderBase], path: Path) -> int:
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    count = 0
    async with make() as reader:
        read = reader.read
        while True:
            try:
                await read(q)
            except ar.OutOfRangeError:
                return count
            count += 1


def reader_run(
    make: Callable[[], ar.ReaderBase], path: Path, n: int | None, verb: str = "read_up_to"
) -> Callable[[], int]:
    if n is None:
        return lambda: anyio.run(_drain_read, make, path)
    if verb == "read_batch":
        return lambda: anyio.run(_drain_batch, make, path, n)
    return lambda: anyio.run(_drain_up_to, make, path, n)


def tf_data_run(
    path: Path, compression: str = "", kind: str = "tfrecord"
) -> Callable[[], int] | None:
    """Return a run of the matching ``tf.data`` reader ``.batch(1024)`` over ``path``, or
    ``None`` when TensorFlow does not import. ``kind``: ``"tfrecord"``, ``"text"`` or
    ``"fixed:<record bytes>"``."""
    try:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        import tensorflow as tf
    except ImportError:
        return None

    def dataset() -> Any:
        if kind == "text":
            return tf.data.TextLineDataset(str(path))
        if kind.startswith("fixed:"):
            return tf.data.FixedLengthRecordDataset(str(path), int(kind.split(":")[1]))
        return tf.data.TFRecordDataset(str(path), compression_type=compression)

    def run() -> int:
        return sum(int(batch.shape[0]) for batch in dataset().batch(1024))

    return run


#: TensorFlow 1.x's queue-based text reader, in a child process (graph mode is global).
_TF1_TEXT = """
import os, sys, time
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
v1 = tf.compat.v1
v1.disable_eager_execution()
queue = v1.FIFOQueue(1, tf.string)
enqueue, close = queue.enqueue([sys.argv[1]]), queue.close()
_, values = v1.TextLineReader().read_up_to(queue, 1024)
with v1.Session() as sess:
    sess.run(enqueue)
    sess.run(close)
    lines, start = 0, time.perf_counter()
    try:
        while True:
            lines += len(sess.run(values))
    except tf.errors.OutOfRangeError:
        pass
    print(lines, time.perf_counter() - start)
"""


def tf1_text_run(path: Path) -> tuple[int, float] | None:
    """Lines and seconds of TensorFlow 1.x's ``TextLineReader.read_up_to(queue, 1024)`` over
    ``path`` (graph mode, ``session.run`` per call), or ``None`` without TensorFlow."""
    try:
        import tensorflow  # noqa: F401
    except ImportError:
        return None
    done = subprocess.run(
        [sys.executable, "-c", _TF1_TEXT, str(path)], capture_output=True, text=True, check=True
    )
    lines, seconds = done.stdout.split()
    return int(lines), float(seconds)


class Table:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, str, str, str, str]] = []

    def add(self, case: str, how: str, seconds: float, records: int, size: int, ratio: str) -> None:
        self.rows.append(
            (
                case,
                how,
                f"{records / seconds / 1e6:.2f}",
                f"{size / seconds / 1e6:.0f}",
                f"{seconds / max(records, 1) * 1e6:.3f}",
                ratio,
            )
        )

    def print(self) -> None:
        head = ("case", "method", "M rec/s", "MB/s", "us/rec", "ratio")
        widths = [max(len(r[i]) for r in [*self.rows, head]) for i in range(6)]
        line = "| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |"
        print(line)
        print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        for row in self.rows:
            cells = [
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=True))
            ]
            print("| " + " | ".join(cells) + " |")


def floor(
    table: Table, name: str, fn: Callable[[], int], raw_seconds: float, size: int, expected: int
) -> None:
    """Add the case's "python floor" row (see ``floor_tfrecord``)."""
    seconds, records = best_of(fn)
    _check_count(f"{name} python floor", records, expected)
    table.add(name, "python floor", seconds, records, size, f"{raw_seconds / seconds:.2f}x raw")


def _check_count(what: str, got: int, expected: int) -> None:
    """Stop the run when a method did not see every record: its time would mean nothing."""
    if got != expected:
        raise SystemExit(f"{what}: read {got} records, the file has {expected}")


def _versus(tf_seconds: float | None, ours: float) -> str:
    """The "; tf.data took N x our time" suffix of a verdict (empty without TensorFlow)."""
    return "" if tf_seconds is None else f"; tf.data took {tf_seconds / ours:.2f}x our time"


def run_all(tmp: Path, scale: float) -> None:
    table = Table()
    verdicts: list[str] = []

    def raw(path: Path) -> float:
        raw_read(path)  # warm the page cache
        seconds, _ = best_of(lambda: raw_read(path))
        return seconds

    def case(
        name: str,
        path: Path,
        make: Callable[[], ar.ReaderBase],
        n: int | None,
        raw_seconds: float,
        decompressed: int,
        expected: int,
        verb: str = "read_up_to",
    ) -> tuple[float, int]:
        seconds, records = best_of(reader_run(make, path, n, verb))
        how = "read()" if n is None else f"{verb}({n})"
        _check_count(f"{name} {how}", records, expected)
        table.add(name, how, seconds, records, decompressed, f"{raw_seconds / seconds:.2f}x raw")
        return seconds, records

    def tf_data(
        name: str, run: Callable[[], int] | None, ours: float, size: int, expected: int
    ) -> float | None:
        """Add the case's tf.data row; return its seconds (``None``: TensorFlow absent)."""
        if run is None:
            return None
        run()  # the first pass builds the graph
        seconds, records = best_of(run)
        _check_count(f"{name} tf.data", records, expected)
        table.add(
            name, "tf.data batch(1024)", seconds, records, size, f"{seconds / ours:.2f}x ours"
        )
        return seconds

    # TFRecord, 100 KiB records.
    big = tmp / "big.tfrecord"
    big_count = int(2000 * scale)
    tfrecord_file(big, 100 << 10, big_count)
    size = big.stat().st_size
    raw_s = raw(big)
    table.add("tfrecord 100KiB", "raw 4MiB reads", raw_s, int(2000 * scale), size, "1.00x raw")
    floor(table, "tfrecord 100KiB", functools.partial(floor_tfrecord, big), raw_s, size, big_count)
    s, _ = case("tfrecord 100KiB", big, ar.TFRecordReader, 1024, raw_s, size, big_count)
    b, _ = case("tfrecord 100KiB", big, ar.TFRecordReader, 1024, raw_s, size, big_count, BATCH)
    tf_s = tf_data("tfrecord 100KiB", tf_data_run(big), s, size, big_count)
    verdicts.append(f"tfrecord 100KiB vs raw: {raw_s / s:.2f}{_versus(tf_s, s)}")
    verdicts.append(f"tfrecord 100KiB read_batch vs raw: {raw_s / b:.2f} (bar 0.60)")

    # TFRecord, 100-byte records, uncompressed and GZIP, against tf.data.
    count = int(2_000_000 * scale)
    for comp in ("", "GZIP"):
        small = tmp / f"small{comp}.tfrecord"
        tfrecord_file(small, 100, count, comp)
        decompressed = count * 116
        raw_s = raw(small)
        label = f"tfrecord 100B {comp or 'none'}"
        if not comp:  # a compressed file's raw read says nothing about its records
            table.add(label, "raw 4MiB reads", raw_s, count, decompressed, "1.00x raw")
        make = functools.partial(ar.TFRecordReader, comp)
        s, _ = case(label, small, make, 1024, raw_s, decompressed, count)
        b, _ = case(label, small, make, 1024, raw_s, decompressed, count, BATCH)
        if not comp:
            s1, n1 = case(label, small, ar.TFRecordReader, None, raw_s, decompressed, count)
            verdicts.append(f"read() steady state: {s1 / n1 * 1e6:.2f} us/record (bar 5)")
        tf_s = tf_data(label, tf_data_run(small, comp), s, decompressed, count)
        if tf_s is not None:
            verdicts.append(f"{label} vs tf.data: {tf_s / s:.2f}x (bar 1.0)")
            verdicts.append(f"{label} read_batch vs tf.data: {tf_s / b:.2f}x (bar 2.0)")
        else:
            verdicts.append(f"{label}: TensorFlow not importable, no tf.data reference")

    # Text lines.
    text = tmp / "lines.txt"
    text_file(text, int(5_000_000 * scale))
    size = text.stat().st_size
    raw_s = raw(text)
    lines = size and text.read_bytes().count(b"\n")
    table.add("text lines", "raw 4MiB reads", raw_s, lines, size, "1.00x raw")
    floor(table, "text lines", functools.partial(floor_lines, text), raw_s, size, lines)
    s, n = case("text lines", text, ar.TextLineReader, 1024, raw_s, size, lines)
    b, _ = case("text lines", text, ar.TextLineReader, 1024, raw_s, size, lines, BATCH)
    tf_s = tf_data("text lines", tf_data_run(text, kind="text"), s, size, lines)
    verdicts.append(f"text lines: {n / s / 1e6:.2f} M lines/s (bar 5){_versus(tf_s, s)}")
    verdicts.append(f"text lines read_batch: {n / b / 1e6:.2f} M lines/s{_versus(tf_s, b)}")
    tf1 = tf1_text_run(text)
    if tf1 is not None:
        tf1_lines, tf1_s = tf1
        _check_count("text lines TF1", tf1_lines, lines)
        table.add(
            "text lines", "TF1 read_up_to(1024)", tf1_s, tf1_lines, size, f"{tf1_s / b:.2f}x ours"
        )
        verdicts.append(f"text lines read_batch vs TF1 TextLineReader: {tf1_s / b:.2f}x (bar 10)")

    # Fixed-length records, CIFAR-10 sized.
    fixed = tmp / "fixed.bin"
    records = max(1, round(60 * scale)) * 1000
    fixed.write_bytes(os.urandom(3073 * 1000) * (records // 1000))
    size = fixed.stat().st_size
    raw_s = raw(fixed)
    table.add("fixed 3073B", "raw 4MiB reads", raw_s, records, size, "1.00x raw")
    floor(table, "fixed 3073B", functools.partial(floor_fixed, fixed, 3073), raw_s, size, records)
    make_fixed = functools.partial(ar.FixedLengthRecordReader, 3073)
    s, _ = case("fixed 3073B", fixed, make_fixed, 1024, raw_s, size, records)
    b, _ = case("fixed 3073B", fixed, make_fixed, 1024, raw_s, size, records, BATCH)
    tf_s = tf_data("fixed 3073B", tf_data_run(fixed, kind="fixed:3073"), s, size, records)
    verdicts.append(f"fixed 3073B vs raw: {raw_s / s:.2f}{_versus(tf_s, s)}")
    verdicts.append(f"fixed 3073B read_batch vs raw: {raw_s / b:.2f} (bar 0.50)")

    table.print()
    print()
    for verdict in verdicts:
        print("-", verdict)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB to MB
    print(f"- peak RSS of this run: {peak:.0f} MB")


def _rss_mb() -> float:
    """The resident set size of this process now, in MB (Linux ``/proc``; 0 elsewhere)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6
    except OSError:
        return 0.0


def _big_child(path: str, verb: str) -> None:
    """Stream ``path`` with ``verb`` (1024 records a call), sampling RSS every 0.1 s."""
    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.1):
            samples.append(_rss_mb())

    drain = _drain_batch if verb == BATCH else _drain_up_to
    sampler = threading.Thread(target=sample, daemon=True)
    start = time.perf_counter()
    sampler.start()
    n = anyio.run(drain, ar.TFRecordReader, Path(path), 1024)
    done.set()
    sampler.join()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6  # KiB to MB
    # Ten samples evenly spread over the run: flat means no growth while streaming.
    step = max(1, len(samples) // 10)
    over_time = " ".join(f"{mb:.0f}" for mb in samples[::step][:10])
    half = samples[len(samples) // 2 :] or [0.0]
    print(
        f"{verb}(1024): {n} records, {os.path.getsize(path) / seconds / 1e6:.0f} MB/s, "
        f"peak RSS {peak:.0f} MB; RSS over time (MB): {over_time}; "
        f"second half {min(half):.0f}-{max(half):.0f} MB"
    )


def run_big(tmp: Path) -> None:
    path = tmp / "huge.tfrecord"
    record = b"".join(frame_record(os.urandom(10_000)))
    with open(path, "wb") as f:
        block = record * 1000
        for _ in range((2 << 30) // len(block)):
            f.write(block)
    print(f"streaming {path.stat().st_size / 1e9:.2f} GB in a child process per verb:")
    for verb in ("read_up_to", BATCH):
        subprocess.run(
            [sys.executable, __file__, "--big-child", str(path), "--verb", verb], check=True
        )


# Allocation discipline: Python allocations a call leaves alive while its result is held.
# ``sys.getallocatedblocks`` counts the interpreter's allocated memory blocks (every Python
# object, whatever its size); a ``read_up_to`` result holds two ``bytes`` per record (key and
# value), a ``RecordBatch`` a fixed handful of objects over shared buffers.

#: Batch sizes of the allocation table.
ALLOC_SIZES = (64, 1024, 16384)


#: Records each measurement spans: several framing rounds, so that records a reader framed
#: ahead of a call (or a call framed for later ones) average out.
ALLOC_SPAN = 32768


async def _held_blocks(make: Callable[[], ar.ReaderBase], path: Path, n: int, verb: str) -> float:
    """Return the blocks held per call by the results of the calls that read ``ALLOC_SPAN``
    records ``n`` at a time, all of them held, after one warm-up call."""
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    calls = max(1, ALLOC_SPAN // n)
    async with make() as reader:
        call = reader.read_batch if verb == BATCH else reader.read_up_to
        await call(q, n)  # warm up: the file is open, the first chunk read
        held: list[Any] = []
        gc.collect()
        before = sys.getallocatedblocks()
        for _ in range(calls):
            held.append(await call(q, n))
        after = sys.getallocatedblocks()
    # The list holding the results is one block of its own, and not the calls' doing.
    return (after - before - 1) / calls


def run_alloc(tmp: Path) -> None:
    """Print the allocation table: blocks held per call against the batch size."""
    most = ALLOC_SPAN + 2 * max(ALLOC_SIZES)  # the span and the warm-up call, with room
    tfr = tmp / "alloc.tfrecord"
    tfrecord_file(tfr, 100, most)
    text = tmp / "alloc.txt"
    text_file(text, most)
    fixed = tmp / "alloc.bin"
    fixed.write_bytes(os.urandom(3073 * 1000) * (most // 1000 + 1))
    cases: list[tuple[str, Path, Callable[[], ar.ReaderBase]]] = [
        ("tfrecord 100B", tfr, ar.TFRecordReader),
        ("text lines", text, ar.TextLineReader),
        ("fixed 3073B", fixed, functools.partial(ar.FixedLengthRecordReader, 3073)),
    ]
    head = ("case", "verb", *(f"n={n}" for n in ALLOC_SIZES))
    rows: list[tuple[str, ...]] = []
    for name, path, make in cases:
        for verb in ("read_up_to", BATCH):
            held = [f"{anyio.run(_held_blocks, make, path, n, verb):.1f}" for n in ALLOC_SIZES]
            rows.append((name, verb, *held))
    widths = [max(len(r[i]) for r in [*rows, head]) for i in range(len(head))]
    print(
        f"blocks held per call, results held (sys.getallocatedblocks delta over {ALLOC_SPAN}"
        " records, divided by the calls):"
    )
    print("| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |")
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for row in rows:
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("| " + " | ".join(cells) + " |")


def _tmpdir(given: str | None) -> Iterator[Path]:
    if given:
        Path(given).mkdir(parents=True, exist_ok=True)
        yield Path(given)
        return
    with tempfile.TemporaryDirectory(prefix="asyncreader-bench-") as tmp:
        yield Path(tmp)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scale", type=float, default=1.0, help="data size factor")
    parser.add_argument("--dir", help="where to write the data (default: a temporary dir)")
    parser.add_argument("--big", action="store_true", help="stream a 2 GB file, report RSS")
    parser.add_argument(
        "--alloc", action="store_true", help="count Python allocations per call instead"
    )
    parser.add_argument("--big-child", help=argparse.SUPPRESS)
    parser.add_argument("--verb", default="read_up_to", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.big_child:
        _big_child(args.big_child, args.verb)
        return
    print(f"Python {sys.version.split()[0]}, asyncreader readers, asyncio")
    for tmp in _tmpdir(args.dir):
        if args.big:
            run_big(tmp)
        elif args.alloc:
            run_alloc(tmp)
        else:
            run_all(tmp, args.scale)


if __name__ == "__main__":
    main()
