"""The decode stage's error policy: DecodeErrors with decode_csv, decode_raw, parse_example."""

from __future__ import annotations

import random
import threading
from typing import TYPE_CHECKING

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

DEFAULTS: list[object] = [[0], [0.0], [""]]


def keys_for(count: int, work: str = "data.csv") -> list[bytes]:
    return [f"{work}:{i + 1}".encode() for i in range(count)]


def assert_columns_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype
        assert g.shape == w.shape
        assert g.tolist() == w.tolist()


# --- decode_csv ------------------------------------------------------------------------

BAD_LINES = {
    b"x,1.5,a": "is not a valid int32",  # a value that does not parse
    b"1,2.5": "Expect 3 fields but have 2",  # too few fields
    b'1,2,"a"b': "Quote inside a string",  # a badly quoted field
    b"1,2\n5,c": "Unquoted fields cannot have",  # LF inside an unquoted field
}


def test_csv_skips_each_kind_of_bad_record_and_keeps_the_rest() -> None:
    lines = [b"1,1.5,a", *BAD_LINES, b"2,2.5,b", b"3,,c"]
    keys = keys_for(len(lines))
    errors = ar.DecodeErrors()
    label, value, text = ar.decode_csv(lines, DEFAULTS, on_error=errors, keys=keys)
    assert label.tolist() == [1, 2, 3]
    assert value.tolist() == [1.5, 2.5, 0.0]
    assert text.tolist() == [b"a", b"b", b"c"]
    assert errors.kept.tolist() == [0, 5, 6]
    assert errors.errors_skipped == 4
    assert errors.records_decoded == 3
    letters = errors.dead_letters
    assert [letter.index for letter in letters] == [1, 2, 3, 4]
    for letter, (line, message) in zip(letters, BAD_LINES.items(), strict=True):
        assert letter.work_item == b"data.csv"
        assert letter.record == keys[lines.index(line)]
        assert not letter.rest_of_work_item
        assert isinstance(letter.error, ar.InvalidArgumentError)
        assert message in str(letter.error)
        assert "'data.csv'" in str(letter.error)


def test_csv_missing_required_field_is_skipped() -> None:
    errors = ar.DecodeErrors("skip")
    _, out = ar.decode_csv([b"1,2", b"3,", b"4,5"], [[0], np.int64], on_error=errors)
    assert out.tolist() == [2, 5]
    assert errors.kept.tolist() == [0, 2]
    (letter,) = errors.dead_letters
    assert letter.work_item == b""
    assert letter.record is None
    assert letter.index == 1
    assert "Field 1 is required but missing in record 1" in str(letter.error)


def test_csv_raise_with_keys_names_the_file_and_record() -> None:
    lines = [b"1,1.5,a", b"2,oops,b"]
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_csv(lines, DEFAULTS, keys=keys_for(2, "train.csv"))
    assert info.value.work_item == b"train.csv"
    assert info.value.record == b"train.csv:2"
    assert "Field 1 in record 1 is not a valid float" in str(info.value)
    assert "'train.csv'" in str(info.value)


def test_csv_raise_policy_in_decode_errors_counts_and_raises() -> None:
    errors = ar.DecodeErrors("raise")
    ar.decode_csv([b"1", b"2"], [[0]], on_error=errors)
    assert errors.kept.tolist() == [0, 1]
    assert errors.records_decoded == 2
    with pytest.raises(ar.InvalidArgumentError, match="not a valid int32"):
        ar.decode_csv([b"1", b"z"], [[0]], on_error=errors)
    assert errors.errors_skipped == 0


def test_csv_good_batch_keeps_its_shape_and_kept_is_everything() -> None:
    errors = ar.DecodeErrors()
    lines = [f"{i},{i / 2},s{i}".encode() for i in range(100)]
    got = ar.decode_csv(lines, DEFAULTS, on_error=errors)
    assert_columns_equal(got, ar.decode_csv(lines, DEFAULTS))
    assert errors.kept.tolist() == list(range(100))
    assert errors.dead_letters == ()


