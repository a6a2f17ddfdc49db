"""Segment mode of the framers: the records of list mode as buffers with offsets.

Every test that feeds a framer through ``framer_util.feed_until_error`` (all the framer
tests: compression, headers, footers, hops, CRLF, limits, corruption, truncation, trailing
garbage, resuming, every chunk boundary) also runs segment mode in lockstep and compares.
The tests here add what that cannot see: that buffers are views of the chunk, that no
object is made per record, random files and chunkings, and the CRC helper.
"""

from __future__ import annotations

import gc
import gzip
import statistics
import sys
import zlib
from typing import TYPE_CHECKING

import numpy as np
import pytest
from framer_util import feed_until_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._io import crc
from asyncreader._records.batch import KeyRun, assemble
from asyncreader._records.fixed_length import FixedLengthFramer
from asyncreader._records.lines import LineFramer
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

if TYPE_CHECKING:
    from collections.abc import Callable

    from asyncreader._records.framer import Framed, Framer


def encode(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


def chunk_array(chunk: bytes) -> np.ndarray:
    return np.frombuffer(chunk, np.uint8)


# -- views, not copies -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "chunk"),
    [
        (TFRecordFramer, encode([b"a" * 30, b"bb", b"", b"c" * 70])),  # header walk
        (TFRecordFramer, encode([b"v" * (i % 7) for i in range(40)])),  # ... many records
        (TFRecordFramer, encode([b"x" * 40] * 50)),  # the uniform-run block path
        (lambda: TFRecordFramer(verify_crc=False), encode([b"x" * 40] * 50)),
        (LineFramer, b"one\r\ntwo\n\nthree\r\nlast"),
        (lambda: FixedLengthFramer(7, 3, 2, 0), bytes(range(200))),
        (lambda: FixedLengthFramer(7, 0, 0, 3), bytes(range(200))),
    ],
)
def test_records_of_one_chunk_are_views_of_it(make: Callable[[], Framer], chunk: bytes) -> None:
    framer = make()
    framed = framer.decode_segments(chunk)
    assert len(framed) > 1
    assert len(framed.segments) == 1
    (segment,) = framed.segments
    assert np.shares_memory(segment.buffer, chunk_array(chunk))
    assert not segment.buffer.flags.writeable
    # And they are the records list mode gives.
    keys, values = make().decode(chunk)
    assert framed.keys.tolist() == keys
    assert framed.tolist() == values


def test_a_record_across_chunks_is_joined_and_the_rest_stays_in_place() -> None:
    data = encode([b"a" * 50, b"b" * 50, b"c" * 50])
    first, second = data[:100], data[100:]  # the second record straddles the cut
    framer = TFRecordFramer()
    assert framer.decode_segments(first).tolist() == [b"a" * 50]
    framed = framer.decode_segments(second)
    assert framed.tolist() == [b"b" * 50, b"c" * 50]
    joined, in_place = framed.segments
    assert not np.shares_memory(joined.buffer, chunk_array(second))
    assert np.shares_memory(in_place.buffer, chunk_array(second))
    assert framed.keys.tolist() == [66, 132]


def test_a_line_across_chunks_is_joined_and_the_rest_stays_in_place() -> None:
    framer = LineFramer()
    assert len(framer.decode_segments(b"hel")) == 0
    second = b"lo\r\nworld\r\nnext"
    framed = framer.decode_segments(second)
    assert framed.tolist() == [b"hello", b"world"]
    assert framed.keys.tolist() == [1, 2]
    assert not np.shares_memory(framed.segments[0].buffer, chunk_array(second))
    assert np.shares_memory(framed.segments[1].buffer, chunk_array(second))
    final = framer.finish_segments()
    assert final.tolist() == [b"next"]
    assert final.keys.tolist() == [3]


def test_no_records_is_an_empty_framed() -> None:
    framed = TFRecordFramer().decode_segments(b"")
    assert len(framed) == 0
    assert framed.keys.dtype == np.int64
    assert framed.segments == []
    assert LineFramer().finish_segments().segments == []


