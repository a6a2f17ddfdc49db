"""parse_example's lockstep path (examples that share a structure, not a length): the same
results and errors as parsing every example by itself, for lists of bytes and RecordBatches,
with examples that leave the structure anywhere in the batch."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._decoders import example as example_module
from asyncreader._decoders import example_layout, example_lockstep, wire
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble

if TYPE_CHECKING:
    from collections.abc import Iterator

Spec = dict[str, ar.FixedLenFeature | ar.VarLenFeature]

#: Values whose varints take 1, 1, 2, 6 and 10 bytes, and the extremes of int64.
INTS = [0, 127, 128, 2**35, -1, -(2**63), 2**63 - 1, 300]
#: Bytes lengths with 1- and 2-byte prefixes, and one with a 3-byte prefix.
BYTE_LENGTHS = [0, 1, 127, 128, 5, 20000]

VARYING: Spec = {
    "id": ar.FixedLenFeature([], "int64"),
    "s": ar.VarLenFeature("string"),
    "f": ar.VarLenFeature("float"),
    "pair": ar.FixedLenFeature([2], "float", default_value=[0.5, 1.5]),
    "ids": ar.VarLenFeature("int64"),
    "grid": ar.FixedLenFeature([2, 1], "int64", default_value=[[7], [8]]),
    "absent": ar.FixedLenFeature([], "int64", default_value=5),
    "name": ar.FixedLenFeature([], "string", default_value=b"?"),
}
#: A spec that the varying examples break (a string list that is not always one value).
STRICT: Spec = {
    "id": ar.FixedLenFeature([], "int64"),
    "s": ar.FixedLenFeature([], "string"),
    "ids": ar.FixedLenFeature([2], "int64"),
}


def entry(key: bytes, feature: bytes) -> bytes:
    body = b"\x0a" + wire.encode_varint(len(key)) + key + b"\x12"
    body += wire.encode_varint(len(feature)) + feature
    return b"\x0a" + wire.encode_varint(len(body)) + body


def example_of(entries: list[bytes]) -> bytes:
    body = b"".join(entries)
    return b"\x0a" + wire.encode_varint(len(body)) + body


def ints(values: list[int]) -> bytes:
    return wire.encode_feature(wire.INT64, np.array(values, dtype=np.int64))


def floats(values: list[float]) -> bytes:
    return wire.encode_feature(wire.FLOAT, np.array(values, dtype=np.float32))


def strings(values: list[bytes]) -> bytes:
    return wire.encode_feature(wire.BYTES, values)


def unpacked_ints(values: list[int]) -> bytes:
    body = b"".join(b"\x08" + wire.encode_varint(value) for value in values)
    return b"\x1a" + wire.encode_varint(len(body)) + body


def features(rng: np.random.Generator) -> dict[str, bytes]:
    """One example's serialized Features, in the batch's common structure."""
    text = [bytes(rng.integers(97, 123, int(rng.choice(BYTE_LENGTHS)), dtype=np.uint8))]
    return {
        "f": floats(rng.standard_normal(int(rng.integers(0, 4))).tolist()),
        "grid": ints([int(rng.choice(INTS)) for _ in range(2)]),
        "id": ints([int(rng.choice(INTS))]),
        "ids": ints([int(rng.choice(INTS)) for _ in range(int(rng.integers(0, 4)))]),
        "name": strings([b"n%d" % rng.integers(0, 10 ** int(rng.integers(1, 6)))]),
        "pair": floats(rng.standard_normal(2).tolist()),
        "s": strings(text * int(rng.integers(0, 3))),
        "skip": strings([b"x" * int(rng.integers(0, 200))]),
    }


#: Ways an example departs from the batch's structure, and corruptions.
ODD = [
    "reorder",
    "missing",
    "kind",
    "unpacked",
    "extra",
    "empty-feature",
    "empty-example",
    "repeat-key",
    "unpacked-float",
    "long-prefix",
    "rename",
    "longer-key",
    "merged",
]
CORRUPT = ["truncated", "past-end", "bad-float", "open-varint", "long-varint", "huge-length"]


def build(features_: dict[str, bytes], odd: str | None = None) -> bytes:
    """An example of ``features_``, departing from the common structure as ``odd`` says."""
    feats = dict(features_)
    order = list(feats)
    if odd == "reorder":
        order.reverse()
    elif odd == "missing":
        order.remove("id")
    elif odd == "kind":
        feats["id"] = floats([1.0])
    elif odd == "unpacked":
        feats["ids"] = unpacked_ints([1, 2**40, -3])
    elif odd == "unpacked-float":
        feats["f"] = b"\x12\x05\x0d" + np.float32(2.5).tobytes()
    elif odd == "rename":
        # A key of the same length as the one it replaces.
        feats["t"] = feats.pop("s")
        order[order.index("s")] = "t"
    elif odd == "longer-key":
        # A key that starts with a requested key.
        feats["idz"] = feats.pop("id")
        order[order.index("id")] = "idz"
    elif odd == "merged":
        # Two lists in one Feature: protobuf merges them.
        feats["ids"] = ints([1]) + ints([2, 3])
    elif odd == "extra":
        feats["more"] = ints([1])
        order.append("more")
    elif odd == "empty-feature":
        feats["s"] = b""
    elif odd == "empty-example":
        return b""
    elif odd == "long-prefix":
        # A length written in more bytes than needed is still valid protobuf.
        feats["id"] = b"\x1a\x83\x00\x0a\x01\x05"
    elif odd == "past-end":
        feats["s"] = b"\x0a\x05\x0a\x09abc"
    elif odd == "huge-length":
        # A bytes value's length of 2**64 - 11: taken as an int64, it would lead back to
        # the value's own tag.
        feats["s"] = b"\x0a\x0b\x0a" + wire.encode_varint(2**64 - 11)
    elif odd == "bad-float":
        feats["f"] = b"\x12\x05\x0a\x03abc"
    elif odd == "open-varint":
        feats["ids"] = b"\x1a\x04\x0a\x02\x01\x81"
    elif odd == "long-varint":
        feats["ids"] = b"\x1a\x0e\x0a\x0c" + b"\xff" * 11 + b"\x01"
    entries = [entry(key.encode(), feats[key]) for key in order]
    if odd == "repeat-key":
        entries.append(entry(b"id", ints([42])))
    data = example_of(entries)
    if odd == "truncated":
        data = data[:-1]
    return data


def batch_of(count: int, seed: int, odd: dict[int, str] | None = None) -> list[bytes]:
    rng = np.random.default_rng(seed)
    odd = odd or {}
    return [build(features(rng), odd.get(index)) for index in range(count)]


def record_batch(records: list[bytes]) -> RecordBatch:
    """``records`` in one block between junk headers and footers, as a reader holds them."""
    block = bytearray()
    starts = []
    for record in records:
        block += b"\x80" * 12  # bytes that would continue a varint read past a record
        starts.append(len(block))
        block += record + b"\x0a" * 4
    segment = Segment(
        np.frombuffer(bytes(block), np.uint8),
        np.array(starts, np.int64),
        np.array([len(record) for record in records], np.int64),
    )
    return assemble([segment], [KeyRun(b"part-0", len(records), range(len(records)))])


@contextlib.contextmanager
def path(name: str) -> Iterator[None]:
    """Parse by one path only: ``per-example``, ``lockstep`` (for any batch size) or the
    default choice."""
    layout = 10**9 if name != "default" else example_layout.LAYOUT_MIN_BATCH
    lockstep = {"per-example": 10**9, "lockstep": 1}.get(name, example_lockstep.LOCKSTEP_MIN_BATCH)
    per_feature = 0 if name == "lockstep" else example_lockstep.LOCKSTEP_PER_FEATURE
    with (
        mock.patch.object(example_layout, "LAYOUT_MIN_BATCH", layout),
        mock.patch.object(example_lockstep, "LOCKSTEP_MIN_BATCH", lockstep),
        mock.patch.object(example_lockstep, "LOCKSTEP_PER_FEATURE", per_feature),
    ):
        yield


def outcome(name: str, serialized: object, spec: Spec, **kwargs: Any) -> tuple[str, Any]:
    with path(name):
        try:
            return "ok", ar.parse_example(serialized, spec, **kwargs)
        except ar.AsyncReaderError as exc:
            return "error", (type(exc), str(exc), exc.record, exc.work_item)


def same_array(got: np.ndarray, want: np.ndarray) -> None:
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    assert got.flags.writeable == want.flags.writeable
    if got.dtype == np.float32:
        # Bit for bit (NaNs included).
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
    else:
        assert got.tolist() == want.tolist()


def assert_same(got: tuple[str, Any], want: tuple[str, Any]) -> None:
    assert got[0] == want[0], (got, want)
    if got[0] == "error":
        assert got[1] == want[1]
        return
    assert list(got[1]) == list(want[1])
    for name, value in want[1].items():
        other = got[1][name]
        if isinstance(value, np.ndarray):
            same_array(other, value)
        else:
            assert isinstance(other, ar.SparseTensorValue)
            same_array(other.indices, value.indices)
            same_array(other.values, value.values)
            same_array(other.dense_shape, value.dense_shape)


def check(records: list[bytes], spec: Spec, **kwargs: Any) -> tuple[str, Any]:
    """Both input forms parse alike by the lockstep, default and per-example paths."""
    want = outcome("per-example", records, spec, **kwargs)
    for name in ("lockstep", "default"):
        assert_same(outcome(name, records, spec, **kwargs), want)
    batch = record_batch(records)
    want_batch = outcome("per-example", batch, spec, **kwargs)
    for name in ("lockstep", "default"):
        assert_same(outcome(name, batch, spec, **kwargs), want_batch)
    return want


@pytest.mark.parametrize("count", [1, 2, 3, 9, 257])
@pytest.mark.parametrize("seed", [0, 1])
def test_varying_examples_parse_as_one_by_one(count: int, seed: int) -> None:
    result = check(batch_of(count, seed), VARYING)
    assert result[0] == "ok"
    assert result[1]["id"].shape == (count,)


@pytest.mark.parametrize("odd", ODD)
@pytest.mark.parametrize("where", [0, 1, 5, 19])
def test_examples_leaving_the_structure_parse_as_one_by_one(odd: str, where: int) -> None:
    check(batch_of(20, where, {where: odd, 11: "reorder"}), VARYING)


@pytest.mark.parametrize("corrupt", CORRUPT)
@pytest.mark.parametrize("where", [0, 7, 15])
def test_corrupt_example_fails_as_one_by_one(corrupt: str, where: int) -> None:
    records = batch_of(16, where, {where: corrupt, 12: "truncated"})
    result = check(records, VARYING)
    assert result[0] == "error"
    # An over-long varint is found once every example has been read, as one by one.
    assert result[1][2] == (12 if corrupt == "long-varint" else min(where, 12))
    # Named examples name the bad one in messages where TensorFlow does.
    check(records, STRICT, example_names=[f"ex{index}" for index in range(16)])


@pytest.mark.parametrize("where", [0, 3, 9])
def test_over_long_varint_names_its_example(where: int) -> None:
    result = check(batch_of(10, where, {where: "long-varint"}), VARYING)
    assert result[0] == "error"
    assert result[1][1].startswith("Could not parse example input")
    assert result[1][2] == where


@pytest.mark.parametrize("count", [1, 2, 3, 40])
def test_spec_violations_fail_as_one_by_one(count: int) -> None:
    result = check(batch_of(count, 3), STRICT)
    assert result[0] == "error"
    names = [f"ex{index}" for index in range(count)]
    check(batch_of(count, 4), STRICT, example_names=names)
    check(batch_of(count, 5, {count - 1: "missing"}), {"id": ar.FixedLenFeature([], "int64")})
    check(batch_of(count, 6, {0: "kind"}), {"id": ar.VarLenFeature("int64")})


def test_kinds_other_than_asked_fail_as_one_by_one() -> None:
    records = batch_of(12, 8)
    check(records, {"id": ar.FixedLenFeature([], "float")})
    check(records, {"s": ar.VarLenFeature("int64"), "f": ar.VarLenFeature("float")})
    check(records, {"f": ar.FixedLenFeature([1], "float", default_value=[3.0])})


def test_skipping_policy_keeps_the_same_examples() -> None:
    records = batch_of(30, 9, {4: "truncated", 17: "past-end", 20: "reorder"})
    kept = {}
    for name in ("per-example", "lockstep"):
        errors = ar.DecodeErrors(on_error="skip")
        result = outcome(name, records, VARYING, on_error=errors)
        kept[name] = (result, errors.kept.tolist())
    assert kept["lockstep"][1] == kept["per-example"][1]
    assert 4 not in kept["lockstep"][1]
    assert_same(kept["lockstep"][0], kept["per-example"][0])


def test_varying_batch_takes_no_per_example_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    original = example_module._parse_one

    def counted(index: int, *args: Any) -> None:
        calls.append(index)
        original(index, *args)

    monkeypatch.setattr(example_module, "_parse_one", counted)
    records = batch_of(100, 10)
    assert len({len(record) for record in records}) > 10
    ar.parse_example(records, VARYING)
    ar.parse_example(record_batch(records), VARYING)
    assert calls == []
    records[9] = build(features(np.random.default_rng(1)), "reorder")
    ar.parse_example(records, VARYING)
    assert calls == [9]


def test_large_bytes_values_come_out_whole() -> None:
    rng = np.random.default_rng(11)
    images = [bytes(rng.integers(0, 256, int(size), dtype=np.uint8)) for size in [3000, 30000] * 8]
    records = [
        example_of([entry(b"image", strings([image])), entry(b"label", ints([index]))])
        for index, image in enumerate(images)
    ]
    spec: Spec = {"image": ar.FixedLenFeature([], "string"), "label": ar.VarLenFeature("int64")}
    result = check(records, spec)
    assert result[1]["image"].tolist() == images
    assert result[1]["label"].values.tolist() == list(range(16))


def test_many_values_per_example() -> None:
    rng = np.random.default_rng(12)
    records = [
        example_of(
            [
                entry(b"f", floats(rng.standard_normal(int(rng.integers(50, 200))).tolist())),
                entry(b"s", strings([b"v%d" % k for k in range(int(rng.integers(0, 40)))])),
            ]
        )
        for _ in range(25)
    ]
    check(records, {"f": ar.VarLenFeature("float"), "s": ar.VarLenFeature("string")})


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    count=st.integers(1, 12),
    odd=st.dictionaries(st.integers(0, 11), st.sampled_from(ODD + CORRUPT), max_size=3),
)
def test_property_lockstep_equals_per_example(seed: int, count: int, odd: dict[int, str]) -> None:
    records = batch_of(count, seed, odd)
    check(records, VARYING)
    check(records, STRICT)


_DTYPES = {"bytes_list": "string", "float_list": "float", "int64_list": "int64"}
_VALUES = {
    "bytes_list": st.binary(max_size=300),
    "float_list": st.floats(width=32, allow_nan=True, allow_infinity=True),
    "int64_list": st.integers(min_value=-(2**63), max_value=2**63 - 1),
}


@st.composite
def shared_structure_batches(draw: st.DrawFn) -> tuple[list[bytes], Spec]:
    """Examples of one random set of features (a few missing or empty), and a random spec
    over them: right and wrong dtypes, fixed lengths that do or do not fit, defaults."""
    schema = draw(
        st.dictionaries(st.text(max_size=4), st.sampled_from(list(_DTYPES)), min_size=1, max_size=4)
    )
    records = []
    for _ in range(draw(st.integers(1, 12))):
        features = {}
        for key, kind in schema.items():
            shape = draw(st.integers(0, 19))
            if shape == 0:
                continue  # missing
            if shape == 1:
                features[key] = ar.Feature()  # a Feature of no kind
                continue
            values: Any = draw(st.lists(_VALUES[kind], max_size=3 if shape < 17 else 40))
            features[key] = ar.Feature(**{kind: values})
        records.append(ar.Example(features).SerializeToString())
    spec: Spec = {}
    for key, kind in [*schema.items(), ("absent", "int64_list")]:
        dtype = _DTYPES[draw(st.sampled_from([kind, kind, kind, *_DTYPES]))]
        choice = draw(st.integers(0, 3))
        if choice == 0:
            spec[key] = ar.VarLenFeature(dtype)
        elif choice == 1:
            spec[key] = ar.FixedLenFeature([], dtype)
        else:
            size = draw(st.integers(1, 2))
            default = None
            if choice == 3:
                default = [b"d"] * size if dtype == "string" else [1] * size
            spec[key] = ar.FixedLenFeature([size], dtype, default_value=default)
    return records, spec


def lockstep_equals_per_example(batch: tuple[list[bytes], Spec]) -> None:
    records, spec = batch
    check(records, spec)


_PROPERTY = {"batch": shared_structure_batches()}
_HEALTH = [HealthCheck.too_slow, HealthCheck.data_too_large]
test_shared_structure_property = settings(
    max_examples=150, deadline=None, suppress_health_check=_HEALTH
)(given(**_PROPERTY)(lockstep_equals_per_example))
test_shared_structure_property_stress = pytest.mark.stress(
    settings(max_examples=10_000, deadline=None, suppress_health_check=_HEALTH)(
        given(**_PROPERTY)(lockstep_equals_per_example)
    )
)
