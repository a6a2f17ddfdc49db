"""RecordBatch: records as buffers, with bytes, keys, numpy and Arrow views on demand."""

from __future__ import annotations

import gc

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from asyncreader import InvalidArgumentError
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble, concat


def framed(records: list[bytes], *, gap: int = 0, head: int = 0) -> Segment:
    """``records`` in one buffer, ``gap`` junk bytes between them (a TFRecord's framing)."""
    buffer = bytearray(b"\xee" * head)
    starts, lengths = [], []
    for r in records:
        starts.append(len(buffer))
        lengths.append(len(r))
        buffer += r + b"\xee" * gap
    return Segment(
        np.frombuffer(bytes(buffer), np.uint8),
        np.array(starts, np.int64),
        np.array(lengths, np.int64),
    )


def batch_of(*parts: tuple[list[bytes], int], work: bytes = b"f") -> RecordBatch:
    segments, runs, n = [], [], 0
    for records, gap in parts:
        segments.append(framed(records, gap=gap, head=3))
        runs.append(KeyRun(work, len(records), range(n, n + len(records))))
        n += len(records)
    return assemble(segments, runs)


RECORDS = [b"alpha", b"", b"gamma!", b"d" * 300]


def test_records_come_out_as_bytes_in_order() -> None:
    b = batch_of((RECORDS[:2], 12), (RECORDS[2:], 0))
    assert len(b) == 4
    assert b.tolist() == RECORDS
    assert list(b) == RECORDS
    assert [b[i] for i in range(4)] == RECORDS
    assert b[-1] == RECORDS[-1]
    assert b[-4] == RECORDS[0]
    with pytest.raises(IndexError):
        b[4]
    with pytest.raises(IndexError):
        b[-5]


def test_keys_are_tensorflows_and_built_on_demand() -> None:
    b = batch_of((RECORDS[:2], 12), (RECORDS[2:], 0), work=b"dir/a%b.tfr")
    assert b.keys() == [b"dir/a%b.tfr:0", b"dir/a%b.tfr:1", b"dir/a%b.tfr:2", b"dir/a%b.tfr:3"]
    assert b.key(2) == b"dir/a%b.tfr:2"
    assert b.work_item(3) == b"dir/a%b.tfr"
    assert b.describe(1) == "record b'dir/a%b.tfr:1' of work item b'dir/a%b.tfr'"


def test_keys_of_several_work_items_and_explicit_keys() -> None:
    segments = [framed([b"x", b"y"]), framed([b"z"])]
    runs = [KeyRun(b"a", 2, np.array([7, 19], np.int64)), KeyRun(b"b", 1, None, [b"b"])]
    b = assemble(segments, runs)
    assert b.keys() == [b"a:7", b"a:19", b"b"]
    assert b.describe(2) == "record b'b'"
    assert b.work_item(0) == b"a"
    assert b.work_item(2) == b"b"
    assert "from 2 work items" in repr(b)


def test_buffers_give_every_record_by_start_and_length() -> None:
    for b in (batch_of((RECORDS, 12)), batch_of((RECORDS[:1], 16), (RECORDS[1:], 4))):
        data, starts, lengths = b.data, b.starts, b.lengths
        assert data.dtype == np.uint8
        assert data.ndim == 1
        assert starts.dtype == np.int64
        assert lengths.dtype == np.int64
        got = [data[s : s + n].tobytes() for s, n in zip(starts, lengths, strict=True)]
        assert got == RECORDS


def test_one_segment_shares_the_readers_block() -> None:
    segment = framed(RECORDS, gap=12)
    b = assemble([segment], [KeyRun(b"f", 4, range(4))])
    assert b.data is segment.buffer
    assert b.starts is segment.starts


def test_fixed_length_records_are_a_strided_view() -> None:
    records = [bytes([i]) * 7 for i in range(50)]
    segment = framed(records, gap=5, head=2)  # e.g. a header and a footer per record
    b = assemble([segment], [KeyRun(b"f", 50, range(50))])
    array = b.to_numpy()
    assert array.shape == (50, 7)
    assert np.shares_memory(array, segment.buffer)
    assert not array.flags.writeable
    assert [row.tobytes() for row in array] == records


