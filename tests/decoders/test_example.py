"""The tf.train.Example codec and parse_single_example / parse_example."""

from __future__ import annotations

import numpy as np
import pytest

import asyncreader as ar
from asyncreader._decoders import example as example_parser
from asyncreader._decoders import example_layout, wire


def image_example(label: int, fill: int = 0) -> bytes:
    return ar.Example(
        {
            "image": bytes([fill]) * 48,
            "label": label,
            "vec": np.arange(4, dtype=np.float32) + label,
        }
    ).SerializeToString()


SPEC = {
    "image": ar.FixedLenFeature([], "string"),
    "label": ar.FixedLenFeature([], "int64"),
    "vec": ar.FixedLenFeature([2, 2], "float"),
}


def test_value_inference() -> None:
    example = ar.Example(
        {
            "b": b"x",
            "s": "é",
            "i": 3,
            "t": True,
            "f": 1.5,
            "fl": [1, 2.5],
            "il": [1, 2],
            "bl": ["a", b"b"],
            "fa": np.array([[1, 2]], np.float64),
            "ia": np.array([1, 2], np.uint8),
            "sa": np.array(["x", "y"]),
            "n": np.int64(5),
        }
    )
    kinds = {name: feature.kind for name, feature in example.features.feature.items()}
    assert kinds == {
        "b": "bytes_list",
        "s": "bytes_list",
        "i": "int64_list",
        "t": "int64_list",
        "f": "float_list",
        "fl": "float_list",
        "il": "int64_list",
        "bl": "bytes_list",
        "fa": "float_list",
        "ia": "int64_list",
        "sa": "bytes_list",
        "n": "int64_list",
    }
    values = example.to_dict()
    assert values["s"] == ["é".encode()]
    assert isinstance(values["fa"], np.ndarray)
    assert values["fa"].dtype == np.float32
    assert values["fa"].tolist() == [1.0, 2.0]


def test_features_object_and_feature_objects() -> None:
    features = ar.Features({"x": ar.Feature(int64_list=[1, -2])})
    example = ar.Example(features)
    assert example.features is features
    assert ar.Example.FromString(example.SerializeToString()) == example
    assert repr(ar.Feature(float_list=[1.0])) == "Feature(float_list=[1.0])"
    assert repr(ar.Feature()) == "Feature()"
    assert "x" in repr(example)


def test_inference_errors() -> None:
    for value in ([], [1, "a"], 1 + 2j, np.array([1j]), object()):
        with pytest.raises(ar.InvalidArgumentError):
            ar.Example({"x": value})
    with pytest.raises(ar.InvalidArgumentError, match="only one of"):
        ar.Feature(float_list=[1.0], int64_list=[1])
    with pytest.raises(ar.InvalidArgumentError, match="must be integers"):
        ar.Feature(int64_list=[1.5])
    with pytest.raises(ar.InvalidArgumentError, match="cannot store"):
        ar.Feature(int64_list=[2**64])
    with pytest.raises(ar.InvalidArgumentError, match="not one bytes value"):
        ar.Feature(bytes_list=b"abc")  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="names must be str"):
        ar.Features({1: 2})  # type: ignore[dict-item]


def test_unset_and_empty_features() -> None:
    assert ar.Example().SerializeToString() == b""
    assert ar.Example({}).SerializeToString() == b"\n\x00"
    assert ar.Example.FromString(b"\n\x00").SerializeToString() == b"\n\x00"
    assert ar.Example.FromString(b"").SerializeToString() == b""
    assert ar.Example.parse(b"") == ar.Example()


def test_negative_int64_are_ten_byte_varints() -> None:
    encoded = ar.Feature(int64_list=[-1]).SerializeToString()
    assert encoded == b"\x1a\x0c\x0a\x0a" + b"\xff" * 9 + b"\x01"
    values = np.array([-1, 0, 1, 127, 128, 2**62, -(2**63), 300] * 3, dtype=np.int64)
    assert (
        wire.decode_varints(ar.Feature(int64_list=values).SerializeToString()[4:]).tolist()
        == values.tolist()
    )


