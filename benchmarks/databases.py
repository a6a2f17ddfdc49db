"""Database readers: rows/s of SQLiteReader and PostgresReader against plain fetches of the
same rows, and the value formats considered for a row.

Run: ``python benchmarks/databases.py [--rows 200000] [--postgres URL | --no-postgres]``

The script writes a table of ``--rows`` rows (``id bigint`` key, two integers, two
floats, a short text) into a SQLite file and, unless ``--no-postgres``, into PostgreSQL:
the server at ``--postgres``, else one it starts from Debian's binaries as the tests do
(``tests/readers/postgres_server.py``). Best of three, all in the same run:

* ``plain``: the reference, keyset pagination of 2,048 rows a query (the readers' own
  ``fetch_rows``) with the driver alone: ``sqlite3`` on a worker thread, ``asyncpg``
  ``fetch``; rows as the driver's tuples or records, nothing else done with them;
* ``plain + columns as arrays``: the same, each chunk then turned into column arrays
  (text as one buffer and lengths): the least a columnar value format would cost;
* ``read_batch``: the reader draining the table's 4 shards with ``read_batch(queue,
  2048)``: rows fetched, encoded as Examples, keys ready (made when asked for);
* ``+ parse_example``: the same, each batch decoded into column arrays.

Bar (issue 21): PostgresReader ``read_batch`` >= 0.7x the plain asyncpg fetch.

Then the value formats, on the same rows in memory (no database): the cost to encode the
rows as records and to decode a batch of 2,048 of them into column arrays, for
``tf.train.Example`` + ``parse_example`` (encoded row by row, and a chunk at once column
by column as the readers do), a CSV line + ``decode_csv``, and packed fixed-width binary
+ ``numpy.frombuffer`` with a structured dtype
(numeric columns only: it cannot hold the text column or NULL).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sqlite3
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

import asyncreader as ar
from asyncreader._readers.row_example import RowEncoder

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

CHUNK = 2048
SHARDS = 4
SPEC = {
    "id": ar.FixedLenFeature([], "int64"),
    "a": ar.FixedLenFeature([], "int64"),
    "b": ar.FixedLenFeature([], "int64"),
    "x": ar.FixedLenFeature([], "float32"),
    "y": ar.FixedLenFeature([], "float32"),
    "s": ar.FixedLenFeature([], "string"),
}
COLUMNS = ["id", "a", "b", "x", "y", "s"]
NUMERIC_SPEC = {k: v for k, v in SPEC.items() if k != "s"}
#: (label, table, its columns as the readers select them, parse spec)
TABLES = [
    ("mixed", "t", "a, b, id, s, x, y, id", SPEC),
    ("numeric", "n", "a, b, id, x, y, id", NUMERIC_SPEC),
]


def rows(n: int) -> list[tuple[int, int, int, float, float, str]]:
    return [(i, i % 1000, i * 7919 % 100_003, i / 3, i * 0.25, f"row {i:08d}") for i in range(n)]


def best(times: list[float]) -> float:
    return min(times)


async def timed(fn: Callable[[], Awaitable[int]], n: int) -> float:
    """Best rows/s of three runs of ``fn`` (which returns how many rows it saw)."""
    times = []
    for _ in range(3):
        start = time.perf_counter()
        seen = await fn()
        times.append(time.perf_counter() - start)
        assert seen == n, (seen, n)
    return n / best(times)


# -- SQLite -----------------------------------------------------------------------------


def make_sqlite(path: Path, n: int) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute(
            "CREATE TABLE t (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, x REAL, y REAL, s TEXT)"
        )
        conn.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", rows(n))
        conn.execute(
            "CREATE TABLE n (id INTEGER PRIMARY KEY, a INTEGER, b INTEGER, x REAL, y REAL)"
        )
        conn.execute("INSERT INTO n SELECT id, a, b, x, y FROM t")
    conn.close()


def as_columns(chunk: list[Any]) -> None:
    """A chunk of rows as column arrays (text as one buffer and lengths), the least a
    columnar value format would cost on top of the driver's rows (NULLs not handled)."""
    for values in zip(*chunk):  # noqa: B905
        first = values[0]
        if isinstance(first, (str, bytes)):
            texts = [v.encode() for v in values] if isinstance(first, str) else values
            b"".join(texts)
            np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        else:
            np.array(values)


