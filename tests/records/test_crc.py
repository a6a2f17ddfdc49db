"""CRC-32C and TensorFlow's masking (SPEC §4.2)."""

from __future__ import annotations

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
