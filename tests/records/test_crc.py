"""CRC-32C and TensorFlow's masking (SPEC §4.2)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from asyncreader._io import crc


def test_crc32c_check_value() -> None:
    # The standard CRC-32C check value of the ASCII digits 1..9.
    assert crc.crc32c(b"123456789") == 0xE3069283


def test_crc32c_accepts_any_buffer() -> None:
    data = b"0123456789abcdef"
    expected = crc.crc32c(data)
    assert crc.crc32c(bytearray(data)) == expected
    assert crc.crc32c(memoryview(data)) == expected
    assert crc.crc32c(memoryview(b"xx" + data)[2:]) == expected


def test_extend_continues_a_crc() -> None:
    assert crc.extend(crc.crc32c(b"12345"), b"6789") == 0xE3069283
    assert crc.extend(0, b"123456789") == 0xE3069283


def test_mask_formula() -> None:
    c = 0x12345678
    rotated = ((c >> 15) | (c << 17)) & 0xFFFFFFFF
    assert crc.mask(c) == (rotated + 0xA282EAD8) & 0xFFFFFFFF
    assert crc.mask(0) == 0xA282EAD8


@pytest.mark.parametrize("value", [0, 1, 0xFFFFFFFF, 0x80000000, 0xE3069283, 0x5D7A2F11])
def test_unmask_inverts_mask(value: int) -> None:
    assert crc.unmask(crc.mask(value)) == value
    assert crc.mask(crc.unmask(value)) == value


def test_masked_crc32c_of_empty_payload() -> None:
    assert crc.masked_crc32c(b"") == 0xA282EAD8


def test_masked_crc_differs_from_plain() -> None:
    assert crc.masked_crc32c(b"abc") == crc.mask(crc.crc32c(b"abc"))
    assert crc.masked_crc32c(b"abc") != crc.crc32c(b"abc")


def test_implementation_is_named() -> None:
    assert crc.IMPLEMENTATION in {"crc32c", "google_crc32c"}


# -- CRC-32C of many payloads of one buffer -----------------------------------------------


def _methods() -> list[str]:
    methods = ["copy"]
    if crc.IN_PLACE in ("ctypes", "view"):
        methods.append(crc.IN_PLACE)
    return methods


@pytest.mark.parametrize("how", _methods())
def test_crc32c_many_matches_the_checksum_of_each_slice(how: str) -> None:
    buf = bytes(range(256)) * 300
    starts = np.array([0, 1, 7, 100, 500, 3], dtype=np.int64)
    lengths = np.array([0, 1, 100, crc.COPY_BELOW, crc.COPY_BELOW + 77, 20_000], dtype=np.int64)
    got = crc.crc32c_many(buf, starts, lengths, how=how)
    assert got.dtype == np.uint64
    assert got.tolist() == [
        crc.crc32c(buf[s : s + n]) for s, n in zip(starts, lengths, strict=True)
    ]
    assert crc.crc32c_many(buf, [], [], how=how).tolist() == []


@pytest.mark.parametrize("how", _methods())
@pytest.mark.parametrize(
    ("length", "stride"), [(0, 16), (5, 21), (crc.COPY_BELOW, crc.COPY_BELOW + 16)]
)
def test_crc32c_strided_matches_the_checksum_of_each_slice(
    how: str, length: int, stride: int
) -> None:
    buf = bytes(range(251)) * 800
    count = (len(buf) - 3 - length) // stride
    got = crc.crc32c_strided(buf, 3, count, length, stride, how=how)
    assert got.tolist() == [
        crc.crc32c(buf[3 + i * stride : 3 + i * stride + length]) for i in range(count)
    ]
    assert crc.crc32c_strided(buf, 3, 0, length, stride, how=how).tolist() == []


@pytest.mark.parametrize(
    ("start", "length"), [(0, 0), (3, 100), (1, crc.COPY_BELOW), (5, crc.COPY_BELOW + 3)]
)
def test_crc32c_at_matches_the_checksum_of_the_slice(start: int, length: int) -> None:
    buf = bytes(range(256)) * 100
    assert crc.crc32c_at(buf, start, length) == crc.crc32c(buf[start : start + length])


def test_in_place_checksums_refuse_ranges_outside_the_buffer() -> None:
    if crc.IN_PLACE != "ctypes":
        pytest.skip("only the ctypes path reads memory unchecked")
    buf = bytes(crc.COPY_BELOW)
    with pytest.raises(ValueError, match="outside the buffer"):
        crc.crc32c_at(buf, 1, crc.COPY_BELOW)
    with pytest.raises(ValueError, match="outside the buffer"):
        crc.crc32c_many(buf, np.array([1]), np.array([crc.COPY_BELOW]))


def test_the_google_library_is_found_where_wheels_put_it() -> None:
    if crc.IMPLEMENTATION != "google_crc32c":
        pytest.skip("the crc32c package reads buffers in place itself")
    google: Any = pytest.importorskip("google_crc32c")
    if google.implementation != "c":
        pytest.skip("google-crc32c without its C library")
    # Linux, macOS and Windows wheels bundle the C library: payloads are read in place.
    assert crc.IN_PLACE == "ctypes"
