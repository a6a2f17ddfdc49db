"""Database readers: the rows of a table, in key order, as ``tf.train.Example`` records.

:class:`TableReader` is what :class:`SQLiteReader` and
:class:`~asyncreader.PostgresReader` share: work items naming a key range of a table
(:mod:`~asyncreader._readers.table_work`), keyset pagination (``WHERE key > <last key>
ORDER BY key LIMIT n``, never ``OFFSET``) a chunk of ``fetch_rows`` rows per round trip,
the rows encoded as Examples (:mod:`~asyncreader._readers.row_example`), record keys
``b"<table>:<key>"``, and the position in a work item saved as the last key delivered, so
a restore continues exactly after it whatever was inserted or deleted meanwhile.

The SQLite reader's hooks are plain functions on the I/O executor: one thread hop per
chunk (``read_up_to`` / ``read_batch``), never per row beyond what ``read`` asks for.
"""

from __future__ import annotations

import os
import sqlite3
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .._errors import DataLossError, InvalidArgumentError, NotFoundError
from .._records.batch import KeyRun, Segment, assemble
from .._records.keys import bulk_keys
from .base import ReaderBase
from .hook_path import as_lists
from .row_example import ColumnValues, RowEncoder
from .state import SKIP, check_skip
from .table_work import TableShard, database_name, quote_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._error_policy import OnError
    from .base import ReadManyResult

__all__ = [
    "DEFAULT_FETCH_ROWS",
    "SQLiteConnection",
    "SQLiteReader",
    "TableReader",
    "one_record",
]

#: Rows fetched per round trip (per thread hop for SQLite) unless a call asks for more.
DEFAULT_FETCH_ROWS: Final = 2048

#: The position in a work item: whether a key was delivered yet, and the last one.
_CURSOR: Final = struct.Struct("<?q")


