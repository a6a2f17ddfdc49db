"""The checkpoint codec on bytes from anywhere: a tree back, or InvalidArgumentError.

Property tests feed it random bytes, valid checkpoints cut short or with flipped bits
(checksum recomputed, so the parser itself is reached), random headers of tagged nodes,
and deep nesting; whatever comes in, decoding returns a tree or raises
InvalidArgumentError, and its memory stays within a small multiple of the input's size.
A few hundred examples by default, many more with ``--stress``.
"""

from __future__ import annotations

import json
import math
import tracemalloc
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._io.crc import masked_crc32c
from asyncreader._runtime import state_codec
from asyncreader._runtime.state_codec import _HEAD, MAGIC, MAX_DEPTH, VERSION

if TYPE_CHECKING:
    from collections.abc import Callable

QUICK = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
STRESS = settings(max_examples=20_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pack(header: bytes, blobs: bytes = b"") -> bytes:
    """Checkpoint bytes with a valid checksum around ``header`` and ``blobs``."""
    body = header + blobs
    return MAGIC + _HEAD.pack(VERSION, len(header), masked_crc32c(body)) + body


def split(data: bytes) -> tuple[bytes, bytes]:
    start = len(MAGIC) + _HEAD.size
    _, header_len, _ = _HEAD.unpack_from(data, len(MAGIC))
    return data[start : start + header_len], data[start + header_len :]


def decode_or_reject(data: bytes) -> Any:
    """Decode; only InvalidArgumentError may come out (anything else fails the test)."""
    try:
        return state_codec.decode(data)
    except ar.InvalidArgumentError as exc:
        error = exc
    assert str(error)
    return error


# -- strategies ----------------------------------------------------------------------------

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.sampled_from([math.inf, -math.inf])
    | st.text(max_size=20)
    | st.binary(max_size=40)
)
arrays = st.builds(
    lambda dtype, shape, seed: np.random.default_rng(seed).integers(0, 255, shape).astype(dtype),
    st.sampled_from(["<i8", ">i4", "u1", "<f4", "<f8", "?", "<c16", "S3", "<U2", "<M8[s]"]),
    st.lists(st.integers(0, 4), max_size=3).map(tuple),
    st.integers(0, 2**32),
)
object_arrays = st.lists(st.binary(max_size=10), max_size=6).map(
    lambda items: np.array([*items, b"x"], dtype=object)[:-1] if items else np.empty(0, object)
)
trees = st.recursive(
    scalars | arrays | object_arrays,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.lists(inner, max_size=4).map(tuple)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=30,
)

# Random headers of tagged nodes, valid or not, over random blob areas.
json_scalars = st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=8)
fields = st.sampled_from(["$d", "$t", "$b", "$f", "$a", "$o", "dtype", "shape", "x"])
json_values = st.recursive(
    json_scalars
    | st.sampled_from(["<i8", "|u1", "|O", "(2,)<f4", "<f8", "inf", "nan", "V8", "|S0"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(fields | st.text(max_size=3), inner, max_size=4)
    ),
    max_leaves=25,
)


def same(a: Any, b: Any) -> bool:
    """Equality of trees: arrays by dtype, shape and contents; NaN equal to itself."""
    if isinstance(a, np.ndarray):
        return (
            isinstance(b, np.ndarray)
            and a.dtype == b.dtype
            and a.shape == b.shape
            and all(
                same(x, y)
                for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist(), strict=True)
            )
        )
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) is type(b) and a == b


# -- the properties ------------------------------------------------------------------------


def round_trip(tree: Any) -> None:
    assert same(state_codec.decode(state_codec.encode(tree)), tree)


def arbitrary_bytes(data: bytes, with_magic: bool) -> None:
    if with_magic:
        data = MAGIC + data
    result = decode_or_reject(data)
    assert isinstance(result, ar.InvalidArgumentError)


def damaged(tree: Any, flips: list[tuple[int, int]], cut: int, resum: bool) -> None:
    data = bytearray(state_codec.encode(tree))
    start = len(MAGIC) + _HEAD.size
    for position, bit in flips:
        data[start + position % max(1, len(data) - start)] ^= 1 << bit
    data = data[: max(start, len(data) - cut)]
    if resum:  # recompute the checksum, so the damage reaches the parser
        _, header_len, _ = _HEAD.unpack_from(data, len(MAGIC))
        data[len(MAGIC) : start] = _HEAD.pack(VERSION, header_len, masked_crc32c(data[start:]))
    decode_or_reject(bytes(data))


def crafted(header: Any, blobs: bytes) -> None:
    decode_or_reject(pack(json.dumps(header).encode(), blobs))


def crafted_header_length(tree: Any, header_len: int) -> None:
    data = bytearray(state_codec.encode(tree))
    start = len(MAGIC) + _HEAD.size
    data[len(MAGIC) : start] = _HEAD.pack(VERSION, header_len, masked_crc32c(data[start:]))
    decode_or_reject(bytes(data))


def both(prop: Callable[..., None], *strategies: Any) -> tuple[Any, Any]:
    hypothesis_given: Any = given
    quick: Any = QUICK(hypothesis_given(*strategies)(prop))
    stress: Any = pytest.mark.stress(STRESS(hypothesis_given(*strategies)(prop)))
    return quick, stress


