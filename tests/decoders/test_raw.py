"""decode_raw: dtypes, byte order, batch shapes, fixed_length and TensorFlow's messages."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import asyncreader as ar


@pytest.mark.parametrize(
    ("out_type", "dtype"),
    [
        ("half", np.float16),
        ("float16", np.float16),
        ("float", np.float32),
        (np.float32, np.float32),
        ("double", np.float64),
        (np.dtype("<f8"), np.float64),
        ("int8", np.int8),
        ("int16", np.int16),
        ("int32", np.int32),
        ("int64", np.int64),
        ("uint8", np.uint8),
        ("uint16", np.uint16),
        ("complex64", np.complex64),
        ("complex128", np.complex128),
        (float, np.float32),
    ],
)
def test_every_type_round_trips_both_byte_orders(out_type: object, dtype: type) -> None:
    values: np.ndarray = np.arange(-3, 5).astype(dtype)
    for little in (True, False):
        data = values.astype(np.dtype(dtype).newbyteorder("<" if little else ">")).tobytes()
        result = ar.decode_raw(data, out_type, little_endian=little)
        assert result.dtype == np.dtype(dtype)
        assert result.dtype.isnative
        assert result.tolist() == values.tolist()


def test_bool_output_is_normalised() -> None:
    result = ar.decode_raw([b"\x00\x01\x02\xff"], "bool")
    assert result.dtype == np.bool_
    assert result.tolist() == [[False, True, True, True]]
    assert result.view(np.uint8).max() == 1


def test_complex_parts_are_swapped_separately() -> None:
    data = np.array([1.5 - 2j], dtype=">c8").tobytes()
    assert ar.decode_raw(data, "complex64", little_endian=False).tolist() == [1.5 - 2j]


def test_tf_dtype_like_objects_are_accepted() -> None:
    class FakeDType:
        as_numpy_dtype = np.int16

    assert ar.decode_raw(b"\x01\x00", FakeDType()).tolist() == [1]


def test_batch_shapes() -> None:
    assert ar.decode_raw(b"\x01\x02", "uint8").shape == (2,)
    assert ar.decode_raw([b"ab", b"cd", b"ef"], "uint8").shape == (3, 2)
    assert ar.decode_raw((b"ab",), "int16").shape == (1, 1)
    assert ar.decode_raw([[b"ab", b"cd"], [b"ef", b"gh"]], "uint8").shape == (2, 2, 2)
    assert ar.decode_raw(np.array([[b"abcd"]], dtype=object), "int32").shape == (1, 1, 1)
    assert ar.decode_raw(["ab", "cd"], "uint8").tolist() == [[97, 98], [99, 100]]


def test_empty_inputs_give_a_zero_trailing_dimension() -> None:
    assert ar.decode_raw([], "int16").shape == (0, 0)
    assert ar.decode_raw([b"", b""], "int16").shape == (2, 0)
    assert ar.decode_raw([[b"", b""]], "int16").shape == (1, 2, 0)
    assert ar.decode_raw(b"", "float").shape == (0,)


def test_fixed_width_byte_arrays_keep_their_padding() -> None:
    records = np.array([b"\x01\x00", b"\x02\x00"], dtype="S2")
    assert ar.decode_raw(records, "int16").tolist() == [[1], [2]]


def test_results_are_writable_and_own_their_bytes() -> None:
    data = [b"\x01\x00\x00\x00", b"\x02\x00\x00\x00"]
    result = ar.decode_raw(data, "int32")
    assert result.flags.writeable
    result[0, 0] = 7
    assert data[0] == b"\x01\x00\x00\x00"
    single = ar.decode_raw(data[1], "int32")
    single[0] = 9
    assert data[1] == b"\x02\x00\x00\x00"
    swapped = ar.decode_raw(data, "int32", little_endian=sys.byteorder != "little")
    assert swapped.flags.writeable


def test_different_lengths_name_the_first_offending_element() -> None:
    with pytest.raises(
        ar.InvalidArgumentError,
        match=r"^DecodeRaw requires input strings to all be the same size, but element 2 has "
        r"size 2 != 3$",
    ):
        ar.decode_raw([b"ab", b"cd", b"efg", b"h"], "uint8")


@pytest.mark.parametrize(
    ("out_type", "name", "size"),
    [
        ("int16", "int16", 2),
        ("float", "float", 4),
        ("half", "half", 2),
        ("complex64", "complex64", 8),
    ],
)
def test_length_not_a_multiple_of_the_item_size(out_type: str, name: str, size: int) -> None:
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw([b"abc"], out_type)
    assert info.value.message == (
        f"Input to DecodeRaw has length 3 that is not a multiple of {size}, the size of {name}"
    )


def test_unsupported_out_types() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="Value for attr 'out_type' of string"):
        ar.decode_raw(b"ab", "string")
    with pytest.raises(ar.InvalidArgumentError, match="of uint32 is not in the list"):
        ar.decode_raw(b"abcd", np.uint32)
    with pytest.raises(ar.InvalidArgumentError, match="unknown dtype name"):
        ar.decode_raw(b"ab", "float128x")


def test_bad_data_types() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="expected bytes or str elements"):
        ar.decode_raw([b"ab", 3], "uint8")
    with pytest.raises(ar.InvalidArgumentError, match="expected an array of strings"):
        ar.decode_raw(np.zeros(3), "uint8")
    with pytest.raises(ar.InvalidArgumentError, match="rectangular"):
        ar.decode_raw([[b"a"], [b"b", b"c"]], "uint8")


def test_fixed_length_truncates_and_pads() -> None:
    result = ar.decode_raw([b"abcdef", b"ab", b"", b"abcd"], "uint8", fixed_length=4)
    assert result.tolist() == [
        [97, 98, 99, 100],
        [97, 98, 0, 0],
        [0, 0, 0, 0],
        [97, 98, 99, 100],
    ]
    assert ar.decode_raw([b"\x01"], "uint16", little_endian=False, fixed_length=2).tolist() == [
        [256]
    ]
    assert ar.decode_raw(b"\x01\x00\x00", "int16", fixed_length=2).tolist() == [1]
    assert ar.decode_raw([], "int16", fixed_length=4).shape == (0, 2)
    # One common length (strided path), truncating and padding.
    truncated = ar.decode_raw([b"abc", b"def"], "uint8", fixed_length=2)
    assert truncated.tolist() == [[97, 98], [100, 101]]
    assert truncated.flags.writeable
    padded = ar.decode_raw([b"\x01", b"\x02"], "uint16", little_endian=False, fixed_length=4)
    assert padded.tolist() == [[256, 0], [512, 0]]
    assert ar.decode_raw([b"ab"], "half", fixed_length=2).dtype == np.float16


def test_fixed_length_errors() -> None:
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw([b"a"], "int16", fixed_length=0)
    assert info.value.message == "fixed_length (0) must be greater than zero."
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_raw([b"a"], "int32", fixed_length=6)
    assert info.value.message == "fixed_length (6) must be a multiple of the size of out_type (4)"
    for out_type in ("bool", "complex64", "complex128"):
        with pytest.raises(ar.InvalidArgumentError, match=f"of {out_type} is not in the list"):
            ar.decode_raw([b"abcdefgh"], out_type, fixed_length=8)