def test_to_numpy_copies_across_segments_and_uneven_steps() -> None:
    records = [bytes([i]) * 4 for i in range(6)]
    b = batch_of((records[:2], 3), (records[2:], 0))
    assert [row.tobytes() for row in b.to_numpy()] == records
    seg = Segment(
        np.frombuffer(b"".join(records), np.uint8),
        np.array([0, 4, 12], np.int64),  # skips a record: not one step
        np.array([4, 4, 4], np.int64),
    )
    one = assemble([seg], [KeyRun(b"f", 3, range(3))])
    assert one.to_numpy().tolist() == [list(records[0]), list(records[1]), list(records[3])]


def test_to_numpy_refuses_unequal_lengths_naming_the_records() -> None:
    b = batch_of(([b"abcd", b"efgh", b"ij"], 0), work=b"data.bin")
    with pytest.raises(InvalidArgumentError, match=r"b'data.bin:0' .* 4 bytes.*b'data.bin:2'.* 2"):
        b.to_numpy()


def test_empty_batch() -> None:
    b = assemble([], [])
    assert len(b) == 0
    assert b.tolist() == []
    assert b.keys() == []
    assert b.to_numpy().shape == (0, 0)
    assert b.data.size == 0
    assert b.starts.size == 0
    assert b.lengths.size == 0
    assert len(b.to_arrow()) == 0
    assert repr(b) == "<RecordBatch 0 records>"


def test_to_arrow_shares_back_to_back_records() -> None:
    b = batch_of((RECORDS, 0))
    array = b.to_arrow()
    assert isinstance(array, pa.LargeBinaryArray)
    assert array.to_pylist() == RECORDS
    data_buffer = array.buffers()[2]
    assert data_buffer.address == b.data.ctypes.data  # no copy


def test_to_arrow_joins_records_with_framing_between_them() -> None:
    b = batch_of((RECORDS[:3], 12), (RECORDS[3:], 16))
    assert b.to_arrow().to_pylist() == RECORDS


def test_a_slice_is_a_batch_sharing_the_buffers() -> None:
    b = batch_of((RECORDS[:2], 12), (RECORDS[2:], 0))
    part = b[1:4:2]
    assert isinstance(part, RecordBatch)
    assert part.tolist() == [RECORDS[1], RECORDS[3]]
    assert part.keys() == [b"f:1", b"f:3"]
    assert b[::-1].tolist() == RECORDS[::-1]  # reversed: indexed, still right
    assert b[::-1].to_arrow().to_pylist() == RECORDS[::-1]


def test_views_outlive_the_batch() -> None:
    views = []
    for i in range(200):
        records = [bytes([i % 256]) * 64] * 16
        b = assemble([framed(records, gap=8)], [KeyRun(b"f", 16, range(16))])
        views.append((i, b.to_numpy(), b.data[b.starts[0] :]))
        del b
    gc.collect()
    for i, array, tail in views:
        assert (array == i % 256).all()
        assert tail[0] == i % 256


def test_public_constructor_and_from_records() -> None:
    b = RecordBatch.from_records([b"k1", b"k2"], [b"one", b"three"], work=b"w")
    assert b.tolist() == [b"one", b"three"]
    assert b.keys() == [b"k1", b"k2"]
    assert b.describe(1) == "record b'k2' of work item b'w'"
    c = RecordBatch(b"xxabcyy", [2, 3], [3, 0], keys=[b"a", b"b"])
    assert c.tolist() == [b"abc", b""]
    assert "2 records" in repr(c)
    assert "0..3 bytes" in repr(c)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((b"abc", [0], [1, 2]), "1 starts but 2 lengths"),
        ((b"abc", [2], [2]), "inside its 3 bytes"),
        ((b"abc", [-1], [1]), "inside its 3 bytes"),
        ((b"abc", [[0]], [1]), "1-D array of integers"),
        ((b"abc", [0.5], [1]), "1-D array of integers"),
        ((np.zeros(3, np.int32), [0], [1]), "1-D uint8"),
    ],
)
def test_bad_buffers_are_refused(args: tuple[object, object, object], message: str) -> None:
    with pytest.raises(InvalidArgumentError, match=message):
        RecordBatch(*args, keys=[b"k"] * 1)


