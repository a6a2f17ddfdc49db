"""``read_batch`` keeps its allocations per call constant, and streams in bounded memory.

A ``read_up_to`` result holds two ``bytes`` per record; a ``RecordBatch`` holds a few
objects over shared buffers, so the Python blocks a call leaves alive must not grow with
the number of records it returns, and streaming a file batch by batch (each batch dropped)
must not hold more than a few read blocks at once.
"""

from __future__ import annotations

import functools
import gc
import sys
import tracemalloc
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar
from asyncreader._io.blocks import READ_AHEAD, block_pool
from asyncreader._io.filesystem import READ_BLOCK
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

SMALL, LARGE = 1_000, 20_000
#: Blocks a call may leave alive whatever its record count: the batch, its buffers and
#: arrays, a few per segment. ``read_up_to`` needs ``2 * LARGE`` = 40,000 here.
HELD_BOUND = 200
#: Extra blocks ``LARGE`` records may hold over ``SMALL`` (more segments, not more records).
GROWTH_BOUND = 100


def _tfrecord(path: Path, count: int, size: int) -> None:
    path.write_bytes(b"".join(b"".join(frame_record(b"%*d" % (size, i))) for i in range(count)))


def _lines(path: Path, count: int) -> None:
    path.write_bytes(b"".join(b"line %d,x,y\n" % i for i in range(count)))


def _fixed(path: Path, count: int) -> None:
    path.write_bytes(b"".join(b"%16d" % i for i in range(count)))


FILES: dict[str, tuple[Callable[[Path, int], None], Callable[[], ar.ReaderBase]]] = {
    "tfrecord": (functools.partial(_tfrecord, size=100), ar.TFRecordReader),
    "text": (_lines, ar.TextLineReader),
    "fixed": (_fixed, functools.partial(ar.FixedLengthRecordReader, 16)),
}


async def _queue_of(path: Path) -> ar.FIFOQueue:
    q = ar.FIFOQueue(None)
    await q.enqueue(str(path))
    await q.close()
    return q


async def _held(make: Callable[[], ar.ReaderBase], path: Path, n: int, verb: str) -> int:
    """Blocks left alive by one ``verb(queue, n)`` call while its result is held (after a
    warm-up call of the same size, so the file is open and framing under way)."""
    q = await _queue_of(path)
    async with make() as reader:
        call = getattr(reader, verb)
        result: Any = await call(q, n)
        assert len(result if verb == "read_batch" else result[0]) == n
        del result
        gc.collect()
        before = sys.getallocatedblocks()
        result = await call(q, n)
        after = sys.getallocatedblocks()
        assert len(result if verb == "read_batch" else result[0]) == n
        return after - before


@pytest.mark.parametrize("kind", sorted(FILES))
async def test_read_batch_holds_a_constant_number_of_blocks(kind: str, tmp_path: Path) -> None:
    write, make = FILES[kind]
    path = tmp_path / kind
    write(path, 2 * LARGE + 10)
    with anyio.fail_after(30):
        small = await _held(make, path, SMALL, "read_batch")
        large = await _held(make, path, LARGE, "read_batch")
        per_record = await _held(make, path, LARGE, "read_up_to")
    assert 0 < small <= HELD_BOUND, small
    assert 0 < large <= HELD_BOUND, large
    assert large - small <= GROWTH_BOUND, (small, large)
    # The measure sees per-record objects: read_up_to's key and value bytes (some of them
    # framed ahead during the warm-up call, so at least one per record).
    assert per_record >= LARGE, per_record


async def test_streaming_with_read_batch_keeps_memory_to_a_few_blocks(tmp_path: Path) -> None:
    path = tmp_path / "stream.tfrecord"
    record = b"".join(frame_record(bytes(range(256)) * 4))  # 1,040 bytes framed
    count = (64 << 20) // len(record)
    path.write_bytes(record * count)  # freed before tracing starts
    q = await _queue_of(path)
    seen = 0
    gc.collect()
    block_pool().trim()  # every block the stream needs is allocated while traced
    tracemalloc.start()
    try:
        with anyio.fail_after(50):
            async with ar.TFRecordReader() as reader:
                while True:
                    try:
                        batch = await reader.read_batch(q, 1024)
                    except ar.OutOfRangeError:
                        break
                    seen += len(batch)
                    del batch
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert seen == count
    # The batch in hand, the block being framed, the rest of the buffer's and the blocks
    # read ahead: a few blocks, not the 64 MiB file.
    assert peak < (4 + READ_AHEAD) * READ_BLOCK, f"peak {peak / 2**20:.1f} MiB"