class TableReader(ReaderBase):
    """What the database readers share (internal base).

    Subclasses connect (``on_work_started``), look the table up, and fetch rows
    ``(value columns..., key)`` after a key; the rest is here.
    """

    def __init__(
        self,
        source: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None,
        fetch_rows: int,
        name: str | None,
        on_error: OnError,
    ) -> None:
        super().__init__(name, on_error=on_error)
        if columns is not None:
            if isinstance(columns, str) or not all(isinstance(c, str) for c in columns):
                raise InvalidArgumentError(
                    f"columns must be a sequence of column names, not {columns!r}"
                )
            if not columns:
                raise InvalidArgumentError("columns must name at least one column")
            if len(set(columns)) < len(columns):
                raise InvalidArgumentError(f"columns names a column twice: {columns!r}")
        if isinstance(fetch_rows, bool) or not isinstance(fetch_rows, int) or fetch_rows < 1:
            raise InvalidArgumentError(f"fetch_rows must be an integer >= 1, not {fetch_rows!r}")
        #: The database, as messages name it (a PostgreSQL URL without its password).
        self.database = database_name(source)
        #: The columns each record holds (``None``: all of the table's).
        self.columns: tuple[str, ...] | None = None if columns is None else tuple(columns)
        #: Rows fetched per round trip, unless a call asks for more.
        self.fetch_rows = fetch_rows
        self._reset_item()

    def _reset_item(self) -> None:
        self._shard: TableShard | None = None
        self._encoder: RowEncoder[str] | None = None
        self._prefix = b""
        self._query = ""
        # The last key delivered (None: none yet); rows fetched past it, not delivered.
        self._cursor: int | None = None
        self._rows: list[Any] = []
        # With a driver that hands chunks over as columns: ``_rows`` holds the keys and
        # these the values, one array set per column (see _fetched_columns).
        self._arrays: list[ColumnValues] | None = None
        self._pos = 0
        self._exhausted = False

    # -- what a subclass provides ---------------------------------------------------------

    def _shared_config(self) -> dict[str, object]:
        # A shared reader of another database, columns or chunk size is another reader
        # (the database as messages show it: a PostgreSQL password is not compared).
        return {
            "name": self._name,
            "database": self.database,
            "columns": self.columns,
            "fetch_rows": self.fetch_rows,
        }

    def _placeholder(self, index: int) -> str:
        raise NotImplementedError

    # -- shared steps ----------------------------------------------------------------------

    def _start(self, work: bytes, shard: TableShard, table_columns: Sequence[str]) -> None:
        """Begin ``shard`` whose table has ``table_columns`` (checked to exist)."""
        self._reset_item()
        columns = self.columns if self.columns is not None else tuple(table_columns)
        self._shard = shard
        self._encoder = RowEncoder(columns)
        self._prefix = shard.table.encode("utf-8") + b":"

    def _where(self, after: bool) -> tuple[str, int]:
        """The WHERE clause of the shard's rows (past the cursor if ``after``), with
        placeholders for :meth:`_params`' values, and how many it uses."""
        shard = self._shard
        assert shard is not None
        key = quote_name(shard.key)
        where: list[str] = []
        n = 0
        for bound, op in ((shard.lo, ">="), (shard.hi, "<")):
            if bound is not None:
                n += 1
                where.append(f"{key} {op} {self._placeholder(n)}")
        if after:
            n += 1
            where.append(f"{key} > {self._placeholder(n)}")
        return (f" WHERE {' AND '.join(where)}" if where else ""), n

    def _sql(self, after: bool) -> str:
        shard, encoder = self._shard, self._encoder
        assert shard is not None
        assert encoder is not None
        columns = ", ".join(quote_name(c) for c in (*encoder.columns, shard.key))
        key = quote_name(shard.key)
        clause, n = self._where(after)
        return (
            f"SELECT {columns} FROM {quote_name(shard.table)}{clause} "
            f"ORDER BY {key} LIMIT {self._placeholder(n + 1)}"
        )

    def _params(self, limit: int, after: int | None = None) -> tuple[str, list[object]]:
        """The query of the next ``limit`` rows past ``after`` (default: the cursor)."""
        shard = self._shard
        assert shard is not None
        if after is None:
            after = self._cursor
        params: list[object] = [b for b in (shard.lo, shard.hi) if b is not None]
        if after is not None:
            params.append(after)
        params.append(limit)
        return self._sql(after is not None), params

    def _wants_fetch(self) -> bool:
        return self._pos >= len(self._rows) and not self._exhausted

    def _fetched(self, rows: list[Any], limit: int) -> None:
        """Take a chunk of fetched rows (in key order, past the cursor)."""
        self._rows, self._arrays, self._pos = rows, None, 0
        self._exhausted = len(rows) < limit

    def _fetched_columns(self, keys: list[int], columns: list[ColumnValues], limit: int) -> None:
        """Take a chunk of fetched rows given as their keys (in order, past the cursor) and
        one :class:`ColumnValues` per column of the encoder."""
        self._rows, self._arrays, self._pos = keys, columns, 0
        self._exhausted = len(keys) < limit

    def _take(self, n: int) -> ReadManyResult:
        """Deliver up to ``n`` fetched rows as records (a batch when they are all numeric),
        and whether the work item ends with them; raise for a row that cannot be one
        (after delivering the rows before it: the next call raises again)."""
        rows, i = self._rows, self._pos
        if i >= len(rows):
            return [], [], self._exhausted
        encoder = self._encoder
        assert encoder is not None
        if self._arrays is not None:
            keys = rows[i : i + n]
            columns = [c.slice(i, i + len(keys)) for c in self._arrays]
            encoded = encoder.encode_arrays(columns)
            if encoded is None:  # a float beyond float32: the row path names its row
                chunk = list(zip(*(c.tolist() for c in columns), keys, strict=True))
                return self._take_rows(i, chunk, keys)
        else:
            chunk = rows[i : i + n]
            keys = [row[-1] for row in chunk]
            if set(map(type, keys)) != {int}:  # SQLite keys may hold anything
                bad_key = next(k for k in keys if type(k) is not int)
                good = keys.index(bad_key)
                if good == 0:
                    raise self._error(
                        InvalidArgumentError,
                        f"key {bad_key!r} is not an integer (the key column must hold integers)",
                        record=repr(bad_key),
                    )
                chunk, keys = chunk[:good], keys[:good]
            encoded = encoder.encode_chunk(chunk)
            if encoded is None:
                return self._take_rows(i, chunk, keys)
        # The whole chunk at once, column by column: one buffer, no bytes per record; the
        # keys are made from the key numbers only if they are asked for.
        self._advance(i, keys)
        ids = np.array(keys, dtype=np.int64)
        run = KeyRun(self._work, len(keys), ids, None, self._prefix)
        return assemble([Segment(*encoded)], [run]), self._at_end()

    def _take_rows(self, i: int, chunk: list[Any], keys: list[int]) -> ReadManyResult:
        """:meth:`_take` of ``chunk`` (the rows from ``i`` on), encoded row by row."""
        encoder = self._encoder
        assert encoder is not None
        values, good = encoder.encode(chunk)
        if good < len(chunk):
            if good == 0:
                key = keys[0]
                raise self._error(
                    InvalidArgumentError,
                    f"the row with key {key} cannot be a record: {encoder.error(chunk[0])}",
                    record=key,
                )
            keys = keys[:good]
        self._advance(i, keys)
        return bulk_keys(self._prefix, keys), values, self._at_end()

    def _advance(self, i: int, keys: list[int]) -> None:
        self._pos = i + len(keys)
        self._cursor = keys[-1]

    def _at_end(self) -> bool:
        return self._pos >= len(self._rows) and self._exhausted

    def _error(
        self,
        kind: type[InvalidArgumentError] | type[DataLossError] | type[NotFoundError],
        message: str,
        *,
        record: int | str | None = None,
        table: str | None = None,
    ) -> InvalidArgumentError | DataLossError | NotFoundError:
        """An error naming the database and the table."""
        if table is None:
            table = self._shard.table if self._shard is not None else None
        where = self.database if table is None else f"{self.database}, table {table!r}"
        return kind(f"{where}: {message}", work_item=self._work or None, record=record)

    # -- hooks shared by both readers -------------------------------------------------------

    def serialize_extra(self) -> bytes:
        cursor = self._cursor
        return _CURSOR.pack(cursor is not None, 0 if cursor is None else cursor)

    def _check_extra(self, extra: bytes) -> None:
        check_skip(extra)
        if len(extra) != SKIP.size + _CURSOR.size:
            raise InvalidArgumentError(
                f"state of a {type(self).__name__} must hold the last key delivered"
            )

    def _restore_cursor(self, extra: bytes) -> None:
        has_key, key = _CURSOR.unpack(extra)
        self._cursor = key if has_key else None
        self._rows, self._arrays, self._pos, self._exhausted = [], None, 0, False