@pytest.mark.parametrize("multi_byte", [0.0, 0.01, 0.2, 0.5, 1.0])
@pytest.mark.parametrize("count", [1, 2, 7, 2048])
def test_varint_streams_decode_whatever_the_mix_of_lengths(multi_byte: float, count: int) -> None:
    # decode_varints takes one way when few varints are longer than a byte, another when
    # many are: both must give every value, from 1 to 10 bytes.
    rng = np.random.default_rng(count + int(multi_byte * 100))
    values = rng.integers(0, 128, count, dtype=np.int64)
    wide = rng.random(count) < multi_byte
    bits = rng.integers(7, 64, count)
    values[wide] = rng.integers(0, 2**62, int(wide.sum()), dtype=np.int64) >> (63 - bits[wide])
    values[wide & (rng.random(count) < 0.2)] *= -1  # 10-byte varints
    stream = b"".join(wire.encode_varint(int(v)) for v in values)
    assert wire.decode_varints(stream).tolist() == values.tolist()
    assert wire.decode_varints(np.frombuffer(stream, np.uint8)).tolist() == values.tolist()


def _padded_varint(value: int, width: int) -> bytes:
    """``value``'s varint padded to ``width`` bytes (continuation bits on all but the last),
    as the database readers lay integers out: not the shortest, the same number."""
    unsigned = value % 2**64
    groups = [(unsigned >> (7 * i)) & 0x7F for i in range(width)]
    assert unsigned >> (7 * width) == 0
    return bytes([g | 0x80 for g in groups[:-1]] + [groups[-1]])


@pytest.mark.parametrize("widths", ["one", "varying"])
def test_padded_varints_parse_as_their_values(widths: str) -> None:
    # A batch of one layout (every int of one width) or of many (lockstep), and each
    # example alone: padded varints parse to their values on every path.
    rng = np.random.default_rng(len(widths))
    values = [0, 1, 127, 128, 300, 2**31, 2**62, -1, -(2**63)] * 8
    records = []
    for i, value in enumerate(values):
        least = len(wire.encode_varint(value))
        width = 10 if widths == "one" else int(rng.integers(least, 11))
        packed = _padded_varint(value, width)
        feature = b"\x1a" + bytes([len(packed) + 2, 0x0A, len(packed)]) + packed
        entry = b"\x0a\x01n\x12" + bytes([len(feature)]) + feature
        label = ar.Example(features={"i": i}).SerializeToString()[2:]
        body = b"\x0a" + bytes([len(entry)]) + entry + label
        records.append(b"\x0a" + bytes([len(body)]) + body)
    spec = {"n": ar.FixedLenFeature([], "int64"), "i": ar.FixedLenFeature([], "int64")}
    parsed = ar.parse_example(records, spec)
    assert parsed["n"].tolist() == values
    assert parsed["i"].tolist() == list(range(len(values)))
    batch = ar.RecordBatch.from_records([b"%d" % i for i in range(len(values))], records)
    assert ar.parse_example(batch, spec)["n"].tolist() == values
    for record, value in zip(records, values, strict=True):
        assert ar.parse_single_example(record, spec)["n"] == value
        decoded = ar.Example.FromString(record).features.feature["n"].value
        assert isinstance(decoded, np.ndarray)
        assert decoded.tolist() == [value]


