"""PostgreSQL chunks fetched packed: one reply row per chunk, not one per row.

asyncpg makes a ``Record`` and a Python object per value of every row it returns, which
bounds a reader that only wants the rows' bytes. So :class:`~asyncreader.PostgresReader`
asks the server to pack a chunk instead: the same keyset query (``WHERE key > <last key>
ORDER BY key LIMIT n``) as a subquery, aggregated into a single row holding

* the rows' fixed-width part, one aggregate over the rows (``string_agg(int8send(c0) ||
  float8send(coalesce(c1, 0)) || ... , '')``): per row its numbers in their binary form
  (big-endian integers and floats, booleans as a byte; the key among them, or first when
  the record does not hold it) and the length of each text or blob value (-1 for NULL),
  so that the part is one numpy structured array, a field per column;
* for each text or blob column, its values joined (``string_agg(c, '')``; text as the
  server holds it when its encoding is UTF-8, else through ``convert_to``);
* for each number column that may be NULL, the keys of its NULL rows
  (``array_agg(k) FILTER (WHERE c IS NULL)``: an aggregate transition only for a NULL).

Joining a row's numbers before aggregating them costs the server one aggregate
transition a row instead of one per value (measured: 0.45 -> 0.35 us of server CPU a
row for five numbers, 0.65 -> 0.55 with a text column besides). A byte a row for each
column that may be NULL cost about as much again (each ``||`` copies the row so far):
filtered keys instead, and the key sent once when the record holds it, took a chunk of
five nullable numbers from 0.38 to 0.27 us a row of server time (0.44 -> 0.33 with a text
column), as much as a plain fetch. One ``bytes`` per part then becomes numpy arrays with
no Python object per row, which
:meth:`~asyncreader._readers.row_example.RowEncoder.encode_arrays` encodes.

The aggregates of one plain ``Aggregate`` node read the subquery's rows in the same order,
so the parts agree row for row; PostgreSQL keeps the subquery's key order in practice
(an ``ORDER BY`` inside each aggregate would sort each part again), and the keys are
checked and the chunk put in key order if it ever were not. Every length in the reply is
checked against the row count before it is used, and every NULL's key against the
chunk's keys: a reply that does not add up raises :class:`Malformed` (the reader's
DataLossError), never a wrong record.

Columns of other types (numeric, dates, arrays, JSON, ...) are left to the row path.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Final

import numpy as np

from .row_example import ColumnValues, gather
from .table_work import quote_name

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["Malformed", "PackedColumn", "last_key", "packed_plan", "packed_sql", "unpack"]

#: The kind of each column type the packed form holds (``format_type`` names).
_KINDS: Final = {
    "bigint": "int",
    "integer": "int",
    "smallint": "int",
    "boolean": "bool",
    "double precision": "float8",
    "real": "float4",
    "text": "text",
    "character varying": "text",
    "bytea": "bytes",
}

#: Numbers: the SQL function that packs one, and its dtype in a packed row.
_NUMBERS: Final = {
    "int": ("int8send", ">i8"),
    "bool": ("boolsend", "u1"),
    "float8": ("float8send", ">f8"),
    "float4": ("float4send", ">f4"),
}

#: What stands in for NULL in a packed number column (the NULL mask says which).
_ZERO: Final = {"int": "0::int8", "bool": "false", "float8": "0::float8", "float4": "0::real"}


class Malformed(Exception):
    """A packed reply that does not add up (turned into DataLossError by the reader)."""


@dataclasses.dataclass(frozen=True, slots=True)
class PackedColumn:
    """A column read in packed form: its name, kind and whether it may hold NULL."""

    name: str
    kind: str
    nullable: bool


def packed_plan(
    columns: Sequence[str], types: Mapping[str, tuple[str, bool]]
) -> list[PackedColumn] | None:
    """The packed columns of ``columns`` (``types``: each column's ``format_type`` and
    whether it is NOT NULL), or ``None`` if one has a type the packed form does not hold."""
    plan = []
    for name in columns:
        pg_type, not_null = types[name]
        kind = _KINDS.get(pg_type.partition("(")[0])
        if kind is None:
            return None
        plan.append(PackedColumn(name, kind, not not_null))
    return plan


def _key_index(plan: Sequence[PackedColumn], key: str) -> int | None:
    """The index of the key column in ``plan`` when the records hold it (as an integer):
    its number is then the key, sent once."""
    for j, column in enumerate(plan):
        if column.name == key and column.kind == "int":
            return j
    return None


def _layout(plan: Sequence[PackedColumn], key: str) -> np.dtype:
    """The fixed-width part of a packed row: the key (unless a column holds it), each
    number, and the length of each text or blob value, in this order."""
    fields = [] if _key_index(plan, key) is not None else [("k", ">i8")]
    fields += [(f"v{j}", _NUMBERS[c.kind][1]) for j, c in enumerate(plan) if c.kind in _NUMBERS]
    fields += [(f"l{j}", ">i4") for j, c in enumerate(plan) if c.kind not in _NUMBERS]
    return np.dtype(fields)


def _null_keys(plan: Sequence[PackedColumn], key: str) -> list[int]:
    """The columns whose NULL rows the reply names by key: the numbers that may be NULL
    (but the key's own column: a row whose key is NULL drops out of the packed rows)."""
    own = _key_index(plan, key)
    return [j for j, c in enumerate(plan) if c.kind in _NUMBERS and c.nullable and j != own]


def packed_sql(
    plan: Sequence[PackedColumn],
    table: str,
    key: str,
    where: str,
    limit: str,
    *,
    utf8_server: bool = False,
) -> str:
    """The query of a chunk in packed form: the rows of ``table`` matching ``where`` (a
    WHERE clause or ``""``), the first ``limit`` (a placeholder) in ``key`` order.

    ``utf8_server``: the server's encoding is UTF-8, so text is aggregated as it is (its
    bytes are already the UTF-8 ones, and ``octet_length`` counts them) and comes back
    as one ``str`` a column; otherwise each value goes through ``convert_to``, which
    costs the server about a sixth of a chunk's time."""
    own = _key_index(plan, key)
    inner = []
    numbers = []
    lengths = []
    blobs = []
    for j, column in enumerate(plan):
        alias = f"c{j}"
        source = quote_name(column.name)
        if column.kind in _NUMBERS:
            send = _NUMBERS[column.kind][0]
            cast = "::int8" if column.kind == "int" else ""
            inner.append(f"{source}{cast} AS {alias}")
            # A NULL key is not stood in for: its row drops out, and the counts disagree.
            value = alias if j == own else f"coalesce({alias}, {_ZERO[column.kind]})"
            numbers.append(f"{send}({value})")
        else:
            # Text as its UTF-8 bytes, whatever the server's encoding (as asyncpg gives it).
            utf8 = column.kind == "text" and not utf8_server
            value = f"convert_to({source}, 'UTF8')" if utf8 else source
            inner.append(f"{value} AS {alias}")
            lengths.append(f"int4send(coalesce(octet_length({alias}), -1))")
            blobs.append(f"string_agg({alias}, '')")
    q = quote_name(key)
    k = f"c{own}"
    if own is None:
        k = "k"
        inner.append(f"{q}::int8 AS k")
        numbers.insert(0, "int8send(k)")
    nulls = [f"array_agg({k}) FILTER (WHERE c{j} IS NULL)" for j in _null_keys(plan, key)]
    row = " || ".join(numbers + lengths)
    # ORDER BY the table's key column by its qualified name: an output alias cannot shadow it.
    sub = (
        f"SELECT {', '.join(inner)} FROM {quote_name(table)} AS src{where} "
        f"ORDER BY src.{q} LIMIT {limit}"
    )
    outer = ["count(*)", f"string_agg({row}, '')", *blobs, *nulls]
    return f"SELECT {', '.join(outer)} FROM ({sub}) AS chunk"


def last_key(
    reply: Sequence[object], plan: Sequence[PackedColumn], key: str, limit: int
) -> int | None:
    """The key of the last row of a packed reply of a whole chunk (``limit`` rows), read
    before the reply is checked, to ask for the next chunk early; ``None`` when the chunk
    is not whole or the reply not of its form (:func:`unpack` says why)."""
    if len(reply) < 2 or type(reply[0]) is not int or reply[0] != limit or limit < 1:
        return None
    layout = _layout(plan, key)
    fixed = reply[1]
    if not isinstance(fixed, bytes) or len(fixed) != layout.itemsize * limit:
        return None
    row = np.frombuffer(fixed, dtype=layout, offset=len(fixed) - layout.itemsize)
    own = _key_index(plan, key)
    return int(row["k" if own is None else f"v{own}"][0])


def unpack(
    reply: Sequence[object],
    plan: Sequence[PackedColumn],
    key: str,
    limit: int,
    lo: int | None,
    hi: int | None,
    after: int | None,
) -> tuple[list[int], list[ColumnValues]]:
    """The keys (in order) and the columns of a packed reply (of :func:`packed_sql` with
    the same ``plan`` and ``key``), checked: as many rows as the count says, at most
    ``limit``, keys unique in ``lo <= key < hi`` and past ``after``, each NULL's key
    one of them.

    Raises:
        Malformed: the reply does not add up.
    """
    count = reply[0] if len(reply) else None
    if type(count) is not int or not 0 <= count <= limit:
        raise Malformed(f"a row count of {count!r} for a chunk of at most {limit}")
    fields = iter(reply[1:])

    def field(what: str, text: bool = False) -> bytes:
        value = next(fields, b"")
        value = b"" if value is None else value  # string_agg of no rows (or all NULL)
        if text and isinstance(value, str):
            value = value.encode()  # text aggregated as it is (see packed_sql)
        if not isinstance(value, bytes):
            raise Malformed(f"{what}: {type(value).__name__}, not bytes")
        return value

    layout = _layout(plan, key)
    fixed = field("rows")
    if len(fixed) != layout.itemsize * count:
        raise Malformed(f"rows: {len(fixed)} bytes for {count} rows of {layout.itemsize}")
    rows = np.frombuffer(fixed, dtype=layout)
    own = _key_index(plan, key)
    keys = rows["k" if own is None else f"v{own}"].astype(np.int64)
    columns: list[ColumnValues] = []
    for j, column in enumerate(plan):
        what = f"column {column.name!r}"
        if column.kind in _NUMBERS:
            raw = rows[f"v{j}"]
            if column.kind == "bool" and np.any(raw > 1):
                raise Malformed(f"{what}: a boolean byte other than 0 or 1")
            kind = "int" if column.kind in ("int", "bool") else "float"
            data = raw.astype(np.int64 if kind == "int" else np.float64)
            columns.append(ColumnValues(kind, data))
        else:
            blob = np.frombuffer(field(what, column.kind == "text"), dtype=np.uint8)
            lengths = rows[f"l{j}"].astype(np.int64)
            if np.any(lengths < -1):
                raise Malformed(f"{what}: a negative length")
            nulls = lengths < 0
            lengths[nulls] = 0
            total = int(lengths.sum())
            if total != len(blob):
                raise Malformed(f"{what}: lengths adding up to {total} for {len(blob)} bytes")
            columns.append(
                ColumnValues(
                    "bytes",
                    blob,
                    lengths=lengths,
                    starts=np.cumsum(lengths) - lengths,
                    null=nulls if nulls.any() else None,
                )
            )
    null_keys = [
        (j, _keys(next(fields, None), f"column {plan[j].name!r} NULLs"))
        for j in _null_keys(plan, key)
    ]
    if next(fields, None) is not None:
        raise Malformed("more fields than columns")
    order: np.ndarray | None = None
    if count > 1 and not bool(np.all(keys[1:] > keys[:-1])):
        order = np.argsort(keys, kind="stable")
        keys = keys[order]
        if not bool(np.all(keys[1:] > keys[:-1])):
            raise Malformed("a key twice in a chunk")
    for j, named in null_keys:
        if len(named):
            columns[j].null = _null_mask(keys, named, order, f"column {plan[j].name!r} NULLs")
    if order is not None:
        columns = [_reorder(c, order) for c in columns]
    if count:
        first, last = int(keys[0]), int(keys[-1])
        lows = [b for b in (lo, None if after is None else after + 1) if b is not None]
        if (lows and first < max(lows)) or (hi is not None and last >= hi):
            raise Malformed(f"keys {first}..{last} outside the chunk's key range")
    return keys.tolist(), columns


def _keys(value: object, what: str) -> np.ndarray:
    """The keys an ``array_agg`` of keys gave (``None``: no row)."""
    if value is None or (isinstance(value, list) and not value):
        return np.zeros(0, dtype=np.int64)
    try:
        keys = np.array(value) if isinstance(value, list) else None
    except (ValueError, OverflowError):  # ragged lists
        keys = None
    # Integers only (no bool, float, NULL or beyond int64): numpy's int64 and nothing else.
    if keys is None or keys.dtype != np.int64 or keys.ndim != 1:
        raise Malformed(f"{what}: not a list of keys")
    return keys


def _null_mask(
    keys: np.ndarray, named: np.ndarray, order: np.ndarray | None, what: str
) -> np.ndarray:
    """Which rows (in reply order) the keys ``named`` are, ``keys`` being the chunk's keys
    in order (``order``: the reply's rows in key order, ``None`` if they were)."""
    at = np.searchsorted(keys, named)
    if np.any(at >= len(keys)) or np.any(keys[np.minimum(at, len(keys) - 1)] != named):
        raise Malformed(f"{what}: a key not in the chunk")
    mask = np.zeros(len(keys), dtype=bool)
    mask[at if order is None else order[at]] = True
    if np.count_nonzero(mask) != len(at):  # two keys marked one row (no sort to find out)
        raise Malformed(f"{what}: a key twice")
    return mask


def _reorder(column: ColumnValues, order: np.ndarray) -> ColumnValues:
    """``column``'s rows in ``order``."""
    null = None if column.null is None else column.null[order]
    if column.kind != "bytes":
        return ColumnValues(column.kind, column.data[order], null=null)
    assert column.lengths is not None
    assert column.starts is not None
    lengths = column.lengths[order]
    data = gather(column.data, column.starts[order], lengths)
    return ColumnValues(
        "bytes", data, lengths=lengths, starts=np.cumsum(lengths) - lengths, null=null
    )
