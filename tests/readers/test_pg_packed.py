"""The packed form of PostgreSQL chunks: replies are checked before a byte is used."""

from __future__ import annotations

import struct

import pytest

from asyncreader._readers.pg_packed import Malformed, PackedColumn, packed_sql, unpack

PLAN = [
    PackedColumn("n", "int", nullable=True),
    PackedColumn("f", "float4", nullable=False),
    PackedColumn("b", "bool", nullable=False),
    PackedColumn("s", "text", nullable=True),
]


def reply(rows: list[int], **change: object) -> list[object]:
    """A well-formed packed reply of rows with keys ``rows`` (values derived from them)."""
    n = len(rows)
    texts = [None if k % 3 == 0 else ("é" * (k % 4)).encode() for k in rows]
    fields: dict[str, object] = {
        "count": n,
        "keys": struct.pack(f">{n}q", *rows),
        "n": struct.pack(f">{n}q", *(k * 10 for k in rows)),
        "n_null": bytes(k % 2 for k in rows),
        "f": struct.pack(f">{n}f", *(k / 2 for k in rows)),
        "b": bytes(k % 2 for k in rows),
        "s": b"".join(t for t in texts if t is not None),
        "s_len": struct.pack(f">{n}i", *(-1 if t is None else len(t) for t in texts)),
    }
    fields.update(change)
    return list(fields.values())


def test_a_reply_unpacks_to_its_columns() -> None:
    keys, columns = unpack(reply([4, 5, 6, 7]), PLAN, 10, None, None, 3)
    assert keys == [4, 5, 6, 7]
    assert [c.tolist() for c in columns] == [
        [40, None, 60, None],
        [2.0, 2.5, 3.0, 3.5],
        [0, 1, 0, 1],
        [b"", b"\xc3\xa9", None, b"\xc3\xa9" * 3],
    ]


def test_rows_out_of_key_order_are_put_in_order() -> None:
    keys, columns = unpack(reply([6, 4, 7, 5]), PLAN, 10, None, None, None)
    assert keys == [4, 5, 6, 7]
    assert columns[0].tolist() == [40, None, 60, None]
    assert columns[3].tolist() == [b"", b"\xc3\xa9", None, b"\xc3\xa9" * 3]


def test_no_rows() -> None:
    empty = [0, None, None, None, None, None, None, None]
    assert unpack(empty, PLAN, 10, None, None, None)[0] == []


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"count": 11}, "row count of 11"),
        ({"count": -1}, "row count of -1"),
        ({"count": "4"}, "row count of '4'"),
        ({"keys": b"\x00" * 31}, "keys: 31 bytes for 4 rows"),
        ({"n": b"\x00" * 40}, "column 'n': 40 bytes"),
        ({"n_null": b"\x00\x02\x00\x00"}, "NULLs: a byte other than 0 or 1"),
        ({"f": 1.5}, "column 'f': float, not bytes"),
        ({"b": b"\x00\x01\x07\x00"}, "boolean byte other than 0 or 1"),
        ({"s": b"x"}, "lengths adding up to"),
        ({"s_len": struct.pack(">4i", 1, -2, 0, 0)}, "a negative length"),
        ({"s_len": struct.pack(">4i", 2**31 - 1, 2**31 - 1, 2, 0)}, "lengths adding up to"),
        ({"extra": b""}, "more fields than columns"),
        ({"keys": struct.pack(">4q", 4, 5, 5, 6)}, "a key twice"),
        ({"keys": struct.pack(">4q", 3, 5, 6, 7)}, r"keys 3\.\.7 outside"),
    ],
)
def test_a_reply_that_does_not_add_up_is_malformed(change: dict[str, object], message: str) -> None:
    with pytest.raises(Malformed, match=message):
        unpack(reply([4, 5, 6, 7], **change), PLAN, 10, None, None, 3)


@pytest.mark.parametrize(("lo", "hi", "after"), [(5, None, None), (None, 7, None), (0, 8, 4)])
def test_keys_outside_the_shard_are_malformed(
    lo: int | None, hi: int | None, after: int | None
) -> None:
    with pytest.raises(Malformed, match="outside"):
        unpack(reply([4, 5, 6, 7]), PLAN, 10, lo, hi, after)
    assert unpack(reply([5, 6]), PLAN, 10, lo, hi, after)[0] == [5, 6]


def test_the_query_orders_by_the_tables_key_whatever_the_column_names() -> None:
    plan = [PackedColumn("k", "int", nullable=False), PackedColumn('c"0', "bytes", nullable=True)]
    sql = packed_sql(plan, "my table", "c0", ' WHERE "c0" > $1', "$2")
    assert 'FROM "my table" AS src WHERE "c0" > $1 ORDER BY src."c0" LIMIT $2' in sql
    assert '"c""0" AS c1' in sql