def sqlite_plain(path: Path, table: str, columns: str, *, columnar: bool = False) -> int:
    conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", uri=True)
    conn.text_factory = bytes
    seen, last = 0, -1
    try:
        while True:
            chunk = conn.execute(
                f"SELECT {columns} FROM {table} WHERE id > ? ORDER BY id LIMIT ?",
                (last, CHUNK),
            ).fetchall()
            if not chunk:
                return seen
            if columnar:
                as_columns(chunk)
            seen += len(chunk)
            last = chunk[-1][-1]
    finally:
        conn.close()


async def drain(reader: ar.ReaderBase, shards: list[str], spec: dict[str, Any] | None) -> int:
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(shards)
    await queue.close()
    seen = 0
    with contextlib.suppress(ar.OutOfRangeError):
        while True:
            batch = await reader.read_batch(queue, CHUNK)
            if spec is not None:
                seen += len(ar.parse_example(batch, spec)["id"])
            else:
                seen += len(batch)
    return seen


async def reader_run(
    make: Callable[[], ar.ReaderBase], shards: list[str], spec: dict[str, Any] | None
) -> int:
    async with make() as reader:
        return await drain(reader, shards, spec)


# -- PostgreSQL ---------------------------------------------------------------------------


async def make_postgres(url: str, n: int) -> None:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        await conn.execute("DROP TABLE IF EXISTS t")
        await conn.execute(
            "CREATE TABLE t (id bigint PRIMARY KEY, a bigint, b bigint, x double precision, "
            "y double precision, s text)"
        )
        await conn.copy_records_to_table("t", records=rows(n))
        await conn.execute("DROP TABLE IF EXISTS n")
        await conn.execute("CREATE TABLE n AS SELECT id, a, b, x, y FROM t")
        await conn.execute("ALTER TABLE n ADD PRIMARY KEY (id)")
        await conn.execute("ANALYZE t")
        await conn.execute("ANALYZE n")
    finally:
        await conn.close()


async def postgres_plain(url: str, table: str, columns: str, *, columnar: bool = False) -> int:
    import asyncpg

    conn = await asyncpg.connect(url)
    seen, last = 0, -1
    try:
        while True:
            chunk = await conn.fetch(
                f"SELECT {columns} FROM {table} WHERE id > $1 ORDER BY id LIMIT $2",
                last,
                CHUNK,
            )
            if not chunk:
                return seen
            if columnar:
                as_columns(chunk)
            seen += len(chunk)
            last = chunk[-1][-1]
    finally:
        await conn.close()


@contextlib.contextmanager
def postgres(url: str | None) -> Iterator[str]:
    if url is not None:
        yield url
        return
    tests = Path(__file__).resolve().parents[1] / "tests"
    sys.path[:0] = [str(tests / "readers"), str(tests)]  # postgres_server imports servers_util
    from postgres_server import postgres_bin, postgres_server

    bindir = postgres_bin()
    if bindir is None:
        raise SystemExit("no PostgreSQL binaries: pass --postgres URL or --no-postgres")
    with postgres_server(bindir) as started:
        yield started


# -- value formats --------------------------------------------------------------------------


