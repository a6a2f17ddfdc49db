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


async def test_each_batcher_is_levelled_through_its_own_queue(
    ray_env: RayEnv, tmp_path: Path, namespace: str
) -> None:
    train, train_keys, evals, eval_keys = await two_sets(tmp_path)
    cluster = ar.RayCluster(namespace=namespace)
    got: dict[tuple[int, str], list[list[bytes]]] = collections.defaultdict(list)
    ledgers: dict[str, dict[bytes, int]] = {}
    done = [anyio.Event(), anyio.Event()]

    async def rank(r: int) -> None:
        async with ar.Session(cluster=cluster, rank=r, world_size=2) as sess:
            queues: dict[str, Any] = {
                "train": ar.FIFOQueue(None, shared_name="train"),
                "eval": ar.FIFOQueue(None, shared_name="eval"),
            }
            if r == 0:
                for name, paths in (("train", train), ("eval", evals)):
                    await ask(queues[name], "keep_ledger")
                    await queues[name].enqueue_many(paths)
                    await queues[name].close()
            batchers = {}
            for name, queue in queues.items():
                reader = ar.TFRecordReader()
                batchers[name] = ar.batch(
                    functools.partial(reader.read_up_to, queue, 16), BATCH, capacity=4 * BATCH,
                    enqueue_many=True, record_refs=reader, allow_smaller_final_batch=True,
                )  # fmt: skip
            # A training step each time, an evaluation step every third (rank 1 slower).
            ended: set[str] = set()
            step = 0
            while len(ended) < 2:
                step += 1
                for name in ("train", "eval"):
                    if name in ended or (name == "eval" and step % 3 and "train" not in ended):
                        continue
                    try:
                        keys, _ = await batchers[name].dequeue()
                    except ar.OutOfRangeError:
                        ended.add(name)
                        continue
                    batch = [bytes(k) for k in keys]
                    got[r, name].append(batch)
                    await anyio.sleep(0.01 * (r + 1))
                    await sess.ack([k for k in batch if k])
            done[r].set()
            if r == 0:
                await done[1].wait()
                for name, queue in queues.items():
                    ledgers[name] = await ask(queue, "ledger")

    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for r in range(2):
                tg.start_soon(rank, r)
    for name, keys in (("train", train_keys), ("eval", eval_keys)):
        # As many batches on each rank, of this set's records only, each record once.
        assert len(got[0, name]) == len(got[1, name]), name
        delivered = [k for r in range(2) for batch in got[r, name] for k in batch if k]
        assert sorted(delivered) == sorted(keys), name
        assert ledgers[name] == dict.fromkeys(keys, 1), name


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
