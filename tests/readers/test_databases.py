"""SQLiteReader and PostgresReader: table rows as Example records, by key range.

The PostgreSQL tests run against a real server (Debian's ``postgresql`` binaries, started
for the test run as the ``postgres`` user on a free loopback port, see
``postgres_server.py``); they are skipped, with the reason, where those binaries or
asyncpg are absent. Both readers are checked the same way: every row exactly once over
the shards of :func:`~asyncreader.table_shards`, values that ``parse_example`` decodes to
the rows' values, a restore mid-shard that goes on after the last key delivered (rows
inserted or deleted meanwhile), errors naming the database, table and key, and
cancellation that loses and duplicates nothing.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import random
import sqlite3
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest
from example_util import canonical, entries
from postgres_server import postgres_bin, postgres_server
from queue_util import work_queue

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.anyio

ROWS = 1000
SPEC = {
    "id": ar.FixedLenFeature([], "int64"),
    "x": ar.FixedLenFeature([], "float32"),
    "s": ar.FixedLenFeature([], "string"),
    "n": ar.FixedLenFeature([], "int64", default_value=-1),
}


def row(i: int) -> tuple[int, float, str, int | None]:
    """The test table's row with key ``i`` (``n`` is NULL in two rows of three)."""
    return i, i / 4, f"text {i} é", None if i % 3 else i * 7


def check_values(keys: list[bytes], values: list[bytes], table: str = "t") -> list[int]:
    """Check that the records are the rows of their keys; return the keys as ints."""
    ids = [int(k.split(b":")[1]) for k in keys]
    assert keys == [b"%s:%d" % (table.encode(), i) for i in ids]
    got = ar.parse_example(values, SPEC)
    assert got["id"].tolist() == ids
    np.testing.assert_array_equal(got["x"], np.array([row(i)[1] for i in ids], np.float32))
    assert got["s"].tolist() == [row(i)[2].encode() for i in ids]
    assert got["n"].tolist() == [-1 if row(i)[3] is None else row(i)[3] for i in ids]
    return ids


async def read_all(reader: ar.ReaderBase, queue: ar.FIFOQueue, verb: str, n: int = 37) -> list[int]:
    """Read ``queue`` to its end with ``verb``; return the keys (checked) in order."""
    keys: list[bytes] = []
    values: list[bytes] = []
    with anyio.fail_after(30):
        while True:
            try:
                if verb == "read":
                    key, value = await reader.read(queue)
                    keys.append(key)
                    values.append(value)
                elif verb == "read_up_to":
                    ks, vs = await reader.read_up_to(queue, n)
                    keys += ks
                    values += vs
                else:
                    batch = await reader.read_batch(queue, n)
                    keys += batch.keys()
                    values += batch.tolist()
            except ar.OutOfRangeError:
                break
    return check_values(keys, values)


# -- SQLite ---------------------------------------------------------------------------------


def make_sqlite(path: Path, rows: int = ROWS) -> Path:
    db = path / "data.db"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, x REAL, s TEXT, n INTEGER)")
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [row(i) for i in range(rows)])
    conn.close()
    return db


@pytest.fixture
def sqlite_db(tmp_path: Path) -> Path:
    return make_sqlite(tmp_path)


def sql(db: Path, *statements: str) -> None:
    with sqlite3.connect(db) as conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()


async def asql(db: Path, *statements: str) -> None:
    await anyio.to_thread.run_sync(sql, db, *statements)


@pytest.mark.both_backends
@pytest.mark.parametrize("verb", ["read", "read_up_to", "read_batch"])
async def test_sqlite_reads_every_row_once_over_the_shards(sqlite_db: Path, verb: str) -> None:
    shards = await ar.table_shards(sqlite_db, "t", key="id", shards=7)
    assert len(shards) == 7
    async with ar.SQLiteReader(sqlite_db, fetch_rows=100) as reader:
        ids = await read_all(reader, await work_queue(shards), verb)
        assert reader.num_work_units_completed() == 7
    assert ids == list(range(ROWS))


@pytest.mark.both_backends
async def test_sqlite_read_batch_larger_than_fetch_rows_is_one_call(sqlite_db: Path) -> None:
    async with ar.SQLiteReader(sqlite_db, fetch_rows=10) as reader:
        queue = await work_queue(["sql:t?key=id&lo=100&hi=400"])
        with anyio.fail_after(10):
            batch = await reader.read_batch(queue, 250)
        assert batch.keys() == [b"t:%d" % i for i in range(100, 350)]


@pytest.mark.parametrize(
    ("keys", "shards"),
    [
        (range(0), 4),  # an empty table: one item, the whole table
        (range(1), 4),
        (range(3), 10),  # more shards than keys: fewer items, none empty by range
        (range(-50, 51), 3),
        ([-(2**63), 0, 2**63 - 1], 5),  # the whole int64 range
        (range(0, 100_000, 997), 16),
    ],
)
async def test_table_shards_cover_every_key_exactly_once(
    tmp_path: Path, keys: Any, shards: int
) -> None:
    db = tmp_path / "k.db"
    sql(db, "CREATE TABLE k (id INTEGER PRIMARY KEY)")
    with sqlite3.connect(db) as conn:
        conn.executemany("INSERT INTO k VALUES (?)", [(k,) for k in keys])
    conn.close()
    items = await ar.table_shards(db, "k", key="id", shards=shards)
    assert 1 <= len(items) <= shards
    assert len(set(items)) == len(items)
    async with ar.SQLiteReader(db) as reader:
        got = [int(k.split(b":")[1]) for k, _ in await drain(reader, await work_queue(items))]
    assert got == sorted(keys)


async def drain(reader: ar.ReaderBase, queue: ar.FIFOQueue) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    with anyio.fail_after(30):
        while True:
            try:
                keys, values = await reader.read_up_to(queue, 1000)
            except ar.OutOfRangeError:
                return out
            out += zip(keys, values, strict=True)


async def test_table_shards_rejects_bad_arguments(sqlite_db: Path, tmp_path: Path) -> None:
    for shards in (0, -1, 1.5, True):
        with pytest.raises(ar.InvalidArgumentError, match="shards must be an integer >= 1"):
            await ar.table_shards(sqlite_db, "t", key="id", shards=shards)  # type: ignore[arg-type]
    with pytest.raises(ar.NotFoundError, match="no table 'nope'"):
        await ar.table_shards(sqlite_db, "nope", key="id")
    with pytest.raises(ar.NotFoundError, match="no such SQLite database file"):
        await ar.table_shards(tmp_path / "missing.db", "t", key="id")
    assert not (tmp_path / "missing.db").exists()  # not created as an empty database


