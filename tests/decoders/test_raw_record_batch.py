"""decode_raw on a RecordBatch: the same numbers as on a list, from the reader's buffers,
a view where the layout allows, and errors that name the work item and record key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble

DTYPES = ["uint8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64",
          "complex64", "complex128", "bool"]  # fmt: skip


def framed(
    records: list[bytes], *, work: bytes = b"train.bin", gap: int = 0, head: int = 0
) -> RecordBatch:
    """A batch whose records sit in one block with ``gap`` framing bytes between them."""
    buffer = bytearray(b"\x7f" * head)
    starts = []
    for r in records:
        starts.append(len(buffer))
        buffer += r + b"\x7f" * gap
    segment = Segment(
        np.frombuffer(bytes(buffer), np.uint8),
        np.array(starts, np.int64),
        np.array([len(r) for r in records], np.int64),
    )
    return assemble([segment], [KeyRun(work, len(records), range(len(records)))])


@settings(max_examples=150, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    count=st.integers(0, 9),
    items=st.integers(0, 5),
    gap=st.integers(0, 9),
    head=st.integers(0, 9),
    little=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_same_numbers_as_the_list_path(
    dtype: str, count: int, items: int, gap: int, head: int, little: bool, seed: int
) -> None:
    width = items * np.dtype(dtype).itemsize
    rng = np.random.default_rng(seed)
    records = [rng.bytes(width) for _ in range(count)]
    expected = ar.decode_raw(records, dtype, little_endian=little)
    got = ar.decode_raw(framed(records, gap=gap, head=head), dtype, little_endian=little)
    assert got.dtype == expected.dtype
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


@settings(max_examples=100, deadline=None)
@given(
    dtype=st.sampled_from(["uint8", "int16", "int32", "float32", "float64"]),
    lengths=st.lists(st.integers(0, 24), max_size=8),
    fixed=st.integers(1, 6),
    little=st.booleans(),
)
def test_fixed_length_pads_like_the_list_path(
    dtype: str, lengths: list[int], fixed: int, little: bool
) -> None:
    fixed_length = fixed * np.dtype(dtype).itemsize
    records = [bytes(range(n)) for n in lengths]
    expected = ar.decode_raw(records, dtype, little, fixed_length)
    got = ar.decode_raw(framed(records, gap=3), dtype, little, fixed_length)
    assert got.shape == expected.shape
    np.testing.assert_array_equal(got, expected)


def test_aligned_records_of_one_length_are_a_view_of_the_block() -> None:
    records = [np.arange(i, i + 8, dtype=np.float32).tobytes() for i in range(100)]
    batch = framed(records, gap=16, head=8)  # 48-byte step: aligned for float32
    numbers = ar.decode_raw(batch, "float32")
    assert np.shares_memory(numbers, batch.data)
    assert not numbers.flags.writeable
    assert numbers[7].tolist() == list(range(7, 15))


def test_misaligned_or_swapped_records_are_copied_correctly() -> None:
    records = [np.arange(i, i + 4, dtype="<i4").tobytes() for i in range(10)]
    odd = framed(records, gap=1, head=3)
    numbers = ar.decode_raw(odd, "int32")
    assert not np.shares_memory(numbers, odd.data)
    assert numbers.flags.aligned
    assert numbers[9].tolist() == [9, 10, 11, 12]
    big = framed([np.arange(4, dtype=">i4").tobytes()], head=4)
    swapped = ar.decode_raw(big, "int32", little_endian=False)
    assert swapped.tolist() == [[0, 1, 2, 3]]
    assert big.data[4:8].tobytes() == b"\x00\x00\x00\x00"  # the block is left as read


def test_a_record_of_another_size_names_its_work_item_and_key() -> None:
    batch = framed([b"abcd", b"efgh", b"ijklmn"], work=b"shard-7.bin")
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw(batch, "uint8")
    assert info.value.work_item == b"shard-7.bin"
    assert info.value.record == b"shard-7.bin:2"
    assert "element 2 has size 4 != 6" in str(info.value)
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw(framed([b"abc"]), "int16")
    assert info.value.record == b"train.bin:0"
    assert "length 3 that is not a multiple of 2" in str(info.value)


def test_skipping_bad_records_keeps_the_rest_and_names_the_dropped() -> None:
    good = [np.full(2, i, "<i4").tobytes() for i in range(6)]
    records = [*good[:2], b"xyz", *good[2:4], b"0123456789abcdef", *good[4:]]
    errors = ar.DecodeErrors("skip")
    numbers = ar.decode_raw(framed(records, gap=4, work=b"f"), "int32", on_error=errors)
    assert numbers[:, 0].tolist() == [0, 1, 2, 3, 4, 5]
    assert errors.kept.tolist() == [0, 1, 3, 4, 6, 7]
    assert [d.record for d in errors.dead_letters] == [b"f:2", b"f:5"]
    assert [d.work_item for d in errors.dead_letters] == [b"f", b"f"]


def test_explicit_keys_win_over_the_batchs() -> None:
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw(framed([b"ab", b"c"]), "uint8", keys=[b"x:1", b"x:2"])
    assert info.value.record == b"x:2"
    with pytest.raises(ar.InvalidArgumentError, match="keys has 1 entries for 2 records"):
        ar.decode_raw(framed([b"ab", b"cd"]), "uint8", keys=[b"x:1"])


def test_empty_and_zero_width_batches() -> None:
    assert ar.decode_raw(framed([]), "float32").shape == (0, 0)
    assert ar.decode_raw(framed([b"", b""]), "float32").shape == (2, 0)
    assert ar.decode_raw(framed([]), "float32", fixed_length=8).shape == (0, 2)
