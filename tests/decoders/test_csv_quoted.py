"""decode_csv on batches with quoted fields: the quoted route gives the exact path's columns
and errors (class, message, record) on random batches, with and without pyarrow, for lists
of lines and RecordBatches, raising and skipping."""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np
import pytest
from csv_util import exact_path_only, outcome, spy_on, without_pyarrow

import asyncreader as ar
from asyncreader._decoders import csv as csv_module
from asyncreader._records.batch import RecordBatch

if TYPE_CHECKING:
    from collections.abc import Iterator

DEFAULTS: dict[str, Any] = {
    "int32": [7],
    "int64": [np.int64(-3)],
    "float": [1.5],
    "double": [np.float64(2.25)],
    "int32 required": np.array([], np.int32),
    "double required": np.array([], np.float64),
    "string": [b"s"],
    "string required": np.array([], object),
}
NUMBER_TEXTS = {
    "int": ["0", "-5", "42", " 7", "8 ", "2147483648", "-9223372036854775809", "+3", "1.0"],
    "float": ["1.5", "-.25", "1e3", " 2.5", "inf", "nan", "0x1p3", "3.4028235e38", "1e"],
}
STRING_CHARS = ["a", "b", "é", " ", "\t", "0", "1", '"', "\r", "\x00", ",", ";", "|"]


def quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def random_text(rng: random.Random) -> str:
    return "".join(rng.choice(STRING_CHARS) for _ in range(rng.randint(1, 6)))


def valid_field(rng: random.Random, kind: str, delim: str, na: str) -> str:
    """A field TensorFlow reads: quoted when its text needs it, else sometimes."""
    roll = rng.random()
    missing = 0.002 if kind.endswith("required") else 0.03  # mostly valid batches
    if roll < missing:
        text = ""
    elif roll < 2 * missing:
        text = na
    elif kind.startswith("string"):
        text = random_text(rng)
    elif kind.startswith("int"):
        text = rng.choice(NUMBER_TEXTS["int"]) if roll < 0.02 else str(rng.randint(-999, 999))
    else:
        text = rng.choice(NUMBER_TEXTS["float"]) if roll < 0.02 else f"{rng.uniform(-9, 9):.4g}"
    needs_quotes = any(char in text for char in (delim, '"', "\r"))
    if needs_quotes or rng.random() < 0.4:
        return quote(text)
    return text


# Malformed or unusual records, put anywhere in a batch: each either raises in
# TensorFlow's rules or is valid but outside the quoted route's grammar.
def damage(rng: random.Random, fields: list[str], delim: str) -> str:
    choice = rng.randrange(10)
    at = rng.randrange(len(fields))
    if choice == 0:
        fields[at] = 'ab"c'  # a quote inside an unquoted field
    elif choice == 1:
        fields[at] = '"abc"x'  # a bad closing quote
    elif choice == 2:
        fields[at] = '"abc'  # never closed
    elif choice == 3:
        fields.append("1")  # one field too many
    elif choice == 4:
        fields.pop()  # one too few (or an empty record)
    elif choice == 5:
        fields[at] = rng.choice(["1x", "--1", "0x", "1e+", '"1 2"'])  # bad numbers
    elif choice == 6:
        fields[at] = '"a\nb"'  # LF inside a quoted field: valid, exact path
    elif choice == 7:
        fields[at] = "\r" + fields[at]  # CR at the start of a field: skipped
    elif choice == 8:
        fields[at] = "x\ry"  # CR inside an unquoted field
    else:
        return delim.join(fields) + "\r"  # CR ending a record
    return delim.join(fields)


def random_batch(rng: random.Random) -> tuple[list[str], list[Any], dict[str, Any]]:
    """Lines with quoted fields, record_defaults and options; 40% of the batches have one
    record damaged, anywhere."""
    kinds = [rng.choice(list(DEFAULTS)) for _ in range(rng.randint(1, 4))]
    na = rng.choice(["", "", "NA", "0"])
    delim = rng.choice([",", ",", ";", "|", "\t", " "])
    options: dict[str, Any] = {"field_delim": delim, "na_value": na}
    wide = rng.random() < 0.2
    if wide:  # every other column selected; the unselected ones are valid text too
        options["select_cols"] = [2 * i for i in range(len(kinds))]
    count = rng.randint(1, 30)
    damaged = rng.randrange(count) if rng.random() < 0.4 else -1
    lines = []
    for index in range(count):
        fields = [valid_field(rng, kind, delim, na) for kind in kinds]
        if wide:
            fields = [x for field in fields for x in (field, valid_field(rng, "string", delim, na))]
        lines.append(damage(rng, fields, delim) if index == damaged else delim.join(fields))
    if rng.random() < 0.1:
        options["use_quote_delim"] = False
    return lines, [DEFAULTS[kind] for kind in kinds], options