@pytest.mark.both_backends
async def test_sqlite_restore_mid_shard_goes_on_after_the_last_key(sqlite_db: Path) -> None:
    item = "sql:t?key=id&lo=10&hi=60"
    async with ar.SQLiteReader(sqlite_db, fetch_rows=8) as reader:
        queue = await work_queue([item, "sql:t?key=id&lo=60&hi=70"])
        keys, _ = await reader.read_up_to(queue, 13)
        assert keys[-1] == b"t:22"
        state = reader.serialize_state()
        rest = [int(k.split(b":")[1]) for k, _ in await drain(reader, queue)]
    assert rest == list(range(23, 70))
    # Rows change before the restore: the next two rows and one before the position are
    # deleted. The restored reader goes on after key 22, at 25.
    await asql(sqlite_db, "DELETE FROM t WHERE id IN (23, 24)", "DELETE FROM t WHERE id = 15")
    async with ar.SQLiteReader(sqlite_db) as restored:
        restored.restore_state(state)
        queue = await work_queue(["sql:t?key=id&lo=60&hi=70"])
        got = [int(k.split(b":")[1]) for k, _ in await drain(restored, queue)]
        assert restored.num_records_produced() == 13 + len(got)
    assert got == list(range(25, 70))


@pytest.mark.both_backends
async def test_sqlite_state_saved_with_records_put_back_resumes_at_them(sqlite_db: Path) -> None:
    # read() then read_batch: state saved between any two calls resumes exactly.
    async with ar.SQLiteReader(sqlite_db, fetch_rows=5) as reader:
        queue = await work_queue(["sql:t?key=id&hi=40"])
        seen: list[bytes] = []
        states = []
        for step in range(12):
            states.append((reader.serialize_state(), len(seen)))
            if step % 2:
                seen += (await reader.read_batch(queue, 3)).keys()
            else:
                seen.append((await reader.read(queue))[0])
    for state, done in states:
        async with ar.SQLiteReader(sqlite_db) as restored:
            restored.restore_state(state)
            queue = await work_queue(["sql:t?key=id&hi=40"])
            keys, _ = await restored.read_up_to(queue, 5)
            assert keys == [b"t:%d" % i for i in range(done, done + 5)]


@pytest.mark.both_backends
async def test_sqlite_cancelled_reads_lose_and_duplicate_nothing(sqlite_db: Path) -> None:
    shards = await ar.table_shards(sqlite_db, "t", key="id", shards=5)
    async with ar.SQLiteReader(sqlite_db, fetch_rows=16) as reader:
        queue = await work_queue(shards)
        keys: list[bytes] = []
        values: list[bytes] = []
        cancelled = 0
        with anyio.fail_after(30):
            for attempt in range(10_000):
                with anyio.CancelScope() as scope:
                    if attempt % 3 == 0:
                        scope.cancel()  # cancelled before or while the hook runs
                    try:
                        batch = await reader.read_batch(queue, 23)
                    except ar.OutOfRangeError:
                        break
                    keys += batch.keys()
                    values += batch.tolist()
                cancelled += scope.cancelled_caught
        assert cancelled > 0
    assert check_values(keys, values) == list(range(ROWS))


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("setup", "item", "error", "message"),
    [
        ([], "sql:nope?key=id", ar.NotFoundError, r"data\.db: no table 'nope'"),
        ([], "sql:t?key=nope", ar.NotFoundError, r"table 't': no column 'nope'"),
        (
            ["CREATE TABLE d (id INTEGER, v TEXT)", "INSERT INTO d VALUES (1, 'a'), (1, 'b')"],
            "sql:d?key=id",
            ar.InvalidArgumentError,
            r"table 'd': key column 'id' is not unique",
        ),
        (
            ["CREATE TABLE u (id INTEGER UNIQUE, v TEXT)", "INSERT INTO u VALUES (NULL, 'a')"],
            "sql:u?key=id",
            ar.InvalidArgumentError,
            r"table 'u': key column 'id' holds NULL",
        ),
        ([], "t?key=id", ar.InvalidArgumentError, "not a table work item"),
        ([], "sql:t?key=id&lo=x", ar.InvalidArgumentError, "not a table work item"),
    ],
)
async def test_sqlite_bad_work_items_are_abandoned_with_a_named_error(
    sqlite_db: Path, setup: list[str], item: str, error: type[Exception], message: str
) -> None:
    await asql(sqlite_db, *setup)
    async with ar.SQLiteReader(sqlite_db) as reader:
        queue = await work_queue([item, "sql:t?key=id&hi=3"])
        with anyio.fail_after(10), pytest.raises(error, match=message) as info:
            await reader.read(queue)
        assert isinstance(info.value, ar.AsyncReaderError)
        assert info.value.work_item == item.encode()
        # Abandoned: the next read takes the next item.
        keys, _ = await reader.read_up_to(queue, 10)
        assert keys == [b"t:0", b"t:1", b"t:2"]


@pytest.mark.both_backends
async def test_sqlite_missing_column_of_columns_is_not_found(sqlite_db: Path) -> None:
    async with ar.SQLiteReader(sqlite_db, columns=["x", "zz"]) as reader:
        with anyio.fail_after(10), pytest.raises(ar.NotFoundError, match="no column 'zz'"):
            await reader.read(await work_queue(["sql:t?key=id"]))


