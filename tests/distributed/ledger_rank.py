"""One rank of the ledger test, as its own driver process (started by test_ledger.py):
``python ledger_rank.py ADDRESS NAMESPACE RANK WORLD_SIZE SEED PATH...``.

Rank 0 asks the work queue's actor to keep a ledger of acknowledged keys, fills the queue
with the paths and closes it. Every rank reads TFRecords from the shared queue into a
local shuffle buffer and trains in steps of a few records drawn at random from it, each
step acknowledged with ``Session.ack``: records read but not yet consumed wait in the
buffer, as in a real input pipeline. Prints ``started`` after its first ack, and a JSON
summary at the end.
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import anyio

import asyncreader as ar

# Run by path: tests/ on sys.path makes the tests' shared helpers importable under the
# name the test modules give them.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from distributed.shuffled_steps import ShuffledSteps

CHUNK, STEP, BUFFER = 16, 8, 40


async def main(
    address: str, namespace: str, rank: int, world_size: int, seed: int, paths: list[str]
) -> None:
    rng = random.Random(seed * 100 + rank)
    cluster = ar.RayCluster(address, namespace, connect_timeout=30.0, lease_timeout=30.0)
    steps = 0
    async with ar.Session(cluster=cluster, rank=rank, world_size=world_size) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        if rank == 0:
            from asyncreader._distributed.awaiting import wait_ref

            await wait_ref(work._actor.keep_ledger.remote())
            await work.enqueue_many(paths)
            await work.close()
        steps_of = ShuffledSteps(
            ar.TFRecordReader(), work, rng, chunk=CHUNK, step=STEP, buffer=BUFFER
        )
        async for step in steps_of:
            await anyio.sleep(0.003)  # the training step
            await sess.ack(step)
            steps += 1
            if steps == 1:
                print("started", flush=True)
        records = steps_of.records
    print(json.dumps({"rank": rank, "steps": steps, "records": records}), flush=True)


if __name__ == "__main__":
    address, namespace, rank, world_size, seed, *paths = sys.argv[1:]
    anyio.run(main, address, namespace, int(rank), int(world_size), int(seed), paths)