@pytest.mark.parametrize(
    ("stream", "message"),
    [
        (b"\x01\x80", "truncated varint"),
        (b"\x80", "truncated varint"),
        (b"\x01" + b"\xff" * 10 + b"\x01", "longer than 10 bytes"),
        (b"\x01" * 50 + b"\x80" * 10 + b"\x00", "longer than 10 bytes"),
    ],
)
def test_bad_varint_streams_raise(stream: bytes, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.decode_varints(stream)


def test_decoder_accepts_unpacked_mixed_and_unknown_fields() -> None:
    floats = b"\x0d" + np.float32(1.5).tobytes() + b"\x0a\x04" + np.float32(2.5).tobytes()
    feature = b"\x12" + bytes([len(floats)]) + floats + b"\x20\x01"
    entry = b"\x0a\x01u\x12" + bytes([len(feature)]) + feature + b"\x18\x05"
    features = b"\x0a" + bytes([len(entry)]) + entry + b"\x15\x00\x00\x00\x00"
    data = b"\x0a" + bytes([len(features)]) + features + b"\x1b\x08\x01\x1c" + b"\x11" + b"\x00" * 8
    example = ar.Example.FromString(data)
    value = example.features.feature["u"].value
    assert isinstance(value, np.ndarray)
    assert value.tolist() == [1.5, 2.5]
    parsed = ar.parse_single_example(data, {"u": ar.VarLenFeature("float")})["u"]
    assert isinstance(parsed, ar.SparseTensorValue)
    assert parsed.values.tolist() == [1.5, 2.5]


def test_protobuf_merge_rules() -> None:
    def entry(key: bytes, feature: bytes) -> bytes:
        body = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(feature)]) + feature
        return b"\x0a" + bytes([len(body)]) + body

    def example(*entries: bytes) -> bytes:
        body = b"".join(entries)
        return b"\x0a" + bytes([len(body)]) + body

    def ints(*values: int) -> bytes:
        body = b"".join(b"\x08" + bytes([value]) for value in values)
        return b"\x1a" + bytes([len(body)]) + body

    # Two Features fields merge; a repeated key keeps the last value.
    data = example(entry(b"a", ints(1))) + example(entry(b"b", ints(2)), entry(b"a", ints(3)))
    decoded = ar.Example.FromString(data).to_dict()
    assert {k: v.tolist() for k, v in decoded.items()} == {"a": [3], "b": [2]}  # type: ignore[union-attr]
    # The same list twice in one Feature concatenates; another oneof member replaces it.
    merged = ar.Example.FromString(example(entry(b"a", ints(1) + ints(2)))).to_dict()["a"]
    assert isinstance(merged, np.ndarray)
    assert merged.tolist() == [1, 2]
    replaced = ar.Example.FromString(example(entry(b"a", ints(1) + b"\x0a\x03\x0a\x01z")))
    assert replaced.features.feature["a"].value == [b"z"]


@pytest.mark.parametrize(
    "payload",
    [
        b"\x0a\x05abc",
        b"\x0a",
        b"\xff\xff",
        b"\x0a\x02\x0a\x05",
        b"\x07",
        b"\x0c",
        b"\x00\x00",
        b"\x0a\x0b\x0a\x09\x0a\x01u\x12\x04\x12\x02\x0a\x03",
        b"\x0a\x0a\x0a\x08\x0a\x01u\x12\x03\x1a\x01\x80",
        b"\x0a\x07\x0a\x05\x0a\x01u\x12\x80",
        b"\x0b\x08\x01",
    ],
)
def test_malformed_payloads_raise_invalid_argument(payload: bytes) -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"^Error parsing Example"):
        ar.Example.FromString(payload)
    messages = []
    for dtype in ("int64", "float", "string"):
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.parse_example([image_example(1), payload], {"u": ar.VarLenFeature(dtype)})
        assert info.value.record == 1
        messages.append(info.value.message)
    assert any(m.startswith("Could not parse example input, value: '") for m in messages)


def test_over_long_varint_names_the_example() -> None:
    long_varint = b"\xff" * 10 + b"\x01"
    feature = (
        b"\x1a" + bytes([len(long_varint) + 2]) + b"\x0a" + bytes([len(long_varint)]) + long_varint
    )
    body = b"\x0a\x01u\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(body)]) + body
    bad = b"\x0a" + bytes([len(features)]) + features
    good = ar.Example({"u": 1}).SerializeToString()
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example([good, good, bad], {"u": ar.VarLenFeature("int64")})
    assert info.value.record == 2


