"""Train a small model on several ranks of a Ray cluster, from one shared work queue.

Each rank is a Ray actor with its own asyncreader :class:`~asyncreader.Session` in the
same job (``cluster=RayCluster(...)``, ``rank=``, ``world_size=``). The TFRecord files
(written at start: ``tf.train.Example`` protos, an 8-float feature vector, a 0/1 label and
a record id) sit in one queue shared by every rank (``shared_name="files"``): a rank's
reader *leases* a file, and each training step acknowledges the records it consumed
with ``await sess.ack(keys)``. Fast ranks take more files.

One rank dies mid-epoch (it SIGKILLs itself after a few steps, as a crash would): the
files it held go back to the queue with what it had acknowledged, and the other ranks
finish the epoch. The driver then checks that every record was trained on exactly once
(each rank logs the ids of the records of each acknowledged step to a shared queue)
and averages the ranks' models (a numpy logistic regression each).

Needs Ray (``pip install "asyncreader[ray]"``). Run it::

    python examples/ray_train.py [--ranks 3] [--files 8] [--address HOST:PORT]

Without ``--address`` it starts a local cluster of its own, on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import collections
import os
import secrets
import signal
import tempfile
from pathlib import Path
from typing import Any

import anyio
import numpy as np

import asyncreader as ar

FEATURES: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
    "x": ar.FixedLenFeature([8], "float32"),
    "label": ar.FixedLenFeature([], "int64"),
    "id": ar.FixedLenFeature([], "int64"),
}
# The rule the model has to learn: label = 1 when x . WEIGHTS > 0.
WEIGHTS = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -1.0, 0.25, 2.0], dtype=np.float32)
BATCH, BUFFER = 32, 256


def write_shards(folder: Path, files: int, per_file: int, seed: int = 0) -> int:
    """Write ``files`` TFRecord files of labelled examples; return how many records."""
    rng = np.random.default_rng(seed)
    next_id = 0
    for f in range(files):
        with ar.TFRecordWriter(str(folder / f"train-{f:05d}.tfrecord")) as writer:
            for x in rng.standard_normal((per_file, 8)).astype(np.float32):
                example = {"x": x, "label": [int(x @ WEIGHTS > 0)], "id": [next_id]}
                writer.write(ar.Example(example).SerializeToString())
                next_id += 1
    return next_id


async def train_rank(
    namespace: str, rank: int, world_size: int, die_after: int | None
) -> dict[str, Any]:
    """One rank: lease files, train on shuffled batches, acknowledge every step."""
    rng = np.random.default_rng(rank)
    w = np.zeros(8, np.float32)
    b = np.float32(0.0)
    steps = 0
    cluster = ar.RayCluster(None, namespace, connect_timeout=60.0, lease_timeout=30.0)
    async with ar.Session(cluster=cluster, rank=rank, world_size=world_size) as sess:
        files: Any = ar.FIFOQueue(None, shared_name="files")  # filled by the driver
        log: Any = ar.FIFOQueue(None, shared_name="trained-ids")
        reader = ar.TFRecordReader()
        keys: list[bytes] = []
        rows: list[bytes] = []
        ended = False
        while not ended or keys:
            # A local shuffle buffer: records read but not yet trained on wait here.
            if not ended and len(keys) < BUFFER:
                try:
                    got, values = await reader.read_up_to(files, BATCH)
                except ar.OutOfRangeError:
                    ended = True
                else:
                    keys += got
                    rows += values
                continue
            pick = rng.permutation(len(keys))
            take, keep = pick[:BATCH], pick[BATCH:]
            step_keys = [keys[i] for i in take]
            parsed = ar.parse_example([rows[i] for i in take], FEATURES)
            keys, rows = [keys[i] for i in keep], [rows[i] for i in keep]
            # One step of logistic regression (plain numpy).
            # Every feature is fixed-length: dense arrays.
            x = np.asarray(parsed["x"])
            y = np.asarray(parsed["label"]).astype(np.float32)
            p = 1 / (1 + np.exp(-(x @ w + b)))
            w -= 0.5 * x.T @ (p - y) / len(y)
            b -= 0.5 * np.float32((p - y).mean())
            # The step is done: acknowledge its records (if this rank dies now, they
            # are never trained on again), then log their ids for the driver's check.
            await sess.ack(step_keys)
            await log.enqueue_many(np.asarray(parsed["id"]).tolist())
            steps += 1
            # --- checkpoint, then restore at another rank count (to come) ------------
            # With the job checkpoint, every rank would call, at the same step,
            #     job_ckpt = await sess.checkpoint()
            # and the driver would keep rank 0's copy; a new job with another number of
            # ranks would then start each of them with
            #     ar.Session(cluster=..., rank=r, world_size=n2, restore=job_ckpt)
            # and train on exactly the records not yet trained on.
            # -----------------------------------------------------------------------------
            if die_after is not None and steps == die_after:
                os.kill(os.getpid(), signal.SIGKILL)  # a crash, mid-epoch
    return {"rank": rank, "steps": steps, "w": w, "b": float(b)}


def start_ray(address: str | None, temp_dir: str) -> Any:
    """Join the cluster at ``address``, or start a local one on loopback only."""
    if address is None:
        # Read when Ray is imported: every socket on 127.0.0.1, and a token of this run
        # (so nothing is written to the home directory).
        os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        os.environ.setdefault("RAY_AUTH_MODE", "token")
        os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    import ray

    if address is None:
        ray.init(include_dashboard=False, log_to_driver=False, _temp_dir=temp_dir)
    else:
        ray.init(address=address, log_to_driver=False)
    return ray


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=3)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--per-file", type=int, default=400)
    parser.add_argument("--die-after", type=int, default=5, help="steps before rank 1 dies")
    parser.add_argument("--address", default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="ray-train-") as tmp:
        folder = Path(tmp) / "data"
        folder.mkdir()
        total = write_shards(folder, args.files, args.per_file)
        paths = sorted(str(p) for p in folder.glob("*.tfrecord"))
        ray = start_ray(args.address, str(Path(tmp) / "ray"))
        try:
            return run_job(ray, args, paths, total)
        finally:
            ray.shutdown()


def run_job(ray: Any, args: argparse.Namespace, paths: list[str], total: int) -> dict[str, Any]:
    namespace = f"ray-train-{secrets.token_hex(4)}"
    world = args.ranks + 1  # the ranks that train, and this driver
    driver = args.ranks
    rank_actor = ray.remote(num_cpus=0)(RankActor)

    # The driver joins first and stays in the job until the end (its actors live while
    # any rank is inside); it fills the work queue, closes it, and reads the log last.
    results: list[dict[str, Any]] = []
    died: list[int] = []

    async def job() -> list[int]:
        cluster = ar.RayCluster(None, namespace, connect_timeout=60.0)
        async with ar.Session(cluster=cluster, rank=driver, world_size=world):
            files: Any = ar.FIFOQueue(None, shared_name="files")
            log: Any = ar.FIFOQueue(None, shared_name="trained-ids")
            await files.enqueue_many(paths)
            await files.close()
            actors = [rank_actor.remote() for _ in range(args.ranks)]
            runs = [
                actor.run.remote(namespace, r, world, args.die_after if r == 1 else None)
                for r, actor in enumerate(actors)
            ]
            for r, run in enumerate(runs):
                try:
                    results.append(await anyio.to_thread.run_sync(ray.get, run))
                except ray.exceptions.RayActorError:
                    died.append(r)
            await log.close()
            ids: list[int] = []
            while True:
                try:
                    ids += list(await log.dequeue_up_to(total))
                except ar.OutOfRangeError:
                    break
        return ids

    ids = anyio.run(job)
    counts = collections.Counter(int(i) for i in ids)
    missing = total - len(counts)
    twice = sum(1 for n in counts.values() if n > 1)
    steps = np.array([r["steps"] for r in results], np.float32)
    w = sum(r["w"] * s for r, s in zip(results, steps, strict=True)) / steps.sum()
    b = sum(r["b"] * s for r, s in zip(results, steps, strict=True)) / steps.sum()
    test = np.random.default_rng(99).standard_normal((1000, 8)).astype(np.float32)
    accuracy = float(((test @ w + b > 0) == (test @ WEIGHTS > 0)).mean())
    print(f"ranks {args.ranks}, rank(s) killed mid-epoch: {died}")
    for r in results:
        print(f"rank {r['rank']}: {r['steps']} steps")
    print(
        f"records trained on: {sum(counts.values())} of {total}; missing {missing}, twice {twice}"
    )
    print(f"accuracy of the averaged model on 1000 new examples: {accuracy:.3f}")
    steps_of = [r["steps"] for r in results]
    trained = sum(counts.values())
    return {"died": died, "missing": missing, "twice": twice, "trained": trained,
            "total": total, "accuracy": accuracy, "steps": steps_of}  # fmt: skip


class RankActor:
    """A rank as a Ray actor (made remote in :func:`run_job`)."""

    def run(
        self, namespace: str, rank: int, world_size: int, die_after: int | None
    ) -> dict[str, Any]:
        return anyio.run(train_rank, namespace, rank, world_size, die_after)


if __name__ == "__main__":
    main()
