"""parse_example / parse_single_example on a RecordBatch: the same results and errors as on a
list of bytes with the batch's keys, read from the reader's buffers, with errors and dead
letters naming the work item and record key of the bad record."""

from __future__ import annotations

from typing import Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble

WORK = b"shard-3.tfrecord"

SPECS: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
    "image": ar.FixedLenFeature([3], "float"),
    "label": ar.FixedLenFeature([], "int64"),
    "pair": ar.FixedLenFeature([2], "int64", default_value=[7, 8]),
    "tag": ar.VarLenFeature("string"),
    "ids": ar.VarLenFeature("int64"),
    "name": ar.FixedLenFeature([], "string", default_value=b"?"),
}


def tfrecord_segment(records: list[bytes]) -> tuple[Segment, np.ndarray]:
    """``records`` in one block as a TFRecord file holds them (each payload between a
    12-byte header and a 4-byte footer), and the byte offset of each record's header."""
    block = bytearray()
    starts, offsets = [], []
    for record in records:
        offsets.append(len(block))
        block += b"\xee" * 12
        starts.append(len(block))
        block += record + b"\xee" * 4
    segment = Segment(
        np.frombuffer(bytes(block), np.uint8),
        np.array(starts, np.int64),
        np.array([len(r) for r in records], np.int64),
    )
    return segment, np.array(offsets, np.int64)


def tfrecord_block(records: list[bytes], *, work: bytes = WORK) -> RecordBatch:
    """A batch read from a TFRecord block, keyed by the byte offset of each record's header,
    as the TFRecord reader keys them."""
    segment, offsets = tfrecord_segment(records)
    return assemble([segment], [KeyRun(work, len(records), offsets)])


def example(**features: Any) -> bytes:
    return ar.Example(features).SerializeToString()


def uniform(count: int, *, seed: int = 0) -> list[bytes]:
    """Examples that share one byte layout (values of the same encoded size)."""
    rng = np.random.default_rng(seed)
    return [
        example(
            image=rng.standard_normal(3).astype(np.float32),
            label=int(rng.integers(0, 100)),
            pair=[int(v) for v in rng.integers(0, 100, 2)],
            tag=[b"ab", b"c"],
            ids=[int(rng.integers(0, 100))],
            name=b"n%02d" % i,
        )
        for i in range(count)
    ]


def outcome(fn: Any) -> tuple[str, Any]:
    """``fn()``'s result, or its error as (type, text, record, work item)."""
    try:
        return "ok", fn()
    except ar.AsyncReaderError as exc:
        return "error", (type(exc), str(exc), exc.record, exc.work_item)


def assert_same(got: dict[str, Any], expected: dict[str, Any]) -> None:
    assert list(got) == list(expected)
    for name, want in expected.items():
        have = got[name]
        if isinstance(want, np.ndarray):
            assert isinstance(have, np.ndarray)
            assert have.dtype == want.dtype, name
            assert have.shape == want.shape, name
            if want.dtype == object:
                assert have.tolist() == want.tolist(), name
            else:
                assert have.tobytes() == want.tobytes(), name  # bit for bit, NaNs included
        else:
            assert isinstance(have, ar.SparseTensorValue)
            assert have.indices.tolist() == want.indices.tolist(), name
            assert have.dense_shape.tolist() == want.dense_shape.tolist(), name
            assert have.values.dtype == want.values.dtype, name
            assert have.values.tolist() == want.values.tolist() or (
                have.values.tobytes() == want.values.tobytes()
            ), name


def assert_same_outcome(batch: RecordBatch, **kwargs: Any) -> tuple[str, Any]:
    expected = outcome(lambda: ar.parse_example(batch.tolist(), SPECS, keys=batch.keys(), **kwargs))
    got = outcome(lambda: ar.parse_example(batch, SPECS, **kwargs))
    assert got[0] == expected[0], (got, expected)
    if got[0] == "ok":
        assert_same(got[1], expected[1])
    else:
        assert got[1] == expected[1]
    return got