def test_csv_batch_of_only_bad_records_gives_empty_columns() -> None:
    errors = ar.DecodeErrors()
    lines = [b"bad,1.0,x"] * 1000
    label, value, text = ar.decode_csv(lines, DEFAULTS, on_error=errors)
    assert label.shape == value.shape == text.shape == (0,)
    assert [label.dtype, value.dtype, text.dtype] == [np.int32, np.float32, object]
    assert errors.kept.size == 0
    assert errors.errors_skipped == 1000
    assert sorted(letter.index or 0 for letter in errors.dead_letters) == list(range(1000))


def test_csv_argument_errors_are_never_skipped() -> None:
    errors = ar.DecodeErrors()
    with pytest.raises(ar.InvalidArgumentError, match="field_delim"):
        ar.decode_csv([b"1"], [[0]], field_delim="ab", on_error=errors)
    with pytest.raises(ar.InvalidArgumentError, match="1-D batch"):
        ar.decode_csv([[b"1"], [b"2"]], [[0]], on_error=errors)
    with pytest.raises(ar.InvalidArgumentError, match="1-D batch"):
        ar.decode_csv(b"1", [[0]], on_error=errors)
    with pytest.raises(ar.InvalidArgumentError, match="keys has 1 entries for 2 records"):
        ar.decode_csv([b"1", b"2"], [[0]], on_error=errors, keys=[b"k:1"])
    assert errors.errors_skipped == 0


@pytest.mark.parametrize("on_error", ["skip", ar.ErrorPolicy(skip=True)])
def test_skipping_needs_a_decode_errors(on_error: object) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="DecodeErrors"):
        ar.decode_csv([b"1"], [[0]], on_error=on_error)  # type: ignore[arg-type]


def test_max_errors_counts_across_batches() -> None:
    errors = ar.DecodeErrors(ar.ErrorPolicy(skip=True, max_errors=2), name="csv stage")
    ar.decode_csv([b"1", b"x"], [[0]], on_error=errors)
    ar.decode_csv([b"y", b"2"], [[0]], on_error=errors)
    with pytest.raises(ar.InvalidArgumentError, match="not a valid int32: z") as info:
        ar.decode_csv([b"3", b"z"], [[0]], on_error=errors, keys=[b"f:5", b"f:6"])
    assert info.value.record == b"f:6"
    assert any("csv stage: more than 2 bad records" in note for note in info.value.__notes__)
    assert errors.errors_skipped == 3
    assert errors.dead_letters[-1].record == b"f:6"


def test_max_error_fraction() -> None:
    policy = ar.ErrorPolicy(skip=True, max_error_fraction=0.1, min_records=20)
    errors = ar.DecodeErrors(policy)
    ar.decode_csv([b"1"] * 19 + [b"x"], [[0]], on_error=errors)  # 1 in 20: within 10%
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_csv([b"x", b"x", b"x"], [[0]], on_error=errors)
    assert any("over 10.0%" in note for note in info.value.__notes__)


def test_kept_before_any_batch_is_an_error() -> None:
    with pytest.raises(ar.FailedPreconditionError, match="has not decoded"):
        ar.DecodeErrors().kept  # noqa: B018


def test_kept_is_per_thread() -> None:
    errors = ar.DecodeErrors()
    ar.decode_csv([b"1", b"x", b"3"], [[0]], on_error=errors)
    seen: list[list[int]] = []

    def other() -> None:
        ar.decode_csv([b"x", b"2"], [[0]], on_error=errors)
        seen.append(errors.kept.tolist())

    thread = threading.Thread(target=other)
    thread.start()
    thread.join()
    assert seen == [[1]]
    assert errors.kept.tolist() == [0, 2]
    assert errors.errors_skipped == 2


def valid_line(rng: random.Random) -> bytes:
    return f"{rng.randint(-99, 99)},{rng.random():.3f},{rng.choice('abc')}".encode()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), max_size=60), st.integers(0, 2**32 - 1))
def test_csv_skip_keeps_exactly_the_good_records(bad_mask: list[bool], seed: int) -> None:
    rng = random.Random(seed)
    bad_kinds = list(BAD_LINES)
    lines = [rng.choice(bad_kinds) if bad else valid_line(rng) for bad in bad_mask]
    errors = ar.DecodeErrors()
    got = ar.decode_csv(lines, DEFAULTS, on_error=errors)
    good = [i for i, bad in enumerate(bad_mask) if not bad]
    assert errors.kept.tolist() == good
    assert_columns_equal(got, ar.decode_csv([lines[i] for i in good], DEFAULTS))
    assert sorted(letter.index or 0 for letter in errors.dead_letters) == [
        i for i, bad in enumerate(bad_mask) if bad
    ]


