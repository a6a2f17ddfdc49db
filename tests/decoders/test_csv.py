"""decode_csv: splitting, conversion, defaults, argument checks and both decoding paths."""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np
import pytest

import asyncreader as ar
from asyncreader._decoders import csv as csv_module

if TYPE_CHECKING:
    from collections.abc import Iterator


@contextmanager
def exact_path_only() -> Iterator[None]:
    with mock.patch.object(csv_module, "_fast_path", return_value=None):
        yield


@contextmanager
def count_fast_path() -> Iterator[list[bool]]:
    taken: list[bool] = []
    real = csv_module._fast_path

    def spy(*args: Any) -> Any:
        result = real(*args)
        taken.append(result is not None)
        return result

    with mock.patch.object(csv_module, "_fast_path", spy):
        yield taken


def decode_both(records: Any, defaults: Any, **kwargs: Any) -> list[np.ndarray]:
    """Decode with the normal dispatch and with the exact path; they must agree."""
    fast = ar.decode_csv(records, defaults, **kwargs)
    with exact_path_only():
        exact = ar.decode_csv(records, defaults, **kwargs)
    for a, b in zip(fast, exact, strict=True):
        assert a.dtype == b.dtype
        assert a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    return fast


def error_of(records: Any, defaults: Any, **kwargs: Any) -> str:
    messages = []
    for context in (count_fast_path, exact_path_only):
        with context(), pytest.raises(ar.InvalidArgumentError) as info:
            ar.decode_csv(records, defaults, **kwargs)
        messages.append(str(info.value))
    assert messages[0] == messages[1]
    return messages[0]


def test_spec_example() -> None:
    out = decode_both([",1,", "0.2,3,bcd", "3.0,,"], [[1.0], [0], ["a"]])
    assert out[0].dtype == np.float32
    assert out[0].tolist() == pytest.approx([1.0, 0.2, 3.0])
    assert out[1].dtype == np.int32
    assert out[1].tolist() == [1, 3, 0]
    assert out[2].dtype == object
    assert out[2].tolist() == [b"a", b"bcd", b"a"]


def test_common_batches_take_the_fast_path() -> None:
    with count_fast_path() as taken:
        ar.decode_csv(["1,2.5,x", "3,4.5,y"], [[0], [0.0], [""]])
        ar.decode_csv(["1,2,3,4", "5,6,7,8"], [[0], [0]], select_cols=[1, 3])
        ar.decode_csv(['"a",1', "b,2"], [[""], [0]])
        ar.decode_csv(['"a\nb",1', "b,2"], [[""], [0]])  # a LF inside a record
    assert taken == [True, True, True, False]


def test_output_shapes_follow_records() -> None:
    scalar = decode_both(b"1,2", [[0], [0]])
    assert [o.shape for o in scalar] == [(), ()]
    assert scalar[0].item() == 1
    nested = decode_both([["1", "2"], ["3", "4"]], [[0]])
    assert nested[0].tolist() == [[1, 2], [3, 4]]
    array = decode_both(np.array([b"1", b"2"], dtype="S1"), [[0]])
    assert array[0].tolist() == [1, 2]
    empty = ar.decode_csv([], [[0], [""]])
    assert empty[0].shape == (0,)
    assert empty[0].dtype == np.int32
    assert empty[1].dtype == object


@pytest.mark.parametrize(
    ("default", "dtype"),
    [
        (1.0, np.float32),
        ([1.0], np.float32),
        ([], np.float32),
        (1, np.int32),
        (2**40, np.int64),
        ("x", object),
        (b"x", object),
        (np.float64(1), np.float64),
        ([np.float64(1)], np.float64),
        (np.array([1], np.int64), np.int64),
        (np.array([], np.int64), np.int64),
        (np.array(2.0, np.float64), np.float64),
        (np.int64, np.int64),
        (np.dtype(np.float64), np.float64),
        (str, object),
    ],
)
def test_default_kinds(default: object, dtype: type) -> None:
    (out,) = ar.decode_csv(["5"], [default])
    assert out.dtype == np.dtype(dtype)


def test_required_fields() -> None:
    message = error_of(["1,", "2,3"], [[1], np.array([], np.int64)])
    assert message == "Field 1 is required but missing in record 0!"
    assert error_of(["1,2", '3,""'], [[1], []]) == "Field 1 is required but missing in record 1!"
    assert error_of(["1,2", "3,NA"], [[1], []], na_value="NA") == (
        "Field 1 is required but missing in record 1!"
    )


def test_na_value_and_empty_fields_take_defaults() -> None:
    out = decode_both(["NA,x,NA", "2,NA,1.5", ",,"], [[1], ["d"], [9.0]], na_value="NA")
    assert out[0].tolist() == [1, 2, 1]
    assert out[1].tolist() == [b"x", b"d", b"d"]
    assert out[2].tolist() == [9.0, 1.5, 9.0]


