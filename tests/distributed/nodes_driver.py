"""The job of test_nodes.py, as the driver of a cluster started with ``ray start``:
``python nodes_driver.py ADDRESS NAMESPACE VICTIM PATH...``.

Rank actors are placed on the nodes standing for hosts (custom resources ``host1``,
``host2``, ...; rank ``r`` on ``host{r + 1}``), each reading TFRecords from one shared
work queue through a shuffle buffer and acknowledging its steps. This driver is one
more rank of the job that reads nothing: it fills the queue, keeps the work queue's
ledger, SIGKILLs rank ``VICTIM``'s process (none if -1) once it has acknowledged a step, waits for
the other ranks to finish the files, and prints one JSON line: where each rank ran, the
ledger against one local read of the files, and the dead ranks.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import ray

import asyncreader as ar

# Run by path: tests/ on sys.path makes the tests' shared helpers importable under the
# name the test modules give them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from distributed.shuffled_steps import local_keys

CHUNK, STEP, BUFFER = 16, 8, 40


async def read_rank(namespace: str, rank: int, world_size: int) -> dict[str, int]:
    """One rank: read, shuffle, ack steps until the work queue ends."""
    rng = random.Random(rank)
    cluster = ar.RayCluster(None, namespace, connect_timeout=60.0, lease_timeout=30.0)
    steps = records = 0
    async with ar.Session(cluster=cluster, rank=rank, world_size=world_size) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        reader = ar.TFRecordReader()
        buffer: list[bytes] = []
        ended = False
        while not ended or buffer:
            if not ended and len(buffer) < BUFFER:
                try:
                    keys, _ = await reader.read_up_to(work, CHUNK)
                except ar.OutOfRangeError:
                    ended = True
                else:
                    buffer += keys
                    records += len(keys)
                continue
            rng.shuffle(buffer)
            step, buffer = buffer[:STEP], buffer[STEP:]
            await anyio.sleep(0.005)  # the training step
            await sess.ack(step)
            steps += 1
    return {"steps": steps, "records": records}


@ray.remote(num_cpus=0)
class Rank:
    """A rank of the job, as an actor on the node it was placed on."""

    def where(self) -> tuple[int, str]:
        return os.getpid(), ray.get_runtime_context().get_node_id()

    def run(self, namespace: str, rank: int, world_size: int) -> dict[str, int]:
        return anyio.run(read_rank, namespace, rank, world_size)


async def main(namespace: str, victim: int, paths: list[str]) -> dict[str, Any]:
    alive = [node for node in ray.nodes() if node["Alive"]]  # type: ignore[no-untyped-call]
    node_of = {
        name: node["NodeID"] for node in alive for name in node["Resources"]
        if name.startswith("host")
    }  # fmt: skip
    hosts = sorted(node_of)
    ranks = len(hosts)
    cluster = ar.RayCluster(None, namespace, connect_timeout=60.0)
    async with ar.Session(cluster=cluster, rank=ranks, world_size=ranks + 1):
        from asyncreader._distributed.awaiting import wait_ref

        work: Any = ar.FIFOQueue(None, shared_name="files")
        await wait_ref(work._actor.keep_ledger.remote())
        await work.enqueue_many(paths)
        await work.close()
        actors = [Rank.options(resources={hosts[r]: 0.01}).remote() for r in range(ranks)]  # type: ignore[attr-defined]
        placed = [await wait_ref(actor.where.remote()) for actor in actors]
        runs = [actor.run.remote(namespace, r, ranks + 1) for r, actor in enumerate(actors)]
        with anyio.fail_after(120):
            while victim >= 0:  # the victim holds a lease and acknowledged a step
                status = await wait_ref(work._actor.lease_status.remote())
                if any(c.startswith(f"{victim}-") and a > 0 for c, _, _, a, _ in status["leases"]):
                    break
                await anyio.sleep(0.01)
        killed_at = time.monotonic()
        if victim >= 0:
            os.kill(placed[victim][0], signal.SIGKILL)
        results = {}
        with anyio.fail_after(120):
            for r, run in enumerate(runs):
                if r != victim:
                    results[r] = await wait_ref(run)
        ledger = collections.Counter(await wait_ref(work._actor.ledger.remote()))
        status = await wait_ref(work._actor.lease_status.remote())
        finished_after = time.monotonic() - killed_at
    expected = collections.Counter(await local_keys(paths))
    return {
        "placed": {r: placed[r][1] == node_of[hosts[r]] for r in range(ranks)},
        "nodes": len({node for _, node in placed}),
        "lost": sum(1 for k in expected if ledger[k] == 0),
        "twice": sum(1 for k in ledger if ledger[k] > 1),
        "unknown": sum(1 for k in ledger if k not in expected),
        "records": sum(expected.values()),
        "dead": sorted(c.partition("-")[0] for c in status["dead"]),
        "returned": sum(n for *_, n in status["events"]),
        "left": [status["pending"], status["leases"]],
        "steps": {r: s["steps"] for r, s in results.items()},
        "finished_after": finished_after,
    }


if __name__ == "__main__":
    address, namespace, victim, *paths = sys.argv[1:]
    ray.init(address=address, namespace=namespace, log_to_driver=False)
    try:
        print(json.dumps(anyio.run(main, namespace, int(victim), paths)), flush=True)
    finally:
        ray.shutdown()
