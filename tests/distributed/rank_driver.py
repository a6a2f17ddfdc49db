"""One rank of a job, as its own driver process: ``python rank_driver.py ADDRESS NAMESPACE
RANK WORLD_SIZE PATH...`` (started by test_ranks.py).

Every rank builds the same two shared queues (so their creation races between the
processes): ``ready``, where each rank checks in, and ``files``, the work queue. Rank 0
waits until every rank checked in, fills the work queue with the paths and closes it; then
all ranks read TFRecords from it with their own reader. Prints one JSON line: the rank,
the actors it found, and the values of the records it read.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import anyio

import asyncreader as ar


async def main(address: str, namespace: str, rank: int, world_size: int, paths: list[str]) -> None:
    cluster = ar.RayCluster(address, namespace, connect_timeout=20.0)
    values: list[str] = []
    async with ar.Session(cluster=cluster, rank=rank, world_size=world_size):
        ready: Any = ar.FIFOQueue(None, shared_name="ready")
        work: Any = ar.FIFOQueue(None, shared_name="files")
        actors = [ready._actor._actor_id.hex(), work._actor._actor_id.hex()]
        await ready.enqueue(rank)
        if rank == 0:
            with anyio.fail_after(60):
                await ready.dequeue_many(world_size)  # everyone is here
            await work.enqueue_many(paths)
            await work.close()
        reader = ar.TFRecordReader()
        while True:
            try:
                _, batch = await reader.read_up_to(work, 10_000)  # one whole file
            except ar.OutOfRangeError:
                break
            values += [v.decode() for v in batch]
            await anyio.sleep(0.05)  # a training step: other ranks take the next files
    print(json.dumps({"rank": rank, "actors": actors, "values": values}), flush=True)


if __name__ == "__main__":
    address, namespace, rank, world_size, *paths = sys.argv[1:]
    anyio.run(main, address, namespace, int(rank), int(world_size), paths)
