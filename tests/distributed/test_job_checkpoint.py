"""Job checkpoints: one collective cut of every rank and shared work queue, restored with
the same or another number of ranks.

Ranks are Sessions of this process, each in its own task (as in ``test_leases.py``). The
ledger: the records acknowledged before the checkpoint plus those delivered after the
restore must be every record of the files exactly once.
"""

from __future__ import annotations

import collections
import contextlib
import random
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._runtime import state_codec

from .test_leases import in_session, write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SIZES = [30, 7, 55, 12, 41, 3, 26, 60, 18, 35]


def sessions(
    cluster: ar.RayCluster, n: int, **kwargs: Any
) -> tuple[contextlib.AsyncExitStack, list[ar.Session]]:
    made = [ar.Session(cluster=cluster, rank=r, world_size=n, **kwargs) for r in range(n)]
    return contextlib.AsyncExitStack(), made


def work_queue(sess: ar.Session) -> Any:
    return in_session(sess, lambda: ar.FIFOQueue(None, shared_name="files"))


async def gone(ray_env: RayEnv, namespace: str) -> None:
    """Wait until the job's actors left the name table (the last rank out deletes them)."""
    for _ in range(150):
        if not ray_env.named_actors(namespace):
            return
        await anyio.sleep(0.1)
    raise AssertionError(f"the job's actors were not deleted: {ray_env.named_actors(namespace)}")