# --- property: a RecordBatch parses exactly as its records with its keys ---------------

float32s = st.floats(width=32, allow_nan=True, allow_infinity=True)
small_or_any_int = st.one_of(st.integers(0, 127), st.integers(-(2**63), 2**63 - 1))
laid_out = st.fixed_dictionaries(
    {
        "image": st.lists(float32s, min_size=3, max_size=3).map(lambda v: ("float_list", v)),
        "label": st.lists(small_or_any_int, min_size=1, max_size=1).map(
            lambda v: ("int64_list", v)
        ),
        "pair": st.one_of(
            st.none(),
            st.lists(st.integers(0, 300), min_size=1, max_size=3).map(lambda v: ("int64_list", v)),
        ),
        "tag": st.lists(st.binary(max_size=2), max_size=2).map(lambda v: ("bytes_list", v)),
    }
)
anything = st.dictionaries(
    st.sampled_from(["image", "label", "pair", "tag", "ids", "name", "other"]),
    st.one_of(
        st.none(),
        st.lists(st.binary(max_size=4), max_size=3).map(lambda v: ("bytes_list", v)),
        st.lists(float32s, max_size=4).map(lambda v: ("float_list", v)),
        st.lists(small_or_any_int, max_size=3).map(lambda v: ("int64_list", v)),
    ),
    max_size=4,
)


def serialize(features: dict[str, Any]) -> bytes:
    return ar.Example(
        {
            key: ar.Feature() if value is None else ar.Feature(**{value[0]: value[1]})
            for key, value in features.items()
        }
    ).SerializeToString()


records_strategy = st.lists(
    st.one_of(
        laid_out.map(serialize),
        laid_out.map(serialize),
        anything.map(serialize),
        st.binary(max_size=12),  # mostly not an Example
    ),
    max_size=12,
)


