"""decode_csv's Arrow route: the same columns and the same errors as the exact path, on
random batches built to hit every rule, and the exact path alone without pyarrow."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest import mock

import numpy as np
import pytest
from csv_util import exact_path_only, outcome, spy_on, without_pyarrow

import asyncreader as ar
from asyncreader._decoders import csv as csv_module
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble

pytest.importorskip("pyarrow")

DEFAULTS: dict[str, Any] = {
    "int32": [7],
    "int64": [np.int64(-3)],
    "float": [1.5],
    "double": [np.float64(2.25)],
    "int32 required": np.array([], np.int32),
    "float required": [],
    "string": [b"s"],
    "string required": np.array([], object),
}
INT_TEXTS = [
    "0", "-0", "+5", "42", "-17", "007", "2147483647", "-2147483648", "2147483648",
    "-2147483649", "9223372036854775807", "-9223372036854775808", "9223372036854775808",
    "99999999999999999999999", "1.0", "1e3", "0x10", " 5", "5 ", "-", "+", "--1", "1-",
]  # fmt: skip
FLOAT_TEXTS = [
    "0", "-0.0", "1.5", ".5", "5.", "-.25", "+.5", "1e3", "1E-3", "-2.5e+10", "1e39", "-1e39",
    "1e-50", "1e400", "1e-400", "3.4028235e38", "3.40282357e38", "1.4e-45", "7e-46",
    "1.00000005960464477550", "1.0000000596046447755", "16777217", "16777217.000001",
    "0.1", "123456789012345678901234567890", "0x1p3", "0x1.8p1", "inf", "-Infinity",
    "nan", "-nan", "NaN", "1e", "1e+", ".", "e5", "1.5.2", "1_0", " 2.5", "2.5 ", "1d",
]  # fmt: skip
ODD_FIELDS = ['"3"', '"4,5"', '"a""b"', '"bad"x', "\t", " ", "x", "NA", "é", "0x1"]
STRING_TEXTS = ["a", "0", "nan", "0x10", " b ", "-", "1e5", "NA!", "\x00"]


CLEAN_SUFFIX = {"int32": "", "int64": "", "float": ".5", "double": "e-3", "string": "x"}


def lines_block(lines: list[bytes], *, work: bytes = b"t.csv") -> RecordBatch:
    """A batch laid out as a TextLineReader frames a block: lines between newlines."""
    buffer = bytearray(b"header\n")
    starts = []
    for line in lines:
        starts.append(len(buffer))
        buffer += line + b"\n"
    segment = Segment(
        np.frombuffer(bytes(buffer), np.uint8),
        np.array(starts, np.int64),
        np.array([len(x) for x in lines], np.int64),
    )
    return assemble([segment], [KeyRun(work, len(lines), range(2, 2 + len(lines)))])


def random_field(rng: random.Random, kind: str, na: str) -> str:
    roll = rng.random()
    if roll < 0.06:
        return ""
    if roll < 0.08:
        return na
    if roll < 0.12:
        return rng.choice(ODD_FIELDS)
    if kind.startswith("string"):
        return rng.choice(STRING_TEXTS)
    if kind.startswith("int"):
        if roll < 0.3:
            return rng.choice(INT_TEXTS)
        bits = 31 if kind.startswith("int32") else 63
        return str(rng.randint(-(2**bits), 2**bits - 1))
    if roll < 0.35:
        return rng.choice(FLOAT_TEXTS)
    mantissa = rng.uniform(-1e4, 1e4)
    return f"{mantissa:.{rng.randint(0, 17)}g}e{rng.randint(-40, 40)}"


def random_batch(rng: random.Random) -> tuple[list[str], list[Any], dict[str, Any]]:
    """Lines, record_defaults and decode_csv options; mostly clean, sometimes not."""
    kinds = [rng.choice(list(DEFAULTS)) for _ in range(rng.randint(1, 4))]
    na = rng.choice(["", "", "NA", "0", "-1"])
    delim = rng.choice([",", ",", "\t", ";", " "])
    clean = rng.random() < 0.5
    lines = []
    for _ in range(rng.randint(1, 40)):
        if clean:
            fields = [
                f"{rng.randint(-1000, 1000)}{CLEAN_SUFFIX[kind.split()[0]]}" for kind in kinds
            ]
        else:
            fields = [random_field(rng, kind, na) for kind in kinds]
            if rng.random() < 0.03:
                fields.append("1")  # one field too many
            elif rng.random() < 0.03:
                fields.pop()  # one too few
        lines.append(delim.join(fields))
    options: dict[str, Any] = {"field_delim": delim, "na_value": na}
    if rng.random() < 0.2:
        options["use_quote_delim"] = False
    defaults = [DEFAULTS[kind] for kind in kinds]
    if rng.random() < 0.2:
        # Select every other column of wider lines.
        options["select_cols"] = [2 * i for i in range(len(kinds))]
        lines = [delim.join(f"{field}{delim}9" for field in line.split(delim)) for line in lines]
    return lines, defaults, options


def test_random_batches_match_the_exact_path() -> None:
    rng = random.Random(19)
    taken_total: list[bool] = []
    errors = 0
    for _ in range(600):
        lines, defaults, options = random_batch(rng)
        with spy_on("_arrow_path") as taken:
            fast = outcome(lines, defaults, **options)
        with exact_path_only():
            exact = outcome(lines, defaults, **options)
        assert fast == exact, (lines, defaults, options)
        taken_total += taken
        errors += isinstance(exact, tuple)
    # The comparison must exercise both outcomes of the Arrow route and real errors.
    assert taken_total.count(True) > 150
    assert taken_total.count(False) > 50
    assert errors > 50


def test_edge_texts_one_per_batch_match_the_exact_path() -> None:
    cases = [(text, kind) for text in INT_TEXTS for kind in ("int32", "int64")]
    cases += [(text, kind) for text in FLOAT_TEXTS for kind in ("float", "double")]
    for text, kind in cases:
        lines = ["1;2", f"3;{text}"]
        defaults = [[0], DEFAULTS[kind]]
        fast = outcome(lines, defaults, field_delim=";")
        with exact_path_only():
            exact = outcome(lines, defaults, field_delim=";")
        assert fast == exact, (text, kind)


def test_arrow_reads_the_text_from_a_buffer_it_owns() -> None:
    # Arrow's I/O threads drop their references to the input after read_all(); a buffer
    # wrapping a Python object needs the GIL to drop, and a process exiting meanwhile
    # aborted ("terminate called without an active exception", asyncreader convert).
    import pyarrow.csv as pa_csv

    given: list[Any] = []
    real = pa_csv.open_csv

    def spy(source: Any, **kwargs: Any) -> Any:
        given.append(source)
        return real(source, **kwargs)

    with mock.patch.object(pa_csv, "open_csv", spy):
        columns = ar.decode_csv(["1,2.5", "3,4"], [[0], [0.0]])
    assert [c.tolist() for c in columns] == [[1, 3], [2.5, 4.0]]
    assert len(given) == 1
    # Allocated by Arrow: a buffer over the batch's Python bytes would be read-only.
    assert given[0].is_mutable
    assert given[0].to_pybytes() == b"1,2.5\n3,4\n"


def test_clean_numeric_batches_take_the_arrow_route() -> None:
    lines = ["1,2.5,-3e2,9", "4,,0.1,-2147483648", "7,8.,1.00000005960464477550,0"]
    defaults = [[0], [0.0], [0.0], np.array([], np.int64)]
    with spy_on("_arrow_path") as taken:
        columns = ar.decode_csv(lines, defaults)
    assert taken == [True]
    assert columns[0].tolist() == [1, 4, 7]
    assert columns[1].tolist() == [2.5, 0.0, 8.0]
    # Rounded once from the decimal (a float64 detour would give 1.0).
    assert columns[2].tolist() == [-300.0, np.float32(0.1), 1.0000001192092896]
    assert columns[3].dtype == np.int64
    assert all(column.flags.writeable for column in columns)
    batch = lines_block([line.encode() for line in lines])
    with spy_on("_arrow_path") as taken:
        from_block = ar.decode_csv(batch, defaults)
    assert taken == [True]
    for a, b in zip(columns, from_block, strict=True):
        assert a.tobytes() == b.tobytes()


def test_text_outside_the_arrow_alphabet_goes_on_to_the_other_paths() -> None:
    with spy_on("_arrow_path") as taken:
        out = ar.decode_csv(["0x10,1", "inf,2"], [[0.0], [0]])
        with pytest.raises(ar.InvalidArgumentError, match="Field 0 in record 1 is not a valid"):
            ar.decode_csv(["1,1", "0x10,2"], [[0], [0]])  # Arrow would read hex ints
        with pytest.raises(ar.InvalidArgumentError, match="Field 1 in record 1 is not a valid"):
            ar.decode_csv(["a,1", "0x,0x10"], [[""], [0]])  # checked per column here
        mixed = ar.decode_csv(["a,inf", "b,2"], [[""], [0.0]])
    assert taken == [False, False, False, False]
    assert out[0].tolist() == [16.0, float("inf")]
    assert mixed[1].tolist() == [float("inf"), 2.0]


def test_string_columns_take_the_arrow_route_with_numbers_checked_per_column() -> None:
    lines = ["a,1,", "é,,2.5", "inf,3,"]
    defaults: list[Any] = [[b""], [0], [np.float64(-1)]]
    with spy_on("_arrow_path") as taken:
        columns = ar.decode_csv(lines, defaults)
    assert taken == [True]
    assert columns[0].dtype == object
    assert columns[0].tolist() == [b"a", "é".encode(), b"inf"]
    assert columns[1].tolist() == [1, 0, 3]
    assert columns[2].tolist() == [-1.0, 2.5, -1.0]


def test_arrow_refusals_raise_the_exact_paths_errors() -> None:
    cases: list[tuple[list[str], list[Any], str]] = [
        (["1,2", "3,4,5"], [[0], [0]], "Expect 2 fields but have 3 in record 1"),
        (["1,2", "3,2147483648"], [[0], [0]], "Field 1 in record 1 is not a valid int32"),
        (["1,2", ",4"], [[], [0]], "Field 0 is required but missing in record 1!"),
        (["1,2", "3,1e"], [[0], [0.0]], "Field 1 in record 1 is not a valid float: 1e"),
    ]
    for lines, defaults, message in cases:
        with spy_on("_arrow_path") as taken, pytest.raises(ar.InvalidArgumentError) as info:
            ar.decode_csv(lines, defaults)
        assert str(info.value).startswith(message)
        assert info.value.record == 1
        assert taken == [False]
    batch = lines_block([b"1,2", b"3,x"], work=b"rows.csv")
    with pytest.raises(ar.InvalidArgumentError, match=r"rows\.csv"):
        ar.decode_csv(batch, [[0], [0]])


def test_without_pyarrow_the_exact_rules_decode_alone() -> None:
    rng = random.Random(7)
    batches = [random_batch(rng) for _ in range(150)]
    with_arrow = [outcome(lines, defaults, **options) for lines, defaults, options in batches]
    with without_pyarrow(), spy_on("_arrow_path") as taken:
        assert csv_module._arrow_modules() is None
        without = [outcome(lines, defaults, **options) for lines, defaults, options in batches]
        columns = ar.decode_csv(["1,2.5", "3,4.5"], [[0], [0.0]])
    assert not any(taken)
    assert len(taken) > 50
    assert without == with_arrow
    assert columns[0].tolist() == [1, 3]
    assert columns[1].tolist() == [2.5, 4.5]


def test_batches_larger_than_arrows_block_match_the_exact_path() -> None:
    # Over 1 MiB, Arrow parses in several blocks and hands back several chunks per column.
    lines = [f"{i * 987654321},{i % 977}.2512345,{-i}.123456789e-3" for i in range(30_000)]
    assert sum(map(len, lines)) > 1 << 20
    lines[29_000] = "1,,2"
    defaults: list[Any] = [np.int64(0), [9.0], np.float64(0)]
    with spy_on("_arrow_path") as taken:
        fast = outcome(lines, defaults)
    with exact_path_only():
        exact = outcome(lines, defaults)
    assert taken == [True]
    assert fast == exact


def test_concurrent_calls_share_the_arrow_options_safely() -> None:
    rng = random.Random(3)
    batches = [random_batch(rng) for _ in range(200)]
    expected = [outcome(lines, defaults, **options) for lines, defaults, options in batches]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda batch: outcome(batch[0], batch[1], **batch[2]), batches))
    assert results == expected