@pytest.mark.both_backends
async def test_sqlite_columns_choose_the_features(sqlite_db: Path) -> None:
    async with ar.SQLiteReader(sqlite_db, columns=["s", "x"]) as reader:
        _, value = await reader.read(await work_queue(["sql:t?key=id&lo=5"]))
    example = ar.Example.FromString(value)
    assert sorted(example.features.feature) == ["s", "x"]
    assert example.to_dict()["s"] == [b"text 5 \xc3\xa9"]


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("INSERT INTO w VALUES (499.5, 0, '', NULL)", r"key 499\.5 is not an integer"),
        ("UPDATE w SET x = 1e300 WHERE id = 500", r"key 500 .*column 'x': float 1e\+300"),
    ],
)
async def test_sqlite_bad_row_raises_naming_table_and_key_after_the_rows_before(
    sqlite_db: Path, bad: str, message: str
) -> None:
    # A key that is not the rowid can hold any value in SQLite, 499.5 too.
    create = "CREATE TABLE w (id INT PRIMARY KEY, x REAL, s TEXT, n INTEGER)"
    await asql(sqlite_db, create, "INSERT INTO w SELECT * FROM t", bad)
    items = ["sql:w?key=id&lo=490&hi=510", "sql:w?key=id&lo=900&hi=902"]
    async with ar.SQLiteReader(sqlite_db) as reader:
        queue = await work_queue(items)
        with anyio.fail_after(10):
            keys, _ = await reader.read_up_to(queue, 100)
            assert keys == [b"w:%d" % i for i in range(490, 500)]
            for _ in range(2):  # the work item stays in progress: the error repeats
                with pytest.raises(ar.InvalidArgumentError, match=message) as info:
                    await reader.read_up_to(queue, 100)
                assert "data.db, table 'w'" in info.value.message
                assert info.value.work_item == items[0].encode()
    async with ar.SQLiteReader(sqlite_db, on_error="skip") as skipping:
        queue = await work_queue(items)
        keys = [k for k, _ in await drain(skipping, queue)]
        assert keys[-2:] == [b"w:900", b"w:901"]
        assert keys[:-2] == [b"w:%d" % i for i in range(490, 500)]
        assert len(skipping.dead_letters) == 1


@pytest.mark.both_backends
async def test_sqlite_missing_or_corrupt_database(tmp_path: Path) -> None:
    async with ar.SQLiteReader(tmp_path / "missing.db") as reader:
        with anyio.fail_after(10), pytest.raises(ar.NotFoundError, match=r"missing\.db"):
            await reader.read(await work_queue(["sql:t?key=id"]))
    assert not (tmp_path / "missing.db").exists()
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    async with ar.SQLiteReader(tmp_path / "junk.db") as reader:
        with anyio.fail_after(10), pytest.raises(ar.DataLossError, match=r"junk\.db"):
            await reader.read(await work_queue(["sql:t?key=id"]))


@pytest.mark.both_backends
async def test_sqlite_reader_closes_its_connection(sqlite_db: Path) -> None:
    reader = ar.SQLiteReader(sqlite_db)
    await reader.read(await work_queue(["sql:t?key=id"]))
    assert reader._has_open_files()
    await reader.aclose()
    assert not reader._has_open_files()


def test_sqlite_reader_rejects_bad_arguments(sqlite_db: Path) -> None:
    for columns, message in [
        ("x", "sequence of column names"),
        ([], "at least one column"),
        (["x", "x"], "twice"),
    ]:
        with pytest.raises(ar.InvalidArgumentError, match=message):
            ar.SQLiteReader(sqlite_db, columns=columns)
    with pytest.raises(ar.InvalidArgumentError, match="fetch_rows"):
        ar.SQLiteReader(sqlite_db, fetch_rows=0)


@pytest.mark.both_backends
async def test_sqlite_value_bytes_equal_tensorflows_deterministic_serialization(
    tmp_path: Path,
) -> None:
    db = tmp_path / "e.db"
    sql(db, "CREATE TABLE e (k INTEGER PRIMARY KEY, zeta BLOB, a TEXT, ab REAL, neg INTEGER)")
    with sqlite3.connect(db) as conn:
        conn.execute("INSERT INTO e VALUES (3, x'00ff', 'hé', 2.5, -5)")
    conn.close()
    async with ar.SQLiteReader(db) as reader:
        _, value = await reader.read(await work_queue(["sql:e?key=k"]))
    expected = ar.Example(
        {
            "k": ar.Feature(int64_list=[3]),
            "zeta": ar.Feature(bytes_list=[b"\x00\xff"]),
            "a": ar.Feature(bytes_list=["hé".encode()]),
            "ab": ar.Feature(float_list=[2.5]),
            "neg": ar.Feature(int64_list=[-5]),
        }
    )
    assert value == expected.SerializeToString()


async def test_checkpoint_restore_only_reads_the_programs_tables(sqlite_db: Path) -> None:
    shards = await ar.table_shards(sqlite_db, "t", key="id", shards=3)

    async def build() -> tuple[ar.FIFOQueue, ar.SQLiteReader]:
        queue = ar.string_input_producer(shards, num_epochs=1, shuffle=False)
        return queue, ar.SQLiteReader(sqlite_db)

    with anyio.fail_after(30):
        async with ar.Session() as session:
            queue, reader = await build()
            await reader.read_up_to(queue, 10)
            checkpoint = await session.checkpoint()
        async with ar.Session(restore=checkpoint):
            queue, reader = await build()
            keys, _ = await reader.read_up_to(queue, 5)
            assert keys == [b"t:%d" % i for i in range(10, 15)]
        # A program that does not name the table's shards cannot be made to read them by
        # the reader's state in an (unsigned) checkpoint.
        with pytest.raises(ar.InvalidArgumentError, match="no input producer"):
            async with ar.Session(restore=checkpoint):
                ar.SQLiteReader(sqlite_db)