test_round_trip, test_round_trip_stress = both(round_trip, trees)
test_arbitrary_bytes, test_arbitrary_bytes_stress = both(
    arbitrary_bytes, st.binary(max_size=300), st.booleans()
)
test_damaged_checkpoints, test_damaged_checkpoints_stress = both(
    damaged,
    trees,
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), max_size=3),
    st.integers(0, 50) | st.just(0),
    st.booleans(),
)
test_crafted_headers, test_crafted_headers_stress = both(
    crafted, json_values, st.binary(max_size=64)
)
test_crafted_header_length, test_crafted_header_length_stress = both(
    crafted_header_length, trees, st.integers(0, 2**64 - 1) | st.integers(0, 400)
)


# -- specific crafted inputs ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "message"),
    [
        ({"$d": [1]}, "dict node does not hold an object"),
        ({"$t": 5}, "tuple node does not hold a list"),
        ({"$d": {}, "$t": []}, "unknown node"),
        ({"$b": [0, 1], "extra": 1}, "unknown node"),
        ({"$b": "0,1"}, "bad blob reference"),
        ({"$b": [True, 1]}, "bad blob reference"),
        ({"$f": "1e5"}, "bad float"),
        ({"$a": [0, 8], "dtype": "|O", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "(2,)<f4", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": 5, "shape": [1]}, "bad array dtype"),
        # Strings numpy parses with ast.literal_eval or warns about (found by fuzzing).
        ({"$a": [0, 8], "dtype": "i4,,", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "(,)i4", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "<i4,<i4", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "|a8", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "float64", "shape": [1]}, "bad array dtype"),
        ({"$a": [0, 8], "dtype": "<f8", "shape": [-1]}, "bad array shape"),
        ({"$a": [0, 8], "dtype": "<f8", "shape": [10**6, 10**6]}, "needs 8000000000000 bytes"),
        ({"$o": [], "shape": [10**9]}, "does not hold 1000000000 items"),
        ({"x": 1}, "unknown node"),
        ({"$b": [0, 4]}, "4 bytes of blobs are not referenced"),
    ],
)
def test_malformed_nodes_are_rejected_by_name(header: Any, message: str) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="checkpoint is damaged") as info:
        state_codec.decode(pack(json.dumps(header).encode(), b"\0" * 8))
    assert message in str(info.value)


def test_deep_nesting_is_rejected_not_a_recursion_error() -> None:
    for header in (b"[" * 200_000 + b"]" * 200_000, b'{"$t":' * 50_000 + b"1" + b"}" * 50_000):
        with pytest.raises(ar.InvalidArgumentError, match="nested deeper"):
            state_codec.decode(pack(header))
    nested: Any = 1
    for _ in range(MAX_DEPTH + 1):
        nested = [nested]
    with pytest.raises(ar.InvalidArgumentError, match=f"deeper than {MAX_DEPTH}"):
        state_codec.encode(nested)
    for _ in range(MAX_DEPTH // 2):
        nested = nested[0]
    assert state_codec.decode(state_codec.encode(nested)) == nested


def test_blob_references_cannot_repeat_or_overlap() -> None:
    one = state_codec.encode([b"abcd", b"efgh"])
    header, blobs = split(one)
    assert json.loads(header) == [{"$b": [0, 4]}, {"$b": [4, 4]}]
    for refs in ([[0, 4], [0, 4]], [[4, 4], [0, 4]], [[0, 6], [4, 4]], [[0, 4], [4, 5]]):
        crafted_header = json.dumps([{"$b": r} for r in refs]).encode()
        with pytest.raises(ar.InvalidArgumentError, match="blob reference"):
            state_codec.decode(pack(crafted_header, blobs))


def test_decoding_memory_is_bounded_by_the_input_size() -> None:
    # 200 references to one 1 MiB blob would build 200 MiB of bytes from 1 MiB of input.
    blob = b"\x01" * (1 << 20)
    repeated = pack(json.dumps([{"$b": [0, len(blob)]}] * 200).encode(), blob)
    huge_array = pack(
        json.dumps({"$a": [0, 8], "dtype": "<f8", "shape": [1 << 27]}).encode(), b"\0" * 8
    )
    wide_objects = pack(json.dumps({"$o": [1], "shape": [1 << 28]}).encode())
    for data in (repeated, huge_array, wide_objects):
        tracemalloc.start()
        try:
            with pytest.raises(ar.InvalidArgumentError, match="checkpoint is damaged"):
                state_codec.decode(data)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert peak < 4 * len(data) + (1 << 20), (len(data), peak)
    # A legitimate large checkpoint decodes with a small multiple of its size.
    legit = state_codec.encode({"a": np.arange(1 << 17), "b": [b"x" * 100] * 2000})
    tracemalloc.start()
    try:
        tree = state_codec.decode(legit)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tree["b"] == [b"x" * 100] * 2000
    assert peak < 8 * len(legit), (len(legit), peak)


def test_non_checkpoints_are_rejected() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="is bytes, not str"):
        state_codec.decode("text")  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="bad magic"):
        state_codec.decode(b"")
    with pytest.raises(ar.InvalidArgumentError, match="version 2"):
        state_codec.decode(MAGIC + _HEAD.pack(2, 0, masked_crc32c(b"")))
    with pytest.raises(ar.InvalidArgumentError, match="longer than the 2 bytes"):
        state_codec.decode(MAGIC + _HEAD.pack(VERSION, 10, masked_crc32c(b"[]")) + b"[]")
    with pytest.raises(ar.InvalidArgumentError, match="checkpoint is damaged"):
        state_codec.decode(pack(b"\xff\xfe"))
    with pytest.raises(ar.InvalidArgumentError, match="checkpoint is damaged"):
        state_codec.decode(pack(b"9" * 5000))