def test_parse_single_example_shapes_and_types() -> None:
    result = ar.parse_single_example(image_example(3), SPEC | {"x": ar.VarLenFeature("int64")})
    image, label, vec, x = result["image"], result["label"], result["vec"], result["x"]
    assert isinstance(image, np.ndarray)
    assert image.shape == ()
    assert image.dtype == object
    assert image.item() == b"\x00" * 48
    assert isinstance(label, np.ndarray)
    assert label.dtype == np.int64
    assert label.item() == 3
    assert isinstance(vec, np.ndarray)
    assert vec.shape == (2, 2)
    assert vec.dtype == np.float32
    assert isinstance(x, ar.SparseTensorValue)
    assert x.indices.shape == (0, 1)
    assert x.dense_shape.tolist() == [0]


def test_parse_example_batch_layout_and_defaults() -> None:
    batch = [image_example(i, fill=i) for i in range(6)] + [b""]
    spec = SPEC | {
        "label": ar.FixedLenFeature([], np.int64, default_value=-1),
        "image": ar.FixedLenFeature([], "string", default_value=b"none"),
        "vec": ar.FixedLenFeature([2, 2], np.float32, default_value=[0, 0, 0, 0]),
    }
    result = ar.parse_example(batch, spec)
    labels, images, vecs = result["label"], result["image"], result["vec"]
    assert isinstance(labels, np.ndarray)
    assert labels.tolist() == [0, 1, 2, 3, 4, 5, -1]
    assert isinstance(images, np.ndarray)
    assert images[5] == bytes([5]) * 48
    assert images[6] == b"none"
    assert isinstance(vecs, np.ndarray)
    assert vecs.shape == (7, 2, 2)
    assert vecs[2].tolist() == [[2.0, 3.0], [4.0, 5.0]]
    assert vecs[6].tolist() == [[0, 0], [0, 0]]
    assert vecs.flags.writeable


def test_layout_path_equals_per_example_path() -> None:
    # Same length but a different key, a longer label, and a different layout entirely.
    batch = [image_example(i) for i in range(8)]
    odd = ar.Example(
        {"image": b"\x01" * 48, "label": 200, "vec": np.ones(4, np.float32)}
    ).SerializeToString()
    reordered = ar.Example({"vec": np.ones(4, np.float32), "label": 2, "image": b"\x02" * 48})
    batch[3] = odd
    batch[5] = reordered.SerializeToString() + b"\x10\x01"  # unknown trailing field
    together = ar.parse_example(batch, SPEC)
    for index, data in enumerate(batch):
        alone = ar.parse_single_example(data, SPEC)
        for key in SPEC:
            got = together[key]
            assert isinstance(got, np.ndarray)
            other = alone[key]
            assert isinstance(other, np.ndarray)
            assert got[index : index + 1].tolist()[0] == other.tolist()


def test_varlen_batch_indices() -> None:
    batch = [
        ar.Example({"v": [1, 2, 3]}).SerializeToString(),
        b"",
        ar.Example({"v": ar.Feature(int64_list=[])}).SerializeToString(),
        ar.Example({"v": [7]}).SerializeToString(),
    ]
    sparse = ar.parse_example(batch, {"v": ar.VarLenFeature("int64")})["v"]
    assert isinstance(sparse, ar.SparseTensorValue)
    indices, values, dense_shape = sparse
    assert indices.tolist() == [[0, 0], [0, 1], [0, 2], [3, 0]]
    assert values.tolist() == [1, 2, 3, 7]
    assert dense_shape.tolist() == [4, 3]
    assert sparse.to_dense().tolist() == [[1, 2, 3], [0, 0, 0], [0, 0, 0], [7, 0, 0]]
    assert "dense_shape=[4, 3]" in repr(sparse)


