"""Train a small model on several ranks of a Ray cluster, checkpoint the whole job, and
restore it with another number of ranks.

Each rank is a Ray actor with its own asyncreader :class:`~asyncreader.Session` in the
same job (``cluster=RayCluster(...)``, ``rank=``, ``world_size=``). The TFRecord files
(written at start: ``tf.train.Example`` protos, an 8-float feature vector, a 0/1 label and
a record id) sit in one queue shared by every rank (``shared_name="files"``): a rank's
reader *leases* a file, and each training step acknowledges the records it consumed
with ``await sess.ack(keys)``. Fast ranks take more files.

The first job (3 ranks) takes a **job checkpoint** a few steps in: every rank calls
``await sess.checkpoint()`` at the same step, right after acknowledging it, and gets the
same bytes; the driver keeps them (rank 0 hands them over) with the ranks' averaged
model. Then one rank dies (it SIGKILLs itself, as a crash would): the files it held go
back to the queue with what it had acknowledged, and the other ranks finish the epoch.

The second job restores that checkpoint with **another number of ranks** (2): it starts
from the checkpoint's model and trains on exactly the records not acknowledged at the
checkpoint. The driver checks, from the ids each rank logs with every acknowledged step,
that every record was trained on exactly once in the first job (killed rank included),
and exactly once over the checkpoint's part of the first job plus the second job.

Needs Ray (``pip install "asyncreader[ray]"``). Run it::

    python examples/ray_train.py [--ranks 3] [--restore-ranks 2] [--files 8] [--address HOST:PORT]

Without ``--address`` it starts a local cluster of its own, on 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import collections
import os
import secrets
import signal
import tempfile
from dataclasses import dataclass, field
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
BATCH, BUFFER = 32, 96


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


@dataclass
class Plan:
    """What one rank of a job does besides training."""

    job: int
    w: np.ndarray  # the model it starts from
    b: float
    checkpoint_at: int | None = None  # the step after which the job checkpoints
    die_after: int | None = None  # the step after which this rank crashes
    restore: bytes | None = None  # the job checkpoint to restore
    paths: list[str] = field(default_factory=list)  # the work items (rank 0 enqueues them)


async def train_rank(
    namespace: str, rank: int, world_size: int, plan: Plan, log: Any
) -> dict[str, Any]:
    """One rank: lease files, train on shuffled batches, acknowledge every step."""
    rng = np.random.default_rng(rank)
    w, b = plan.w.copy(), np.float32(plan.b)
    steps = 0
    checkpointed = False
    cluster = ar.RayCluster(None, namespace, connect_timeout=60.0, lease_timeout=30.0)
    async with ar.Session(
        cluster=cluster, rank=rank, world_size=world_size, restore=plan.restore
    ) as sess:
        ready: Any = ar.FIFOQueue(None, shared_name="ready")
        files: Any = ar.FIFOQueue(None, shared_name="files")  # filled by rank 0
        await ready.enqueue(rank)
        if rank == 0:
            # Every rank is here (so each takes a fair share): fill the work queue (a
            # restored job fills it again, with the same paths) and close it.
            await ready.dequeue_many(world_size)
            await files.enqueue_many(plan.paths)
            await files.close()

        async def checkpoint() -> None:
            # Collective: every rank calls it at this step, after the step's ack, and
            # gets the same bytes. Rank 0 hands them to the driver; each rank, its model.
            nonlocal checkpointed
            state = await sess.checkpoint(timeout=120)
            checkpointed = True
            saved = state if rank == 0 else None
            await log.model.remote(rank, w, float(b), saved)  # an ObjectRef: awaitable

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
            ids = np.asarray(parsed["id"]).tolist()
            await log.trained.remote(plan.job, checkpointed, ids)
            steps += 1
            if steps == plan.checkpoint_at:
                await checkpoint()
            if steps == plan.die_after:
                os.kill(os.getpid(), signal.SIGKILL)  # a crash, mid-epoch
        if plan.checkpoint_at is not None and not checkpointed:
            await checkpoint()  # the files ran out first: still one cut for every rank
    return {"rank": rank, "steps": steps, "w": w, "b": float(b)}


class TrainedLog:
    """The driver's record of what the ranks trained on (a Ray actor, outside the job)."""

    def __init__(self) -> None:
        self.ids: dict[tuple[int, bool], list[int]] = collections.defaultdict(list)
        self.models: dict[int, tuple[np.ndarray, float]] = {}
        self.checkpoint: bytes | None = None

    def trained(self, job: int, after_checkpoint: bool, ids: list[int]) -> None:
        self.ids[job, after_checkpoint] += ids

    def model(self, rank: int, w: np.ndarray, b: float, checkpoint: bytes | None) -> None:
        self.models[rank] = (w, b)
        self.checkpoint = checkpoint or self.checkpoint

    def get(self) -> tuple[dict[tuple[int, bool], list[int]], Any, bytes | None]:
        return dict(self.ids), self.models, self.checkpoint


