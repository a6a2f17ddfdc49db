"""RowEncoder: a whole chunk encoded column by column gives the row-by-row encoder's bytes
(or, in the fixed forms, bytes that parse to exactly the same Examples)."""

from __future__ import annotations

import random
from typing import TYPE_CHECKING

import numpy as np
import pytest
from example_util import canonical, entries, protobuf_example_class

import asyncreader as ar
from asyncreader._decoders import wire
from asyncreader._readers.row_example import ColumnValues, RowEncoder

if TYPE_CHECKING:
    from collections.abc import Sequence

INT_EDGES = [-(2**63), -(2**31), -129, -1, 0, 1, 127, 128, 16383, 16384, 2**31, 2**63 - 1]
FLOAT_EDGES = [0.0, -0.0, 1.5, -2.25, 1e-45, 3.4e38, float("inf"), float("-inf"), 1 / 3]
TEXT_EDGES = ["", "a", "hé", "€" * 50, "\U0001f600", "x" * 127, "y" * 128, "z" * 20000]


def value(rng: random.Random, kind: str) -> object:
    if rng.random() < 0.2:
        return None
    if kind == "int":
        return rng.choice(
            [rng.choice(INT_EDGES), rng.randrange(-(2**63), 2**63), rng.randrange(300), True]
        )
    if kind == "float":
        return rng.choice([rng.choice(FLOAT_EDGES), rng.uniform(-1e6, 1e6)])
    if kind == "text":
        if rng.random() < 0.3:
            return rng.choice(TEXT_EDGES)
        return "".join(rng.choice("ab é€\U0001f600") for _ in range(rng.randrange(40)))
    return bytes(rng.randrange(256) for _ in range(rng.randrange(300)))


def chunk(
    rng: random.Random, kinds: dict[str, str], n: int
) -> tuple[RowEncoder[str], list[tuple[object, ...]]]:
    encoder = RowEncoder(list(kinds))
    rows = [
        (*(value(rng, kinds[c]) for c in encoder.columns), key)  # the key last, as fetched
        for key in range(n)
    ]
    return encoder, rows


