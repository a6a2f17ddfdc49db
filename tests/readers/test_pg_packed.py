"""The packed form of PostgreSQL chunks: replies are checked before a byte is used."""

from __future__ import annotations

import numpy as np
import pytest

from asyncreader._readers.pg_packed import Malformed, PackedColumn, last_key, packed_sql, unpack

PLAN = [
    PackedColumn("n", "int", nullable=True),
    PackedColumn("f", "float4", nullable=False),
    PackedColumn("b", "bool", nullable=False),
    PackedColumn("s", "text", nullable=True),
]


#: A packed row of PLAN read by a key it does not hold: key, the numbers, the length of "s".
ROW = np.dtype([("k", ">i8"), ("v0", ">i8"), ("v1", ">f4"), ("v2", "u1"), ("l3", ">i4")])


def reply(
    keys: list[int], *, values: dict[str, list[int]] | None = None, **change: object
) -> list[object]:
    """A well-formed packed reply of rows with keys ``keys`` (values derived from them);
    ``values`` replaces fields of the packed rows, ``change`` whole parts of the reply."""
    n = len(keys)
    texts = [None if k % 3 == 0 else ("é" * (k % 4)).encode() for k in keys]
    packed = np.zeros(n, dtype=ROW)
    packed["k"] = keys
    packed["v0"] = [0 if k % 2 else k * 10 for k in keys]
    packed["v1"] = [k / 2 for k in keys]
    packed["v2"] = [k % 2 for k in keys]
    packed["l3"] = [-1 if t is None else len(t) for t in texts]
    for name, column in (values or {}).items():
        packed[name] = column
    parts: dict[str, object] = {
        "count": n,
        "rows": packed.tobytes(),
        "s": b"".join(t for t in texts if t is not None),
        "n nulls": [k for k in keys if k % 2] or None,  # array_agg of no row is NULL
    }
    parts.update(change)
    return list(parts.values())


def test_a_reply_unpacks_to_its_columns() -> None:
    keys, columns = unpack(reply([4, 5, 6, 7]), PLAN, "k", 10, None, None, 3)
    assert keys == [4, 5, 6, 7]
    assert [c.tolist() for c in columns] == [
        [40, None, 60, None],
        [2.0, 2.5, 3.0, 3.5],
        [0, 1, 0, 1],
        [b"", b"\xc3\xa9", None, b"\xc3\xa9" * 3],
    ]


def test_rows_out_of_key_order_are_put_in_order() -> None:
    keys, columns = unpack(reply([6, 4, 7, 5]), PLAN, "k", 10, None, None, None)
    assert keys == [4, 5, 6, 7]
    assert columns[0].tolist() == [40, None, 60, None]
    assert columns[2].tolist() == [0, 1, 0, 1]
    assert columns[3].tolist() == [b"", b"\xc3\xa9", None, b"\xc3\xa9" * 3]


def test_null_rows_are_named_by_key_in_any_order() -> None:
    named = reply([4, 5, 9, 6, 7])
    named[-1] = [9, 5]  # the last part: the keys of the rows where "n" is NULL
    keys, columns = unpack(named, PLAN, "k", 10, 0, 10, None)
    assert keys == [4, 5, 6, 7, 9]
    assert columns[0].tolist() == [40, None, 60, 0, None]
    named = reply([4, 5, 6, 7])
    named[-1] = None
    _, columns = unpack(named, PLAN, "k", 10, 0, 10, None)
    assert columns[0].null is None
    assert columns[0].tolist() == [40, 0, 60, 0]


def test_a_column_holding_the_key_sends_it_once() -> None:
    # Reading by "n" (its own column): no separate key in the rows, no NULL list for it.
    plan = [PackedColumn("s", "bytes", nullable=True), PackedColumn("n", "int", nullable=True)]
    sql = packed_sql(plan, "t", "n", "", "$1")
    assert "string_agg(int8send(c1) || int4send(coalesce(octet_length(c0), -1)), '')" in sql
    assert "FILTER" not in sql
    assert "AS k" not in sql
    rows = np.array([(7, 1), (9, -1)], dtype=[("v1", ">i8"), ("l0", ">i4")])
    keys, columns = unpack([2, rows.tobytes(), b"x"], plan, "n", 10, None, None, None)
    assert keys == [7, 9]
    assert [c.tolist() for c in columns] == [[b"x", None], [7, 9]]
    # Another integer column than the key: the key comes first, NULLs by key.
    sql = packed_sql(plan, "t", "id", "", "$1")
    assert '"id"::int8 AS k' in sql
    assert "string_agg(int8send(k) || int8send(coalesce(c1, 0::int8)) || int4send(" in sql
    assert "array_agg(k) FILTER (WHERE c1 IS NULL)" in sql