QUICK = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRESS = settings(max_examples=5_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PROPERTY = {"records": records_strategy, "repeat": st.integers(0, 6)}


def batch_parses_like_the_list_with_its_keys(records: list[bytes], repeat: int) -> None:
    # Repeating the first record gives long runs of one layout (the numpy path).
    records = records[:1] * repeat + records
    assert_same_outcome(tfrecord_block(records))


def skipping_batch_matches_the_list(records: list[bytes], repeat: int) -> None:
    records = records[:1] * repeat + records
    batch = tfrecord_block(records)
    from_list = ar.DecodeErrors("skip")
    expected = outcome(
        lambda: ar.parse_example(batch.tolist(), SPECS, keys=batch.keys(), on_error=from_list)
    )
    from_batch = ar.DecodeErrors("skip")
    got = outcome(lambda: ar.parse_example(batch, SPECS, on_error=from_batch))
    assert got[0] == expected[0] == "ok"
    assert_same(got[1], expected[1])
    assert from_batch.kept.tolist() == from_list.kept.tolist()
    assert [(d.work_item, d.record, d.index, str(d.error)) for d in from_batch.dead_letters] == [
        (d.work_item, d.record, d.index, str(d.error)) for d in from_list.dead_letters
    ]


test_batch_parses_like_the_list = QUICK(given(**PROPERTY)(batch_parses_like_the_list_with_its_keys))
test_batch_parses_like_the_list_stress = pytest.mark.stress(
    STRESS(given(**PROPERTY)(batch_parses_like_the_list_with_its_keys))
)
test_skipping_batch_matches_the_list = QUICK(given(**PROPERTY)(skipping_batch_matches_the_list))
test_skipping_batch_matches_the_list_stress = pytest.mark.stress(
    STRESS(given(**PROPERTY)(skipping_batch_matches_the_list))
)


# --- the shared layout, read from the block ---------------------------------------------


def test_tfrecord_block_is_parsed_without_an_object_per_record() -> None:
    records = uniform(64)
    batch = tfrecord_block(records)
    expected = ar.parse_example(records, SPECS)
    got_items = []
    real_getitem = RecordBatch.__getitem__

    def counting_getitem(self: RecordBatch, index: Any) -> Any:
        got_items.append(index)
        return real_getitem(self, index)

    def refuse(self: RecordBatch) -> Any:
        raise AssertionError("records were turned into objects one by one")

    with (
        mock.patch.object(RecordBatch, "__getitem__", counting_getitem),
        mock.patch.object(RecordBatch, "__iter__", refuse),
        mock.patch.object(RecordBatch, "tolist", refuse),
    ):
        got = ar.parse_example(batch, SPECS)
    assert got_items == [0]  # only the first record, to learn the layout
    assert_same(got, expected)
    image = got["image"]
    assert isinstance(image, np.ndarray)
    assert image.flags.writeable
    assert image.flags.c_contiguous
    assert not np.shares_memory(image, batch.data)  # the result does not pin the block
    image[:] = 0  # and writing to it leaves the records as read
    assert batch.tolist() == records


def test_dense_values_come_out_right_from_the_block() -> None:
    images = np.arange(30, dtype=np.float32).reshape(10, 3) - 7.5
    records = [example(image=images[i], label=i * 1000, pair=[i, -i], name=b"x") for i in range(10)]
    got: dict[str, Any] = ar.parse_example(tfrecord_block(records), SPECS)
    assert got["image"].tolist() == images.tolist()
    assert got["label"].tolist() == [i * 1000 for i in range(10)]
    assert got["pair"].tolist() == [[i, -i] for i in range(10)]
    assert got["name"].tolist() == [b"x"] * 10
    ids = got["ids"]
    assert isinstance(ids, ar.SparseTensorValue)
    assert ids.dense_shape.tolist() == [10, 0]


def test_mixed_lengths_parse_like_the_list() -> None:
    # Labels below 128 take one byte, larger ones more: three lengths in one batch, each
    # with several examples, and two records that are not laid out like the first.
    records = []
    for i in range(24):
        label = [5, 300, 70000][i % 3] + i
        records.append(example(image=np.full(3, i, np.float32), label=label, tag=[b"t"]))
    records[7] = example(tag=[b"first"], label=1, image=np.zeros(3, np.float32))  # other order
    records[13] = example(image=np.ones(3, np.float32), label=2, tag=[b"t"], other=b"zz")
    batch = tfrecord_block(records)
    assert len(set(batch.lengths.tolist())) > 2
    kind, got = assert_same_outcome(batch)
    assert kind == "ok"
    labels = got["label"].tolist()
    assert labels[:3] == [5, 301, 70002]
    assert labels[7] == 1
    assert labels[13] == 2
    assert got["image"][13].tolist() == [1.0, 1.0, 1.0]


def test_a_batch_from_records_parses_like_the_list() -> None:
    records = [*uniform(9, seed=4), example(label=3, image=np.zeros(3, np.float32))]
    keys = [b"a.tfrecord:%d" % (i * 100) for i in range(len(records))]
    batch = RecordBatch.from_records(keys, records, work=b"a.tfrecord")
    assert_same(ar.parse_example(batch, SPECS), ar.parse_example(records, SPECS))
    assert_same_outcome(batch)


def test_a_batch_over_two_blocks_and_two_work_items() -> None:
    # A read that crossed from one file's last block into the next file's first.
    records = uniform(10, seed=5)
    records[8] = example(image=np.zeros(3, np.float32), label=b"not a number")
    keys = [KeyRun(b"a", 6, np.arange(6) * 10), KeyRun(b"b", 4, np.arange(4) * 10)]
    batch = assemble([tfrecord_segment(records[:6])[0], tfrecord_segment(records[6:])[0]], keys)
    kind, error = assert_same_outcome(batch)
    assert kind == "error"
    assert error[2:] == (b"b:20", b"b")
    records[8] = records[7]
    batch = assemble([tfrecord_segment(records[:6])[0], tfrecord_segment(records[6:])[0]], keys)
    kind, got = assert_same_outcome(batch)
    assert kind == "ok"
    assert_same(got, ar.parse_example(records, SPECS))


def test_an_empty_batch_gives_empty_results() -> None:
    got: dict[str, Any] = ar.parse_example(tfrecord_block([]), SPECS)
    assert_same(got, ar.parse_example([], SPECS))
    assert got["image"].shape == (0, 3)


# --- errors name the work item and record key -------------------------------------------


def test_a_missing_required_feature_names_the_record() -> None:
    records = uniform(8)
    records[5] = example(image=np.zeros(3, np.float32), tag=[b"x"])  # no label
    batch = tfrecord_block(records)
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example(batch, SPECS)
    assert info.value.work_item == WORK
    assert info.value.record == batch.key(5)
    assert info.value.record == WORK + b":%d" % int(batch.starts[5] - 12)
    assert info.value.message.startswith(
        "Name: <unknown>, Feature: label (data type: int64) is required"
    )
    assert repr(batch.key(5).decode())[1:-1] in str(info.value)


def test_a_corrupt_record_names_the_record() -> None:
    records = [*uniform(6), b"\x0a\x05broken", *uniform(3)]
    batch = tfrecord_block(records)
    with pytest.raises(ar.InvalidArgumentError, match="Could not parse example input") as info:
        ar.parse_example(batch, SPECS)
    assert (info.value.work_item, info.value.record) == (WORK, batch.key(6))


def test_wrong_float_count_in_a_shared_layout_names_the_first_record() -> None:
    # Every example has the layout, but with 4 floats where the spec asks for 3.
    records = [example(image=np.full(4, i, np.float32), label=i) for i in range(6)]
    batch = tfrecord_block(records)
    kind, error = assert_same_outcome(batch)
    assert kind == "error"
    assert error[0] is ar.InvalidArgumentError
    assert "Number of float values != expected.  Values size: 4 but output shape: [3]" in error[1]
    assert error[2:] == (batch.key(0), WORK)


@pytest.mark.parametrize(
    ("good", "bad", "size"),
    [
        (lambda i: [i, i + 1], [300], 1),  # two bytes each: one value where two are needed
        (lambda i: [i, 200 + i], [1, 2, 3], 3),  # three bytes each: three values
    ],
)
def test_varints_of_another_count_in_a_shared_layout_name_their_record(
    good: Any, bad: list[int], size: int
) -> None:
    # Same bytes, same layout, but a different number of values in one example.
    image = np.zeros(3, np.float32)
    records = [example(pair=good(i), label=1, image=image) for i in range(6)]
    records[4] = example(pair=bad, label=1, image=image)
    batch = tfrecord_block(records)
    assert len(set(batch.lengths.tolist())) == 1
    kind, error = assert_same_outcome(batch)
    assert kind == "error"
    assert (
        f"Number of int64 values != expected.  Values size: {size} but output shape: [2]"
        in error[1]
    )
    assert error[2:] == (batch.key(4), WORK)


def test_an_over_long_varint_in_a_shared_layout_names_its_record() -> None:
    def with_label(stream: bytes) -> bytes:
        # label: int64_list with a packed stream of exactly 11 bytes.
        inner = b"\x0a" + bytes([len(stream)]) + stream
        feature = b"\x1a" + bytes([len(inner)]) + inner
        entry = b"\x0a\x05label\x12" + bytes([len(feature)]) + feature
        return b"\x0a" + bytes([len(entry) + 2]) + b"\x0a" + bytes([len(entry)]) + entry

    fine = b"\x80" * 9 + b"\x01" + b"\x05"  # two varints: one of 10 bytes and one of 1
    records = [with_label(fine) for _ in range(6)]
    records[3] = with_label(b"\x80" * 10 + b"\x01")  # one varint of 11 bytes
    batch = tfrecord_block(records)
    specs = {"label": ar.FixedLenFeature([2], "int64")}
    expected = outcome(lambda: ar.parse_example(batch.tolist(), specs, keys=batch.keys()))
    got = outcome(lambda: ar.parse_example(batch, specs))
    assert got == expected
    assert got[0] == "error"
    assert got[1][2:] == (batch.key(3), WORK)


def test_explicit_keys_and_names_are_used() -> None:
    records = uniform(6)
    records[2] = b"\xff"
    batch = tfrecord_block(records)
    keys = [b"other:%d" % i for i in range(6)]
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example(batch, SPECS, keys=keys)
    assert (info.value.work_item, info.value.record) == (b"other", b"other:2")
    records[2] = example(label=b"text", image=np.zeros(3, np.float32))
    with pytest.raises(
        ar.InvalidArgumentError, match=r"^Name: ex2, Key: label, Index: 2\."
    ) as info:
        ar.parse_example(tfrecord_block(records), SPECS, example_names=[f"ex{i}" for i in range(6)])
    assert info.value.record == tfrecord_block(records).key(2)
    with pytest.raises(ar.InvalidArgumentError, match="keys has 1 entries for 6 records"):
        ar.parse_example(batch, SPECS, keys=[b"x:1"])
    with pytest.raises(ar.InvalidArgumentError, match=r"len\(example_names\) == len\(serialized\)"):
        ar.parse_example(batch, SPECS, example_names=["a"])


def test_skipping_notes_dead_letters_by_key() -> None:
    records = uniform(12, seed=2)
    records[2] = b"\x0a\x02\x0a"  # truncated
    records[9] = example(image=np.zeros(2, np.float32), label=1)  # two floats, not three
    batch = tfrecord_block(records)
    errors = ar.DecodeErrors("skip")
    got = ar.parse_example(batch, SPECS, on_error=errors)
    kept = [i for i in range(12) if i not in (2, 9)]
    assert errors.kept.tolist() == kept
    assert [(d.work_item, d.record, d.index) for d in errors.dead_letters] == [
        (WORK, batch.key(2), 2),
        (WORK, batch.key(9), 9),
    ]
    assert all(isinstance(d.error, ar.InvalidArgumentError) for d in errors.dead_letters)
    assert all(d.error.record == d.record for d in errors.dead_letters)
    assert_same(got, ar.parse_example([records[i] for i in kept], SPECS))
    # The policy's limit stops the stage with the error of the record that exceeded it.
    strict = ar.DecodeErrors(ar.ErrorPolicy(skip=True, max_errors=1))
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example(batch, SPECS, on_error=strict)
    assert info.value.record == batch.key(9)


# --- parse_single_example ---------------------------------------------------------------


def test_parse_single_example_of_a_one_record_batch() -> None:
    (record,) = uniform(1)
    batch = tfrecord_block([record])
    assert_same(ar.parse_single_example(batch, SPECS), ar.parse_single_example(record, SPECS))
    bad = tfrecord_block([example(image=np.zeros(3, np.float32))])
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_single_example(bad, SPECS)
    assert info.value.message == (
        "Feature: label (data type: int64) is required but could not be found."
    )
    assert (info.value.work_item, info.value.record) == (WORK, bad.key(0))
    with pytest.raises(ar.InvalidArgumentError, match="Could not parse example") as info:
        ar.parse_single_example(tfrecord_block([b"\xff"]), SPECS)
    assert info.value.record == WORK + b":0"


def test_parse_single_example_needs_exactly_one_record() -> None:
    for count in (0, 2):
        with pytest.raises(
            ar.InvalidArgumentError, match=f"needs a RecordBatch of one record, got {count}"
        ):
            ar.parse_single_example(tfrecord_block(uniform(count)), SPECS)