# -- PostgreSQL -------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    """A PostgreSQL server for the whole test run (``pg_table`` makes the tables)."""
    pytest.importorskip("asyncpg", reason="asyncpg (asyncreader[postgres]) is not installed")
    bindir = postgres_bin()
    if bindir is None:
        pytest.skip(
            "PostgreSQL is not installed (Debian's postgresql package; .ci/run installs it)"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("no postgres user to run PostgreSQL as (the postgresql package makes it)")
    with postgres_server(bindir) as url:
        yield url


async def pg(url: str, *statements: str, args: list[tuple[Any, ...]] | None = None) -> Any:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        result = None
        for statement in statements:
            if args is not None:
                await conn.executemany(statement, args)
            else:
                result = await conn.fetch(statement)
        return result
    finally:
        await conn.close()


@pytest.fixture
async def pg_table(postgres_url: str) -> str:
    """``postgres_url`` with a fresh table ``t`` (bigint key, REAL, text, NULLs)."""
    await pg(
        postgres_url,
        "DROP TABLE IF EXISTS t, d, u, f CASCADE",
        "CREATE TABLE t (id bigint PRIMARY KEY, x double precision, s text, n bigint)",
    )
    await pg(
        postgres_url, "INSERT INTO t VALUES ($1, $2, $3, $4)", args=[row(i) for i in range(ROWS)]
    )
    return postgres_url


async def reader_connections(url: str) -> int:
    """Connections to the server other than the one asking."""
    rows = await pg(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid()",
    )
    return int(rows[0][0])


async def ahead_arrived(reader: Any) -> None:
    """Wait until the chunk a PostgresReader asked for ahead has arrived (its query is
    done), so that a lock taken now holds back only the chunk after it."""
    with anyio.fail_after(10):
        while reader._ahead is None or not reader._ahead.task.done():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def busy_connections(url: str) -> int:
    """Connections to the server other than the one asking that run a query."""
    rows = await pg(
        url,
        "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid() AND state <> 'idle'",
    )
    return int(rows[0][0])


@pytest.mark.network
@pytest.mark.parametrize("verb", ["read", "read_up_to", "read_batch"])
async def test_postgres_reads_every_row_once_over_the_shards(pg_table: str, verb: str) -> None:
    shards = await ar.table_shards(pg_table, "t", key="id", shards=6)
    assert len(shards) == 6
    async with ar.PostgresReader(pg_table, fetch_rows=64) as reader:
        assert await read_all(reader, await work_queue(shards), verb) == list(range(ROWS))
        assert reader.num_work_units_completed() == 6
    assert await reader_connections(pg_table) == 0


@pytest.mark.network
async def test_postgres_restore_mid_shard_goes_on_after_the_last_key(pg_table: str) -> None:
    async with ar.PostgresReader(pg_table, fetch_rows=8) as reader:
        queue = await work_queue(["sql:t?key=id&lo=10&hi=60"])
        keys, _ = await reader.read_up_to(queue, 13)
        assert keys[-1] == b"t:22"
        state = reader.serialize_state()
    await pg(pg_table, "DELETE FROM t WHERE id IN (23, 24)", "DELETE FROM t WHERE id = 15")
    async with ar.PostgresReader(pg_table) as restored:
        restored.restore_state(state)
        got = [int(k.split(b":")[1]) for k, _ in await drain(restored, await work_queue([]))]
    assert got == list(range(25, 60))


@pytest.mark.network
async def test_postgres_values_decode_like_sqlite(pg_table: str, tmp_path: Path) -> None:
    db = make_sqlite(tmp_path, rows=50)
    async with ar.PostgresReader(pg_table) as p, ar.SQLiteReader(db) as s:
        pk, pv = await p.read_up_to(await work_queue(["sql:t?key=id&hi=50"]), 100)
        sk, sv = await s.read_up_to(await work_queue(["sql:t?key=id&hi=50"]), 100)
    assert pk == sk
    assert canonical(pv) == sv  # the same Examples (a fixed form may lay them out apart)
    check_values(pk, pv)


@pytest.mark.network
@pytest.mark.parametrize(
    ("setup", "item", "error", "message"),
    [
        ([], "sql:nope?key=id", ar.NotFoundError, r"/postgres: no table 'nope'"),
        ([], "sql:t?key=nope", ar.NotFoundError, r"table 't': no column 'nope'"),
        (
            ["CREATE TABLE d (id int, v text)"],
            "sql:d?key=id",
            ar.InvalidArgumentError,
            "not unique",
        ),
        (
            ["CREATE TABLE u (id int UNIQUE, v text)", "INSERT INTO u VALUES (NULL, 'a')"],
            "sql:u?key=id",
            ar.InvalidArgumentError,
            "holds NULL",
        ),
        (
            ["CREATE TABLE f (id text PRIMARY KEY)"],
            "sql:f?key=id",
            ar.InvalidArgumentError,
            "is text, not an integer",
        ),
    ],
)
async def test_postgres_bad_work_items_are_abandoned_with_a_named_error(
    pg_table: str, setup: list[str], item: str, error: type[Exception], message: str
) -> None:
    if setup:
        await pg(pg_table, *setup)
    async with ar.PostgresReader(pg_table) as reader:
        queue = await work_queue([item, "sql:t?key=id&hi=3"])
        with anyio.fail_after(10), pytest.raises(error, match=message) as info:
            await reader.read(queue)
        assert isinstance(info.value, ar.AsyncReaderError)
        assert info.value.work_item == item.encode()
        keys, _ = await reader.read_up_to(queue, 10)
        assert keys == [b"t:0", b"t:1", b"t:2"]
    assert await reader_connections(pg_table) == 0


@pytest.mark.network
async def test_postgres_unencodable_value_names_table_key_and_column(pg_table: str) -> None:
    await pg(
        pg_table, "ALTER TABLE t ADD COLUMN at timestamp", "UPDATE t SET at = now() WHERE id = 7"
    )
    async with ar.PostgresReader(pg_table, columns=["id", "at"]) as reader:
        queue = await work_queue(["sql:t?key=id&hi=20"])
        keys, values = await reader.read_up_to(queue, 100)
        assert keys == [b"t:%d" % i for i in range(7)]
        assert "at" not in ar.Example.FromString(values[0]).features.feature  # NULL
        with pytest.raises(
            ar.InvalidArgumentError, match=r"table 't': the row with key 7 .*'at'.*datetime"
        ):
            await reader.read_up_to(queue, 100)


@pytest.mark.network
async def test_postgres_password_is_not_shown(pg_table: str) -> None:
    url = pg_table.replace("postgres@", "postgres:s3cret@") + "x"  # no such database
    async with ar.PostgresReader(url) as reader:
        with anyio.fail_after(10), pytest.raises(ar.NotFoundError, match="cannot connect") as info:
            await reader.read(await work_queue(["sql:t?key=id"]))
    assert "s3cret" not in str(info.value)
    assert "postgres@127.0.0.1" in str(info.value)


@pytest.mark.network
async def test_postgres_cancel_mid_query_loses_nothing_and_leaves_no_connection(
    pg_table: str,
) -> None:
    import asyncpg

    locker = await asyncpg.connect(pg_table)
    try:
        async with ar.PostgresReader(pg_table, fetch_rows=100) as reader:
            queue = await work_queue(["sql:t?key=id&hi=300"])
            keys, _ = await reader.read_up_to(queue, 100)  # the first chunk, in hand
            await ahead_arrived(reader)
            tx = locker.transaction()
            await tx.start()
            # The lock holds back the third chunk's query (the second one's has arrived).
            await locker.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
            with anyio.fail_after(5):
                more, _ = await reader.read_up_to(queue, 100)  # read ahead: no wait
            with anyio.move_on_after(0.5) as scope:  # the third one waits for the lock
                await reader.read_up_to(queue, 100)
            assert scope.cancelled_caught
            await tx.rollback()
            with anyio.fail_after(10):
                rest, _ = await reader.read_up_to(queue, 1000)
            assert keys + more + rest == [b"t:%d" % i for i in range(300)]
            # Cancelled while connecting: nothing stays open either.
            reset = ar.PostgresReader(pg_table)
            with anyio.CancelScope() as cancelled:
                cancelled.cancel()
                await reset.read(await work_queue(["sql:t?key=id"]))
            await reset.aclose()
        with anyio.fail_after(10):
            while await reader_connections(pg_table) > 1:  # noqa: ASYNC110 - the locker's own
                await anyio.sleep(0.05)  # the server notes a closed connection soon after
    finally:
        await locker.close()


@pytest.mark.network
async def test_postgres_reset_and_restore_drop_a_chunk_read_ahead(pg_table: str) -> None:
    # A chunk asked for ahead, which the server holds back (a lock), must not keep the
    # connection busy: reset cancels it at once, and a restore reads past the saved key.
    import asyncpg

    locker = await asyncpg.connect(pg_table)
    try:
        async with ar.PostgresReader(pg_table, fetch_rows=50) as reader:
            queue = await work_queue(["sql:t?key=id&hi=200"])
            first, _ = await reader.read_up_to(queue, 50)
            state = reader.serialize_state()
            await ahead_arrived(reader)
            tx = locker.transaction()
            await tx.start()
            await locker.execute("LOCK TABLE t IN ACCESS EXCLUSIVE MODE")
            with anyio.fail_after(5):
                await reader.read_up_to(queue, 50)  # read ahead before the lock
            with anyio.fail_after(1.5):  # not the 2 s allowed to close a connection
                await reader.reset()  # the next chunk's query waits: cancelled
            await tx.rollback()
            reader.restore_state(state)
            with anyio.fail_after(10):
                rest, _ = await reader.read_up_to(queue, 1000)
            assert first + rest == [b"t:%d" % i for i in range(200)]
            # Restored while a chunk read ahead is in hand: it is dropped, not delivered.
            await reader.read_up_to(await work_queue(["sql:t?key=id&hi=200"]), 50)
            reader.restore_state(state)
            with anyio.fail_after(10):
                again, _ = await reader.read_up_to(queue, 1000)
            assert again == rest
    finally:
        await locker.close()


@pytest.mark.parametrize("anyio_backend", ["trio"])
async def test_postgres_refuses_trio_before_taking_a_work_item() -> None:
    queue = await work_queue(["sql:t?key=id"])
    # Refused before any connection: no server needed.
    async with ar.PostgresReader("postgresql://postgres@127.0.0.1:1/none") as reader:
        with pytest.raises(ar.FailedPreconditionError, match="asyncio only"):
            await reader.read(queue)
    assert queue.size() == 1  # the item is still there


def test_postgres_reader_rejects_a_non_postgres_url() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="postgresql:// URL"):
        ar.PostgresReader("mysql://user:pw@host/db")


