"""Two shared work queues in one job, a batcher on each: each is levelled on its own.

Every rank reads a training set from one shared queue and an evaluation set from another,
each through its own batcher. Each batcher's epoch's tail goes through the pool of the
queue its reader leases from (``record_refs=`` names the reader), so every rank gets as
many batches of each as the others, each batch holds records of its own set only, and
every record is acknowledged once, to the queue it came from.
"""

from __future__ import annotations

import collections
import functools
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar

from .test_equal_steps import ask
from .test_leases import write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BATCH = 8


async def two_sets(tmp_path: Path) -> tuple[list[str], list[bytes], list[str], list[bytes]]:
    """A skewed training set (one file ten times the others) and a small evaluation set."""
    (tmp_path / "train").mkdir()
    (tmp_path / "eval").mkdir()
    train, train_keys = await write_files(tmp_path / "train", [30, 300, 25, 31])
    evals, eval_keys = await write_files(tmp_path / "eval", [20, 17, 90])
    return train, train_keys, evals, eval_keys


class Job:
    """What each rank of a run saw, the queues' ledgers and drops, and its checkpoint."""

    def __init__(self) -> None:
        self.batches: dict[tuple[int, str], list[list[bytes]]] = collections.defaultdict(list)
        self.ledgers: dict[str, dict[bytes, int]] = {}
        self.drops: dict[str, dict[bytes, int]] = {}
        self.checkpoint: bytes | None = None
        #: Keys the tail pools handed each rank that it still remembers at its end.
        self.remembered: dict[int, int] = {}

    def delivered(self, name: str) -> list[bytes]:
        return [
            k
            for (_, n), batches in self.batches.items()
            if n == name
            for b in batches
            for k in b
            if k
        ]

    def counts(self, name: str, ranks: int) -> list[int]:
        return [len(self.batches[r, name]) for r in range(ranks)]


async def run_job(
    namespace: str,
    sets: dict[str, list[str]],
    ranks: int,
    *,
    checkpoint_at: int | None = None,
    restore: bytes | None = None,
    deterministic: bool = False,
    eval_every: int | None = 3,
    shuffle: bool = False,
    stop: bool = True,
) -> Job:
    """Every rank takes a training batch each step and an evaluation batch every
    ``eval_every`` steps (``None``: once training ended) (rank ``r`` trains
    ``0.01 * (r + 1)`` s a step); with ``checkpoint_at``, every rank takes the job
    checkpoint after that step (and with ``stop``, the run ends there). ``shuffle``:
    seeded ``shuffle_batch`` instead of ``batch``."""
    job = Job()
    cluster = ar.RayCluster(namespace=namespace)
    done = [anyio.Event() for _ in range(ranks)]

    async def rank(r: int) -> None:
        async with ar.Session(
            cluster=cluster, rank=r, world_size=ranks, restore=restore, deterministic=deterministic
        ) as sess:
            queues: dict[str, Any] = {name: ar.FIFOQueue(None, shared_name=name) for name in sets}
            if r == 0:
                for name, paths in sets.items():
                    await ask(queues[name], "keep_ledger")
                    await queues[name].enqueue_many(paths)
                    await queues[name].close()
            batchers = {}
            for name, queue in queues.items():
                reader = ar.TFRecordReader()
                source = functools.partial(reader.read_up_to, queue, 16)
                common: dict[str, Any] = {
                    "enqueue_many": True,
                    "record_refs": reader,
                    "allow_smaller_final_batch": True,
                }
                if shuffle:
                    batchers[name] = ar.shuffle_batch(source, BATCH, 64, 16, seed=3, **common)
                else:
                    batchers[name] = ar.batch(source, BATCH, capacity=4 * BATCH, **common)
            ended: set[str] = set()
            step = 0
            while len(ended) < len(sets):
                step += 1
                for name in sets:
                    if name in ended:
                        continue
                    waits = eval_every is None or step % eval_every
                    if name == "eval" and "train" not in ended and waits:
                        continue
                    try:
                        keys, _ = await batchers[name].dequeue()
                    except ar.OutOfRangeError:
                        ended.add(name)
                        continue
                    batch = [bytes(k) for k in keys]
                    job.batches[r, name].append(batch)
                    await anyio.sleep(0.01 * (r + 1))
                    await sess.ack([k for k in batch if k])
                if step == checkpoint_at:
                    job.checkpoint = await sess.checkpoint(timeout=60)
                    if stop:
                        break
            job.remembered[r] = sum(len(q._pool_keys) for q in queues.values())
            done[r].set()
            if r == 0:
                for event in done:
                    await event.wait()
                if checkpoint_at is None or not stop:
                    for name, queue in queues.items():
                        job.ledgers[name] = await ask(queue, "ledger")
                        job.drops[name] = await ask(queue, "drops")
            else:
                await done[0].wait()  # the job's actors go with rank 0

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for r in range(ranks):
                tg.start_soon(rank, r)
    return job