def as_batch(lines: list[str]) -> RecordBatch:
    keys = [f"q.csv:{i + 1}".encode() for i in range(len(lines))]
    return RecordBatch.from_records(keys, [line.encode() for line in lines], work=b"q.csv")


@contextmanager
def exact_path_forbidden() -> Iterator[None]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the exact path was used")

    with mock.patch.object(csv_module, "_exact_path", refuse):
        yield


def pyarrow_modes() -> list[Any]:
    return [
        pytest.param(True, id="pyarrow", marks=pytest.mark.skipif(
            csv_module._arrow_modules() is None, reason="pyarrow is not installed"
        )),
        pytest.param(False, id="no-pyarrow"),
    ]  # fmt: skip


@contextmanager
def arrow_mode(with_arrow: bool) -> Iterator[None]:
    if with_arrow:
        yield
    else:
        with without_pyarrow():
            yield


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_random_quoted_batches_match_the_exact_path(with_arrow: bool) -> None:
    rng = random.Random(41)
    taken_total: list[bool] = []
    errors = 0
    for _ in range(500):
        lines, defaults, options = random_batch(rng)
        with arrow_mode(with_arrow), spy_on("_quoted_path") as taken:
            fast = outcome(lines, defaults, **options)
            fast_bytes = outcome([line.encode() for line in lines], defaults, **options)
        with exact_path_only():
            exact = outcome(lines, defaults, **options)
        assert fast == exact, (lines, defaults, options)
        assert fast_bytes == exact, (lines, defaults, options)
        taken_total += taken
        errors += isinstance(exact, tuple)
    # Both outcomes of the quoted route, and real errors, must have been exercised.
    assert taken_total.count(True) > 300
    assert taken_total.count(False) > 100
    assert errors > 150


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_random_quoted_record_batches_match_the_exact_path(with_arrow: bool) -> None:
    rng = random.Random(43)
    errors = 0
    for _ in range(300):
        lines, defaults, options = random_batch(rng)
        with arrow_mode(with_arrow):
            fast = outcome(as_batch(lines), defaults, **options)
        with exact_path_only():
            exact = outcome(as_batch(lines), defaults, **options)
        assert fast == exact, (lines, defaults, options)
        if isinstance(exact, tuple):
            errors += 1
            assert "q.csv" in exact[2]  # errors name the work item and the record key
    assert errors > 30


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_skipping_bad_records_matches_the_exact_path(with_arrow: bool) -> None:
    rng = random.Random(47)
    skipped = 0
    for _ in range(200):
        lines, defaults, options = random_batch(rng)
        keys = [f"s.csv:{i + 1}".encode() for i in range(len(lines))]
        results = []
        for context in (arrow_mode(with_arrow), exact_path_only()):
            errors = ar.DecodeErrors("skip")
            with context:
                columns = outcome(lines, defaults, on_error=errors, keys=keys, **options)
            letters = [
                (d.index, d.work_item, d.record, type(d.error).__name__, str(d.error))
                for d in errors.dead_letters
            ]
            results.append((columns, errors.kept.tolist(), letters))
        assert results[0] == results[1], (lines, defaults, options)
        skipped += len(results[1][2])
    assert skipped > 30


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_valid_quoted_batches_never_reach_the_exact_path(with_arrow: bool) -> None:
    lines = ['1,"some text, with comma",2.5,"7"', '2,"a ""quoted"" word",,"-8"', '3,"",1e3,9']
    defaults: list[Any] = [[0], [b"d"], [0.0], np.int64(0)]
    with arrow_mode(with_arrow), exact_path_forbidden(), spy_on("_arrow_path") as arrow:
        columns = ar.decode_csv(lines, defaults)
        from_batch = ar.decode_csv(as_batch(lines), defaults)
        crs = ar.decode_csv(['x;"a\rb;c"', 'y;"\r"'], [[""], [""]], field_delim=";")
    assert arrow == ([True] * 3 if with_arrow else [False] * 3)
    assert columns[0].tolist() == [1, 2, 3]
    assert columns[1].tolist() == [b"some text, with comma", b'a "quoted" word', b"d"]
    assert columns[2].tolist() == [2.5, 0.0, 1000.0]
    assert columns[3].dtype == np.int64
    assert columns[3].tolist() == [7, -8, 9]  # quoted numbers convert as unquoted ones
    for a, b in zip(columns, from_batch, strict=True):
        assert a.dtype == b.dtype
        assert a.tolist() == b.tolist()
    assert crs[1].tolist() == [b"a\rb;c", b"\r"]