# -- numeric tables: a chunk encoded at once --------------------------------------------------

EDGES = [-(2**63), -(2**31), -1, 0, 1, 127, 128, 2**31, 2**62, 2**63 - 1]
NUMERIC_SPEC = {
    "id": ar.FixedLenFeature([], "int64"),
    "big": ar.FixedLenFeature([], "int64"),
    "flag": ar.FixedLenFeature([], "int64"),
    "x": ar.FixedLenFeature([], "float32"),
}


def make_numeric(db: Path, with_null: bool = False) -> list[tuple[int, int, int, float | None]]:
    data: list[tuple[int, int, int, float | None]] = [
        (i, EDGES[i % len(EDGES)], i % 2, i * 0.5) for i in range(200)
    ]
    if with_null:
        data[150] = (150, 0, 0, None)
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE m (id INTEGER PRIMARY KEY, big INTEGER, flag INTEGER, x REAL)")
        conn.executemany("INSERT INTO m VALUES (?, ?, ?, ?)", data)
    conn.close()
    return data


@pytest.mark.both_backends
async def test_numeric_rows_come_as_one_buffer_and_parse_to_their_values(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    data = await anyio.to_thread.run_sync(make_numeric, db)
    async with ar.SQLiteReader(db) as reader:
        batch = await reader.read_batch(await work_queue(["sql:m?key=id"]), 200)
    assert batch.keys() == [b"m:%d" % i for i in range(200)]
    assert len(set(batch.lengths.tolist())) == 1  # one layout: parse_example's fast path
    assert len(batch.data) == sum(batch.lengths.tolist())  # one buffer, no copy per record
    parsed = ar.parse_example(batch, NUMERIC_SPEC)
    assert parsed["big"].tolist() == [r[1] for r in data]
    assert parsed["flag"].tolist() == [r[2] for r in data]
    np.testing.assert_array_equal(parsed["x"], np.array([r[3] for r in data], np.float32))
    # Each record is a valid Example on its own (10-byte varints parse as the value).
    example = ar.Example.FromString(batch[3])
    big = example.to_dict()["big"]
    assert isinstance(big, np.ndarray)
    assert big.tolist() == [EDGES[3]]
    # Read a row at a time (row by row encoding), the same values come out.
    async with ar.SQLiteReader(db) as reader:
        queue = await work_queue(["sql:m?key=id&hi=12"])
        one_by_one = [(await reader.read(queue))[1] for _ in range(12)]
    again = ar.parse_example(one_by_one, NUMERIC_SPEC)
    assert again["big"].tolist() == parsed["big"].tolist()[:12]


@pytest.mark.both_backends
async def test_numeric_chunk_with_a_null_is_encoded_row_by_row(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    await anyio.to_thread.run_sync(make_numeric, db, True)
    async with ar.SQLiteReader(db, fetch_rows=100) as reader:
        batch = await reader.read_batch(await work_queue(["sql:m?key=id&lo=100"]), 100)
    parsed = ar.parse_example(batch, {"x": ar.FixedLenFeature([], "float32", default_value=-1.0)})
    assert parsed["x"][50] == -1.0  # the NULL: no feature, the default
    assert parsed["x"][49] == 149 * 0.5


@pytest.mark.both_backends
async def test_numeric_chunk_with_a_float_beyond_float32_names_its_row(tmp_path: Path) -> None:
    db = tmp_path / "m.db"
    await anyio.to_thread.run_sync(make_numeric, db)
    await asql(db, "UPDATE m SET x = -1e300 WHERE id = 40")
    async with ar.SQLiteReader(db) as reader:
        queue = await work_queue(["sql:m?key=id"])
        with anyio.fail_after(10):
            batch = await reader.read_batch(queue, 100)
            assert batch.keys() == [b"m:%d" % i for i in range(40)]
            with pytest.raises(ar.InvalidArgumentError, match=r"key 40 .*'x': float -1e\+300"):
                await reader.read_batch(queue, 100)


@pytest.mark.network
async def test_postgres_lost_connection_fails_the_read_and_the_next_goes_on(
    pg_table: str,
) -> None:
    async with ar.PostgresReader(pg_table, fetch_rows=50) as reader:
        queue = await work_queue(["sql:t?key=id&hi=200"])
        keys, _ = await reader.read_up_to(queue, 50)
        with anyio.fail_after(10):
            while await busy_connections(pg_table):  # noqa: ASYNC110
                await anyio.sleep(0.01)  # the next chunk, read ahead, is in hand
        # The server drops the reader's connection (as a restart would).
        await pg(
            pg_table,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()",
        )
        with anyio.fail_after(10):
            more, _ = await reader.read_up_to(queue, 50)
            with pytest.raises(ar.DataLossError, match=r"/postgres, table 't'"):
                await reader.read_up_to(queue, 50)
            rest = [k for k, _ in await drain(reader, queue)]
    assert keys + more + rest == [b"t:%d" % i for i in range(200)]


async def test_text_and_blob_values_of_every_length_encode_as_tensorflow_does(
    tmp_path: Path,
) -> None:
    # Lengths around the varint boundaries of the value and of the entry around it, and
    # past the lengths whose headers are cached.
    lengths = [0, 1, 100, 110, 127, 128, 200, 16383, 16384, 5000, 100, 0]
    db = tmp_path / "l.db"
    await asql(db, "CREATE TABLE l (k INTEGER PRIMARY KEY, t TEXT, b BLOB, big INTEGER)")
    with sqlite3.connect(db) as conn:
        conn.executemany(
            "INSERT INTO l VALUES (?, ?, ?, ?)",
            [(i, "é" * (n // 2), b"\x00" * n, 1 << (7 * (i % 9))) for i, n in enumerate(lengths)],
        )
    conn.close()
    async with ar.SQLiteReader(db, columns=["t", "b", "big"]) as reader:
        _, values = await reader.read_up_to(await work_queue(["sql:l?key=k"]), 100)
    expected = [
        ar.Example(
            {
                "t": ar.Feature(bytes_list=[("é" * (n // 2)).encode()]),
                "b": ar.Feature(bytes_list=[b"\x00" * n]),
                "big": ar.Feature(int64_list=[1 << (7 * (i % 9))]),
            }
        ).SerializeToString()
        for i, n in enumerate(lengths)
    ]
    assert values == expected


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_postgres_client_errors_of_a_dropped_connection_are_data_loss() -> None:
    # A connection the server terminated mid-call may fail with asyncpg's
    # InternalClientError instead of an InterfaceError, depending on timing: both are a
    # DataLossError naming the table, never asyncpg's own exception.
    asyncpg = pytest.importorskip("asyncpg")
    from asyncreader._readers.postgres import _fetch

    class Dropped:
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        async def fetch(self, sql: str, *params: object) -> Any:
            raise self.exc

    for exc in (
        asyncpg.InternalClientError("cannot switch to state 11; another operation is in progress"),
        asyncpg.InterfaceError("connection is closed"),
    ):
        with pytest.raises(ar.DataLossError, match=r"db, table 't': " + type(exc).__name__):
            await _fetch(Dropped(exc), "db", "t", "SELECT 1", [])


async def test_a_shared_sqlite_reader_is_one_reader_per_configuration(
    sqlite_db: Path, tmp_path: Path
) -> None:
    async with ar.Session():
        a = ar.SQLiteReader(sqlite_db, fetch_rows=50, shared_name="rows")
        assert ar.SQLiteReader(sqlite_db, fetch_rows=50, shared_name="rows") is a
        with pytest.raises(ar.InvalidArgumentError, match="fetch_rows"):
            ar.SQLiteReader(sqlite_db, fetch_rows=60, shared_name="rows")
        with pytest.raises(ar.InvalidArgumentError, match="database"):
            ar.SQLiteReader(tmp_path / "other.db", fetch_rows=50, shared_name="rows")


# -- PostgreSQL chunks in packed form -------------------------------------------------------

PACKED_COLUMNS = (
    "id bigint PRIMARY KEY, i2 smallint, i4 integer, i8 bigint, f4 real, f8 double precision, "
    "b boolean, t text, v varchar(20), y bytea"
)


def packed_row(rng: random.Random, key: int) -> tuple[object, ...]:
    """A random row of PACKED_COLUMNS' table: extremes, non-ASCII text, NULLs."""

    def maybe(value: object) -> object:
        return None if rng.random() < 0.2 else value

    def pick(*values: object) -> object:
        return maybe(rng.choice(values))

    big = 2**63
    return (
        key,
        pick(-(2**15), -1, 0, 1, 2**15 - 1, rng.randrange(-(2**15), 2**15)),
        pick(-(2**31), 0, 2**31 - 1, rng.randrange(-(2**31), 2**31)),
        pick(-big, -1, 0, 127, 128, big - 1, rng.randrange(-big, big)),
        pick(0.0, -0.0, 1.5, float("nan"), float("inf"), float("-inf"), 3.4e38, 1e-45),
        pick(0.0, 1 / 3, float("nan"), float("-inf"), 1e-300, 3.4e38, rng.uniform(-1e9, 1e9)),
        pick(True, False),
        pick("", "a", "hé €", "\U0001f600" * 3, "x" * 300, "tab\tnew\nline\\"),
        pick("", "ü" * 20, "v"),
        pick(b"", b"\x00", b"\xff\x00\\x", bytes(range(256)) * 3),
    )


async def read_records(
    url: str, work: list[str], sizes: list[int], fetch_rows: int
) -> tuple[list[bytes], list[bytes]]:
    keys: list[bytes] = []
    values: list[bytes] = []
    async with ar.PostgresReader(url, fetch_rows=fetch_rows) as reader:
        queue = await work_queue(work)
        with anyio.fail_after(30), contextlib.suppress(ar.OutOfRangeError):
            for i in itertools.count():
                ks, vs = await reader.read_up_to(queue, sizes[i % len(sizes)])
                keys += ks
                values += vs
    return keys, values


@pytest.mark.network
@pytest.mark.parametrize("seed", range(4))
async def test_postgres_packed_chunks_give_the_examples_of_the_row_path(
    pg_table: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(seed)
    await pg(pg_table, "DROP TABLE IF EXISTS p", f"CREATE TABLE p ({PACKED_COLUMNS})")
    keys = sorted(rng.sample(range(-(2**40), 2**40), 300))
    await pg(
        pg_table,
        "INSERT INTO p VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)",
        args=[packed_row(rng, k) for k in keys],
    )
    if seed == 3:  # every row of a chunk NULL in some columns, and no NULL in others
        await pg(pg_table, "UPDATE p SET t = NULL, f4 = NULL, i8 = 5, y = 'z'")
    work = await ar.table_shards(pg_table, "p", key="id", shards=3)
    sizes = [rng.choice([1, 7, 15, 16, 40, 200]) for _ in range(5)]
    fetch_rows = rng.choice([5, 64, 2048])
    packed = await read_records(pg_table, work, sizes, fetch_rows)
    from asyncreader._readers import postgres

    calls: list[object] = []

    def row_path(*args: object) -> None:
        calls.append(args)
        return None

    monkeypatch.setattr(postgres, "packed_plan", row_path)
    rows = await read_records(pg_table, work, sizes, fetch_rows)
    assert calls  # the second read took the row path
    assert packed[0] == [b"p:%d" % k for k in keys]
    assert packed[0] == rows[0]
    assert canonical(packed[1]) == rows[1]


@pytest.mark.network
@pytest.mark.parametrize("texts", ["varied", "all NULL", "one huge"])
async def test_postgres_numbers_and_one_text_give_the_examples_of_the_row_path(
    pg_table: str, texts: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Numbers without NULL beside one text column take the fixed form (text last, padded
    # integers); the first rows' chunks, with NULL numbers, the other one.
    rng = random.Random(texts)
    await pg(
        pg_table,
        "DROP TABLE IF EXISTS q",
        "CREATE TABLE q (id bigint PRIMARY KEY, i integer NOT NULL, f real NOT NULL, "
        "b boolean, n bigint, a text)",
    )
    choices = [None, "", "a", "hé €", "\U0001f600" * 3, "x" * 300, "tab\tnew\nline"]

    def text(k: int) -> str | None:
        if texts == "all NULL":
            return None
        if texts == "one huge" and k == 150:
            return "z" * 100_000
        return rng.choice(choices)

    await pg(
        pg_table,
        "INSERT INTO q VALUES ($1, $2, $3, $4, $5, $6)",
        args=[
            (
                k,
                -k * 7919,
                k / 7,
                k % 2 == 0,
                None if k < 60 and k % 5 == 0 else k**k % 2**50,
                text(k),
            )
            for k in range(400)
        ],
    )
    work = await ar.table_shards(pg_table, "q", key="id", shards=2)
    packed = await read_records(pg_table, work, [40, 64, 200], 64)
    from asyncreader._readers import postgres

    monkeypatch.setattr(postgres, "packed_plan", lambda *args: None)
    rows = await read_records(pg_table, work, [40, 64, 200], 64)
    assert packed[0] == rows[0] == [b"q:%d" % k for k in range(400)]
    assert canonical(packed[1]) == rows[1]
    laid_out = [entries(record) for record in packed[1]]
    if texts != "all NULL":
        # The text ("a") after the numbers, and integers padded: longer than the rows'.
        assert sum(keys[-1] == b"a" and keys[0] == b"b" for keys in laid_out) > 100
    assert sum(len(p) > len(r) for p, r in zip(packed[1], rows[1], strict=True)) > 150
    spec = {
        "a": ar.FixedLenFeature([], "string", b"-"),
        "n": ar.FixedLenFeature([], "int64", -1),
        "f": ar.FixedLenFeature([], "float32"),
    }
    got = ar.parse_example(packed[1], spec)
    want = ar.parse_example(rows[1], spec)
    assert all(np.array_equal(got[name], want[name]) for name in spec)


@pytest.mark.network
@pytest.mark.parametrize("encoding", ["UTF8", "LATIN1"])
async def test_postgres_packed_text_is_utf8_whatever_the_servers_encoding(
    postgres_url: str, encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A UTF-8 database aggregates text as it is; another converts each value first. Both
    # give the row path's bytes.
    name = f"enc_{encoding.lower()}"
    await pg(
        postgres_url,
        f"DROP DATABASE IF EXISTS {name}",
        f"CREATE DATABASE {name} ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' "
        "TEMPLATE template0",
    )
    url = postgres_url.rsplit("/", 1)[0] + f"/{name}"
    texts = ["", "hé", "ü" * 20, "Ä x", None, "plain"]
    await pg(url, "CREATE TABLE p (id bigint PRIMARY KEY, t text, v varchar(30), n bigint)")
    await pg(
        url,
        "INSERT INTO p VALUES ($1, $2, $3, $4)",
        args=[(k, texts[k % 6], texts[(k + 1) % 6], k * 3) for k in range(100)],
    )
    from asyncreader._readers import postgres

    real = postgres._fetch
    queries: list[str] = []

    async def spy(conn: Any, db: str, table: str, sql: str, params: Any) -> Any:
        queries.append(sql)
        return await real(conn, db, table, sql, params)

    monkeypatch.setattr(postgres, "_fetch", spy)
    work = await ar.table_shards(url, "p", key="id", shards=2)
    packed = await read_records(url, work, [7, 40], 16)
    packs = [q for q in queries if "string_agg" in q]
    assert packs
    assert all(("convert_to" in q) == (encoding != "UTF8") for q in packs)
    monkeypatch.setattr(postgres, "packed_plan", lambda *args: None)
    rows = await read_records(url, work, [7, 40], 16)
    assert packed == rows
    assert ar.parse_example(packed[1], {"t": ar.FixedLenFeature([], "string", b"-")})[
        "t"
    ].tolist() == [b"-" if t is None else t.encode() for t in (texts[k % 6] for k in range(100))]


@pytest.mark.network
async def test_postgres_types_without_packed_form_take_the_row_path(pg_table: str) -> None:
    await pg(
        pg_table,
        "DROP TABLE IF EXISTS p",
        "CREATE TABLE p (id integer PRIMARY KEY, j json, a bigint[], c char(3))",
        "INSERT INTO p SELECT i, json_build_object('i', i), ARRAY[i, -i], 'ab' "
        "FROM generate_series(0, 39) i",
    )
    for columns, spec in [
        (["j"], {"j": ar.FixedLenFeature([], "string")}),
        (["a"], {"a": ar.FixedLenFeature([2], "int64")}),
        (["c", "id"], {"c": ar.FixedLenFeature([], "string")}),
    ]:
        async with ar.PostgresReader(pg_table, columns=columns) as reader:
            queue = await work_queue(["sql:p?key=id"])
            keys, values = await reader.read_up_to(queue, 100)
        assert keys == [b"p:%d" % i for i in range(40)]
        got = ar.parse_example(values, spec)
        if "j" in got:
            assert got["j"].tolist() == [b'{"i" : %d}' % i for i in range(40)]
        if "a" in got:
            assert got["a"].tolist() == [[i, -i] for i in range(40)]
        if "c" in got:
            assert got["c"].tolist() == [b"ab "] * 40  # asyncpg keeps char(n)'s padding


@pytest.mark.network
async def test_postgres_float_beyond_float32_in_a_packed_chunk_names_its_row(
    pg_table: str,
) -> None:
    await pg(pg_table, "UPDATE t SET x = 1e300 WHERE id = 30")
    async with ar.PostgresReader(pg_table, columns=["x"]) as reader:
        queue = await work_queue(["sql:t?key=id&hi=100"])
        keys, _ = await reader.read_up_to(queue, 100)
        assert keys == [b"t:%d" % i for i in range(30)]
        with pytest.raises(ar.InvalidArgumentError, match=r"table 't': the row with key 30 .*'x'"):
            await reader.read_up_to(queue, 100)


@pytest.mark.network
async def test_postgres_malformed_packed_reply_is_data_loss_naming_table_and_key(
    pg_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncreader._readers import postgres

    real = postgres._fetch

    async def truncated(conn: Any, db: str, table: str, sql: str, params: Any) -> Any:
        rows = await real(conn, db, table, sql, params)
        if "string_agg" not in sql or params[:-1] != [9]:
            return rows
        reply = list(rows[0])
        reply[1] = reply[1][:-1]  # the packed rows of the chunk after key 9 one byte short
        return [reply]

    async with ar.PostgresReader(pg_table, fetch_rows=10) as reader:
        queue = await work_queue(["sql:t?key=id"])
        monkeypatch.setattr(postgres, "_fetch", truncated)
        keys, _ = await reader.read_up_to(queue, 10)
        assert keys[-1] == b"t:9"
        with pytest.raises(
            ar.DataLossError, match=r"table 't': malformed reply for the rows after key 9: rows"
        ):
            await reader.read_up_to(queue, 10)
        monkeypatch.setattr(postgres, "_fetch", real)
        keys, _ = await reader.read_up_to(queue, 10)  # nothing lost: it goes on at key 10
        assert keys[0] == b"t:10"


@pytest.mark.network
async def test_postgres_rows_out_of_key_order_drop_the_chunk_read_ahead(
    pg_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The next chunk is asked for after the reply's last row before the reply is checked;
    # a reply out of key order (which PostgreSQL does not give in practice) makes that the
    # wrong key: the chunk read ahead is dropped, and nothing is lost or read twice.
    from asyncreader._readers import postgres

    real = postgres._fetch
    afters: list[object] = []

    async def reversed_rows(conn: Any, db: str, table: str, sql: str, params: Any) -> Any:
        if "string_agg" in sql:
            afters.append(params[1] if len(params) == 3 else None)  # [hi, after, limit]
        rows = await real(conn, db, table, sql, params)
        if "string_agg" not in sql:
            return rows
        reply = list(rows[0])
        size = len(reply[1]) // reply[0] if reply[0] else 1
        reply[1] = np.frombuffer(reply[1], dtype=np.dtype((np.void, size)))[::-1].tobytes()
        return [reply]

    monkeypatch.setattr(postgres, "_fetch", reversed_rows)
    async with ar.PostgresReader(pg_table, columns=["x", "n", "id"], fetch_rows=100) as reader:
        queue = await work_queue(["sql:t?key=id&hi=450"])
        keys: list[bytes] = []
        values: list[bytes] = []
        with anyio.fail_after(30), contextlib.suppress(ar.OutOfRangeError):
            while True:
                batch = await reader.read_batch(queue, 64)
                keys += batch.keys()
                values += batch.tolist()
    assert keys == [b"t:%d" % i for i in range(450)]
    got = ar.parse_example(values, {k: v for k, v in SPEC.items() if k != "s"})
    assert got["id"].tolist() == list(range(450))
    assert got["n"].tolist() == [-1 if row(i)[3] is None else row(i)[3] for i in range(450)]
    # Each chunk's successor was first asked for after the reversed reply's last row (its
    # first key), then, that chunk dropped, after its last key; the last one is not whole.
    assert afters == [None, 0, 99, 100, 199, 200, 299, 300, 399]


@pytest.mark.network
async def test_postgres_packed_query_refused_by_the_server_falls_back_to_rows(
    pg_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncreader._readers import postgres

    real = postgres._fetch
    refused: list[str] = []

    async def refuse_packed(conn: Any, db: str, table: str, sql: str, params: Any) -> Any:
        if "string_agg" in sql:
            refused.append(sql)
            # An error of the server's, as a chunk beyond its 1 GB limit on a value gives.
            return await real(conn, db, table, "SELECT 1 / 0", [])
        return await real(conn, db, table, sql, params)

    monkeypatch.setattr(postgres, "_fetch", refuse_packed)
    async with ar.PostgresReader(pg_table, fetch_rows=100) as reader:
        got = await read_all(reader, await work_queue(["sql:t?key=id"]), "read_batch", 64)
    assert got == list(range(ROWS))
    assert len(refused) == 1  # the work item went on with rows