@pytest.mark.anyio
async def test_text_reader_into_csv_decoder_names_the_bad_lines(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_bytes(b"1,1.0,a\n2,broken,b\n3,3.0,c\n4,4.0\n5,5.0,e\n")
    queue = ar.FIFOQueue(1, dtypes=None)
    await queue.enqueue(str(path))
    await queue.close()
    reader = ar.TextLineReader()
    errors = ar.DecodeErrors()
    keys, lines = await reader.read_up_to(queue, 10)
    label, _, _ = ar.decode_csv(lines, DEFAULTS, on_error=errors, keys=keys)
    assert label.tolist() == [1, 3, 5]
    assert [keys[i] for i in errors.kept] == [f"{path}:{n}".encode() for n in (1, 3, 5)]
    assert [letter.record for letter in errors.dead_letters] == [
        f"{path}:{n}".encode() for n in (2, 4)
    ]
    assert {letter.work_item for letter in errors.dead_letters} == {str(path).encode()}


# --- decode_raw ------------------------------------------------------------------------


def test_raw_skips_records_of_another_size() -> None:
    values = [b"abcd", b"ab", b"efgh", b"abc", b"ijkl"]
    keys = keys_for(5, "img.tfrecord")
    errors = ar.DecodeErrors()
    out = ar.decode_raw(values, np.uint8, on_error=errors, keys=keys)
    assert out.tolist() == [list(b"abcd"), list(b"efgh"), list(b"ijkl")]
    assert errors.kept.tolist() == [0, 2, 4]
    assert [(d.record, d.index) for d in errors.dead_letters] == [(keys[1], 1), (keys[3], 3)]
    assert "element 1 has size 4 != 2" in str(errors.dead_letters[0].error)


def test_raw_expected_size_is_the_most_common_multiple_of_the_item_size() -> None:
    errors = ar.DecodeErrors()
    # The first record is the odd one: TensorFlow would blame every other record.
    values = [b"\x01\x00", b"\x02\x00\x00\x00", b"\x03\x00\x00\x00", b"\x04\x00\x00"]
    out = ar.decode_raw(values, np.int16, on_error=errors)
    assert out.tolist() == [[2, 0], [3, 0]]
    assert errors.kept.tolist() == [1, 2]
    messages = [str(letter.error) for letter in errors.dead_letters]
    assert "has size 4 != 2" in messages[0]
    assert "length 3 that is not a multiple of 2" in messages[1]


def test_raw_all_records_bad() -> None:
    errors = ar.DecodeErrors()
    out = ar.decode_raw([b"abc", b"de"], np.int32, on_error=errors)
    assert out.shape == (0, 0)
    assert out.dtype == np.int32
    assert errors.errors_skipped == 2


def test_raw_raise_with_keys_and_fixed_length() -> None:
    keys = keys_for(2, "x.bin")
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw([b"ab", b"abc"], np.uint8, keys=keys)
    assert info.value.record == b"x.bin:2"
    errors = ar.DecodeErrors()
    out = ar.decode_raw([b"ab", b"abc"], np.uint8, fixed_length=2, on_error=errors, keys=keys)
    assert out.tolist() == [[97, 98], [97, 98]]
    assert errors.kept.tolist() == [0, 1]
    assert errors.dead_letters == ()


def test_raw_with_keys_keeps_plain_shapes() -> None:
    errors = ar.DecodeErrors("raise")
    assert ar.decode_raw([], np.uint8, keys=[], on_error=errors).shape == (0, 0)
    nested = ar.decode_raw([[b"ab"], [b"cd"]], np.uint8, keys=[b"f:1", b"f:2"])
    assert nested.tolist() == [[[97, 98]], [[99, 100]]]
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw([[b"ab"], [b"c"]], np.uint8, keys=[b"f:1", b"f:2"])
    assert info.value.record == b"f:2"


def test_record_index_is_not_repeated_but_a_longer_number_is_not_taken_for_it() -> None:
    assert str(ar.InvalidArgumentError("bad in record 1", record=1)) == "bad in record 1"
    assert str(ar.InvalidArgumentError("bad in record 10", record=1)).endswith("(record 1)")


def test_raw_good_batch_matches_plain_decode() -> None:
    values = [bytes(range(i, i + 8)) for i in range(50)]
    errors = ar.DecodeErrors()
    out = ar.decode_raw(values, np.float32, little_endian=False, on_error=errors)
    np.testing.assert_array_equal(out, ar.decode_raw(values, np.float32, little_endian=False))
    assert errors.kept.tolist() == list(range(50))


# --- parse_example ---------------------------------------------------------------------

SPEC: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
    "label": ar.FixedLenFeature([], np.int64),
    "image": ar.FixedLenFeature([4], np.float32),
    "tags": ar.VarLenFeature(np.bytes_),
}