class SQLiteConnection:
    """A read-only connection to a SQLite file, with errors naming the database."""

    def __init__(self, path: str) -> None:
        self.path = path
        if not os.path.isfile(path):
            raise NotFoundError(f"{path}: no such SQLite database file")
        try:
            # Read-only: a wrong path must not create an empty database. Used from one
            # worker thread at a time (the reader's lock), not always the same one.
            conn = sqlite3.connect(
                Path(path).absolute().as_uri() + "?mode=ro", uri=True, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise NotFoundError(f"{path}: cannot open the SQLite database: {exc}") from None
        conn.text_factory = bytes  # TEXT comes as its UTF-8 bytes: no decode and re-encode
        self.conn: sqlite3.Connection | None = conn

    def close(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            conn.close()

    def execute(self, sql: str, params: Sequence[object] = (), *, table: str) -> list[Any]:
        """Run ``sql``; SQLite's errors become DataLossError naming the database and table."""
        assert self.conn is not None
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            raise DataLossError(f"{self.path}, table {table!r}: {exc}") from None

    def check_table(
        self, table: str, key: str, columns: Sequence[str] | None, work: bytes | None
    ) -> list[str]:
        """Check that ``table`` can be read by ``key``; return its columns.

        Raises:
            NotFoundError: no such table, key column or column.
            InvalidArgumentError: the key is not unique, or some row's key is NULL.
        """
        where = f"{self.path}, table {table!r}"
        info = self.execute(f"PRAGMA table_info({quote_name(table)})", table=table)
        if not info:
            raise NotFoundError(f"{self.path}: no table {table!r}", work_item=work)
        names = [_text(row[1]) for row in info]
        for column in (key, *(columns or ())):
            if column not in names:
                raise NotFoundError(f"{where}: no column {column!r}", work_item=work)
        primary = [(_text(row[1]), _text(row[2]).upper()) for row in info if row[5]]
        unique = len(primary) == 1 and primary[0][0] == key
        if not unique:
            for index in self.execute(f"PRAGMA index_list({quote_name(table)})", table=table):
                # (seq, name, unique, origin, partial)
                if index[2] and not index[4]:
                    parts = self.execute(
                        f"PRAGMA index_info({quote_name(_text(index[1]))})", table=table
                    )
                    if [_text(p[2]) for p in parts] == [key]:
                        unique = True
                        break
        if not unique:
            raise InvalidArgumentError(
                f"{where}: key column {key!r} is not unique (it needs a PRIMARY KEY or a "
                "UNIQUE index on it alone)",
                work_item=work,
            )
        # An INTEGER PRIMARY KEY is the rowid: never NULL. Any other key may hold NULLs,
        # which no key range holds.
        if primary != [(key, "INTEGER")]:
            q = quote_name(key)
            nulls = self.execute(
                f"SELECT 1 FROM {quote_name(table)} WHERE {q} IS NULL LIMIT 1", table=table
            )
            if nulls:
                raise InvalidArgumentError(
                    f"{where}: key column {key!r} holds NULL (a row with a NULL key is in no "
                    "key range)",
                    work_item=work,
                )
        return names

    def key_bounds(self, table: str, key: str) -> tuple[int | None, int | None]:
        """The smallest and largest key (``None, None`` for an empty table)."""
        q = quote_name(key)
        ((low, high),) = self.execute(
            f"SELECT min({q}), max({q}) FROM {quote_name(table)}", table=table
        )
        for value in (low, high):
            if value is not None and type(value) is not int:
                raise InvalidArgumentError(
                    f"{self.path}, table {table!r}: key {value!r} is not an integer (the key "
                    "column must hold integers)"
                )
        return low, high


def one_record(taken: ReadManyResult) -> tuple[bytes, bytes, bool] | None:
    """``read_many(1)``'s record as ``read_one`` returns it."""
    if len(taken) == 2:
        (keys, values), at_end = as_lists(taken[0]), taken[1]
    else:
        keys, values, at_end = taken
    return (keys[0], values[0], at_end) if keys else None


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class SQLiteReader(TableReader):
    """A reader of the rows of SQLite tables (the standard library's ``sqlite3``).

    Work items name a table and a range of its integer key:
    ``"sql:<table>?key=<column>&lo=<int>&hi=<int>"`` (``lo`` included, ``hi`` excluded,
    either left out for no bound), as :func:`~asyncreader.table_shards` makes them. Each
    row becomes one record, in key order: key ``b"<table>:<key>"`` (stable: the same row
    has the same key in every shard layout), value a serialized ``tf.train.Example`` with
    a feature per column (see :doc:`the reference </reference/readers>` for the types),
    which ``parse_example`` decodes a batch at a time.

    Rows are fetched ``fetch_rows`` at a time by keyset pagination (``WHERE key > <last
    key> ORDER BY key LIMIT n``), each chunk in one hop to the I/O executor; the database
    is opened read-only when a work item starts and closed with the reader. Saved state
    holds the last key delivered: a restored reader goes on exactly after it, even if rows
    were added or deleted meanwhile.

    Args:
        database: The SQLite database file, the same for every work item (work items
            name tables only, so a restored checkpoint cannot point the reader at another
            database).
        columns: The columns each record holds; ``None`` (the default) for all of the
            table's, in its order.
        fetch_rows: Rows fetched per hop, unless a ``read_up_to`` / ``read_batch`` asks
            for more.
        name: The reader's name in messages.
        on_error: What to do with bad input: ``"raise"`` (the default), ``"skip"`` (skips
            the rest of the work item) or an :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).

    Raises:
        InvalidArgumentError: ``columns`` is empty or not names, or ``fetch_rows`` < 1.
    """

    _sqlite: SQLiteConnection | None = None

    def __init__(
        self,
        database: str | os.PathLike[str],
        *,
        columns: Sequence[str] | None = None,
        fetch_rows: int = DEFAULT_FETCH_ROWS,
        name: str | None = None,
        on_error: OnError = None,
        shared_name: str | None = None,
        container: str | None = None,
    ) -> None:
        del shared_name, container  # consumed by SharedResourceMeta
        super().__init__(
            database, columns=columns, fetch_rows=fetch_rows, name=name, on_error=on_error
        )
        self._path = os.fspath(database)

    def _placeholder(self, index: int) -> str:
        return "?"

    def on_work_started(self, work: bytes) -> None:
        shard = TableShard.parse(work)
        if self._sqlite is None:
            self._sqlite = SQLiteConnection(self._path)
        names = self._sqlite.check_table(shard.table, shard.key, self.columns, work)
        self._start(work, shard, names)

    def read_many(self, n: int) -> ReadManyResult:
        if self._wants_fetch():
            limit = max(n, self.fetch_rows)
            sql, params = self._params(limit)
            assert self._sqlite is not None
            assert self._shard is not None
            self._fetched(self._sqlite.execute(sql, params, table=self._shard.table), limit)
        return self._take(n)

    def read_one(self) -> tuple[bytes, bytes, bool] | None:
        return one_record(self.read_many(1))

    def restore_extra(self, extra: bytes) -> None:
        self._restore_cursor(extra)

    def on_work_finished(self) -> None:
        self._reset_item()  # the connection stays open for the next work item

    def reset_state(self) -> None:
        self._reset_item()

    def _close_files(self) -> None:
        conn, self._sqlite = self._sqlite, None
        if conn is not None:
            conn.close()

    def _has_open_files(self) -> bool:
        return self._sqlite is not None