async def test_each_batcher_is_levelled_through_its_own_queue(
    ray_env: RayEnv, tmp_path: Path, namespace: str
) -> None:
    train, train_keys, evals, eval_keys = await two_sets(tmp_path)
    job = await run_job(namespace, {"train": train, "eval": evals}, 2)
    for name, keys in (("train", train_keys), ("eval", eval_keys)):
        # As many batches on each rank, of this set's records only, each record once.
        counts = job.counts(name, 2)
        assert counts[0] == counts[1], name
        assert sorted(job.delivered(name)) == sorted(keys), name
        assert job.ledgers[name] == dict.fromkeys(keys, 1), name
    # Every record the pools handed out was acknowledged: none is remembered.
    assert job.remembered == {0: 0, 1: 0}


async def test_a_checkpoint_restored_with_more_ranks_delivers_each_set_once(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Two ranks checkpoint after six steps; three restore it and finish the epoch of both
    # sets. Each rank of the restored job gets as many batches of each set as the others,
    # and the records acknowledged before the checkpoint and after the restore (with those
    # the remainder dropped: fewer than one per rank) are each set's records, once.
    train, train_keys, evals, eval_keys = await two_sets(tmp_path)
    sets = {"train": train, "eval": evals}
    before = await run_job(ray_env.namespace(), sets, 2, checkpoint_at=6)
    assert before.checkpoint is not None
    after = await run_job(ray_env.namespace(), sets, 3, restore=before.checkpoint)
    for name, keys in (("train", train_keys), ("eval", eval_keys)):
        assert len(set(after.counts(name, 3))) == 1, (name, after.counts(name, 3))
        dropped = list(collections.Counter(after.drops[name]).elements())
        delivered = before.delivered(name) + after.delivered(name)
        assert sorted(delivered + dropped) == sorted(keys), name


async def test_a_deterministic_job_takes_one_batchers_epoch_after_the_other(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Evaluation once training ended: each batcher is levelled through its own queue,
    # and each rank's stream of each set is the same in two runs.
    train, train_keys, evals, eval_keys = await two_sets(tmp_path)
    sets = {"train": train, "eval": evals}
    options: dict[str, Any] = {"deterministic": True, "eval_every": None}
    runs = [await run_job(ray_env.namespace(), sets, 2, **options) for _ in range(2)]
    for name, keys in (("train", train_keys), ("eval", eval_keys)):
        counts = runs[0].counts(name, 2)
        assert counts[0] == counts[1], name
        dropped = list(collections.Counter(runs[0].drops[name]).elements())
        assert sorted(runs[0].delivered(name) + dropped) == sorted(keys), name
        for r in range(2):
            assert runs[0].batches[r, name] == runs[1].batches[r, name], (name, r)


async def test_a_deterministic_restore_continues_each_batcher_of_each_rank_exactly(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # A checkpoint early in training: each rank's pipeline holds records of both queues
    # (its evaluation batcher reads ahead meanwhile), in shuffle buffers. A rank whose
    # share of the training files fits in its buffer waits for its first batch until the
    # others' shares are read, so it takes part from its waiting reader at its own step;
    # the checkpoint's batch counts say which. Restored with as many ranks, each rank
    # restores both batchers' buffers and generators, takes back the items it had from
    # each queue, and each batcher's stream on each rank goes on as in the
    # uninterrupted run.
    from asyncreader._runtime import state_codec

    train, train_keys, evals, eval_keys = await two_sets(tmp_path)
    sets = {"train": train, "eval": evals}
    options: dict[str, Any] = {"deterministic": True, "eval_every": None, "shuffle": True}
    whole = await run_job(ray_env.namespace(), sets, 2, **options)
    before = await run_job(ray_env.namespace(), sets, 2, checkpoint_at=3, stop=False, **options)
    assert before.checkpoint is not None
    parts = state_codec.decode(before.checkpoint)["ranks"]
    assert all("pipeline" in part for part in parts)
    # Counts by batcher in the order of their first batch (training's first); a batcher
    # not taken from yet has none.
    cuts = [
        {name: part["batch_counts"].get(f"shuffle_batch#{i}", 0) for i, name in enumerate(sets)}
        for part in parts
    ]
    after = await run_job(ray_env.namespace(), sets, 2, restore=before.checkpoint, **options)
    for name, keys in (("train", train_keys), ("eval", eval_keys)):
        for r in range(2):
            stream = before.batches[r, name][: cuts[r][name]] + after.batches[r, name]
            assert stream == whole.batches[r, name], (name, r, cuts[r])
        dropped = list(collections.Counter(after.drops[name]).elements())
        delivered = [
            k for r in range(2) for b in before.batches[r, name][: cuts[r][name]] for k in b if k
        ]
        assert sorted(delivered + after.delivered(name) + dropped) == sorted(keys), name


async def test_a_deterministic_job_refuses_batchers_taken_in_turns(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Taken in turns, the two batchers would wait on each other at the epoch's end (each
    # tail waits for every rank's share, which a rank waiting on the other batcher does
    # not read on): the first evaluation batch mid-training raises, naming both.
    train, _, evals, _ = await two_sets(tmp_path)
    with pytest.raises(BaseExceptionGroup) as caught:
        await run_job(ray_env.namespace(), {"train": train, "eval": evals}, 2, deterministic=True)
    errors = [e for e in caught.value.exceptions if isinstance(e, ar.InvalidArgumentError)]
    assert errors, caught.value.exceptions
    assert "batch of shared queue 'eval': in a deterministic job, batch of shared queue " in (
        str(errors[0])
    )
    assert "'train' is in the middle of its epoch (3 batches)" in str(errors[0])


async def test_a_batcher_that_does_not_name_its_reader_is_refused(
    ray_env: RayEnv, tmp_path: Path, namespace: str
) -> None:
    # With two leased queues, a batcher without record_refs cannot tell whose tail it is
    # in: its first batch raises, naming the queues, instead of a wrong pool at the end.
    train, _, evals, _ = await two_sets(tmp_path)
    cluster = ar.RayCluster(namespace=namespace)
    with anyio.fail_after(60):
        async with ar.Session(cluster=cluster, rank=0, world_size=1):
            first: Any = ar.FIFOQueue(None, shared_name="train")
            second: Any = ar.FIFOQueue(None, shared_name="eval")
            await first.enqueue_many(train)
            await first.close()
            await second.enqueue_many(evals)
            await second.close()
            reader, other = ar.TFRecordReader(), ar.TFRecordReader()
            await other.read_up_to(second, 4)  # this rank now leases from both
            batcher = ar.batch(
                functools.partial(reader.read_up_to, first, 16), BATCH, enqueue_many=True
            )
            with pytest.raises(
                ar.InvalidArgumentError, match=r"several shared queues \('train', 'eval'\)"
            ):
                await batcher.dequeue()


class _Queue:
    """A restored work queue as the rank's backend sees it (no actor: replies are given)."""

    def __init__(self, name: str, items: list[bytes]) -> None:
        from types import SimpleNamespace

        self.name = name
        self._actor_name = f"asyncreader:c/queue/{name}"
        self._pooled = False
        self.items = items
        self._actor = SimpleNamespace(job_items=SimpleNamespace(remote=lambda _: self))

    async def _lease_client_ready(self) -> None:
        pass


def _restored_backend(queues: list[_Queue], held: dict[bytes, list[int]]) -> Any:
    """A rank's backend restoring a pipeline that holds ``held``, with ``queues``."""
    from types import SimpleNamespace

    from asyncreader._distributed.remote_queue import RayBackend

    backend: Any = object.__new__(RayBackend)
    backend._queues = {("c", "queue", q.name): q for q in queues}
    backend._held = held
    backend._held_queues = dict.fromkeys(q._actor_name for q in queues)
    backend._held_known = False
    backend._held_lock = anyio.Lock()
    backend._checkpointer = None
    backend._cluster = SimpleNamespace(connect_timeout=5.0, lease_timeout=5.0)

    async def wait(reply_of: _Queue, name: str, actor: Any) -> Any:
        return ("ok", reply_of.items)

    backend._wait = wait
    return backend


async def test_records_of_an_item_in_two_queues_are_refused() -> None:
    # The restored pipeline holds records of part-0, an item of both queues' leases:
    # which queue they came from is unknown, so the restore refuses them.
    train, evals = _Queue("train", [b"part-0", b"part-1"]), _Queue("eval", [b"part-0"])
    backend = _restored_backend([train, evals], {b"part-0": [3]})
    with pytest.raises(ar.InvalidArgumentError, match="both shared queues 'train' and 'eval'"):
        await backend._held_items()


async def test_a_restored_batcher_is_levelled_through_the_queue_of_its_records() -> None:
    train, evals = _Queue("train", [b"part-0"]), _Queue("eval", [b"part-9"])
    backend = _restored_backend([train, evals], {b"part-9": [1]})
    from types import SimpleNamespace

    batcher = SimpleNamespace(_what="shuffle_batch", _restored_works=frozenset({b"part-9"}))
    assert await backend.home_queue(batcher) is evals
    assert evals._pooled
    assert not train._pooled
    # Records of no restored queue's items (or, were it so, of two): refused, naming
    # the batcher.
    lost = SimpleNamespace(_what="shuffle_batch", _restored_works=frozenset({b"part-5"}))
    with pytest.raises(ar.InvalidArgumentError, match=r"shuffle_batch: .* of 0 of this rank"):
        await backend.home_queue(lost)
