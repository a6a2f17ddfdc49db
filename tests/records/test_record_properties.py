"""Property tests: any input gives records or a declared error; chunking never matters.

A few hundred examples by default; the ``stress`` variants run 10,000 and more.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any

import pytest
from framer_util import feed_until_error, fixed_length_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._records.fixed_length import FixedLengthFramer
from asyncreader._records.lines import LineFramer
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

QUICK = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRESS = settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

payload_lists = st.lists(st.binary(max_size=300), max_size=20)
cut_lists = st.lists(st.integers(min_value=0, max_value=10_000), max_size=8)


def run(framer: Any, data: bytes, cuts: list[int]) -> tuple[list[int], list[bytes], Any, Any]:
    """Feed ``data`` split at ``cuts`` (any order, past the end or not); return the records
    and the error's type and message, if any. Any other than these declared errors fails."""
    within = sorted({cut for cut in cuts if cut < len(data)})
    keys, values, error = feed_until_error(framer, data, within)
    if error is None:
        return keys, values, None, None
    if not isinstance(error, (ar.DataLossError, ar.InvalidArgumentError, ar.OutOfRangeError)):
        raise error
    return keys, values, type(error), error.message


def encode(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


# -- the properties ---------------------------------------------------------------------


def arbitrary_bytes_tfrecord(data: bytes, cuts: list[int], compressed: bool) -> None:
    kind = "ZLIB" if compressed else None
    whole = run(TFRecordFramer(compression_type=kind, max_output=64), data, [])
    split = run(TFRecordFramer(compression_type=kind, max_output=64), data, cuts)
    assert split == whole


def round_trip_tfrecord(payloads: list[bytes], cuts: list[int]) -> None:
    data = encode(payloads)
    _keys, values, error, _ = run(TFRecordFramer(), data, cuts)
    assert error is None
    assert values == payloads
    z = zlib.compress(data)
    assert run(TFRecordFramer(compression_type="ZLIB", max_output=100), z, cuts)[1] == payloads


def damaged_tfrecord(payloads: list[bytes], position: int, flip: int, cuts: list[int]) -> None:
    data = bytearray(encode(payloads))
    if data:
        data[position % len(data)] ^= flip
    _keys, values, error, _message = run(TFRecordFramer(), bytes(data), cuts)
    # Records before the damage come out unchanged; then a DataLossError or, when the
    # damage shortened a header at the end, a silent end.
    assert values == payloads[: len(values)]
    assert error in (None, ar.DataLossError)


def arbitrary_lines(data: bytes, cuts: list[int], skip: int) -> None:
    expected = run(LineFramer(skip_header_lines=skip), data, [])
    assert expected[2] is None
    assert run(LineFramer(skip_header_lines=skip), data, cuts) == expected
    # Reference split.
    lines = data.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    lines = [ln[:-1] if ln.endswith(b"\r") else ln for ln in lines]
    if data and not data.endswith(b"\n") and lines and lines[-1] == b"" and data.endswith(b"\r"):
        lines.pop()
    assert expected[1] == lines[skip:]


def arbitrary_fixed(data: bytes, cuts: list[int], r: int, h: int, f: int, p: int) -> None:
    whole = run(FixedLengthFramer(r, h, f, p), data, [])
    assert run(FixedLengthFramer(r, h, f, p), data, cuts) == whole
    assert whole[1] == fixed_length_reference(data, r, h, f, p)
    assert (whole[2] is ar.OutOfRangeError) == (len(data) < h)


def writer_round_trip(tmp: Path, payloads: list[bytes], kind: str | None) -> None:
    path = tmp / "p.tfrecord"
    with ar.TFRecordWriter(path, kind, buffer_size=97) as writer:
        writer.write_many(payloads)
    assert list(ar.tf_record_iterator(path, kind, read_size=61)) == payloads


# -- quick and stress wrappers ----------------------------------------------------------

fixed_shapes = (
    st.integers(1, 9),
    st.integers(0, 9),
    st.integers(0, 9),
    st.integers(0, 12),
)


def both(prop: Callable[..., None], *strategies: Any) -> tuple[Any, Any]:
    hypothesis_given: Any = given
    quick: Any = QUICK(hypothesis_given(*strategies)(prop))
    stress: Any = pytest.mark.stress(STRESS(hypothesis_given(*strategies)(prop)))
    return quick, stress


test_arbitrary_bytes_tfrecord, test_arbitrary_bytes_tfrecord_stress = both(
    arbitrary_bytes_tfrecord, st.binary(max_size=400), cut_lists, st.booleans()
)
test_round_trip_tfrecord, test_round_trip_tfrecord_stress = both(
    round_trip_tfrecord, payload_lists, cut_lists
)
test_damaged_tfrecord, test_damaged_tfrecord_stress = both(
    damaged_tfrecord, payload_lists, st.integers(0, 10_000), st.integers(1, 255), cut_lists
)
test_arbitrary_lines, test_arbitrary_lines_stress = both(
    arbitrary_lines,
    st.binary(max_size=200) | st.text("ab\r\n", max_size=60).map(str.encode),
    cut_lists,
    st.integers(0, 3),
)
test_arbitrary_fixed, test_arbitrary_fixed_stress = both(
    arbitrary_fixed, st.binary(max_size=200), cut_lists, *fixed_shapes
)


@QUICK
@given(payloads=payload_lists, kind=st.sampled_from([None, "ZLIB", "GZIP"]))
def test_writer_round_trip(tmp_path_factory: pytest.TempPathFactory, payloads, kind) -> None:  # type: ignore[no-untyped-def]
    writer_round_trip(tmp_path_factory.mktemp("w"), payloads, kind)


@pytest.mark.stress
@STRESS
@given(payloads=payload_lists, kind=st.sampled_from([None, "ZLIB", "GZIP"]))
def test_writer_round_trip_stress(tmp_path_factory: pytest.TempPathFactory, payloads, kind) -> None:  # type: ignore[no-untyped-def]
    writer_round_trip(tmp_path_factory.mktemp("w"), payloads, kind)