def formats(n: int) -> list[tuple[str, float, float]]:
    """(format, encode rows/s, decode rows/s) for each value format, best of three."""
    data = [(*r[:5], r[5].encode()) for r in rows(n)]
    encoder = RowEncoder(COLUMNS)
    order = [COLUMNS.index(c) for c in encoder.columns]
    example_rows = [tuple(r[i] for i in order) for r in data]
    packed = struct.Struct("<qqqdd")
    structured = np.dtype([("id", "<i8"), ("a", "<i8"), ("b", "<i8"), ("x", "<f8"), ("y", "<f8")])
    defaults: list[object] = [0, 0, 0, 0.0, 0.0, ""]

    def enc_example() -> list[bytes]:
        return encoder.encode(example_rows)[0]

    def enc_example_chunks() -> list[bytes]:
        out: list[bytes] = []
        for i in range(0, n, CHUNK):
            encoded = encoder.encode_chunk(example_rows[i : i + CHUNK])
            assert encoded is not None
            data, starts, lengths = encoded
            # The readers hand this buffer on as it is; bytes here only for the decoder.
            buffer = data.tobytes()
            out += [buffer[s : s + k] for s, k in zip(starts.tolist(), lengths.tolist())]  # noqa: B905
        return out

    def enc_csv() -> list[bytes]:
        return [b"%d,%d,%d,%r,%r,%s" % r for r in data]

    def enc_raw() -> list[bytes]:
        return [packed.pack(*r[:5]) for r in data]

    def dec_example(values: list[bytes]) -> object:
        return ar.parse_example(values, SPEC)

    def dec_csv(values: list[bytes]) -> object:
        return ar.decode_csv(values, defaults)

    def dec_raw(values: list[bytes]) -> object:
        return np.frombuffer(b"".join(values), dtype=structured)

    out = []
    for name, enc, dec in [
        ("tf.train.Example + parse_example", enc_example, dec_example),
        ("same, a chunk at once (the readers)", enc_example_chunks, dec_example),
        ("CSV line + decode_csv", enc_csv, dec_csv),
        ("packed binary + frombuffer (no text)", enc_raw, dec_raw),
    ]:
        enc_times, dec_times = [], []
        values: list[bytes] = []
        for _ in range(3):
            start = time.perf_counter()
            values = enc()
            enc_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            for i in range(0, n, CHUNK):
                dec(values[i : i + CHUNK])
            dec_times.append(time.perf_counter() - start)
        out.append((name, n / best(enc_times), n / best(dec_times)))
    return out


# -- main -----------------------------------------------------------------------------------


async def measure(
    kind: str,
    make: Callable[[], ar.ReaderBase],
    plain: Callable[..., Awaitable[int]],
    source: str | Path,
    n: int,
) -> list[tuple[str, str, float, float]]:
    out = []
    for label, table, columns, spec in TABLES:
        shards = await ar.table_shards(source, table, key="id", shards=SHARDS)
        base = await timed(functools.partial(plain, table, columns), n)
        out.append((f"{kind} {label}", "plain fetch", base, 1.0))
        rate = await timed(functools.partial(plain, table, columns, columnar=True), n)
        out.append((f"{kind} {label}", "plain + columns as arrays", rate, rate / base))
        for method, parse in (("read_batch", None), ("read_batch + parse_example", spec)):
            rate = await timed(functools.partial(reader_run, make, shards, parse), n)
            out.append((f"{kind} {label}", method, rate, rate / base))
    return out


async def run(args: argparse.Namespace) -> list[tuple[str, str, float, float]]:
    n = args.rows
    table: list[tuple[str, str, float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "bench.db"
        await anyio.to_thread.run_sync(make_sqlite, db, n)

        async def sqlite_fetch(name: str, columns: str, *, columnar: bool = False) -> int:
            return await anyio.to_thread.run_sync(
                functools.partial(sqlite_plain, db, name, columns, columnar=columnar)
            )

        make = functools.partial(ar.SQLiteReader, db)
        table += await measure("SQLite", make, sqlite_fetch, db, n)
    if not args.no_postgres:
        with postgres(args.postgres) as url:
            await make_postgres(url, n)
            make_pg = functools.partial(ar.PostgresReader, url)
            table += await measure(
                "PostgreSQL", make_pg, functools.partial(postgres_plain, url), url, n
            )
    return table


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--postgres", help="a PostgreSQL URL (default: start a server)")
    parser.add_argument("--no-postgres", action="store_true")
    args = parser.parse_args(argv)
    table = anyio.run(run, args)
    print(f"{'table':<19} {'method':<28} {'rows/s':>10} {'vs plain':>9}")
    for db, method, rate, ratio in table:
        print(f"{db:<19} {method:<28} {rate:>10,.0f} {ratio:>8.2f}x")
    print()
    print(f"{'value format':<38} {'encode rows/s':>14} {'decode rows/s':>14} {'both rows/s':>12}")
    for name, enc, dec in formats(min(args.rows, 100_000)):
        both = 1 / (1 / enc + 1 / dec)
        print(f"{name:<38} {enc:>14,.0f} {dec:>14,.0f} {both:>12,.0f}")
    missed = [
        (db, ratio)
        for db, method, _, ratio in table
        if db.startswith("PostgreSQL") and method == "read_batch" and ratio < 0.7
    ]
    for db, ratio in missed:
        print(f"bar missed: {db} read_batch {ratio:.2f}x < 0.7x plain asyncpg")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