def test_keys_must_match_the_records() -> None:
    with pytest.raises(InvalidArgumentError, match="one bytes key per record"):
        RecordBatch(b"abc", [0, 1], [1, 1], keys=[b"k"])
    with pytest.raises(InvalidArgumentError, match="one key per record"):
        RecordBatch.from_records([b"k"], [b"a", b"b"])
    with pytest.raises(InvalidArgumentError, match="must be bytes"):
        RecordBatch.from_records([b"k"], ["text"])  # type: ignore[list-item]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.binary(max_size=40), max_size=12), st.integers(0, 20)),
        max_size=4,
    )
)
def test_any_segmentation_gives_the_same_records(parts: list[tuple[list[bytes], int]]) -> None:
    expected = [r for records, _ in parts for r in records]
    b = batch_of(*parts)
    assert len(b) == len(expected)
    assert b.tolist() == expected == list(b)
    assert b.to_arrow().to_pylist() == expected
    data, starts, lengths = b.data, b.starts, b.lengths
    assert [data[s : s + n].tobytes() for s, n in zip(starts, lengths, strict=True)] == expected
    assert b.nbytes == sum(map(len, expected))
    if expected and len(set(map(len, expected))) == 1:
        assert [row.tobytes() for row in b.to_numpy()] == expected
    if len(expected) > 2:
        assert b[1::2].tolist() == expected[1::2]


@pytest.mark.parametrize("separator", [b"", b"\n", b"\r\n", b"--"])
def test_join_is_separator_join_of_the_records(separator: bytes) -> None:
    b = batch_of((RECORDS[:2], 3), (RECORDS[2:], 0))
    assert b.join(separator) == separator.join(RECORDS)
    assert b[::-1].join(separator) == separator.join(RECORDS[::-1])
    assert batch_of(([], 0)).join(separator) == b""


def test_join_of_lines_in_their_block_is_one_slice() -> None:
    block = np.frombuffer(b"head\nalpha\nbeta\n\ngamma\n", np.uint8)
    starts = np.array([5, 11, 16, 17], np.int64)
    lengths = np.array([5, 4, 0, 5], np.int64)
    b = assemble([Segment(block, starts, lengths)], [KeyRun(b"t", 4, range(2, 6))])
    assert b.join(b"\n") == b"alpha\nbeta\n\ngamma"
    assert b.join(b"\r\n") == b"alpha\r\nbeta\r\n\r\ngamma"


def test_take_picks_records_in_any_order() -> None:
    b = batch_of((RECORDS[:2], 3), (RECORDS[2:], 0))
    assert b.take([3, 0, -1]).tolist() == [RECORDS[3], RECORDS[0], RECORDS[3]]
    assert b.take([3, 0, -1]).keys() == [b"f:3", b"f:0", b"f:3"]
    assert b.take([]).tolist() == []
    with pytest.raises(IndexError):
        b.take([4])
    with pytest.raises(IndexError):
        b.take([-5])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.lists(st.binary(max_size=20), max_size=8), st.integers(0, 5)),
        max_size=4,
    ),
    st.integers(-12, 40),
    st.integers(-12, 40),
)
def test_contiguous_slices_are_views_with_their_keys(
    parts: list[tuple[list[bytes], int]], lo: int, hi: int
) -> None:
    b = batch_of(*parts)
    expected = b.tolist()
    keys = b.keys()
    part = b[lo:hi]
    assert part.tolist() == expected[lo:hi]
    assert part.keys() == keys[lo:hi]
    assert [part.key(i) for i in range(len(part))] == keys[lo:hi]
    assert len(part) == len(expected[lo:hi])
    # A slice of a slice, and the slices' concatenation, are the same records again.
    assert part[1:].tolist() == expected[lo:hi][1:]
    whole = concat([b[:lo], b[lo:]])
    assert whole.tolist() == expected
    assert whole.keys() == keys


def test_a_contiguous_slice_copies_nothing() -> None:
    records = [bytes([i]) * 8 for i in range(10)]
    b = assemble([framed(records, gap=4)], [KeyRun(b"f", 10, np.arange(10, dtype=np.int64))])
    part = b[2:5]
    assert part is not b
    assert b[:] is b
    assert np.shares_memory(part.starts, b.starts)
    assert np.shares_memory(part.to_numpy(), b.data)
    assert part.keys() == [b"f:2", b"f:3", b"f:4"]
    assert part.work_item(0) == b"f"


