"""One rank of the job-checkpoint test, as its own driver process (started by
test_job_checkpoint_ranks.py): ``python checkpoint_rank.py ADDRESS NAMESPACE RANK
WORLD_SIZE MODE CHECKPOINT OUT PATH...``.

Every rank says it joined on a shared ``ready`` queue; rank 0 waits for all of them, then
fills the work queue with the paths and closes it. Every rank reads TFRecords from the
shared queue into a local shuffle buffer and trains in steps drawn at random from it,
each step acknowledged with ``Session.ack``.

``MODE`` ``before``: after ``STEPS`` steps (or when the files ran out) every rank takes
the job checkpoint; rank 0 writes it to ``CHECKPOINT``; each rank writes the keys it
acknowledged before it to ``OUT`` (JSON, hex), prints ``checkpointed``, goes on for a few
steps and then waits to be killed. ``MODE`` ``after``: the session restores
``CHECKPOINT``; the rank reads to the end, acknowledging every step, writes the keys it
acknowledged to ``OUT`` and exits.
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

CHUNK, STEP, BUFFER, STEPS = 8, 5, 20, 4


async def main(
    address: str, namespace: str, rank: int, world_size: int, mode: str, checkpoint: anyio.Path,
    out: anyio.Path, paths: list[str],
) -> None:  # fmt: skip
    rng = random.Random(rank)
    cluster = ar.RayCluster(address, namespace, connect_timeout=30.0, lease_timeout=30.0)
    restore = await checkpoint.read_bytes() if mode == "after" else None
    acked: list[bytes] = []
    async with ar.Session(
        cluster=cluster, rank=rank, world_size=world_size, restore=restore
    ) as sess:
        ready: Any = ar.FIFOQueue(None, shared_name="ready")
        work: Any = ar.FIFOQueue(None, shared_name="files")
        await ready.enqueue(rank)
        if rank == 0:
            with anyio.fail_after(60):
                await ready.dequeue_many(world_size)  # every rank is here: fair shares
            await work.enqueue_many(paths)  # the same items again when restoring
            await work.close()

        async def cut() -> None:
            data = await sess.checkpoint(timeout=60)
            if rank == 0:
                await checkpoint.write_bytes(data)
            await out.write_text(json.dumps([k.hex() for k in acked]))
            print("checkpointed", flush=True)

        steps = 0
        async for step in ShuffledSteps(
            ar.TFRecordReader(), work, rng, chunk=CHUNK, step=STEP, buffer=BUFFER
        ):
            await sess.ack(step)
            acked += step
            steps += 1
            if mode == "before" and steps == STEPS:
                await cut()
            if mode == "before" and steps == STEPS + 3:
                break  # what follows the checkpoint is not in it: stop mid-epoch
        if mode == "before":
            if steps < STEPS:
                await cut()  # the files ran out first: still one cut for every rank
            print("stopping", flush=True)
            await anyio.sleep_forever()  # killed here, as a job that is stopped
    await out.write_text(json.dumps([k.hex() for k in acked]))


if __name__ == "__main__":
    address, namespace, rank, world_size, mode, checkpoint, out, *paths = sys.argv[1:]
    anyio.run(
        main, address, namespace, int(rank), int(world_size), mode, anyio.Path(checkpoint),
        anyio.Path(out), paths,
    )  # fmt: skip
