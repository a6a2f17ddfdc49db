"""Work items of the database readers: a table's rows in a range of its integer key.

A work item is a string ``"sql:<table>?key=<column>&lo=<int>&hi=<int>"``: the rows of
``<table>`` whose key column is ``>= lo`` and ``< hi`` (either bound may be left out:
no bound on that side). It names a table of the database the *reader* was built for, never
a database itself, so a checkpoint restored into a program (whose work items come as
strings) cannot make a reader connect anywhere the program did not name.
:func:`table_shards` splits a table into such items by key range, for a producer to
shuffle and checkpoint.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
from typing import Final
from urllib.parse import parse_qsl, quote, unquote, urlsplit, urlunsplit

from .._errors import InvalidArgumentError
from .._io.executor import run_io

__all__ = ["TableShard", "database_name", "quote_name", "table_shards"]

_PREFIX: Final = "sql:"
_INT: Final = re.compile(r"-?(?:0|[1-9][0-9]*)")


@dataclasses.dataclass(frozen=True, slots=True)
class TableShard:
    """The rows of ``table`` with ``lo <= key < hi`` (``None``: unbounded)."""

    table: str
    key: str
    lo: int | None = None
    hi: int | None = None

    def work_item(self) -> str:
        """The shard as a work item string."""
        query = f"key={quote(self.key, safe='')}"
        if self.lo is not None:
            query += f"&lo={self.lo}"
        if self.hi is not None:
            query += f"&hi={self.hi}"
        return f"{_PREFIX}{quote(self.table, safe='')}?{query}"

    @classmethod
    def parse(cls, work: bytes) -> TableShard:
        """Parse a work item.

        Raises:
            InvalidArgumentError: ``work`` is not a table work item.
        """
        try:
            text = work.decode("utf-8")
        except UnicodeDecodeError:
            text = ""
        head, _, query = text.partition("?")
        fields: dict[str, str] = {}
        ok = head.startswith(_PREFIX) and len(head) > len(_PREFIX)
        for name, value in parse_qsl(query, keep_blank_values=True):
            ok = ok and name in ("key", "lo", "hi") and name not in fields
            fields[name] = value
        for bound in ("lo", "hi"):
            ok = ok and (bound not in fields or _INT.fullmatch(fields[bound]) is not None)
        if not ok or not fields.get("key"):
            raise InvalidArgumentError(
                'not a table work item: expected "sql:<table>?key=<column>&lo=<int>&hi=<int>" '
                "(lo and hi optional), as table_shards() makes them",
                work_item=work,
            )
        lo, hi = fields.get("lo"), fields.get("hi")
        return cls(
            unquote(head[len(_PREFIX) :]),
            fields["key"],
            None if lo is None else int(lo),
            None if hi is None else int(hi),
        )


def quote_name(name: str) -> str:
    """``name`` as a quoted SQL identifier (SQLite and PostgreSQL alike)."""
    if "\x00" in name:
        raise InvalidArgumentError(f"a table or column name cannot hold NUL: {name!r}")
    return '"' + name.replace('"', '""') + '"'


def is_postgres(source: str | os.PathLike[str]) -> bool:
    """Whether ``source`` is a PostgreSQL connection URL (else a SQLite file)."""
    return isinstance(source, str) and source.startswith(("postgresql://", "postgres://"))


def database_name(source: str | os.PathLike[str]) -> str:
    """``source`` as messages show it: a PostgreSQL URL without its password."""
    text = os.fspath(source)
    if not is_postgres(text):
        return text
    parts = urlsplit(text)
    netloc = parts.netloc
    if "@" in netloc:
        user, _, host = netloc.rpartition("@")
        netloc = user.partition(":")[0] + "@" + host
    query = "&".join(
        f"{k}={v}" for k, v in parse_qsl(parts.query, keep_blank_values=True) if k != "password"
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def check_shard_count(shards: int) -> int:
    if isinstance(shards, bool) or not isinstance(shards, int) or shards < 1:
        raise InvalidArgumentError(f"shards must be an integer >= 1, not {shards!r}")
    return shards


def split_range(table: str, key: str, low: int | None, high: int | None, shards: int) -> list[str]:
    """Split the keys ``low..high`` (inclusive; ``None`` for an empty table) into at most
    ``shards`` work items of equal key ranges; the first has no lower bound and the last no
    upper bound, so together they cover every row, including rows added later."""
    if low is None or high is None or shards == 1:
        return [TableShard(table, key).work_item()]
    span = high - low + 1
    bounds = sorted({low + span * i // shards for i in range(1, shards)} - {low})
    edges: list[int | None] = [None, *bounds, None]
    return [TableShard(table, key, lo, hi).work_item() for lo, hi in itertools.pairwise(edges)]


def _sqlite_bounds(path: str, table: str, key: str) -> tuple[int | None, int | None]:
    from .database import SQLiteConnection

    conn = SQLiteConnection(path)
    try:
        conn.check_table(table, key, None, work=None)
        return conn.key_bounds(table, key)
    finally:
        conn.close()


async def table_shards(
    source: str | os.PathLike[str], table: str, *, key: str, shards: int = 1
) -> list[str]:
    """Split a database table into work items by ranges of its integer key.

    The items are strings (``"sql:<table>?key=<column>&lo=<int>&hi=<int>"``) for
    :class:`~asyncreader.SQLiteReader` or :class:`~asyncreader.PostgresReader`: hand them
    to ``string_input_producer`` to shuffle them, run epochs and save them in checkpoints.
    The key range between the smallest and the largest key is cut into ``shards`` equal
    parts (fewer when there are fewer keys); the first item has no lower bound and the last
    no upper bound, so the items cover every row exactly once, rows added later included.

    Args:
        source: A SQLite database file, or a PostgreSQL URL (``postgresql://...``).
        table: The table.
        key: Its key column: integers, unique (a PRIMARY KEY or a UNIQUE index on that
            column alone) and never NULL.
        shards: How many items to make, >= 1.

    Returns:
        The work items, in key order.

    Raises:
        NotFoundError: the database, the table or the key column does not exist.
        InvalidArgumentError: ``shards`` is not >= 1, or the key is not a unique,
            non-NULL integer column.
    """
    check_shard_count(shards)
    if is_postgres(source):
        from .postgres import postgres_bounds

        low, high = await postgres_bounds(str(source), table, key)
    else:
        low, high = await run_io(_sqlite_bounds, os.fspath(source), table, key)
    return split_range(table, key, low, high, shards)
