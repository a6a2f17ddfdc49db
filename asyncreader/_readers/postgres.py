"""PostgresReader: the rows of PostgreSQL tables through asyncpg (``asyncreader[postgres]``).

asyncpg is natively async and runs on asyncio only, so the reader's hooks are coroutines
on the event loop (no worker thread), and on trio the reader refuses to read, before it
takes a work item, with :class:`~asyncreader.FailedPreconditionError`. Everything but the
connection and the catalog queries is :class:`~asyncreader._readers.database.TableReader`'s.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
from typing import TYPE_CHECKING, Any, Final

import anyio

from .._errors import DataLossError, FailedPreconditionError, InvalidArgumentError, NotFoundError
from .database import DEFAULT_FETCH_ROWS, TableReader, one_record
from .pg_packed import Malformed, PackedColumn, last_key, packed_plan, packed_sql, unpack
from .table_work import TableShard, database_name, quote_name

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._error_policy import OnError
    from .base import ReadManyResult
    from .work import WorkQueue

__all__ = ["PostgresReader", "postgres_bounds"]

#: How long closing a connection waits for the server before dropping it.
_CLOSE_TIMEOUT: Final = 2.0

# The table's columns, whether the key has a unique index of its own (or is the primary
# key), and its type; no rows when the table does not exist.
_CATALOG: Final = """
SELECT a.attname, a.attnum,
       format_type(a.atttypid, a.atttypmod) AS type, a.attnotnull,
       EXISTS (
           SELECT 1 FROM pg_index i
           WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL
             AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum
       ) AS is_unique