def records(encoded: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[bytes]:
    data, starts, lengths = encoded
    return [
        data[s : s + n].tobytes() for s, n in zip(starts.tolist(), lengths.tolist(), strict=True)
    ]


@pytest.mark.parametrize("seed", range(40))
def test_chunk_bytes_equal_row_by_row_bytes(seed: int) -> None:
    rng = random.Random(seed)
    names = ["id", "a", "é", "z" * 140, "b", "long_name_" * 3]
    kinds = {
        name: rng.choice(["int", "float", "text", "blob"])
        for name in names[: rng.randrange(1, len(names) + 1)]
    }
    kinds["t"] = "text"  # text, so no chunk is all numbers (which takes the matrix form)
    encoder, rows = chunk(rng, kinds, rng.randrange(16, 400))
    expected, good = encoder.encode(rows)
    assert good == len(rows)
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert records(encoded) == expected
    # Every record parses back to its row (NULL: no feature).
    example = ar.Example.FromString(records(encoded)[0])
    present = {c for c, v in zip(encoder.columns, rows[0][:-1], strict=True) if v is not None}
    assert set(example.features.feature) == present


def test_numeric_columns_with_nulls_keep_shortest_varints() -> None:
    encoder = RowEncoder(["n", "x"])
    rows: list[tuple[object, ...]] = [
        (INT_EDGES[i % len(INT_EDGES)], None if i % 5 == 0 else i * 0.5, i) for i in range(64)
    ]
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert records(encoded) == encoder.encode(rows)[0]
    assert len(set(encoded[2].tolist())) > 1  # the row form: lengths vary


def test_a_column_entirely_null_has_no_feature() -> None:
    encoder = RowEncoder(["n", "s"])
    rows: list[tuple[object, ...]] = [(None, f"r{i}", i) for i in range(20)]
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert records(encoded) == encoder.encode(rows)[0]
    assert set(ar.Example.FromString(records(encoded)[3]).features.feature) == {"s"}


def test_one_long_value_among_short_ones_gives_the_same_bytes() -> None:
    # Padding every row to the longest value would cost far more than the values: the
    # chunk is gathered span by span instead.
    encoder = RowEncoder(["b", "n"])
    rows: list[tuple[object, ...]] = [(b"v" * (i % 7), i - 50, i) for i in range(100)]
    rows[60] = (bytes(range(256)) * 400, 10, 60)
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert records(encoded) == encoder.encode(rows)[0]


def test_one_long_value_beside_a_column_entirely_null() -> None:
    encoder = RowEncoder(["b", "n"])
    rows: list[tuple[object, ...]] = [(b"v", None, i) for i in range(100)]
    rows[5] = (b"w" * 100_000, None, 5)
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert records(encoded) == encoder.encode(rows)[0]


def test_all_numeric_chunk_keeps_its_one_layout() -> None:
    encoder = RowEncoder(["n", "x"])
    rows: list[tuple[object, ...]] = [(i - 10, i / 4, i) for i in range(32)]
    encoded = encoder.encode_chunk(rows)
    assert encoded is not None
    assert set(encoded[2].tolist()) == {len(records(encoded)[0])}
    parsed = ar.parse_example(
        records(encoded),
        {"n": ar.FixedLenFeature([], "int64"), "x": ar.FixedLenFeature([], "float32")},
    )
    assert parsed["n"].tolist() == [i - 10 for i in range(32)]


@pytest.mark.parametrize(
    ("usual", "bad"),
    [
        (1, [1, 2]),  # an array: encoded row by row
        (1, 1 << 64),  # beyond int64: the row path names it
        (2.5, 1e300),  # beyond float32: the row path names it
        (b"x", bytearray(b"x")),  # another bytes-like type: row by row
        (1, "text"),  # a column of mixed kinds (SQLite allows it)
    ],
)
def test_columns_only_rows_handle_are_left_to_them(usual: object, bad: object) -> None:
    encoder = RowEncoder(["v", "s"])
    rows: list[tuple[object, ...]] = [(usual, "s", i) for i in range(20)]
    assert encoder.encode_chunk(rows) is not None
    rows[9] = (bad, "s", 9)
    assert encoder.encode_chunk(rows) is None


def test_short_chunks_are_left_to_the_row_path() -> None:
    encoder = RowEncoder(["s"])
    assert encoder.encode_chunk([("a", i) for i in range(15)]) is None


def test_columns_of_rows_always_take_the_row_form_with_bytes_names() -> None:
    encoder = RowEncoder([b"x", b"\xffn"])
    assert encoder.columns == (b"x", b"\xffn")
    columns: list[list[object]] = [[i * 0.5 for i in range(40)], list(range(-20, 20))]
    rows = list(zip(*columns, strict=True))
    values = encoder.encode_columns(columns)
    assert values == encoder.encode(rows)[0]  # shortest varints, not the fixed layout
    assert len(set(map(len, values))) > 1
    assert set(wire.index_example(values[0])) == {b"x", b"\xffn"}


def test_columns_of_rows_name_a_value_without_an_example_form() -> None:
    encoder = RowEncoder(["n"])
    with pytest.raises(ar.InvalidArgumentError, match=r"row 3: column 'n': integer") as info:
        encoder.encode_columns([[1, 2, 3, 1 << 64, 5]])
    assert info.value.record == 3


def column_values(values: list[object], kind: str) -> ColumnValues:
    """A column as a driver handing over arrays gives it (NULLs as zeros / empty)."""
    null = np.array([v is None for v in values], dtype=bool)
    if kind in ("int", "float"):
        dtype = np.int64 if kind == "int" else np.float64
        data = np.array([0 if v is None else v for v in values], dtype=dtype)
        return ColumnValues(kind, data, null=null)
    blobs = [
        v.encode() if isinstance(v, str) else v if isinstance(v, bytes) else b"" for v in values
    ]
    lengths = np.array([len(b) for b in blobs], dtype=np.int64)
    data = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return ColumnValues(
        "bytes", data, lengths=lengths, starts=np.cumsum(lengths) - lengths, null=null
    )


@pytest.mark.parametrize("seed", range(30))
def test_arrays_give_the_bytes_of_the_rows(seed: int) -> None:
    # encode_arrays of any slice of a chunk's columns == what the rows' path gives for it.
    rng = random.Random(seed)
    names = ["id", "a", "é", "b", "long_name_" * 3]
    kinds = {name: rng.choice(["int", "float", "text", "blob"]) for name in names}
    if seed % 3 == 0:
        kinds = {name: rng.choice(["int", "float"]) for name in names}  # the matrix form
    encoder, rows = chunk(rng, kinds, rng.choice([1, 5, 15, 16, 17, 100, 300]))
    if seed % 2:
        fill = {"int": 0, "float": 0.0, "text": "", "blob": b""}
        defaults = [fill[kinds[c]] for c in encoder.columns] + [None]
        rows = [
            tuple(d if v is None else v for v, d in zip(row, defaults, strict=True)) for row in rows
        ]
    columns = [
        column_values(
            [row[j] for row in rows], "bytes" if kinds[c] in ("text", "blob") else kinds[c]
        )
        for j, c in enumerate(encoder.columns)
    ]
    for start, stop in [(0, len(rows)), (len(rows) // 3, len(rows) - 1), (0, 1)]:
        part = rows[start:stop]
        if not part:
            continue
        got = encoder.encode_arrays([c.slice(start, stop) for c in columns])
        want = encoder.encode_chunk(part)
        if want is None:
            values, good = encoder.encode(part)
            if good < len(part):  # a float beyond float32: the row path names it
                assert got is None
                continue
            assert got is not None
            assert canonical(records(got)) == values
        else:
            assert got is not None
            assert canonical(records(got)) == canonical(records(want))
        assert [c.slice(start, stop).tolist() for c in columns] == [
            [v.encode() if isinstance(v, str) else v for v in col]
            for col in list(zip(*part, strict=True))[: len(columns)]
        ]


@pytest.mark.parametrize(
    ("kinds", "make"),
    [
        # Every entry of every row one length: records with no padding to drop.
        (
            {"i": "int", "f": "float", "s": "text"},
            lambda k: (100 + k % 28, [float("nan"), -0.0, 2.5][k % 3], "abc"),
        ),
        # Two long values a row, one longer than 32767 bytes.
        (
            {"a": "blob", "b": "blob", "n": "int"},
            lambda k: (b"\x01" * (40000 + k), b"\x02" * (19000 - k), -k),
        ),
    ],
)
def test_arrays_of_uniform_or_wide_rows_give_the_bytes_of_the_rows(
    kinds: dict[str, str], make: object
) -> None:
    encoder = RowEncoder(list(kinds))
    order = [list(kinds).index(c) for c in encoder.columns]
    rows = [tuple(make(k)[i] for i in order) for k in range(40)]  # type: ignore[operator]
    columns = [
        column_values(
            [row[j] for row in rows], "bytes" if kinds[c] in ("text", "blob") else kinds[c]
        )
        for j, c in enumerate(encoder.columns)
    ]
    got = encoder.encode_arrays(columns)
    assert got is not None
    values, good = encoder.encode(rows)
    assert good == len(rows)
    assert canonical(records(got)) == values
    dtypes = {"int": "int64", "float": "float32", "text": "string", "blob": "string"}
    spec = {c: ar.FixedLenFeature([], dtypes[kinds[c]]) for c in encoder.columns}
    parsed = ar.parse_example(records(got), spec)
    for j, c in enumerate(encoder.columns):
        want = [row[j].encode() if isinstance(row[j], str) else row[j] for row in rows]
        if kinds[c] == "float":
            np.testing.assert_array_equal(parsed[c], np.array(want, dtype=np.float32))
        else:
            assert list(parsed[c]) == want


def _mixed_rows(texts: Sequence[object]) -> tuple[RowEncoder[str], list[tuple[object, ...]]]:
    """Rows of numbers (never NULL: negative, small, wide, special floats) and the text
    column "c", which sorts between them."""
    encoder = RowEncoder(["b", "c", "d", "e", "f"])
    assert encoder.columns == ("b", "c", "d", "e", "f")
    specials = [float("nan"), -0.0, float("inf"), 1.5, 3.4e38]
    rows: list[tuple[object, ...]] = [
        (k * 131, text, -k if k % 3 else 2**62, specials[k % 5], 0, k)
        for k, text in enumerate(texts)
    ]
    return encoder, rows


def _columns_of(encoder: RowEncoder[str], rows: list[tuple[object, ...]]) -> list[ColumnValues]:
    kinds = {"b": "int", "c": "bytes", "d": "int", "e": "float", "f": "int"}
    return [
        column_values([row[j] for row in rows], kinds[c]) for j, c in enumerate(encoder.columns)
    ]


def _texts(case: str) -> Sequence[object]:
    rng = random.Random(case)
    if case == "short with NULLs and empties":
        return [rng.choice([None, "", "a", "row 17", "x" * rng.randrange(30)]) for _ in range(50)]
    if case == "all NULL":
        return [None] * 40
    if case == "non-ASCII":
        return [
            "".join(rng.choice("é€\U0001f600ab") for _ in range(rng.randrange(9)))
            for _ in range(40)
        ]
    if case == "around 128 bytes":  # entry heads and records of one and two length bytes
        return ["y" * rng.randrange(30, 200) for _ in range(64)]
    if case == "one length":  # every record fills its padded row
        return [f"row {k:08d}" for k in range(40)]
    if case == "all long":
        return [b"\x00\xff" * rng.randrange(1500, 1600) for _ in range(20)]
    assert case == "one huge"  # padding would cost too much: the other form
    return ["z" * 70000] + ["a"] * 39


@pytest.mark.parametrize(
    "case",
    [
        "short with NULLs and empties",
        "all NULL",
        "non-ASCII",
        "around 128 bytes",
        "one length",
        "all long",
        "one huge",
    ],
)
def test_numbers_and_one_text_parse_as_the_rows(case: str) -> None:
    texts = _texts(case)
    encoder, rows = _mixed_rows(texts)
    columns = _columns_of(encoder, rows)
    got = encoder.encode_arrays(columns)
    assert got is not None
    values, good = encoder.encode(rows)
    assert good == len(rows)
    assert canonical(records(got)) == values
    if case == "one huge":
        assert records(got) == values  # the padded form would be mostly padding
    else:
        # The text's entry after the numbers (in its place among them when every text is
        # as long), integers padded to their column's longest varint.
        for record, text in zip(records(got), texts, strict=True):
            keys = [b"b", b"d", b"e", b"f"] + ([] if text is None else [b"c"])
            if case == "one length":
                keys = [b"b", b"c", b"d", b"e", b"f"]
            assert entries(record) == keys
        assert sum(map(len, records(got))) > sum(map(len, values))
        if case == "one length":
            assert len(set(map(len, records(got)))) == 1  # one layout: parsed as a matrix
    spec = {
        "b": ar.FixedLenFeature([], "int64"),
        "c": ar.FixedLenFeature([], "string", b"-"),
        "d": ar.FixedLenFeature([], "int64"),
        "e": ar.FixedLenFeature([], "float32"),
        "f": ar.FixedLenFeature([], "int64"),
    }
    for batch in (records(got), ar.RecordBatch(*got, keys=[b"%d" % i for i in range(len(rows))])):
        parsed = ar.parse_example(batch, spec)
        assert parsed["b"].tolist() == [row[0] for row in rows]
        assert parsed["c"].tolist() == [
            b"-" if t is None else t.encode() if isinstance(t, str) else t for t in texts
        ]
        assert parsed["d"].tolist() == [row[2] for row in rows]
        np.testing.assert_array_equal(
            parsed["e"], np.array([row[3] for row in rows], dtype=np.float32)
        )
        assert parsed["f"].tolist() == [0] * len(rows)


def test_numbers_and_one_text_with_a_float_beyond_float32_are_refused() -> None:
    encoder, rows = _mixed_rows(["t"] * 20)
    rows[7] = (*rows[7][:3], 1e300, *rows[7][4:])
    assert encoder.encode_arrays(_columns_of(encoder, rows)) is None  # the row path names it


def test_a_float_beyond_float32_in_a_column_with_nulls_is_refused() -> None:
    encoder, rows = _mixed_rows(["t"] * 20)
    rows[7] = (*rows[7][:3], 1e300, *rows[7][4:])
    columns = _columns_of(encoder, rows)
    columns[3].null = np.arange(20) == 3
    assert encoder.encode_arrays(columns) is None  # the row path names it


def test_a_number_column_entirely_null_beside_a_text_has_no_feature() -> None:
    encoder, rows = _mixed_rows(["t", "", None] * 8)
    columns = _columns_of(encoder, rows)
    columns[2].null = np.ones(24, dtype=bool)  # "d"
    got = encoder.encode_arrays(columns)
    assert got is not None
    rows = [(b, c, None, e, f, key) for b, c, _, e, f, key in rows]
    assert canonical(records(got)) == encoder.encode(rows)[0]
    assert all(b"d" not in entries(record) for record in records(got))


def test_numbers_with_nulls_follow_the_numbers_without() -> None:
    encoder, rows = _mixed_rows(["t", None, "ü" * 200] * 10)
    columns = _columns_of(encoder, rows)
    columns[0].null = np.arange(30) % 4 == 1  # "b" NULL in some rows: no fixed place
    columns[0].data[columns[0].null] = 2**63 - 1  # what a NULL row holds is never used
    columns[3].null = np.arange(30) == 2  # "e" too, with a value beyond float32
    columns[3].data[2] = 1e300
    got = encoder.encode_arrays(columns)
    assert got is not None
    rows = [
        (None if k % 4 == 1 else b, c, d, None if k == 2 else e, f, key)
        for k, (b, c, d, e, f, key) in enumerate(rows)
    ]
    assert canonical(records(got)) == encoder.encode(rows)[0]
    for record, row in zip(records(got), rows, strict=True):
        order = [b"d", b"f", b"b", b"c", b"e"]  # the numbers without NULL first
        present = {b"b": row[0], b"c": row[1], b"d": row[2], b"e": row[3], b"f": row[4]}
        assert entries(record) == [k for k in order if present[k] is not None]


def test_two_texts_follow_the_numbers() -> None:
    encoder = RowEncoder(["a", "n", "z"])
    rows: list[tuple[object, ...]] = [
        ("x" * (k % 7), k, None if k % 3 == 0 else "é" * (k % 150), k) for k in range(64)
    ]
    kinds = {"a": "bytes", "n": "int", "z": "bytes"}
    columns = [
        column_values([row[j] for row in rows], kinds[c]) for j, c in enumerate(encoder.columns)
    ]
    got = encoder.encode_arrays(columns)
    assert got is not None
    assert canonical(records(got)) == encoder.encode(rows)[0]
    assert entries(records(got)[1]) == [b"n", b"a", b"z"]


def test_many_numbers_with_nulls_keep_the_row_bytes() -> None:
    # Each entry after a varying one is placed with a mask as wide as all before it: with
    # many, the slots' form costs less, and gives the rows' bytes.
    rng = random.Random(8)
    names = [f"c{j}" for j in range(8)]
    encoder = RowEncoder(names)
    rows: list[tuple[object, ...]] = [
        (*(None if rng.random() < 0.3 else k * 1000 + j for j in range(8)), k) for k in range(40)
    ]
    columns = [column_values([row[j] for row in rows], "int") for j in range(8)]
    got = encoder.encode_arrays(columns)
    assert got is not None
    assert records(got) == encoder.encode(rows)[0]


@pytest.mark.parametrize("case", ["short with NULLs and empties", "one length", "numbers only"])
def test_the_fixed_forms_parse_with_protobuf_as_the_rows(case: str) -> None:
    # protobuf's own parser, with TensorFlow's Example messages: padded varints and
    # entries out of key order are the same Example, serialized again as the rows' bytes.
    pytest.importorskip("google.protobuf")
    example_class = protobuf_example_class()
    if case == "numbers only":  # every integer a 10-byte varint
        encoder = RowEncoder(["i", "f"])
        assert encoder.columns == ("f", "i")
        rows: list[tuple[object, ...]] = [(k / 3, k * 997 - 9000, k) for k in range(20)]
        columns = [
            column_values([row[0] for row in rows], "float"),
            column_values([row[1] for row in rows], "int"),
        ]
    else:
        encoder, rows = _mixed_rows(_texts(case))
        columns = _columns_of(encoder, rows)
        columns[3].null = np.arange(len(rows)) % 4 == 1  # "e": NULLs, a varying entry
        rows = [(*row[:3], None if k % 4 == 1 else row[3], *row[4:]) for k, row in enumerate(rows)]
    got = encoder.encode_arrays(columns)
    assert got is not None
    want = encoder.encode(rows)[0]
    assert records(got) != want  # a fixed form
    for record, row_bytes in zip(records(got), want, strict=True):
        message = example_class()
        message.ParseFromString(record)
        assert message.SerializeToString(deterministic=True) == row_bytes