def test_quoting_rules() -> None:
    out = decode_both(['"a""b",c', '"x,y","\n"', '"",d', '"",""'], [["q"], ["r"]])
    assert out[0].tolist() == [b'a"b', b"x,y", b"q", b"q"]
    assert out[1].tolist() == [b"c", b"\n", b"d", b"r"]
    unquoted = decode_both(['"3",4'], [[""], [0]], use_quote_delim=False)
    assert unquoted[0].tolist() == [b'"3"']


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ('a"b,c', "Unquoted fields cannot have quotes/CRLFs inside (record 0)"),
        ("a\rb,c", "Unquoted fields cannot have quotes/CRLFs inside (record 0)"),
        ("1\n,2", "Unquoted fields cannot have quotes/CRLFs inside (record 0)"),
        ('"a"b",c', "Quote inside a string has to be escaped by another quote (record 0)"),
        ('"a', "Quoted field has to end with quote followed by delim or end (record 0)"),
        ('"', "Quoted field has to end with quote followed by delim or end (record 0)"),
        ('"a""', "Quoted field has to end with quote followed by delim or end (record 0)"),
        ('x,"', "Quoted field has to end with quote followed by delim or end (record 0)"),
    ],
)
def test_quoting_errors(record: str, message: str) -> None:
    assert error_of([record], [[""], [""]]) == message


def test_crlf_at_field_start_is_skipped_and_trailing_delimiter_adds_a_field() -> None:
    out = decode_both(["1,\n2", "\r3,4", "5,"], [[0], [0]])
    assert out[0].tolist() == [1, 3, 5]
    assert out[1].tolist() == [2, 4, 0]
    assert error_of(["1,\n"], [[0], [0]]) == "Expect 2 fields but have 1 in record 0"
    assert decode_both([","], [[7], [8]])[1].tolist() == [8]


def test_field_count_errors_use_the_flat_record_index() -> None:
    assert error_of([""], [[1]]) == "Expect 1 fields but have 0 in record 0"
    assert error_of(["1", "2,3"], [[1]]) == "Expect 1 fields but have 2 in record 1"
    assert error_of([["1", "2"], ["3", "4,5"]], [[1]]) == "Expect 1 fields but have 2 in record 3"
    assert error_of(["1", ""], [[1]]) == "Expect 1 fields but have 0 in record 1"


def test_select_cols() -> None:
    out = decode_both(["1,2,3,4", "5,6,7,8"], [[0], [0]], select_cols=[1, 3])
    assert out[0].tolist() == [2, 6]
    assert out[1].tolist() == [4, 8]
    # Scanning stops after the last selected column: the bad quote is never seen.
    assert decode_both(['1,2,"x'], [[0], [0]], select_cols=[0, 1])[1].tolist() == [2]
    assert decode_both(["1,"], [[9]], select_cols=[1])[0].tolist() == [9]
    assert error_of(["1,2"], [[0], [0]], select_cols=[0, 2]) == (
        "Expect 2 fields but have 1 in record 0"
    )
    assert decode_both(["1,2,3", "4,5"], [[0]], select_cols=[1])[0].tolist() == [2, 5]


@pytest.mark.parametrize(
    ("select_cols", "message"),
    [
        ([1, 1], "select_cols is not strictly increasing."),
        ([2, 1], "select_cols is not strictly increasing."),
        ([-1, 1], "select_cols contains negative values."),
        ([0], "Length of select_cols and record_defaults do not match."),
    ],
)
def test_select_cols_checks(select_cols: list[int], message: str) -> None:
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_csv(["1,2"], [[0], [0]], select_cols=select_cols)
    assert info.value.message == message


def test_argument_errors() -> None:
    cases: list[tuple[dict[str, Any], list[Any], str]] = [
        ({"field_delim": "ab"}, [[0]], "field_delim should be only 1 char"),
        ({"field_delim": "é"}, [[0]], "field_delim should be only 1 char"),
        ({}, [[[0]]], "Each record default should be at most rank 1"),
        ({}, [np.zeros((1, 1))], "Each record default should be at most rank 1"),
        ({}, [[0], [1, 2]], "There should only be 1 default per field but field 1 has 2"),
        ({}, [np.array([1, 2, 3])], "There should only be 1 default per field but field 0 has 3"),
        ({}, [[True]], "Value for attr 'OUT_TYPE' of bool is not in the list of allowed values"),
        ({}, [np.array([1], np.int16)], "Value for attr 'OUT_TYPE' of int16"),
        ({}, [[None]], "cannot use None as a record default"),
    ]
    for kwargs, defaults, message in cases:
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.decode_csv(["1"], defaults, **kwargs)
        assert info.value.message.startswith(message)
    with pytest.raises(ar.InvalidArgumentError, match="expected bytes, str"):
        ar.decode_csv(3, [[0]])