def test_concat_keeps_every_segment_and_key_run() -> None:
    a = RecordBatch.from_records([b"x:1", b"x:2"], [b"one", b"two"], work=b"x")
    b = batch_of((RECORDS, 2), work=b"y")
    both = concat([a, b[:0], b])
    assert both.tolist() == [b"one", b"two", *RECORDS]
    assert both.keys() == [b"x:1", b"x:2", b"y:0", b"y:1", b"y:2", b"y:3"]
    assert [both.work_item(i) for i in (0, 2)] == [b"x", b"y"]
    assert concat([a]) is a
    assert len(concat([])) == 0


@pytest.mark.parametrize(
    "ids",
    [
        range(995, 2010),
        np.arange(995, 2010, dtype=np.int64),
        np.arange(2010, 995, -1, dtype=np.int64),
        np.array([7, 3000, 3001, 12], np.int64),
    ],
)
def test_keys_of_any_ids_are_work_colon_id(ids: range | np.ndarray) -> None:
    n = len(ids)
    segment = framed([b"r"] * n)
    b = assemble([segment], [KeyRun(b"w%d", n, ids)])
    expected = [b"w%d:" + str(int(i)).encode() for i in ids]
    assert b.keys() == expected
    assert [b.key(i) for i in (0, n - 1)] == [expected[0], expected[-1]]


@pytest.mark.parametrize(
    ("starts", "lengths"),
    [
        ([12, 128, 244, 360], [100, 100, 100, 100]),  # one length at equal steps
        ([5], [7]),  # one record
        ([0, 3, 3, 9], [3, 0, 6, 1]),  # back to back, lengths differ
        ([0, 10, 20], [0, 0, 0]),  # empty records
        ([9000, 10, 40_000], [4, 6, 3]),  # a few records far apart (picked from a block)
        ([40, 0, 80, 120], [8, 8, 8, 8]),  # one length, steps not equal
    ],
)
def test_tolist_gives_every_layouts_records(starts: list[int], lengths: list[int]) -> None:
    buffer = np.frombuffer(bytes(range(251)) * 200, np.uint8)
    batch = assemble(
        [Segment(buffer, np.array(starts, np.int64), np.array(lengths, np.int64))],
        [KeyRun(b"f", len(starts), range(len(starts)))],
    )
    expected = [buffer[s : s + n].tobytes() for s, n in zip(starts, lengths, strict=True)]
    assert batch.tolist() == expected
    assert list(batch) == expected
    assert all(type(r) is bytes for r in batch.tolist())


def test_a_pickled_batch_holds_only_the_bytes_its_records_cover() -> None:
    import pickle

    # Two records in the middle of a 4 MiB read block, keys by record number.
    records = [b"abc", b"de"]
    segment = framed(records, gap=4, head=4 << 20)
    tail = np.concatenate([segment.buffer, np.zeros(1 << 20, np.uint8)])
    batch = assemble(
        [Segment(tail, segment.starts, segment.lengths)], [KeyRun(b"f.txt", 2, range(7, 9))]
    )
    data = pickle.dumps(batch)
    assert len(data) < 2000
    back = pickle.loads(data)
    assert back.tolist() == records
    assert back.keys() == [b"f.txt:7", b"f.txt:8"]
    assert back.work_item(1) == b"f.txt"


def test_key_runs_with_a_stem_make_keys_from_it_in_every_view() -> None:
    # Database rows: work item "sql:t?key=id", keys b"t:<id>" made only when asked for.
    import pickle

    data = np.frombuffer(b"abcdef", np.uint8)
    segment = Segment(data, np.arange(6, dtype=np.int64), np.ones(6, np.int64))
    ids = np.array([-5, 3, 4, 5, 2**62, 9], np.int64)
    batch = assemble([segment], [KeyRun(b"sql:t?key=id", 6, ids, None, b"t:")])
    want = [b"t:-5", b"t:3", b"t:4", b"t:5", b"t:%d" % 2**62, b"t:9"]
    assert batch.keys() == want
    assert [batch.key(i) for i in range(6)] == want
    assert batch[1:4].keys() == want[1:4]  # consecutive ids: the range path
    assert batch.take([5, 0]).keys() == [want[5], want[0]]
    assert pickle.loads(pickle.dumps(batch)).keys() == want
    assert concat([batch[:2], batch[4:]]).keys() == want[:2] + want[4:]
    assert batch.work_item(2) == b"sql:t?key=id"
    assert batch.describe(0) == "record b't:-5' of work item b'sql:t?key=id'"