# -- no object per record ---------------------------------------------------------------


def _small_records(kind: str, count: int) -> tuple[Callable[[], Framer], bytes]:
    if kind == "tfrecord":
        return TFRecordFramer, encode([bytes(range(100))] * count)
    if kind == "tfrecord-no-crc":
        return lambda: TFRecordFramer(verify_crc=False), encode([bytes(range(100))] * count)
    if kind == "lines":
        return LineFramer, b"".join(b"line %d\r\n" % i for i in range(count))
    return lambda: FixedLengthFramer(100, 4, 4, 0), bytes(8 + 100 * count)


def _blocks_held(make: Callable[[], Framer], data: bytes, segments: bool) -> int:
    """Memory blocks still allocated while the result of one decode is held (the
    collector paused, so that it frees nothing meanwhile)."""
    framer = make()
    gc.disable()
    try:
        before = sys.getallocatedblocks()
        result: Framed | tuple[list[int], list[bytes]] = (
            framer.decode_segments(data) if segments else framer.decode(data)
        )
        after = sys.getallocatedblocks()
    finally:
        gc.enable()
    assert len(result[0] if isinstance(result, tuple) else result) > 0
    return after - before


@pytest.mark.parametrize("kind", ["tfrecord", "tfrecord-no-crc", "lines", "fixed"])
def test_segment_mode_makes_no_object_per_record(kind: str) -> None:
    make, data = _small_records(kind, 10_000)
    gc.collect()
    # List mode holds one bytes (and one int) per record; the check would see it.
    assert _blocks_held(make, data, segments=False) >= 10_000
    # Segment mode holds a few arrays, however many records there are. (The median of
    # five: threads left by earlier tests may allocate or free blocks meanwhile.)
    small = _small_records(kind, 100)[1]
    held = [
        statistics.median(_blocks_held(make, records, segments=True) for _ in range(5))
        for records in (small, data)
    ]
    assert max(held) < 200, held
    assert held[1] - held[0] < 50, held


# -- random files, random chunkings -----------------------------------------------------

QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# Mostly small payloads, now and then one long enough to be checksummed in place.
payloads = st.lists(
    st.binary(max_size=120) | st.integers(crc.COPY_BELOW - 1, crc.COPY_BELOW + 9).map(bytes),
    max_size=30,
)
cut_lists = st.lists(st.integers(min_value=0, max_value=40_000), max_size=8)


def _cut(data: bytes, cuts: list[int]) -> list[int]:
    return sorted({c for c in cuts if c < len(data)})


@QUICK
@given(
    records=payloads,
    repeat=st.integers(1, 40),
    damage=st.none() | st.tuples(st.integers(0, 10**6), st.integers(1, 255)),
    tail=st.binary(max_size=20),
    kind=st.sampled_from([None, "ZLIB", "GZIP"]),
    verify=st.booleans(),
    cuts=cut_lists,
)
def test_tfrecord_segments_equal_list_mode(
    records: list[bytes],
    repeat: int,
    damage: tuple[int, int] | None,
    tail: bytes,
    kind: str | None,
    verify: bool,
    cuts: list[int],
) -> None:
    # Repeating the last record makes runs long enough for the block path.
    data = bytearray(encode(records + records[-1:] * repeat) + tail)
    if damage is not None and data:
        data[damage[0] % len(data)] ^= damage[1]
    fed = bytes(data)
    if kind == "ZLIB":
        fed = zlib.compress(fed)
    elif kind == "GZIP":
        fed = gzip.compress(fed)
    framer = TFRecordFramer(compression_type=kind, verify_crc=verify, max_output=4096)
    # feed_until_error checks segment mode against list mode, call by call.
    feed_until_error(framer, fed, _cut(fed, cuts))