def test_no_rows() -> None:
    empty = [0, None, None, None]
    assert unpack(empty, PLAN, "k", 10, None, None, None)[0] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": 11}, "row count of 11"),
        ({"count": -1}, "row count of -1"),
        ({"count": "4"}, "row count of '4'"),
        ({"rows": b"\x00" * 103}, "rows: 103 bytes for 4 rows of 25"),
        ({"rows": None}, "rows: 0 bytes for 4 rows"),
        ({"rows": 1.5}, "rows: float, not bytes"),
        ({"n nulls": [5, 8]}, "'n' NULLs: a key not in the chunk"),
        ({"n nulls": [3]}, "'n' NULLs: a key not in the chunk"),
        ({"n nulls": [5, 5]}, "'n' NULLs: a key twice"),
        ({"n nulls": [5, None]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": [5.0]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": [True]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": [2**63]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": [[5], [6, 7]]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": [[5]]}, "'n' NULLs: not a list of keys"),
        ({"n nulls": b"\x05"}, "'n' NULLs: not a list of keys"),
        ({"values": {"v2": [0, 1, 7, 0]}}, "boolean byte other than 0 or 1"),
        ({"s": 1.5}, "column 's': float, not bytes"),
        ({"s": b"x"}, "lengths adding up to"),
        ({"values": {"l3": [1, -2, 0, 0]}}, "a negative length"),
        ({"values": {"l3": [2**31 - 1, 2**31 - 1, 2, 0]}}, "lengths adding up to"),
        ({"extra": b""}, "more fields than columns"),
        ({"values": {"k": [4, 5, 5, 6]}}, "a key twice"),
        ({"values": {"k": [3, 5, 6, 7]}}, r"keys 3\.\.7 outside"),
    ],
)
def test_a_reply_that_does_not_add_up_is_malformed(change: dict[str, object], message: str) -> None:
    with pytest.raises(Malformed, match=message):
        unpack(reply([4, 5, 6, 7], **change), PLAN, "k", 10, None, None, 3)  # type: ignore[arg-type]


@pytest.mark.parametrize(("lo", "hi", "after"), [(5, None, None), (None, 7, None), (0, 8, 4)])
def test_keys_outside_the_shard_are_malformed(
    lo: int | None, hi: int | None, after: int | None
) -> None:
    with pytest.raises(Malformed, match="outside"):
        unpack(reply([4, 5, 6, 7]), PLAN, "k", 10, lo, hi, after)
    assert unpack(reply([5, 6]), PLAN, "k", 10, lo, hi, after)[0] == [5, 6]


def test_the_query_orders_by_the_tables_key_whatever_the_column_names() -> None:
    plan = [PackedColumn("k", "int", nullable=False), PackedColumn('c"0', "bytes", nullable=True)]
    sql = packed_sql(plan, "my table", "c0", ' WHERE "c0" > $1', "$2")
    assert 'FROM "my table" AS src WHERE "c0" > $1 ORDER BY src."c0" LIMIT $2' in sql
    assert '"c""0" AS c1' in sql


def test_text_from_a_utf8_server_comes_as_str() -> None:
    # Aggregated as it is (no convert_to), text comes back as one str: the same bytes.
    as_text = reply([4, 5, 6, 7], s="é" * 4)
    assert unpack(as_text, PLAN, "k", 10, None, None, 3)[1][3].tolist() == [
        b"",
        b"\xc3\xa9",
        None,
        b"\xc3\xa9" * 3,
    ]
    sql = packed_sql(PLAN, "t", "k", "", "$1", utf8_server=True)
    assert "convert_to" not in sql
    assert "string_agg(c3, '')" in sql
    assert "convert_to(\"s\", 'UTF8') AS c3" in packed_sql(PLAN, "t", "k", "", "$1")
    blob = [PackedColumn("y", "bytes", nullable=True)]
    blob_reply = [1, np.array([(4, 1)], dtype=[("k", ">i8"), ("l0", ">i4")]).tobytes(), "x"]
    with pytest.raises(Malformed, match="column 'y': str, not bytes"):
        unpack(blob_reply, blob, "k", 10, None, None, None)


def test_a_rows_numbers_are_joined_before_one_aggregate() -> None:
    # One aggregate transition a row for the fixed-width part, one per blob column, and
    # one per NULL of a number column.
    sql = packed_sql(PLAN, "t", "k", "", "$1")
    assert sql.count("string_agg(") == 2
    assert (
        "string_agg(int8send(k) || int8send(coalesce(c0, 0::int8)) || float4send(coalesce(c1, "
        "0::real)) || boolsend(coalesce(c2, false)) || "
        "int4send(coalesce(octet_length(c3), -1)), ''), string_agg(c3, ''), "
        "array_agg(k) FILTER (WHERE c0 IS NULL) FROM" in sql
    )
    assert ROW.itemsize == 25


def test_the_last_key_of_a_whole_chunk_is_read_before_the_reply_is_checked() -> None:
    assert last_key(reply([4, 5, 7, 6]), PLAN, "k", 4) == 6  # the reply's last row
    assert last_key(reply([4, 5, 7, 6], s=b"wrong"), PLAN, "k", 4) == 6  # checked later
    assert last_key(reply([4, 5, 6]), PLAN, "k", 4) is None  # the last chunk
    assert last_key(reply([4, 5, 6, 7], rows=b"\x00" * 99), PLAN, "k", 4) is None
    assert last_key(reply([4, 5, 6, 7], rows="text"), PLAN, "k", 4) is None
    assert last_key(reply([4, 5, 6, 7], count="4"), PLAN, "k", 4) is None
    assert last_key([0, None], PLAN, "k", 0) is None
    assert last_key([], PLAN, "k", 4) is None
    # The key column among the record's: its own number.
    plan = [PackedColumn("n", "int", nullable=False), PackedColumn("s", "bytes", nullable=True)]
    rows = np.array([(7, 1), (9, -1)], dtype=[("v0", ">i8"), ("l1", ">i4")])
    assert last_key([2, rows.tobytes(), b"x"], plan, "n", 2) == 9