def test_quoted_numbers_alone_take_the_arrow_route() -> None:
    pytest.importorskip("pyarrow")
    lines = ['"1","2.5"', '3,""', '"-4",1e3']
    with exact_path_forbidden(), spy_on("_arrow_path") as arrow:
        columns = ar.decode_csv(lines, [np.int64(0), [9.0]])
    assert arrow == [True]
    assert columns[0].tolist() == [1, 3, -4]
    assert columns[1].tolist() == [2.5, 9.0, 1000.0]
    # Arrow refuses a delimiter in a number; the exact path names the field.
    message = "Field 0 in record 1 is not a valid float: 3,5"
    with spy_on("_arrow_path") as arrow, pytest.raises(ar.InvalidArgumentError, match=message):
        ar.decode_csv(['"1",2', '"3,5",4'], [[0.0], [0]])
    assert arrow == [False]


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_quoted_empty_and_na_fields_take_the_default_or_are_missing(with_arrow: bool) -> None:
    with arrow_mode(with_arrow), exact_path_forbidden():
        out = ar.decode_csv(['"",""', '"NA","NA"', '"1","x"'], [[5], [b"d"]], na_value="NA")
    assert out[0].tolist() == [5, 5, 1]
    assert out[1].tolist() == [b"d", b"d", b"x"]
    with arrow_mode(with_arrow), pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_csv(['1,"a"', '"",b'], [np.int32, [b""]])
    assert str(info.value) == "Field 0 is required but missing in record 1!"
    assert info.value.record == 1


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_each_malformed_record_raises_the_exact_paths_error(with_arrow: bool) -> None:
    good = ['1,"a,b"', '2,"c"']
    cases = {
        '3,a"b': "Unquoted fields cannot have quotes/CRLFs inside",
        '3,"a"b': "Quote inside a string has to be escaped by another quote",
        '3,"ab': "Quoted field has to end with quote followed by delim or end",
        '3,"a""': "Quoted field has to end with quote followed by delim or end",
        '3,"a",4': "Expect 2 fields but have 3 in record 1",
        '"3"': "Expect 2 fields but have 1 in record 1",
        "": "Expect 2 fields but have 0 in record 1",
        '"3x","a"': "Field 0 in record 1 is not a valid int32: 3x",
        '"3,4","a"': "Field 0 in record 1 is not a valid int32: 3,4",
        "3,x\ry": "Unquoted fields cannot have quotes/CRLFs inside",
        "3,x\r": "Unquoted fields cannot have quotes/CRLFs inside",  # Arrow would end the line
        "3,\r": "Expect 2 fields but have 1 in record 1",  # a CR at a field start is skipped
        '3,"x"\r': "Quote inside a string has to be escaped by another quote",
    }
    for bad, message in cases.items():
        lines = [good[0], bad, good[1]]
        with arrow_mode(with_arrow):
            fast = outcome(lines, [[0], [b""]])
        with exact_path_only():
            exact = outcome(lines, [[0], [b""]])
        assert fast == exact
        assert isinstance(exact, tuple)
        assert exact[1] == "InvalidArgumentError"
        assert exact[2].startswith(message), (bad, exact)
        assert exact[3] == 1


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_records_the_grammar_leaves_out_still_decode_as_tensorflow_does(with_arrow: bool) -> None:
    cases: list[tuple[list[str], Any]] = [
        (['"a\nb",1', '"c",2'], [[b"a\nb", b"c"], [1, 2]]),  # LF inside a quoted field
        (['\r"a",1', '"c",\n2'], [[b"a", b"c"], [1, 2]]),  # CR / LF skipped at a field start
        (['"a",1,"x"bad', '"c",2,'], [[b"a", b"c"], [1, 2]]),  # malformed unselected tail
    ]
    for lines, expected in cases:
        select = [0, 1] if lines[0].endswith("bad") else None
        with arrow_mode(with_arrow), spy_on("_quoted_path") as taken:
            columns = ar.decode_csv(lines, [[b""], [0]], select_cols=select)
        assert not any(taken)
        assert [c.tolist() for c in columns] == expected