def example(label: int, tags: int) -> bytes:
    return ar.Example(
        {
            "label": label,
            "image": np.full(4, label, np.float32),
            "tags": ar.Feature(bytes_list=[f"t{j}".encode() for j in range(tags)]),
        }
    ).SerializeToString()


BAD_EXAMPLES = [
    b"\x0a\xff\xff",  # not an Example
    ar.Example({"image": np.zeros(4, np.float32)}).SerializeToString(),  # label missing
    ar.Example({"label": 1.5, "image": np.zeros(4, np.float32)}).SerializeToString(),  # type
    ar.Example({"label": 1, "image": np.zeros(3, np.float32)}).SerializeToString(),  # count
]


def assert_parsed_equal(got: Mapping[str, object], want: Mapping[str, object]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        g, w = got[name], want[name]
        if isinstance(w, ar.SparseTensorValue):
            assert isinstance(g, ar.SparseTensorValue)
            for a, b in zip(g, w, strict=True):
                assert a.tolist() == b.tolist()
        else:
            assert isinstance(g, np.ndarray)
            assert isinstance(w, np.ndarray)
            assert g.dtype == w.dtype
            assert g.tolist() == w.tolist()


def test_parse_example_skips_each_kind_of_bad_example() -> None:
    batch = [example(1, 2), *BAD_EXAMPLES, example(2, 0), example(3, 3)]
    keys = keys_for(len(batch), "ex.tfrecord")
    errors = ar.DecodeErrors()
    got = ar.parse_example(batch, SPEC, on_error=errors, keys=keys)
    good = [batch[0], batch[5], batch[6]]
    assert_parsed_equal(got, ar.parse_example(good, SPEC))
    assert errors.kept.tolist() == [0, 5, 6]
    assert sorted(d.index or 0 for d in errors.dead_letters) == [1, 2, 3, 4]
    assert {d.record for d in errors.dead_letters} == set(keys[1:5])


def test_parse_example_error_messages_use_positions_in_the_whole_batch() -> None:
    batch = [example(i, 1) for i in range(6)]
    batch[4] = BAD_EXAMPLES[2]
    names = [f"n{i}" for i in range(6)]
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example(batch, SPEC, example_names=names)
    assert "Name: n4, Key: label, Index: 4." in str(info.value)
    errors = ar.DecodeErrors()
    batch[1] = BAD_EXAMPLES[3]
    ar.parse_example(batch, SPEC, example_names=names, on_error=errors)
    messages = sorted(str(d.error) for d in errors.dead_letters)
    assert "Name: n1, Key: image, Index: 1." in messages[0]
    assert "Name: n4, Key: label, Index: 4." in messages[1]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.integers(-1, 3), max_size=40))
def test_parse_example_skip_keeps_exactly_the_good_examples(kinds: list[int]) -> None:
    # -1 .. 3: a bad example of that kind (0-3) or, for -1, a good one.
    batch = [example(i, i % 4) if kind < 0 else BAD_EXAMPLES[kind] for i, kind in enumerate(kinds)]
    errors = ar.DecodeErrors()
    got = ar.parse_example(batch, SPEC, on_error=errors)
    good = [i for i, kind in enumerate(kinds) if kind < 0]
    assert errors.kept.tolist() == good
    assert_parsed_equal(got, ar.parse_example([batch[i] for i in good], SPEC))