class RankActor:
    """A rank as a Ray actor (made remote in :func:`run_jobs`)."""

    def run(
        self, namespace: str, rank: int, world_size: int, plan: Plan, log: Any
    ) -> dict[str, Any]:
        return anyio.run(train_rank, namespace, rank, world_size, plan, log)


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
    parser.add_argument("--restore-ranks", type=int, default=2)
    parser.add_argument("--files", type=int, default=8)
    parser.add_argument("--per-file", type=int, default=400)
    parser.add_argument("--checkpoint-at", type=int, default=3, help="steps per rank before it")
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
            return run_jobs(ray, args, paths, total)
        finally:
            ray.shutdown()


def run_job(ray: Any, ranks: int, plans: list[Plan], log: Any) -> tuple[list[Any], list[int]]:
    """One job of ``ranks`` rank actors: the results of those that finished, and the
    ranks that died. (The job's shared queues go when its last rank ends or dies.)"""
    namespace = f"ray-train-{secrets.token_hex(4)}"
    rank_actor = ray.remote(num_cpus=0)(RankActor)
    actors = [rank_actor.remote() for _ in range(ranks)]
    runs = [actor.run.remote(namespace, r, ranks, plans[r], log) for r, actor in enumerate(actors)]
    results: list[dict[str, Any]] = []
    died: list[int] = []
    for r, run in enumerate(runs):
        try:
            results.append(ray.get(run))
        except ray.exceptions.RayActorError:
            died.append(r)
    for actor in actors:
        ray.kill(actor)
    return results, died


def check(ids: list[int], total: int) -> tuple[int, int]:
    """How many records were never trained on, and how many more than once."""
    counts = collections.Counter(ids)
    return total - len(counts), sum(1 for n in counts.values() if n > 1)


def run_jobs(ray: Any, args: argparse.Namespace, paths: list[str], total: int) -> dict[str, Any]:
    log = ray.remote(num_cpus=0)(TrainedLog).remote()
    start = np.zeros(8, np.float32)

    # Job 1: checkpoint at a step, then lose rank 1; the others finish the epoch.
    plans = [Plan(1, start, 0.0, args.checkpoint_at, args.die_after if r == 1 else None,
                  paths=paths) for r in range(args.ranks)]  # fmt: skip
    results, died = run_job(ray, args.ranks, plans, log)
    ids, models, state = ray.get(log.get.remote())
    assert state is not None  # what the driver keeps: the job checkpoint ...
    before = ids.get((1, False), [])
    first = before + ids.get((1, True), [])
    print(f"job 1: {args.ranks} ranks, rank(s) killed mid-epoch: {died}")
    for r in results:
        print(f"  rank {r['rank']}: {r['steps']} steps")
    missing, twice = check(first, total)
    print(f"job 1: records trained on: {len(first)} of {total}; missing {missing}, twice {twice}")
    print(f"job checkpoint at step {args.checkpoint_at}: {len(state)} bytes, "
          f"{len(before)} records trained on before it")  # fmt: skip
    # ... and with it the ranks' models at the checkpoint, averaged.
    w0 = np.mean([w for w, _ in models.values()], axis=0).astype(np.float32)
    b0 = float(np.mean([b for _, b in models.values()]))

    # Job 2: restore the checkpoint with another number of ranks; train to the end.
    plans = [Plan(2, w0, b0, restore=state, paths=paths) for _ in range(args.restore_ranks)]
    results2, died2 = run_job(ray, args.restore_ranks, plans, log)
    ids, _, _ = ray.get(log.get.remote())
    second = ids.get((2, False), [])
    print(f"job 2: restored with {args.restore_ranks} ranks")
    for r in results2:
        print(f"  rank {r['rank']}: {r['steps']} steps")
    missing2, twice2 = check(before + second, total)
    print(f"checkpoint + job 2: records trained on: {len(before) + len(second)} of {total}; "
          f"missing {missing2}, twice {twice2}")  # fmt: skip

    steps = np.array([r["steps"] for r in results2], np.float32)
    w = sum(r["w"] * s for r, s in zip(results2, steps, strict=True)) / steps.sum()
    b = sum(r["b"] * s for r, s in zip(results2, steps, strict=True)) / steps.sum()
    test = np.random.default_rng(99).standard_normal((1000, 8)).astype(np.float32)
    accuracy = float(((test @ w + b > 0) == (test @ WEIGHTS > 0)).mean())
    print(f"accuracy of the restored job's averaged model on 1000 new examples: {accuracy:.3f}")
    ray.kill(log)
    return {"died": died, "missing": missing, "twice": twice, "trained": len(first),
            "restored_missing": missing2, "restored_twice": twice2, "before": len(before),
            "after": len(second), "died_after_restore": died2, "total": total,
            "accuracy": accuracy}  # fmt: skip


if __name__ == "__main__":
    main()
