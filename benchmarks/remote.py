"""Remote reading speed: ``read_batch`` over ``s3://`` (and ``http://``) against fetching the
same objects whole with the same client, concurrently, in the same run.

Run: ``python benchmarks/remote.py [--scale 3.0] [--quick] [--repeats 5] [--no-nginx]
[--no-obstore]``

The script starts moto's S3 server (``moto[server]``) on loopback, uploads TFRecord files
of 100-byte and of 100 KiB records (``8 x scale`` files of each: 12 MB a file of 100 KiB
records, 4 MB of 100-byte records; the default scale makes the transfer last many round
trips of the +50 ms run, and moto's cost per range request grows with the object), and
times, median of five wall-clock runs after a warm-up, the runs compared interleaved (one
of each per round, so load from elsewhere on the machine falls on all of them alike; the
load average is printed):

* ``raw``: the client the readers use for ``s3://`` (obstore when installed, else s3fs's
  ``fs.cat``) fetching every file whole, concurrently: the reference of the "vs raw"
  column;
* ``read_batch``: a ``TFRecordReader`` draining the files with ``read_batch(queue, 1024)``
  (1 reader; and 4 readers on the same work queue, one task each), records/s, and MB/s of
  the files' bytes (as raw counts them);
* a table of the read-ahead window and concurrency (``set_remote_reading``) for the 100 KiB
  files, one reader;
* the same with 50 ms added to every request by a delaying proxy on loopback (the tests'
  ``fault_proxy``), raw and ``read_batch`` both through it, against ``read_batch``
  through the same proxy without the delay (the proxy's own copying is not latency); and
  with the read-ahead window doubled to 128 MiB (the window is what bounds a reader's
  throughput at a high latency: about window / round trip);
* the client comparison: obstore (the Rust ``object_store`` client) fetching the same
  objects whole and as 8 MiB ranges, concurrently, next to s3fs doing the same, and
  ``read_batch`` through s3fs (the readers' client unless obstore is turned on) against
  s3fs's whole-object fetch (``--no-obstore`` skips it; obstore is not a dependency of
  asyncreader);
* with nginx installed, the same files over ``http://`` (raw: fsspec's HTTP filesystem
  fetching them whole concurrently).

Bars: ``read_batch`` of 100 KiB records >= 0.8x raw; with 50 ms per request, within 2x of
the figure without. moto's server is pure Python and takes most of the two cores, so the
absolute figures are the server's; the ratios are what the readers add.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import anyio

import asyncreader as ar
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "readers"))  # the tests' fault proxy

BUCKET = "bench"
#: Files per kind at scale 1; ``--scale`` changes their number, not their size.
FILES = 8
#: File sizes: moto's server copies a whole object to answer each range request, so its
#: cost per request grows with the object (8 MiB ranges of a 96 MB object: 152 MB/s
#: against 659 MB/s whole); at these sizes the server's range answers keep up.
SMALL_FILE = 4_000_000
LARGE_FILE = 12_000_000


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    import socket

    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise SystemExit(f"{what} did not start") from None
            time.sleep(0.05)


def tfrecord_file(record: int, total: int) -> tuple[bytes, int, int]:
    """A TFRecord file of ``record``-byte records, about ``total`` bytes; returns it, its
    record count and payload bytes."""
    payload = os.urandom(record)
    n = max(1, total // (record + 16))
    framed = b"".join(frame_record(payload))
    return framed * n, n, n * record


def timed(fn: Callable[[], Awaitable[float | None]]) -> float:
    """One run of ``fn``: the time it returns, else its wall-clock time."""
    start = time.perf_counter()
    took: float | None = asyncio.run(fn())  # type: ignore[arg-type]
    return time.perf_counter() - start if took is None else took


def interleaved(
    fns: list[Callable[[], Awaitable[float | None]]],
    repeats: int,
    before: list[Callable[[], None]] | None = None,
) -> list[float]:
    """The median time of each of ``fns`` over ``repeats`` rounds after a warm-up round
    (clients connected, sessions made), one run of each per round in turn; ``before[i]``
    runs untimed before each run of ``fns[i]``."""
    times: list[list[float]] = [[] for _ in fns]
    for i in range(repeats + 1):
        for j, fn in enumerate(fns):
            if before is not None:
                before[j]()
            took = timed(fn)
            if i:
                times[j].append(took)
    return [statistics.median(t) for t in times]


def best(fn: Callable[[], Awaitable[float | None]], repeats: int) -> float:
    """The median time of ``fn`` over ``repeats`` runs after a warm-up run."""
    return interleaved([fn], repeats)[0]


async def drain(urls: list[str], readers: int, records: int) -> None:
    """Read ``urls`` with ``readers`` TFRecordReaders on one work queue; check that
    ``records`` records came out."""
    queue = ar.FIFOQueue(None)
    for url in urls:
        await queue.enqueue(url.encode())
    await queue.close()
    count = 0

    async def one() -> None:
        nonlocal count
        async with ar.TFRecordReader() as reader:
            while True:
                try:
                    batch = await reader.read_batch(queue, 1024)
                except ar.OutOfRangeError:
                    return
                count += len(batch)

    async with anyio.create_task_group() as tg:
        for _ in range(readers):
            tg.start_soon(one)
    if count != records:
        raise SystemExit(f"read {count} records, not {records}")


def row(name: str, seconds: float, records: int, nbytes: int, ref: float | None) -> str:
    mbs = nbytes / seconds / 1e6
    ratio = f"{mbs / ref:5.2f}x" if ref else "    -"
    rps = f"{records / seconds / 1e3:9.1f}k" if records else "         -"
    return f"| {name:<44} | {rps} | {mbs:8.1f} | {ratio} |"


HEADER = "| {:<44} | {:>10} | {:>8} | {:>6} |".format("what", "records/s", "MB/s", "vs raw")
RULE = "|" + "-" * 46 + "|" + "-" * 12 + "|" + "-" * 10 + "|" + "-" * 8 + "|"


try:
    import obstore as _obstore  # noqa: F401

    CLIENT = "obstore"
    ar.set_remote_reading(obstore=True)  # s3:// ranges through obstore (off by default)
except ImportError:
    CLIENT = "s3fs"


def s3_conf(endpoint: str) -> None:
    import fsspec
    import s3fs

    fsspec.config.conf["s3"] = {"endpoint_url": endpoint, "key": "test", "secret": "test"}
    s3fs.S3FileSystem.clear_instance_cache()


def raw_s3(urls: list[str]) -> Callable[[], Awaitable[float]]:
    """Fetch ``urls`` whole, concurrently, with the client the readers use for ``s3://``
    (obstore when installed, else s3fs)."""
    from asyncreader._io.obstore_client import obstore_client

    if any(obstore_client(u) is None for u in urls):
        return raw_fetch("s3", urls)
    import obstore

    async def run() -> float:
        # Made here, after the round's set-up: through the proxy when it is configured.
        clients = [obstore_client(u) for u in urls]
        start = time.perf_counter()
        for result in await asyncio.gather(
            *(obstore.get_async(c._store, c._key) for c in clients)  # type: ignore[union-attr]
        ):
            await result.bytes_async()
        return time.perf_counter() - start

    return run


def raw_fetch(protocol: str, urls: list[str]) -> Callable[[], Awaitable[float]]:
    """Fetch ``urls`` whole, concurrently, with fsspec's client of ``protocol``; the time
    excludes setting up the client."""
    import fsspec

    async def run() -> float:
        fs = fsspec.filesystem(protocol, asynchronous=True, skip_instance_cache=True)
        session = await fs.set_session()
        try:
            start = time.perf_counter()
            await fs._cat(urls)
            return time.perf_counter() - start
        finally:
            await session.close()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scale", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="one run each, no tables")
    parser.add_argument("--no-nginx", action="store_true")
    parser.add_argument("--no-obstore", action="store_true")
    parser.add_argument("--repeats", type=int, help="timed rounds (default 5; 1 with --quick)")
    args = parser.parse_args()
    repeats = args.repeats or (1 if args.quick else 5)

    import s3fs

    port = free_port()
    moto = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{port}"
    tmp = Path(tempfile.mkdtemp(prefix="asyncreader-remote-"))
    proxy = None
    try:
        wait_port(port, moto, "moto's S3 server")
        fs = s3fs.S3FileSystem(endpoint_url=endpoint, key="test", secret="test")
        fs.mkdir(BUCKET)
        kinds = {"100 B": (100, SMALL_FILE), "100 KiB": (100 << 10, LARGE_FILE)}
        n_files = max(2, round(FILES * args.scale))
        files: dict[str, tuple[list[str], int, int, int]] = {}
        for label, (size, file_size) in kinds.items():
            data, n, payload = tfrecord_file(size, file_size)
            names = [f"{size}-{i}.tfrecord" for i in range(n_files)]
            for name in names:
                fs.pipe(f"{BUCKET}/{name}", data)
                (tmp / name).write_bytes(data)
            files[label] = (names, n * n_files, payload * n_files, len(data) * n_files)
        s3_conf(endpoint)
        load = os.getloadavg()
        print(
            f"moto S3 server on loopback; {n_files} files per kind; median of {repeats}, "
            f"interleaved; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}\n"
        )
        print(HEADER)
        print(RULE)
        results: dict[str, float] = {}
        for label, (names, records, _, total) in files.items():
            urls = [f"s3://{BUCKET}/{n}" for n in names]
            raw, *readers_t = interleaved(
                [raw_s3(urls), *(functools.partial(drain, urls, r, records) for r in (1, 4))],
                repeats,
            )
            ref = total / raw / 1e6
            print(row(f"s3 {label}: raw {CLIENT}, whole, concurrent", raw, 0, total, None))
            for readers, t in zip((1, 4), readers_t, strict=True):
                results[f"{label}/{readers}"] = total / t / 1e6 / ref
                name = f"s3 {label}: read_batch, {readers} reader(s)"
                print(row(name, t, records, total, ref))
        print()
        names, records, _, total = files["100 KiB"]
        urls = [f"s3://{BUCKET}/{n}" for n in names]
        if not args.quick:
            print("read-ahead window x concurrency, s3 100 KiB records, 1 reader:\n")
            print(HEADER)
            print(RULE)
            configs = [(w << 20, c) for w in (4, 16, 64) for c in (1, 4, 8)]

            def config(window: int, concurrency: int) -> Callable[[], None]:
                def set_up() -> None:
                    # obstore named each time: a call with the defaults alone turns it off
                    ar.set_remote_reading(
                        read_ahead=window, concurrency=concurrency, obstore=CLIENT == "obstore"
                    )

                return set_up

            raw, *config_t = interleaved(
                [raw_s3(urls), *(functools.partial(drain, urls, 1, records) for _ in configs)],
                repeats,
                before=[config(64 << 20, 8), *(config(w, c) for w, c in configs)],
            )
            ref = total / raw / 1e6
            for (window, concurrency), t in zip(configs, config_t, strict=True):
                name = f"read_ahead {window >> 20} MiB, concurrency {concurrency}"
                print(row(name, t, records, total, ref))
            ar.set_remote_reading(obstore=CLIENT == "obstore")
            print()

        from fault_proxy import FaultProxy

        proxy = FaultProxy(port)
        print("50 ms added to every request (delaying proxy), s3 100 KiB records:\n")
        print(HEADER)
        print(RULE)

        def through(delay: float | None, window: int = 64 << 20) -> Callable[[], None]:
            def set_up() -> None:
                ar.set_remote_reading(read_ahead=window, obstore=CLIENT == "obstore")
                if delay is None:
                    s3_conf(endpoint)
                else:
                    s3_conf(proxy.url)  # type: ignore[union-attr]
                    proxy.delay = delay  # type: ignore[union-attr]

            return set_up

        def one_reader() -> Awaitable[None]:
            return drain(urls, 1, records)

        direct, no_latency, raw, slow, wide = interleaved(
            [one_reader, one_reader, raw_s3(urls), one_reader, one_reader],
            repeats,
            before=[
                through(None),
                through(0.0),
                through(0.05),
                through(0.05),
                through(0.05, 128 << 20),
            ],
        )
        ar.set_remote_reading(obstore=CLIENT == "obstore")
        print(row("read_batch, 1 reader, direct", direct, records, total, None))
        name = "read_batch, 1 reader, proxy, no added latency"
        print(row(name, no_latency, records, total, None))
        ref = total / raw / 1e6
        print(row(f"raw {CLIENT}, whole, concurrent, +50 ms", raw, 0, total, None))
        print(row("read_batch, 1 reader, +50 ms", slow, records, total, ref))
        print(row("same, read_ahead 128 MiB", wide, records, total, ref))
        slowdown = slow / no_latency
        print(
            f"\n+50 ms per request: {slowdown:.2f}x the time through the proxy without it "
            f"({slow / direct:.2f}x the time direct; bar: <= 2x); with a 128 MiB window "
            f"{wide / no_latency:.2f}x\n"
        )
        proxy.close()
        proxy = None
        s3_conf(endpoint)

        if not args.no_obstore:
            compare_clients(endpoint, names, records, total, repeats)

        if not args.no_nginx:
            nginx_rows(tmp, files, repeats)

        ok = results["100 KiB/1"] >= 0.8 and slowdown <= 2.0
        print(
            f"bars: 100 KiB read_batch {results['100 KiB/1']:.2f}x raw (>= 0.8), "
            f"+50 ms {slowdown:.2f}x (<= 2): {'met' if ok else 'MISSED'}"
        )
        if not ok:
            raise SystemExit(1)
    finally:
        if proxy is not None:
            proxy.close()
        moto.terminate()
        moto.wait(timeout=10)
        shutil.rmtree(tmp, ignore_errors=True)


def compare_clients(
    endpoint: str, names: list[str], records: int, total: int, repeats: int
) -> None:
    """obstore next to s3fs: whole objects and 8 MiB ranges, concurrently; and
    ``read_batch`` through s3fs, the readers' client unless obstore is turned on."""
    try:
        import obstore
        from obstore.store import S3Store
    except ImportError:
        print("obstore is not installed: client comparison skipped\n")
        return
    import s3fs

    store = S3Store(
        BUCKET,
        config={
            "endpoint": endpoint,
            "access_key_id": "test",
            "secret_access_key": "test",
            "region": "us-east-1",
        },
        client_options={"allow_http": True},
    )
    part = 8 << 20
    size = total // len(names)
    starts = list(range(0, size, part))
    ends = [min(size, s + part) for s in starts]

    async def obstore_whole() -> None:
        async def one(name: str) -> None:
            result = await obstore.get_async(store, name)
            await result.bytes_async()

        await asyncio.gather(*(one(n) for n in names))

    async def obstore_ranges() -> None:
        await asyncio.gather(
            *(obstore.get_ranges_async(store, n, starts=starts, ends=ends) for n in names)
        )

    async def s3fs_ranges() -> float:
        fs = s3fs.S3FileSystem(
            endpoint_url=endpoint,
            key="test",
            secret="test",
            asynchronous=True,
            skip_instance_cache=True,
        )
        session = await fs.set_session()
        try:
            start = time.perf_counter()
            await asyncio.gather(
                *(
                    fs._cat_file(f"{BUCKET}/{n}", start=s, end=e)
                    for n in names
                    for s, e in zip(starts, ends, strict=True)
                )
            )
            return time.perf_counter() - start
        finally:
            await session.close()

    urls = [f"s3://{BUCKET}/{n}" for n in names]
    print("clients, s3 100 KiB files fetched concurrently:\n")
    print(HEADER)
    print(RULE)
    ref_t = best(raw_fetch("s3", urls), repeats)
    ref = total / ref_t / 1e6
    print(row("s3fs: whole objects", ref_t, 0, total, ref))
    print(row("obstore: whole objects", best(obstore_whole, repeats), 0, total, ref))
    print(row("s3fs: 8 MiB ranges", best(s3fs_ranges, repeats), 0, total, ref))
    print(row("obstore: 8 MiB ranges", best(obstore_ranges, repeats), 0, total, ref))
    ar.set_remote_reading(obstore=False)
    try:
        through_s3fs = best(functools.partial(drain, urls, 1, records), repeats)
    finally:
        ar.set_remote_reading(obstore=CLIENT == "obstore")
    print(row("s3fs (the default): read_batch, 1 reader", through_s3fs, records, total, ref))
    print()