@pytest.mark.parametrize("with_arrow", pyarrow_modes())
def test_a_quoted_field_never_spans_two_records(with_arrow: bool) -> None:
    # Joined by LF, these read as one valid record; each on its own is malformed.
    cases: list[tuple[list[str], list[Any]]] = [
        (['"a', 'b"'], [[b""]]),
        (['1,"a', 'b",2', "3,c"], [[0], [b""]]),
        (['"x"', '"a', 'b"', '"y"'], [[b""]]),
    ]
    for lines, defaults in cases:
        with arrow_mode(with_arrow), spy_on("_quoted_path") as taken:
            fast = outcome(lines, defaults)
        with exact_path_only():
            exact = outcome(lines, defaults)
        assert taken == [False]
        assert fast == exact
        assert isinstance(exact, tuple)
        assert exact[2].startswith("Quoted field has to end with quote followed by delim or end")


def test_use_quote_delim_false_keeps_quotes_as_characters() -> None:
    lines = ['"1","a,b"', '"2",c,"']
    with spy_on("_quoted_path") as taken:
        columns = ar.decode_csv(lines, [[b""], [b""], [b""]], use_quote_delim=False)
    assert not taken
    assert columns[0].tolist() == [b'"1"', b'"2"']
    assert columns[1].tolist() == [b'"a', b"c"]
    assert columns[2].tolist() == [b'b"', b'"']


def test_large_quoted_batches_with_cr_match_the_exact_path() -> None:
    # Over 1 MiB, Arrow parses in blocks; a CR inside a quoted field must not end a block.
    lines = [f'{i},"row {i}\r, {"x" * (i % 50)}",{i % 977}.25' for i in range(30_000)]
    assert sum(map(len, lines)) > 1 << 20
    defaults: list[Any] = [np.int64(0), [b""], [0.0]]
    with spy_on("_quoted_path") as taken:
        fast = outcome(lines, defaults)
    with exact_path_only():
        exact = outcome(lines, defaults)
    assert taken == [True]
    assert fast == exact


def test_delimiters_in_quoted_fields_stand_in_as_bytes_the_batch_lacks() -> None:
    # \x00 and \x01, the first spare bytes, are in the text: others stand in for them.
    lines = [b'"a,\x00","\x01,b",1', b'\x02,",,",2']
    with without_pyarrow(), exact_path_forbidden():
        columns = ar.decode_csv(lines, [[b""], [b""], [0]])
    assert columns[0].tolist() == [b"a,\x00", b"\x02"]
    assert columns[1].tolist() == [b"\x01,b", b",,"]
    assert columns[2].tolist() == [1, 2]


def test_a_batch_holding_every_byte_value_goes_to_the_exact_path() -> None:
    every = bytes(code for code in range(256) if code not in b'"\n')
    lines = [b'"' + every + b'",1', b'"a,""b",2']
    with without_pyarrow(), spy_on("_quoted_columns") as taken:
        columns = ar.decode_csv(lines, [[b""], [0]])
    assert taken == [False]
    assert columns[0].tolist() == [every, b'a,"b']
    assert columns[1].tolist() == [1, 2]


def test_bytes_outside_ascii_and_utf8_keep_their_values() -> None:
    lines = [b'"\xff\xfe,\x80","\xc3\xa9"', b'\x85,"\x00"']
    for context in (without_pyarrow, exact_path_only):
        with context():
            columns = ar.decode_csv(lines, [[b""], [b""]])
        assert columns[0].tolist() == [b"\xff\xfe,\x80", b"\x85"]
        assert columns[1].tolist() == ["é".encode(), b"\x00"]


@pytest.mark.parametrize("delim", [",", ";", "|", "\t", " ", "^", "]", "\\", "-", "x"])
def test_any_delimiter_byte_is_matched_literally(delim: str) -> None:
    lines = [f'"a{delim}b"{delim}1', f'c{delim}"2"']
    with exact_path_forbidden():
        columns = ar.decode_csv(lines, [[b""], [0]], field_delim=delim)
    assert columns[0].tolist() == [f"a{delim}b".encode(), b"c"]
    assert columns[1].tolist() == [1, 2]