@QUICK
@given(
    data=st.binary(max_size=300) | st.text("ab\r\n", max_size=120).map(str.encode),
    skip=st.integers(0, 3),
    first_line=st.integers(1, 3),
    limit=st.sampled_from([1, 4, 10, 1000]),
    cuts=cut_lists,
)
def test_line_segments_equal_list_mode(
    data: bytes, skip: int, first_line: int, limit: int, cuts: list[int]
) -> None:
    framer = LineFramer(skip_header_lines=skip, first_line=first_line, max_record_bytes=limit)
    feed_until_error(framer, data, _cut(data, cuts))


@QUICK
@given(
    data=st.binary(max_size=300),
    shape=st.tuples(st.integers(1, 9), st.integers(0, 9), st.integers(0, 9), st.integers(0, 12)),
    start=st.integers(0, 3),
    kind=st.sampled_from([None, "ZLIB"]),
    cuts=cut_lists,
)
def test_fixed_length_segments_equal_list_mode(
    data: bytes, shape: tuple[int, int, int, int], start: int, kind: str | None, cuts: list[int]
) -> None:
    fed = zlib.compress(data) if kind else data
    framer = FixedLengthFramer(*shape, encoding=kind, start_index=start, max_output=64)
    feed_until_error(framer, fed, _cut(fed, cuts))


def test_modes_can_alternate_on_one_framer() -> None:
    data = b"".join(b"%d\r\n" % i for i in range(200))
    expected = LineFramer().decode(data)[1]
    framer = LineFramer()
    got: list[bytes] = []
    for n, at in enumerate(range(0, len(data), 37)):
        piece = data[at : at + 37]
        got += framer.decode_segments(piece).tolist() if n % 2 else framer.decode(piece)[1]
    got += framer.finish()[1]
    assert got == expected


# -- errors -------------------------------------------------------------------------------


def test_records_before_a_bad_payload_come_first_then_the_error() -> None:
    data = bytearray(encode([b"p" * 20] * 40))
    bad_at = 30 * 36
    data[bad_at + 12] ^= 1  # record 30's payload: caught by the block's CRC check
    framer = TFRecordFramer(work_item="f.tfrecord")
    framed = framer.decode_segments(bytes(data))
    assert framed.keys.tolist() == list(range(0, bad_at, 36))
    assert framer.skip_to == (bad_at + 36, bad_at + 36)
    with pytest.raises(ar.DataLossError, match=f"corrupted record at {bad_at + 12}") as info:
        framer.decode_segments(b"")
    assert (info.value.work_item, info.value.record, info.value.offset) == (
        "f.tfrecord",
        bad_at,
        bad_at + 12,
    )
    with pytest.raises(ar.DataLossError):
        framer.finish_segments()


def test_a_long_line_fails_after_the_lines_before_it() -> None:
    framer = LineFramer(max_record_bytes=5, work_item="t.txt")
    framed = framer.decode_segments(b"ab\ncd\n" + b"x" * 9 + b"\nok\n")
    assert framed.tolist() == [b"ab", b"cd"]
    with pytest.raises(ar.ResourceExhaustedError, match="line 3 at 6 is 9 bytes") as info:
        framer.decode_segments(b"")
    assert info.value.work_item == "t.txt"
    assert framer.skip_to == (16, 4)


# -- a RecordBatch straight from the segments ----------------------------------------------


def test_segments_assemble_into_a_record_batch() -> None:
    chunk = bytes(range(256)) * 4
    framer = FixedLengthFramer(16, header_bytes=8, work_item="f.bin")
    framed = framer.decode_segments(chunk)
    batch = assemble(framed.segments, [KeyRun(b"f.bin", len(framed), ids=framed.keys)])
    assert len(batch) == 63
    assert batch.keys()[:2] == [b"f.bin:0", b"f.bin:1"]
    assert batch.tolist() == framer.__class__(16, header_bytes=8).decode(chunk)[1]
    assert np.shares_memory(batch.to_numpy(), chunk_array(chunk))