def nginx_rows(root: Path, files: dict[str, tuple[list[str], int, int, int]], repeats: int) -> None:
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        print("nginx is not installed: http:// rows skipped\n")
        return
    port = free_port()
    conf = root / "nginx.conf"
    conf.write_text(
        f"""daemon off;
worker_processes 1;
error_log {root}/error.log;
pid {root}/nginx.pid;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {root}/body;
    proxy_temp_path {root}/proxy;
    fastcgi_temp_path {root}/fastcgi;
    uwsgi_temp_path {root}/uwsgi;
    scgi_temp_path {root}/scgi;
    server {{ listen 127.0.0.1:{port}; root {root}; }}
}}
"""
    )
    root.chmod(0o755)  # nginx's workers run as another user
    for name in root.iterdir():
        name.chmod(0o644)
    proc = subprocess.Popen([binary, "-c", str(conf), "-p", str(root)])
    try:
        wait_port(port, proc, "nginx")
        print("nginx over http:// on loopback:\n")
        print(HEADER)
        print(RULE)
        for label, (names, records, _, total) in files.items():
            urls = [f"http://127.0.0.1:{port}/{n}" for n in names]
            raw = best(raw_fetch("http", urls), repeats)
            ref = total / raw / 1e6
            print(row(f"http {label}: raw fsspec cat, concurrent", raw, 0, total, None))
            t = best(functools.partial(drain, urls, 1, records), repeats)
            print(row(f"http {label}: read_batch, 1 reader", t, records, total, ref))
        print()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