def test_error_messages_in_batches() -> None:
    good = image_example(1)
    cases: list[tuple[dict[str, ar.FixedLenFeature | ar.VarLenFeature], str]] = [
        (
            {"zz": ar.FixedLenFeature([], "float")},
            "Name: <unknown>, Feature: zz (data type: float) is required but could not be found.",
        ),
        (
            {"label": ar.FixedLenFeature([], "float", default_value=0.0)},
            "Name: <unknown>, Key: label, Index: 1.  Data types don't match. Data type: int64 "
            "but expected type: float",
        ),
        (
            {"label": ar.VarLenFeature("string")},
            "Name: <unknown>, Key: label, Index: 1.  Data types don't match. Expected type: "
            "string, Actual type: int64",
        ),
        (
            {"vec": ar.FixedLenFeature([3], "float", default_value=[1, 2, 3])},
            "Name: <unknown>, Key: vec, Index: 1.  Number of float values != expected.  Values "
            "size: 4 but output shape: [3]",
        ),
        (
            {"image": ar.FixedLenFeature([2], "string", default_value=[b"a", b"b"])},
            "Name: <unknown>, Key: image, Index: 1.  Number of bytes values != expected.  "
            "Values size: 1 but output shape: [2]",
        ),
        (
            {"image": ar.FixedLenFeature([0], "string", default_value=[])},
            "Name: <unknown>, Key: image, Index: 1.  Can't parse serialized Example.",
        ),
    ]
    for spec, message in cases:
        first = good if "zz" in spec else b"\x12\x00"
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.parse_example([first, good], spec)
        assert info.value.message == message
        assert info.value.record == (0 if "zz" in spec else 1)
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.parse_example(
            [good, b""], {"label": ar.FixedLenFeature([], "int64")}, example_names=["a", "b"]
        )
    assert info.value.message.startswith("Name: b, Feature: label")


def test_spec_errors() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="attr 'Tdense' of int32"):
        ar.FixedLenFeature([], "int32")
    with pytest.raises(ar.InvalidArgumentError, match="attr 'sparse_types' of double"):
        ar.VarLenFeature(np.float64)
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.FixedLenFeature([2, 2], "float", default_value=7)
    assert info.value.message == (
        "Input to reshape is a tensor with 1 values, but the requested shape has 4"
    )
    with pytest.raises(ar.InvalidArgumentError, match="is not a valid int64"):
        ar.FixedLenFeature([], "int64", default_value="x")
    with pytest.raises(
        ar.InvalidArgumentError, match="First dimension of shape for feature f unknown"
    ):
        ar.parse_example([b""], {"f": ar.FixedLenFeature([None], "float")})
    with pytest.raises(ar.InvalidArgumentError, match="All dimensions of shape for feature f"):
        ar.parse_example([b""], {"f": ar.FixedLenFeature([2, None], "float")})
    with pytest.raises(ar.InvalidArgumentError, match="must be a FixedLenFeature"):
        ar.parse_example([b""], {"f": "float"})  # type: ignore[dict-item]
    with pytest.raises(ar.InvalidArgumentError, match="vector"):
        ar.parse_example([[b""]], {"f": ar.VarLenFeature("float")})
    with pytest.raises(ar.InvalidArgumentError, match="example_names"):
        ar.parse_example([b""], {"f": ar.VarLenFeature("float")}, example_names=["a", "b"])


def test_parse_example_with_one_value_parses_one_example() -> None:
    result = ar.parse_example(image_example(4), {"label": ar.FixedLenFeature([], "int64")})
    label = result["label"]
    assert isinstance(label, np.ndarray)
    assert label.shape == ()
    assert label.item() == 4


def test_empty_batch() -> None:
    result = ar.parse_example(
        [], {"f": ar.FixedLenFeature([3], "float"), "v": ar.VarLenFeature("string")}
    )
    dense, sparse = result["f"], result["v"]
    assert isinstance(dense, np.ndarray)
    assert dense.shape == (0, 3)
    assert isinstance(sparse, ar.SparseTensorValue)
    assert sparse.dense_shape.tolist() == [0, 0]
    assert sparse.indices.shape == (0, 2)
    assert sparse.values.dtype == object


def test_shared_layout_starts_at_its_minimum_batch() -> None:
    # Below LAYOUT_MIN_BATCH examples the layout check costs more than it saves, so small
    # batches (and parse_single_example) take the per-example path.
    specs = example_parser._check_specs(SPEC)
    batch = [image_example(i) for i in range(example_layout.LAYOUT_MIN_BATCH)]
    assert example_layout.SharedLayout.build(batch[:-1], specs) is None
    layout = example_layout.SharedLayout.build(batch, specs)
    assert layout is not None
    assert layout.matched.tolist() == [True] * len(batch)
