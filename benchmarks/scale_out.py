"""Scale-out on Ray: what a shared queue costs, and records/s with 1, 2 and 4 ranks.

Run: ``python benchmarks/scale_out.py [--files 16] [--records 2000] [--record-bytes 1024]
[--ranks 1,2,4] [--sections queue,leases,ranks]`` (needs ``pip install "asyncreader[ray]"``).

Starts a local Ray cluster on loopback (every socket on 127.0.0.1, token authentication with
a token of this run only), then measures in the same run:

* **queue cost**: ``enqueue_many`` + ``dequeue_up_to`` round trips through a local
  :class:`~asyncreader.FIFOQueue` and through the same queue shared in the cluster
  (``shared_name=`` in a session with ``cluster=``: hosted in a Ray actor), with chunks of 1
  and of 1,000 work items: the cost per call and per item, and the shared queue's cost as a
  multiple of the local one's;
* **leases**: the cost of a lease report (``Session.ack`` of a step's keys, which also
  reports the reader's position in its leased file) against a bare round trip to the
  queue's actor; and the time from SIGKILLing a rank process that holds a lease to another
  rank's reader, waiting for work, having that lease (the death noticed through the
  rank's anchor actor, the lease given back, the waiting take served);
* **ranks**: 1, 2 and 4 rank processes (separate drivers joining the cluster, as
  ``torchrun`` would start them) read the same TFRecord files, taking work items from one
  shared work queue with ``read_batch``; records/s from the first rank's first read to the
  last rank's end (process start-up and joining the cluster are reported apart), against
  one process reading the same files through a local queue in this run;
* **job checkpoint**: ranks (Sessions of the benchmark's process, each its own client of the
  cluster) each hold ``--checkpoint-leases`` leases (a reader per lease, half of what it read
  acknowledged) on a work queue of ``--checkpoint-items`` items; the time of the job's
  first collective ``await sess.checkpoint()``, the best of ``--repeat`` more, and the
  checkpoint's size.
* **deterministic vs dynamic** (``--sections determ``): two ranks (Sessions of the
  benchmark's process) read the files through one shared work queue, acknowledging each
  read of 256 records; rank 1 is slow (``--skew`` s of "training" per read). Records/s of
  the job, and records per rank, balanced dynamically and with ``deterministic=True``
  (the fixed schedule: each rank reads half of the files, so the job waits for the slow
  rank's half).

This machine's cores bound the speed-up: with 2 cores expect none beyond 2 ranks, and the
Ray processes (GCS, raylet, the queue's actor) share those cores with the ranks.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

# Read by Ray when it is imported: every Ray socket on 127.0.0.1, and token authentication
# with a token of this run only (inherited by the rank processes; nothing written to $HOME).
_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(32),
}


def _write_files(root: Path, files: int, records: int, record_bytes: int) -> list[str]:
    paths = []
    payload = b"x" * (record_bytes - 8)
    for f in range(files):
        path = root / f"part-{f:03d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for r in range(records):
                writer.write(r.to_bytes(8, "little") + payload)
        paths.append(str(path))
    return paths


async def _read_all(reader: ar.TFRecordReader, work: Any) -> int:
    count = 0
    while True:
        try:
            batch = await reader.read_batch(work, 4096)
        except ar.OutOfRangeError:
            return count
        count += len(batch)


# --- one rank (a separate process) ------------------------------------------------------


async def _rank_main(address: str, namespace: str, rank: int, world: int, paths: list[str]) -> None:
    joined = time.perf_counter()
    cluster = ar.RayCluster(address, namespace, connect_timeout=30.0)
    async with ar.Session(cluster=cluster, rank=rank, world_size=world):
        ready: Any = ar.FIFOQueue(None, shared_name="ready")
        work: Any = ar.FIFOQueue(None, shared_name="files")
        go: Any = ar.FIFOQueue(None, shared_name="go")
        await ready.enqueue(rank)
        if rank == 0:
            with anyio.fail_after(120):
                await ready.dequeue_many(world)  # every rank has joined
            await work.enqueue_many(paths)
            await work.close()
            await go.enqueue_many(list(range(world)))
        with anyio.fail_after(120):
            await go.dequeue()
        ready_at = time.time()
        join_s = time.perf_counter() - joined
        async with ar.TFRecordReader() as reader:
            records = await _read_all(reader, work)
        done_at = time.time()
    print(
        json.dumps(
            {
                "rank": rank,
                "records": records,
                "start": ready_at,
                "end": done_at,
                "join_s": join_s,
            }
        ),
        flush=True,
    )


def _run_ranks(address: str, world: int, paths: list[str]) -> dict[str, Any]:
    namespace = f"bench-{secrets.token_hex(4)}"
    env = dict(os.environ)
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [sys.executable, __file__, "--rank-of", address, namespace, str(r), str(world), *paths],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for r in range(world)
    ]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"rank failed:\n{err[-3000:]}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    wall = time.perf_counter() - started
    start = min(r["start"] for r in results)
    end = max(r["end"] for r in results)
    records = sum(r["records"] for r in results)
    return {
        "records_per_s": records / (end - start),
        "records": records,
        "read_s": end - start,
        "wall_s": wall,
        "join_s": max(r["join_s"] for r in results),
        "per_rank": [r["records"] for r in results],
    }


# --- in the benchmark's own process -----------------------------------------------------


async def _queue_cost(queue: Any, chunk: int, items: int) -> float:
    """Seconds per call of one enqueue_many + dequeue_up_to round trip of ``chunk`` items."""
    values = [f"/data/part-{i:05d}.tfrecord" for i in range(chunk)]
    calls = max(1, items // chunk)
    start = time.perf_counter()
    for _ in range(calls):
        await queue.enqueue_many(values)
        got = await queue.dequeue_up_to(chunk)
        assert len(got) == chunk
    return (time.perf_counter() - start) / calls


async def _queue_costs(cluster: ar.RayCluster, repeat: int) -> list[tuple[str, int, float]]:
    rows: list[tuple[str, int, float]] = []
    async with ar.Session(cluster=cluster, rank=0, world_size=1):
        shared: Any = ar.FIFOQueue(None, shared_name="cost")
        local = ar.FIFOQueue(None)
        for chunk, items in ((1, 300), (1000, 100_000)):
            for name, queue in (("local", local), ("shared", shared)):
                best = min([await _queue_cost(queue, chunk, items) for _ in range(repeat)])
                rows.append((name, chunk, best))
    return rows


# --- leases: the cost of a report, and the time to take over a dead rank's work ---------


async def _ack_cost(cluster: ar.RayCluster, path: str, keys: int, acks: int) -> dict[str, float]:
    """Median seconds of an ``ack`` of ``keys`` keys (with the reader's position) and of a
    ping of the queue's actor."""
    from asyncreader._distributed.awaiting import wait_ref

    async with ar.Session(cluster=cluster, rank=0, world_size=1) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        await work.enqueue_many([path])
        await work.close()
        reader = ar.TFRecordReader()
        acked, pinged = [], []
        for _ in range(acks):  # alternated, so that both see the same load
            got, _ = await reader.read_up_to(work, keys)
            start = time.perf_counter()
            await sess.ack(got)  # the reader is mid-file: the report carries its position
            acked.append(time.perf_counter() - start)
            start = time.perf_counter()
            await wait_ref(work._actor.ping.remote())
            pinged.append(time.perf_counter() - start)
    return {"ack": statistics.median(acked), "ping": statistics.median(pinged)}


def _namespace() -> str:
    return f"bench-{secrets.token_hex(4)}"


async def _holder_main(address: str, namespace: str, path: str) -> None:
    """A rank that leases the only file, acks part of it, and waits (to be killed)."""
    cluster = ar.RayCluster(address, namespace, connect_timeout=30.0)
    async with ar.Session(cluster=cluster, rank=0, world_size=2) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        got, _ = await ar.TFRecordReader().read_up_to(work, 10)
        await sess.ack(got[:5])
        print("holding", flush=True)
        await anyio.sleep(600)


async def _takeover(address: str, path: str) -> float:
    """Seconds from SIGKILLing a rank holding a lease to this rank's reader having it."""
    namespace = _namespace()
    cluster = ar.RayCluster(None, namespace)
    async with ar.Session(cluster=cluster, rank=1, world_size=2):
        work: Any = ar.FIFOQueue(None, shared_name="files")
        await work.enqueue_many([path])
        await work.close()
        holder = await anyio.open_process(
            [sys.executable, __file__, "--holder-of", address, namespace, path],
            stderr=subprocess.DEVNULL,
        )
        try:
            assert holder.stdout is not None
            out = b""
            with anyio.fail_after(120):
                while b"holding" not in out:
                    out += await holder.stdout.receive()
            reader = ar.TFRecordReader()
            took: list[float] = []

            async def take() -> None:
                await reader.read_up_to(work, 10)  # waits: the only file is leased
                took.append(time.perf_counter())

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(take)
                    await anyio.sleep(0.5)  # the take waits in the queue's actor
                    killed = time.perf_counter()
                    holder.kill()  # SIGKILL
        finally:
            if holder.returncode is None:
                holder.kill()
            await holder.wait()
    return took[0] - killed


async def _local_reference(paths: list[str]) -> float:
    work = ar.FIFOQueue(None)
    await work.enqueue_many(paths)
    await work.close()
    start = time.perf_counter()
    async with ar.TFRecordReader() as reader:
        records = await _read_all(reader, work)
    return records / (time.perf_counter() - start)


@contextlib.asynccontextmanager
async def _ranks_in_process(made: list[ar.Session]) -> AsyncIterator[list[Any]]:
    """Enter the ranks' sessions (of this process); yield each one's handle of the job's
    shared work queue ``files``."""
    from asyncreader._runtime import context

    async with contextlib.AsyncExitStack() as stack:
        for sess in made:
            await stack.enter_async_context(sess)
        works: list[Any] = []
        for sess in made:
            token = context._session.set(sess)
            try:
                works.append(ar.FIFOQueue(None, shared_name="files"))
            finally:
                context._session.reset(token)
        yield works


async def _checkpoint_cost(
    namespace: str, paths: list[str], world: int, leases: int, items: int, repeat: int
) -> tuple[float, float, int]:
    """Seconds of the job's first collective checkpoint of ``world`` ranks, the best of
    the ``repeat`` after it, and its bytes."""
    cluster = ar.RayCluster(None, namespace)
    made = [ar.Session(cluster=cluster, rank=r, world_size=world) for r in range(world)]
    async with _ranks_in_process(made) as works:
        fake = [f"/data/more/part-{i:06d}.tfrecord" for i in range(max(0, items - len(paths)))]
        await works[0].enqueue_many(paths + fake)
        for r, sess in enumerate(made):
            for _ in range(leases):
                keys, _ = await ar.TFRecordReader().read_up_to(works[r], 10)
                await sess.ack(keys[:5])
        times: list[float] = []
        data = b""
        for _ in range(repeat + 1):
            start = time.perf_counter()
            async with anyio.create_task_group() as tg:
                for sess in made:

                    async def one(sess: ar.Session = sess) -> None:
                        nonlocal data
                        data = await sess.checkpoint()

                    tg.start_soon(one)
            times.append(time.perf_counter() - start)
        await works[0].close()
    return times[0], min(times[1:]), len(data)


async def _skewed_job(paths: list[str], deterministic: bool, skew: float) -> dict[str, Any]:
    """Two ranks reading ``paths``, rank 1 sleeping ``skew`` s per read: records/s."""
    cluster = ar.RayCluster(None, _namespace())
    made = [
        ar.Session(cluster=cluster, rank=r, world_size=2, deterministic=deterministic)
        for r in range(2)
    ]
    counts = [0, 0]
    async with _ranks_in_process(made) as works:
        await works[0].enqueue_many(paths)
        await works[0].close()

        async def rank(r: int) -> None:
            reader = ar.TFRecordReader()
            while True:
                try:
                    keys, _ = await reader.read_up_to(works[r], 256)
                except ar.OutOfRangeError:
                    return
                counts[r] += len(keys)
                if r == 1:
                    await anyio.sleep(skew)
                await made[r].ack(keys)

        start = time.perf_counter()
        async with anyio.create_task_group() as tg:
            for r in range(2):
                tg.start_soon(rank, r)
        seconds = time.perf_counter() - start
    return {"records_per_s": sum(counts) / seconds, "per_rank": counts}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=16)
    parser.add_argument("--records", type=int, default=2000, help="records per file")
    parser.add_argument("--record-bytes", type=int, default=1024)
    parser.add_argument("--ranks", default="1,2,4")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--sections", default="queue,leases,ranks,checkpoint")
    parser.add_argument("--checkpoint-ranks", default="1,2,4,8")
    parser.add_argument("--checkpoint-leases", default="1,4", help="leases per rank")
    parser.add_argument("--checkpoint-items", type=int, default=10_000)
    parser.add_argument("--skew", type=float, default=0.01, help="rank 1's seconds per read")
    args = parser.parse_args()
    sections = set(args.sections.split(","))
    os.environ.update(_RAY_ENV)
    import ray

    with tempfile.TemporaryDirectory() as tmp:
        paths = _write_files(Path(tmp), args.files, args.records, args.record_bytes)
        started = time.perf_counter()
        context = ray.init(
            num_cpus=os.cpu_count() or 2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=str(Path(tmp) / "ray"),
        )
        print(f"local Ray cluster up in {time.perf_counter() - started:.1f} s")
        address = cast("Any", context).address_info["gcs_address"]
        try:
            cluster = ar.RayCluster(None, f"bench-{secrets.token_hex(4)}")
            if "queue" in sections:
                rows = anyio.run(_queue_costs, cluster, args.repeat)
                print(
                    "\nqueue cost: enqueue_many + dequeue_up_to, one round trip (best of "
                    f"{args.repeat})"
                )
                print(f"{'queue':<8}{'chunk':>7}{'per call':>12}{'per item':>12}{'x local':>9}")
                local = {chunk: t for name, chunk, t in rows if name == "local"}
                for name, chunk, t in rows:
                    print(
                        f"{name:<8}{chunk:>7}{t * 1e6:>10.1f}us{t / chunk * 1e6:>10.2f}us"
                        f"{t / local[chunk]:>9.1f}"
                    )
            if "leases" in sections:
                (Path(tmp) / "big").mkdir()
                big = _write_files(Path(tmp) / "big", 1, 64 * 200 + 1, 256)[0]
                print("\nlease report: Session.ack of a step's keys + the reader's position")
                print(f"{'keys':>5}{'per ack':>11}{'x ping':>8}{'acks/s':>9}")
                for keys in (8, 64, 512):
                    acks = min(200, 12_800 // keys)
                    cost = min(
                        (
                            anyio.run(_ack_cost, ar.RayCluster(None, _namespace()), big, keys, acks)
                            for _ in range(args.repeat)
                        ),
                        key=lambda c: c["ack"],
                    )
                    print(
                        f"{keys:>5}{cost['ack'] * 1e3:>9.2f}ms{cost['ack'] / cost['ping']:>8.1f}"
                        f"{1 / cost['ack']:>9,.0f}   (ping {cost['ping'] * 1e3:.2f} ms)"
                    )
                times = [anyio.run(_takeover, address, paths[0]) for _ in range(args.repeat)]
                print(
                    "dead rank's lease taken over (SIGKILL to another rank's reader having "
                    f"it): median {statistics.median(times) * 1e3:.0f} ms, "
                    f"{', '.join(f'{t * 1e3:.0f}' for t in times)} ms"
                )
            if "ranks" in sections:
                reference = max(anyio.run(_local_reference, paths) for _ in range(args.repeat))
                print(
                    f"\nranks: {args.files} files x {args.records} records of "
                    f"{args.record_bytes} B; one process, local queue: {reference:,.0f} records/s"
                )
                print(
                    f"{'ranks':>5}{'records/s':>14}{'x local':>9}{'read s':>8}{'join s':>8}"
                    f"{'wall s':>8}  records per rank"
                )
                for world in (int(w) for w in args.ranks.split(",")):
                    runs = [_run_ranks(address, world, paths) for _ in range(args.repeat)]
                    best = max(runs, key=lambda r: r["records_per_s"])
                    assert all(r["records"] == args.files * args.records for r in runs)
                    print(
                        f"{world:>5}{best['records_per_s']:>14,.0f}"
                        f"{best['records_per_s'] / reference:>9.2f}{best['read_s']:>8.2f}"
                        f"{best['join_s']:>8.1f}"
                        f"{statistics.median(r['wall_s'] for r in runs):>8.1f}  {best['per_rank']}"
                    )
            if "checkpoint" in sections:
                print(
                    f"\njob checkpoint: work queue of {args.checkpoint_items:,} items (the "
                    f"job's first, then the best of {args.repeat} more)"
                )
                print(f"{'ranks':>5}{'leases':>8}{'first ms':>10}{'then ms':>9}{'bytes':>9}")
                for world in (int(w) for w in args.checkpoint_ranks.split(",")):
                    for per_rank in (int(n) for n in args.checkpoint_leases.split(",")):
                        if world * per_rank > len(paths):
                            continue  # one file per lease
                        first, seconds, size = anyio.run(
                            _checkpoint_cost,
                            f"bench-{secrets.token_hex(4)}",
                            paths,
                            world,
                            per_rank,
                            args.checkpoint_items,
                            args.repeat,
                        )
                        print(
                            f"{world:>5}{world * per_rank:>8}{first * 1e3:>10.1f}"
                            f"{seconds * 1e3:>9.1f}{size:>9,}"
                        )
            if "determ" in sections:
                print(
                    f"\ndeterministic vs dynamic: 2 ranks, rank 1 sleeps {args.skew * 1e3:g} ms "
                    f"per read of 256 records (best of {args.repeat})"
                )
                print(f"{'mode':<15}{'records/s':>12}  records per rank")
                for deterministic in (False, True):
                    runs = [
                        anyio.run(_skewed_job, paths, deterministic, args.skew)
                        for _ in range(args.repeat)
                    ]
                    best = max(runs, key=lambda r: r["records_per_s"])
                    mode = "deterministic" if deterministic else "dynamic"
                    print(f"{mode:<15}{best['records_per_s']:>12,.0f}  {best['per_rank']}")
        finally:
            ray.shutdown()


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--rank-of":
        address, namespace, rank, world, *files = sys.argv[2:]
        anyio.run(_rank_main, address, namespace, int(rank), int(world), files)
    elif len(sys.argv) > 1 and sys.argv[1] == "--holder-of":
        address, namespace, path = sys.argv[2:5]
        anyio.run(_holder_main, address, namespace, path)
    else:
        main()