FROM pg_class c
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
WHERE c.oid = to_regclass($1)
ORDER BY a.attnum
"""

_INTEGER_TYPES: Final = frozenset({"smallint", "integer", "bigint"})


def _asyncpg() -> Any:
    try:
        return importlib.import_module("asyncpg")
    except ImportError:
        raise FailedPreconditionError(
            "PostgresReader needs asyncpg: pip install 'asyncreader[postgres]'"
        ) from None


def _require_asyncio(what: str) -> None:
    # No running asyncio loop in an async call means another library (trio) runs it.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        raise FailedPreconditionError(
            f"{what} runs on asyncio only (asyncpg has no trio support): run the "
            "pipeline with anyio.run(..., backend='asyncio'), or read the table with "
            "SQLiteReader or a reader of your own on trio"
        ) from None


def _client_errors(asyncpg: Any) -> tuple[type[Exception], ...]:
    # A connection the server dropped mid-call can also surface as asyncpg's
    # InternalClientError ("another operation is in progress"), not only InterfaceError.
    return (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)


async def _connect(dsn: str, work: bytes | None) -> Any:
    """An asyncpg connection; failures become NotFoundError naming the database."""
    asyncpg = _asyncpg()
    try:
        return await asyncpg.connect(dsn)
    except _client_errors(asyncpg) as exc:
        raise NotFoundError(
            f"{database_name(dsn)}: cannot connect to PostgreSQL: {type(exc).__name__}: {exc}",
            work_item=work,
        ) from None


async def _close(conn: Any) -> None:
    """Close ``conn``, dropping it if the server does not answer in time or the caller is
    cancelled: no connection is left open either way."""
    try:
        with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
            await conn.close()
    except Exception:
        pass
    finally:
        if not conn.is_closed():
            conn.terminate()


async def _check_table(
    conn: Any, dsn: str, table: str, key: str, columns: Sequence[str] | None, work: bytes | None
) -> dict[str, tuple[str, bool]]:
    """Check that ``table`` can be read by ``key`` (as SQLite's check); return its columns,
    in order, with their types and whether they are NOT NULL."""
    db = database_name(dsn)
    where = f"{db}, table {table!r}"
    rows = await _fetch(conn, db, table, _CATALOG, [quote_name(table)])
    if not rows:
        raise NotFoundError(f"{db}: no table {table!r}", work_item=work)
    names = [row["attname"] for row in rows]
    for column in (key, *(columns or ())):
        if column not in names:
            raise NotFoundError(f"{where}: no column {column!r}", work_item=work)
    info = rows[names.index(key)]
    if info["type"] not in _INTEGER_TYPES:
        raise InvalidArgumentError(
            f"{where}: key column {key!r} is {info['type']}, not an integer type",
            work_item=work,
        )
    if not info["is_unique"]:
        raise InvalidArgumentError(
            f"{where}: key column {key!r} is not unique (it needs a PRIMARY KEY or a "
            "UNIQUE index on it alone)",
            work_item=work,
        )
    q = quote_name(key)
    nulls = await _fetch(
        conn, db, table, f"SELECT 1 FROM {quote_name(table)} WHERE {q} IS NULL LIMIT 1", []
    )
    if nulls:
        raise InvalidArgumentError(
            f"{where}: key column {key!r} holds NULL (a row with a NULL key is in no key range)",
            work_item=work,
        )
    return {row["attname"]: (row["type"], row["attnotnull"]) for row in rows}


async def _fetch(conn: Any, db: str, table: str, sql: str, params: Sequence[object]) -> Any:
    asyncpg = _asyncpg()
    try:
        return await conn.fetch(sql, *params)
    except _client_errors(asyncpg) as exc:
        raise DataLossError(f"{db}, table {table!r}: {type(exc).__name__}: {exc}") from None


async def postgres_bounds(dsn: str, table: str, key: str) -> tuple[int | None, int | None]:
    """The smallest and largest key of ``table`` (for :func:`table_shards`)."""
    _require_asyncio("table_shards() of a PostgreSQL table")
    conn = await _connect(dsn, None)
    try:
        await _check_table(conn, dsn, table, key, None, None)
        q = quote_name(key)
        ((low, high),) = await _fetch(
            conn,
            database_name(dsn),
            table,
            f"SELECT min({q}), max({q}) FROM {quote_name(table)}",
            [],
        )
        return low, high
    finally:
        await _close(conn)


@dataclasses.dataclass(frozen=True, slots=True)
class _Ahead:
    """A chunk read ahead: its query's task, the key it follows, its row limit, and
    whether it is packed."""

    task: asyncio.Future[Any]
    after: int
    limit: int
    packed: bool

    def matches(self, after: int | None, packed: bool) -> bool:
        """Whether it is the chunk after key ``after`` in this form."""
        return self.after == after and self.packed == packed


class PostgresReader(TableReader):
    """A reader of the rows of PostgreSQL tables, through asyncpg (asyncio only).

    Install ``asyncreader[postgres]``. Work items, records, value format, fetching and
    saved state are :class:`~asyncreader.SQLiteReader`'s: ``"sql:<table>?key=<column>..."``
    items from :func:`~asyncreader.table_shards`, keys ``b"<table>:<key>"``, one
    ``tf.train.Example`` per row, keyset pagination of ``fetch_rows`` rows per round
    trip, exact restore after the last key delivered. The key column must be of an
    integer type with a PRIMARY KEY or a UNIQUE index on it alone; the table is looked up
    in the connection's ``search_path``.

    The reader opens one connection when it first takes a work item and keeps it for the
    next ones; closing the reader closes it (or drops it, if the server does not answer
    within 2 s), and so do ``reset()`` and an error that abandons a work item. A read
    cancelled mid-query delivers nothing and leaves the position where it was (asyncpg
    cancels the query on the server). A read that loses the connection (the server
    restarted) raises :class:`~asyncreader.DataLossError` and leaves the work item in
    progress: the next read connects again and goes on after the last key delivered.

    When every column read is an integer, boolean, ``real``, ``double precision``,
    ``text``, ``varchar`` or ``bytea``, each chunk comes packed in one reply row (each
    row's numbers joined in binary, then aggregated; text and blobs aggregated per
    column): no object per row on either side, and records that parse to the same
    Examples (see :doc:`the reference </reference/readers>` for their forms); a packed reply
    that does not add up raises :class:`~asyncreader.DataLossError` naming the table and
    the key it follows. Columns
    of other types, or a server that refuses the packed query, make the work item fetch
    rows as asyncpg returns them.

    One chunk is read ahead: as soon as a chunk arrives, the query of the next one is
    sent, and the server runs it while this one is encoded and delivered. It is only
    fetched, never delivered early: saved state, restore, cancellation and errors are
    as without it (a failure of the chunk read ahead is raised by the read that needs
    it), and ``reset()``, a restore or the next work item cancel it on the server.

    asyncpg runs on asyncio only: on trio, every read raises
    :class:`~asyncreader.FailedPreconditionError` before taking a work item, so none is
    lost.

    Args:
        dsn: The PostgreSQL URL (``postgresql://user:password@host:port/database``; a
            password is never shown in messages), the same for every work item.
        columns: The columns each record holds; ``None`` (the default) for all of the
            table's, in its order.
        fetch_rows: Rows fetched per round trip, unless a ``read_up_to`` /
            ``read_batch`` asks for more.
        name: The reader's name in messages.
        on_error: What to do with bad input: ``"raise"`` (the default), ``"skip"`` (skips
            the rest of the work item) or an :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).

    Raises:
        InvalidArgumentError: ``dsn`` is not a ``postgresql://`` URL, ``columns`` is empty
            or not names, or ``fetch_rows`` < 1.
    """

    _conn: Any = None
    #: The columns of the current work item in packed form (None: fetched as rows).
    _packed: list[PackedColumn] | None = None
    #: The next chunk, asked for while the current one is encoded.
    _ahead: _Ahead | None = None

    def __init__(
        self,
        dsn: str,
        *,
        columns: Sequence[str] | None = None,
        fetch_rows: int = DEFAULT_FETCH_ROWS,
        name: str | None = None,
        on_error: OnError = None,
        shared_name: str | None = None,
        container: str | None = None,
    ) -> None:
        del shared_name, container  # consumed by SharedResourceMeta
        if not isinstance(dsn, str) or not dsn.startswith(("postgresql://", "postgres://")):
            raise InvalidArgumentError(
                f"dsn must be a postgresql:// URL, not {database_name(dsn)!r}"
                if isinstance(dsn, str)
                else f"dsn must be a postgresql:// URL, not {type(dsn).__name__}"
            )
        super().__init__(dsn, columns=columns, fetch_rows=fetch_rows, name=name, on_error=on_error)
        self._dsn = dsn

    def _placeholder(self, index: int) -> str:
        return f"${index}"

    async def _take_work(self, queue: WorkQueue) -> None:
        # Refused before a work item leaves the queue: none is lost on trio.
        _require_asyncio(self.display_name)
        await super()._take_work(queue)

    async def on_work_started(self, work: bytes) -> None:
        _require_asyncio(self.display_name)
        shard = TableShard.parse(work)
        await self._drop_ahead()
        if self._conn is None:
            self._conn = await _connect(self._dsn, work)
        types = await _check_table(
            self._conn, self._dsn, shard.table, shard.key, self.columns, work
        )
        self._start(work, shard, list(types))
        assert self._encoder is not None
        self._packed = packed_plan(self._encoder.columns, types)

    async def read_many(self, n: int) -> ReadManyResult:
        if self._wants_fetch():
            await self._fetch_next(max(n, self.fetch_rows))
        return self._take(n)

    async def _fetch_next(self, limit: int) -> None:
        """Fetch the chunk after the cursor (the one read ahead, if it is), and ask for the
        one after it before this one is encoded."""
        shard = self._shard
        assert shard is not None
        ahead, self._ahead = self._ahead, None
        rows: Any
        try:
            if ahead is not None and ahead.matches(self._cursor, self._packed is not None):
                limit = ahead.limit
                rows = await ahead.task
            else:
                if ahead is not None:
                    self._ahead = ahead
                    await self._drop_ahead()
                if self._conn is None:
                    # The connection was lost by an earlier read: the work item goes on,
                    # at the same key, on a new one.
                    self._conn = await _connect(self._dsn, self._work)
                rows = await self._fetch_chunk(shard.table, *self._chunk_query(limit, self._cursor))
        except DataLossError:
            if self._packed is None or self._conn is None:
                raise
            # The server refused the packed form (a chunk's column beyond its 1 GB
            # limit, say) but the connection is fine: this work item fetches rows.
            self._packed = None
            rows = await self._fetch_chunk(shard.table, *self._params(limit))
        if self._packed is None:
            self._fetched(rows, limit)
            last = rows[-1][-1] if rows else None
        else:
            reply = rows[0] if len(rows) == 1 else ()
            # The server is the slower side: it starts on the next chunk before this one
            # is even checked (a chunk read ahead after a wrong key is dropped unused).
            early = last_key(reply, self._packed, shard.key, limit)
            if early is not None and self._conn is not None:
                await self._read_ahead(limit, early)
            try:
                keys, columns = unpack(
                    reply, self._packed, shard.key, limit, shard.lo, shard.hi, self._cursor
                )
            except Malformed as exc:
                await self._drop_ahead()
                after = "" if self._cursor is None else f" after key {self._cursor}"
                raise self._error(
                    DataLossError,
                    f"malformed reply for the rows{after}: {exc}",
                    record=self._cursor,
                ) from None
            self._fetched_columns(keys, columns, limit)
            last = keys[-1] if keys else None
            if self._ahead is not None and not self._ahead.matches(last, packed=True):
                await self._drop_ahead()  # the rows came out of key order
        if (
            not self._exhausted
            and last is not None
            and self._conn is not None
            and self._ahead is None
        ):
            await self._read_ahead(limit, last)

    def _chunk_query(self, limit: int, after: int | None) -> tuple[str, list[object]]:
        """The SQL and parameters of the ``limit`` rows after key ``after``."""
        sql, params = self._params(limit, after)
        shard = self._shard
        if self._packed is not None and shard is not None:
            clause, used = self._where(after is not None)
            conn = self._conn
            utf8 = conn is not None and conn.get_settings().server_encoding == "UTF8"
            sql = packed_sql(
                self._packed, shard.table, shard.key, clause, f"${used + 1}", utf8_server=utf8
            )
        return sql, params

    async def _read_ahead(self, limit: int, after: int) -> None:
        """Send the query of the chunk after key ``after``, so that the server works on it
        while the client encodes the current one (the connection runs one query at a
        time: every other use of it drops this one first)."""
        shard = self._shard
        assert shard is not None
        task = asyncio.ensure_future(
            self._fetch_chunk(shard.table, *self._chunk_query(limit, after))
        )
        self._ahead = _Ahead(task, after, limit, self._packed is not None)
        # One turn of the loop lets the task send the query (asyncpg writes it before
        # its first wait); a cancellation here leaves the fetched chunk undelivered.
        await asyncio.sleep(0)

    async def _drop_ahead(self) -> None:
        """Cancel the chunk read ahead, if any, and wait for the connection to be free
        (closing it if the server does not answer in time)."""
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return
        task = ahead.task
        if not task.done():
            task.cancel()
            with anyio.CancelScope(shield=True), anyio.move_on_after(_CLOSE_TIMEOUT):
                await asyncio.wait({task})
        if not task.done():
            conn, self._conn = self._conn, None
            if conn is not None:
                await _close(conn)
        elif not task.cancelled():
            task.exception()  # a failure of a chunk no one reads is not reported

    async def _fetch_chunk(self, table: str, sql: str, params: list[object]) -> Any:
        try:
            return await _fetch(self._conn, self.database, table, sql, params)
        except DataLossError:
            if self._conn.is_closed():
                self._conn = None
            raise

    async def read_one(self) -> tuple[bytes, bytes, bool] | None:
        return one_record(await self.read_many(1))

    async def restore_extra(self, extra: bytes) -> None:
        await self._drop_ahead()
        self._restore_cursor(extra)

    async def on_work_finished(self) -> None:
        await self._drop_ahead()
        self._reset_item()  # the connection stays open for the next work item

    async def reset_state(self) -> None:
        await self._drop_ahead()
        self._reset_item()
        conn, self._conn = self._conn, None
        if conn is not None:
            await _close(conn)

    def _has_open_files(self) -> bool:
        return self._conn is not None

    def _must_close_files(self) -> bool:
        return False  # reset_state closes the connection, on the event loop