async def run_before(
    cluster: ar.RayCluster, paths: list[str], *, n: int, steps: int, seed: int
) -> tuple[list[bytes], list[bytes]]:
    """Run ``n`` ranks for ``steps`` steps each (reading through a buffer, acknowledging
    part of it), take the job checkpoint; return it (as every rank got it) and the keys
    acknowledged before it."""
    acked: list[bytes] = []
    got: list[bytes] = []
    stack, made = sessions(cluster, n)
    async with stack:
        for sess in made:
            await stack.enter_async_context(sess)
        works = [work_queue(sess) for sess in made]
        await works[0].enqueue_many(paths)
        await works[0].close()

        async def rank(r: int) -> None:
            sess, work = made[r], works[r]
            rng = random.Random(seed * 10 + r)
            step = [0]
            sess.track_state("step", lambda: step[0], lambda saved: None)
            reader = ar.TFRecordReader()
            buffer: list[bytes] = []
            for _ in range(steps):
                keys, _ = await reader.read_up_to(work, 9)
                buffer += keys
                rng.shuffle(buffer)
                consumed, buffer = buffer[: len(buffer) // 2], buffer[len(buffer) // 2 :]
                await sess.ack(consumed)
                acked.extend(consumed)
                step[0] += 1
            got.append(await sess.checkpoint(timeout=60))
            # The uninterrupted job goes on: what it does now is not in the checkpoint.
            keys, _ = await reader.read_up_to(work, 5)
            await sess.ack(keys)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for r in range(n):
                    tg.start_soon(rank, r)
    return got, acked


async def run_after(
    cluster: ar.RayCluster, paths: list[str], checkpoint: bytes, *, n: int
) -> tuple[list[bytes], list[Any]]:
    """Restore ``checkpoint`` with ``n`` ranks, read to the end acknowledging everything;
    return the keys delivered and each rank's restored tracked step."""
    delivered: list[bytes] = []
    restored: list[Any] = [None] * n
    stack, made = sessions(cluster, n, restore=checkpoint)
    async with stack:
        for sess in made:
            await stack.enter_async_context(sess)
        works = [work_queue(sess) for sess in made]
        await works[0].enqueue_many(paths)  # the same program: it fills the queue again
        await works[0].close()

        async def rank(r: int) -> None:
            sess, work = made[r], works[r]

            def load(saved: Any) -> None:
                restored[r] = saved

            sess.track_state("step", lambda: 0, load)
            reader = ar.TFRecordReader()
            while True:
                try:
                    keys, _ = await reader.read_up_to(work, 8)
                except ar.OutOfRangeError:
                    return
                delivered.extend(keys)
                await sess.ack(keys)

        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for r in range(n):
                    tg.start_soon(rank, r)
    return delivered, restored


@pytest.mark.parametrize("after", [2, 3, 4])
async def test_a_job_checkpoint_restores_the_rest_exactly_once_with_any_rank_count(
    ray_env: RayEnv, namespace: str, tmp_path: Path, after: int
) -> None:
    paths, keys = await write_files(tmp_path, SIZES)
    got, acked = await run_before(ar.RayCluster(namespace=namespace), paths, n=3, steps=4, seed=1)
    assert len(got) == 3
    assert got[0] == got[1] == got[2]  # every rank: the same bytes
    tree = state_codec.decode(got[0])
    [snapshot] = tree["queues"].values()
    # The cut is in the middle of things: files not taken yet, leases with records
    # read and not all acknowledged.
    assert snapshot["queued"][0] < snapshot["total"] == len(paths)
    assert any(lease[1] for lease in snapshot["leases"])
    assert tree["ranks"] == [{"state/step": 4}] * 3
    await gone(ray_env, namespace)

    again = ray_env.namespace()
    delivered, restored = await run_after(ar.RayCluster(namespace=again), paths, got[0], n=after)
    await gone(ray_env, again)
    ledger = collections.Counter(acked + delivered)
    lost = [k for k in keys if ledger[k] == 0]
    twice = {k: c for k, c in ledger.items() if c > 1}
    assert (lost, twice) == ([], {})
    assert sorted(ledger) == sorted(keys)
    # Each rank's tracked states come back only with the same number of ranks.
    assert restored == ([4] * 3 if after == 3 else [None] * after)


@pytest.mark.both_backends
async def test_a_rank_missing_from_the_checkpoint_fails_the_others_in_time(
    namespace: str,
) -> None:
    stack, made = sessions(ar.RayCluster(namespace=namespace), 3)
    failed: list[str] = []
    async with stack:
        for sess in made:
            await stack.enter_async_context(sess)

        async def arrive(sess: ar.Session) -> None:
            with pytest.raises(TimeoutError) as caught:
                await sess.checkpoint(timeout=1.5)
            failed.append(str(caught.value))

        with anyio.fail_after(30):  # rank 2 never calls checkpoint()
            async with anyio.create_task_group() as tg:
                tg.start_soon(arrive, made[0])
                tg.start_soon(arrive, made[1])
    assert len(failed) == 2
    assert all("rank(s) [2] did not call checkpoint()" in m for m in failed)


async def test_a_dead_rank_fails_the_checkpoint_at_once(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    from .test_leases import anchor_of, until_dead

    paths, _ = await write_files(tmp_path, [20, 20])
    stack, made = sessions(ar.RayCluster(namespace=namespace), 3)
    failed: list[str] = []
    async with stack:
        for sess in made:
            await stack.enter_async_context(sess)
        works = [work_queue(sess) for sess in made]
        await works[0].enqueue_many(paths)
        await works[0].close()
        with anyio.fail_after(30):
            await ar.TFRecordReader().read_up_to(works[2], 5)  # rank 2 holds a lease
            await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(made[2]))
            await until_dead(works[0])

        async def arrive(sess: ar.Session) -> None:
            with pytest.raises(ar.FailedPreconditionError) as caught:
                await sess.checkpoint(timeout=120)
            failed.append(str(caught.value))

        with anyio.fail_after(20):  # far less than the timeout: the death is seen
            async with anyio.create_task_group() as tg:
                tg.start_soon(arrive, made[0])
                tg.start_soon(arrive, made[1])
    assert len(failed) == 2
    assert all("rank(s) [2] died before calling checkpoint()" in m for m in failed)


async def one_rank_checkpoint(
    cluster: ar.RayCluster, paths: list[str], key: bytes | None = None
) -> bytes:
    async with ar.Session(cluster=cluster, rank=0, world_size=1, checkpoint_key=key) as sess:
        work = work_queue(sess)
        await work.enqueue_many(paths)
        await work.close()
        with anyio.fail_after(30):
            keys, _ = await ar.TFRecordReader().read_up_to(work, 5)
            await sess.ack(keys[:2])
            data = await sess.checkpoint()
    return data


def edited(checkpoint: bytes, edit: Any) -> bytes:
    tree = state_codec.decode(checkpoint)
    [snapshot] = tree["queues"].values()
    edit(snapshot)
    return state_codec.encode(tree)


def set_index(value: Any) -> Any:
    def edit(snapshot: dict[str, Any]) -> None:
        snapshot["leases"][0][0] = value

    return edit


async def test_a_checkpoint_restores_only_the_items_the_program_enqueues(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, _ = await write_files(tmp_path, [20, 20])
    data = await one_rank_checkpoint(ar.RayCluster(namespace=namespace), paths)
    await gone(ray_env, namespace)
    again = ar.RayCluster(namespace=ray_env.namespace())

    def restore(checkpoint: bytes, **kwargs: Any) -> ar.Session:
        return ar.Session(cluster=again, rank=0, world_size=1, restore=checkpoint, **kwargs)

    # A checkpoint names work items by index only: an edited one that names anything
    # else, or an index out of range, is refused before anything runs.
    for bad in (set_index(7), set_index(str(tmp_path / "secret.tfrecord")), set_index(-1)):
        with pytest.raises(ar.InvalidArgumentError, match="malformed job checkpoint"):
            restore(edited(data, bad))
    async with ar.Session() as local:
        with pytest.raises(ar.InvalidArgumentError, match="restores job checkpoints"):
            restore(await local.checkpoint())
    # The program fills the queue with other items than the checkpointed job's: refused,
    # and nothing of them is read.
    other = str(tmp_path / "other.tfrecord")
    with ar.TFRecordWriter(other) as writer:
        writer.write(b"not to be read")
    async with restore(data) as sess:
        work = work_queue(sess)
        with pytest.raises(ar.InvalidArgumentError, match="not those of the checkpointed job"):
            await work.enqueue_many([other, paths[1]])
        assert work.size() == 0  # refused: still waiting for the job's items
        await work.enqueue_many([paths[0]])  # one of the two
        with pytest.raises(ar.InvalidArgumentError, match="checkpointed job had enqueued 2"):
            await work.close()
        assert work.size() == 0
    await gone(ray_env, again.namespace)


async def test_a_signed_job_checkpoint_needs_its_key(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, _ = await write_files(tmp_path, [20])
    data = await one_rank_checkpoint(ar.RayCluster(namespace=namespace), paths, key=b"k" * 32)
    await gone(ray_env, namespace)
    cluster = ar.RayCluster(namespace=ray_env.namespace())
    with pytest.raises(ar.InvalidArgumentError, match="signed"):
        ar.Session(cluster=cluster, rank=0, world_size=1, restore=data)
    altered = data[:-1] + bytes([data[-1] ^ 1])
    with pytest.raises(ar.InvalidArgumentError, match="signature does not match"):
        ar.Session(cluster=cluster, rank=0, world_size=1, restore=altered, checkpoint_key=b"k" * 32)
    ar.Session(cluster=cluster, rank=0, world_size=1, restore=data, checkpoint_key=b"k" * 32)


async def test_a_shared_queue_of_examples_must_be_empty_at_a_job_checkpoint(
    namespace: str,
) -> None:
    async with ar.Session(cluster=ar.RayCluster(namespace=namespace), rank=0, world_size=1) as s:
        examples: Any = ar.FIFOQueue(None, shared_name="examples")
        await examples.enqueue_many([(1, 2.0), (3, 4.0)])
        with anyio.fail_after(30):
            with pytest.raises(ar.FailedPreconditionError, match="'examples' holds 2 element"):
                await s.checkpoint()
            await examples.dequeue_many(2)
            assert isinstance(await s.checkpoint(), bytes)


class Lockstep:
    """Ranks that step together (as DDP's do): each step ends with every rank's vote."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.votes: dict[int, list[bool]] = collections.defaultdict(list)
        self.events: dict[int, anyio.Event] = collections.defaultdict(anyio.Event)
        self.arrived: dict[int, int] = collections.defaultdict(int)
        self.all_arrived: dict[int, anyio.Event] = collections.defaultdict(anyio.Event)

    async def gather(self, step: int) -> None:
        """Wait until every rank has taken its batch of ``step``."""
        self.arrived[step] += 1
        if self.arrived[step] == self.n:
            self.all_arrived[step].set()
        await self.all_arrived[step].wait()

    async def agree(self, step: int, vote: bool) -> bool:
        """Wait for every rank's vote at ``step``; whether they all voted yes."""
        self.votes[step].append(vote)
        if len(self.votes[step]) == self.n:
            self.events[step].set()
        await self.events[step].wait()
        return all(self.votes[step])


async def tail_epoch(
    cluster: ar.RayCluster,
    paths: list[str],
    n: int,
    *,
    checkpoint_in_tail: bool,
    restore: bytes | None = None,
    dynamic_pad: bool = False,
) -> tuple[list[bytes], bytes | None, dict[str, Any], dict[bytes, int]]:
    """``n`` ranks batching with equal steps, in lockstep. With ``checkpoint_in_tail``
    they take a job checkpoint at the first step every rank took from the pool, and
    stop there. Return the keys acknowledged, the checkpoint, the tail's state at the
    checkpoint (or the end) and the remainder's drops."""
    acked: list[bytes] = []
    lockstep = Lockstep(n)
    out: dict[str, Any] = {"checkpoint": None, "tail": {}, "drops": {}}

    async def rank(sess: ar.Session) -> None:
        from asyncreader._runtime import context

        context._session.set(sess)  # this task's session: its batcher is this rank's
        work = work_queue(sess)
        if sess.rank == 0:
            await work.enqueue_many(paths)
            await work.close()
        reader = ar.TFRecordReader()

        async def source() -> Any:
            keys, values = await reader.read_up_to(work, 8)
            if not dynamic_pad:
                return keys, values
            # Each read's tokens as wide as its longest record: widths differ per read.
            tokens = np.zeros((len(values), max(map(len, values))), dtype=np.uint8)
            for i, value in enumerate(values):
                tokens[i, : len(value)] = np.frombuffer(value, dtype=np.uint8)
            return keys, values, tokens

        batcher = ar.batch(
            source,
            4,
            enqueue_many=True,
            dynamic_pad=dynamic_pad,
            record_refs=reader,
            remainder="drop",
        )
        step = 0
        async for keys, *_ in batcher:
            step += 1
            await anyio.sleep(0.01 if sess.rank == 0 else 0.0)
            real = [bytes(k) for k in keys if k]
            await sess.ack(real)
            acked.extend(real)
            steps: Any = batcher._steps
            vote = bool(steps and steps._joined)
            if checkpoint_in_tail:
                # The pool's counts are read once every rank holds this step's batch.
                await lockstep.gather(step)
            if vote and sess.rank == 0:
                # (in lockstep no rank takes from the pool until the vote is done)
                out["tail"] = await ask(work, "tail_status")
                vote = out["tail"]["pooled"] > 0
            if checkpoint_in_tail and await lockstep.agree(step, vote):
                state = await sess.checkpoint(timeout=30)
                out["checkpoint"] = state
                return
        if sess.rank == 0:
            out["tail"] = await ask(work, "tail_status")
            out["drops"] = await ask(work, "drops")

    async def keep_ledger(sess: ar.Session) -> None:
        await ask(work_queue(sess), "keep_ledger")

    stack, made = sessions(cluster, n, restore=restore)
    with anyio.fail_after(90):
        async with stack:
            for sess in made:
                await stack.enter_async_context(sess)
            await keep_ledger(made[0])
            async with anyio.create_task_group() as tg:
                for sess in made:
                    tg.start_soon(rank, sess)
    return acked, out["checkpoint"], out["tail"], out["drops"]


async def ask(queue: Any, method: str) -> Any:
    from asyncreader._distributed.awaiting import wait_ref

    return await wait_ref(getattr(queue._actor, method).remote())


@pytest.mark.both_backends
@pytest.mark.parametrize("dynamic_pad", [False, True], ids=["fixed", "dynamic_pad"])
async def test_a_checkpoint_in_the_epochs_tail_restores_every_record_once(
    ray_env: RayEnv, tmp_path: Path, dynamic_pad: bool
) -> None:
    # The checkpoint is taken while the pool holds examples read but not acknowledged:
    # their files' leases are saved as any other, so the restored job (one rank more)
    # reads them again, once.
    paths, every = await write_files(tmp_path, [12, 150, 9, 10, 11])
    first = ray_env.namespace()
    before, checkpoint, tail, _ = await tail_epoch(
        ar.RayCluster(namespace=first), paths, 2, checkpoint_in_tail=True, dynamic_pad=dynamic_pad
    )
    assert checkpoint is not None
    assert tail["tail"], tail
    assert len(tail["counts"]) == 2, tail
    assert len(set(tail["counts"].values())) == 1, tail
    assert tail["pooled"] > 0, tail  # examples in the pool at the checkpoint
    await gone(ray_env, first)
    again = ray_env.namespace()
    after, _, _, drops = await tail_epoch(
        ar.RayCluster(namespace=again),
        paths,
        3,
        checkpoint_in_tail=False,
        restore=checkpoint,
        dynamic_pad=dynamic_pad,
    )
    await gone(ray_env, again)
    dropped = list(collections.Counter(drops).elements())
    assert sorted(before + after + dropped) == sorted(every)