@pytest.mark.parametrize(
    ("text", "value"),
    [
        (" +1 ", 1),
        ("-0", 0),
        ("0001", 1),
        ("\x0b7\x0c", 7),
        ("2147483647", 2147483647),
        ("-2147483648", -2147483648),
    ],
)
def test_int32_texts(text: str, value: int) -> None:
    assert decode_both([text], [[0]], field_delim=";")[0].tolist() == [value]


@pytest.mark.parametrize(
    "text", ["2147483648", "-2147483649", "1.0", "1e3", "0x1", "- 1", "+-1", "+", " ", "1 2", "1_0"]
)
def test_invalid_int32_texts(text: str) -> None:
    assert error_of([text], [[0]], field_delim=";") == (
        f"Field 0 in record 0 is not a valid int32: {text}"
    )


def test_int64_range() -> None:
    out = decode_both(["9223372036854775807", "-9223372036854775808", "0" * 30 + "5"], [[2**40]])
    assert out[0].tolist() == [2**63 - 1, -(2**63), 5]
    assert error_of(["9223372036854775808"], [[2**40]]) == (
        "Field 0 in record 0 is not a valid int64: 9223372036854775808"
    )


@pytest.mark.parametrize(
    ("text", "single", "double"),
    [
        ("0x1.8p1", 3.0, 3.0),
        ("-0X1p3", -8.0, -8.0),
        ("0x.8", 0.5, 0.5),
        ("INF", float("inf"), float("inf")),
        ("-Infinity", float("-inf"), float("-inf")),
        ("+.5", 0.5, 0.5),
        ("5.", 5.0, 5.0),
        (" 1e3 ", 1000.0, 1000.0),
        ("1.00000005960464477550", 1.0000001192092896, 1.0000000596046448),
        ("0x1.000001p0", 1.0, 1.0000000596046448),
        ("3.4028236e38", float("inf"), 3.4028236e38),
        ("3.40282347e+38", 3.4028234663852886e38, 3.40282347e38),  # just above FLT_MAX
        ("7e-46", 0.0, 7e-46),
        ("0x1p-150", 0.0, 2.0**-150),
        ("1e400", float("inf"), float("inf")),
        ("1" * 40, float("inf"), 1.1111111111111112e39),
    ],
)
def test_float_texts(text: str, single: float, double: float) -> None:
    assert decode_both([text], [[0.0]], field_delim=";")[0].tolist() == [single]
    assert decode_both([text], [np.float64(0)], field_delim=";")[0].tolist() == [double]


def test_nan_texts() -> None:
    out = decode_both(["nan", "-NaN", "nan(123)"], [[0.0]])
    assert np.isnan(out[0]).all()


@pytest.mark.parametrize(
    "text",
    ["1e", "1e+", "-", ".", "0x", "0x1p", "1_0", "1d", "infinityx", "nan(", " ", "- 1", "0b1"],
)
def test_invalid_float_texts(text: str) -> None:
    assert error_of([text], [[0.0]], field_delim=";") == (
        f"Field 0 in record 0 is not a valid float: {text}"
    )
    assert error_of([text], [np.float64(0)], field_delim=";") == (
        f"Field 0 in record 0 is not a valid double: {text}"
    )


def test_float32_halfway_cases_round_from_the_exact_value() -> None:
    texts = ["1.00000005960464477550", "1.0000000596046447755", "16777217", "16777217.000001"]
    out = decode_both(texts, [[0.0]])
    assert out[0].tolist() == [1.0000001192092896, 1.0000001192092896, 16777216.0, 16777218.0]


def test_strings_keep_whitespace_and_bytes() -> None:
    out = decode_both([" a ,\tb", "é,\x00"], [[""], [""]])
    assert out[0].tolist() == [b" a ", "é".encode()]
    assert out[1].tolist() == [b"\tb", b"\x00"]


def test_first_error_in_record_order_across_columns() -> None:
    records = ["1,2", "3,x", "y,4"]
    assert error_of(records, [[0], [0]]) == "Field 1 in record 1 is not a valid int32: x"
    assert error_of(["1,0x2", "z,1"], [[0], [0.0]]) == "Field 0 in record 1 is not a valid int32: z"


def test_other_delimiters() -> None:
    out = decode_both(["1\t2", "3\t4"], [[0], [0.0]], field_delim="\t")
    assert out[0].tolist() == [1, 3]
    assert out[1].tolist() == [2.0, 4.0]
    out = decode_both(["1 2", "3 4"], [[0], [0]], field_delim=b" ")
    assert error_of(["1 2", "3  4"], [[0], [0]], field_delim=" ") == (
        "Expect 2 fields but have 3 in record 1"
    )
    assert out[1].tolist() == [2, 4]
