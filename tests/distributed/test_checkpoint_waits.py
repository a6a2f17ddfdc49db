"""Job checkpoints and the waits of the epoch's end.

A rank whose reader waits for work at the end of the queue (the other ranks may still
give their items back) takes part in a checkpoint the others wait in; a rank fenced for
silence leaves the job as a dead one does. Ranks are Sessions of this process, each in
its own task (as in ``test_job_checkpoint.py``).
"""

from __future__ import annotations

import collections
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

import asyncreader as ar
from asyncreader._distributed.job_checkpoint import ItemLog
from asyncreader._distributed.work_queue import LeaseBook, Rank
from asyncreader._runtime import state_codec

from .test_job_checkpoint import gone, run_after, sessions, work_queue
from .test_leases import in_session, status, write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def until(queue: Any, check: Any) -> dict[str, Any]:
    """Wait until ``check(lease status)`` holds; return the status."""
    with anyio.fail_after(30):
        while True:
            st = await status(queue)
            if check(st):
                return st
            await anyio.sleep(0.02)


def ledger_of(keys: list[bytes], acked: list[bytes], delivered: list[bytes]) -> Any:
    ledger = collections.Counter(acked + delivered)
    lost = [k for k in keys if ledger[k] == 0]
    twice = {k: c for k, c in ledger.items() if c > 1}
    return lost, twice, sorted(ledger) == sorted(keys)


async def background_rank(
    sess: ar.Session,
    work: Any,
    acked: list[bytes],
    step: list[int],
    ready: anyio.Event,
    box: dict[str, Any],
) -> None:
    """Rank 2 as a queue-runner program: a background task reads the work queue into a
    local queue, the rank's own task takes its steps from that queue and acknowledges
    them. After one step it waits for input, while its reader waits for work; given a
    step more (``box["local"]``), it calls ``checkpoint()`` (into ``box["again"]``)."""
    reader = ar.TFRecordReader()
    if box.get("batcher"):
        # The batching function's runner task reads; the rank waits for its next batch.
        batches = in_session(
            sess,
            lambda: ar.batch(
                lambda: reader.read_up_to(work, 3), 3, enqueue_many=True, record_refs=reader
            ),
        )
        keys, _ = await batches.dequeue()
        await sess.ack(list(keys))
        acked.extend(keys)
        step[0] += 1
        ready.set()
        await batches.dequeue()  # waits for input: its reader has no work
        raise AssertionError("rank 2 got work although no rank gave any back")
    local = box["local"] = in_session(
        sess, lambda: ar.FIFOQueue(100, dtypes=["string"], shapes=[[]])
    )

    async def feed() -> None:
        while True:
            keys, _ = await reader.read_up_to(work, 3)
            await local.enqueue_many(keys)

    async with anyio.create_task_group() as tg:
        tg.start_soon(feed)
        keys = await local.dequeue_many(3)
        await sess.ack(list(keys))
        acked.extend(keys)
        step[0] += 1
        ready.set()
        keys = await local.dequeue_many(3)  # waits for input: its reader has no work
        assert list(keys) == [b""] * 3, "rank 2 got work although no rank gave any back"
        await sess.ack(list(keys))  # rows without a key: nothing to acknowledge
        step[0] += 1
        start = anyio.current_time()
        box["again"] = await sess.checkpoint(timeout=45)  # the one it took part in
        box["took"] = anyio.current_time() - start
        box["answered"].set()
        await anyio.sleep_forever()


async def checkpoint_while_one_waits(
    cluster: ar.RayCluster,
    paths: list[str],
    *,
    background: bool = False,
    batcher: bool = False,
    **kwargs: Any,
) -> tuple[bytes, list[bytes], float]:
    """Ranks 0 and 1 each hold a large file; rank 2 reads its small file to the end and
    waits for work (in its own task, or with ``background`` in a task feeding a local
    queue its own task waits on); then ranks 0 and 1 checkpoint. Return the checkpoint,
    the keys acknowledged before it, and how long the checkpoint took."""
    acked: list[bytes] = []
    got: list[bytes] = []
    took: list[float] = []
    box: dict[str, Any] = {"batcher": batcher, "answered": anyio.Event()}
    background = background or batcher
    stack, made = sessions(cluster, 3, **kwargs)
    async with stack:
        for sess in made:
            await stack.enter_async_context(sess)
        works = [work_queue(sess) for sess in made]
        await works[0].enqueue_many(paths)  # ranks 0, 1, 2 take them in this order
        turn = [anyio.Event() for _ in range(4)]
        turn[0].set()
        if not batcher:
            await works[0].close()

        async def close_after_first_step() -> None:
            # A batcher's first batch is local only before the epoch's tail, which
            # begins once the queue is closed and drained.
            await turn[3].wait()
            await works[0].close()

        async def rank(r: int, done: anyio.Event | None) -> None:
            sess, work = made[r], works[r]
            step = [0]
            sess.track_state("step", lambda: step[0], lambda saved: None)
            reader = ar.TFRecordReader()
            await turn[r].wait()
            if r == 2 and background:
                await background_rank(sess, work, acked, step, turn[3], box)
            keys, _ = await reader.read_up_to(work, 3 if r == 2 else 6)
            await sess.ack(keys[:3])
            acked.extend(keys[:3])
            step[0] += 1
            turn[r + 1].set()
            if r == 2:
                # Its file is read and acknowledged: its next read waits for the other
                # ranks' items, in the task that would call checkpoint().
                await reader.read_up_to(work, 3)
                raise AssertionError("rank 2 got work although no rank gave any back")
            await turn[3].wait()
            # Rank 2's next take ended its lease: it is in its lease call.
            await until(work, lambda st: len(st["leases"]) == 2)
            await anyio.sleep(0.2)
            start = anyio.current_time()
            with anyio.fail_after(15):  # far less than the timeout
                got.append(await sess.checkpoint(timeout=45))
            took.append(anyio.current_time() - start)
            assert done is not None
            done.set()

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                if batcher:
                    tg.start_soon(close_after_first_step)
                finished = [anyio.Event(), anyio.Event()]
                tg.start_soon(rank, 0, finished[0])
                tg.start_soon(rank, 1, finished[1])
                async with anyio.create_task_group() as waiting:
                    waiting.start_soon(rank, 2, None)
                    for event in finished:
                        await event.wait()
                    if background and not batcher:
                        # Rank 2 gets a step more and calls checkpoint(): the one its
                        # reader took part in, answered at once.
                        await box["local"].enqueue_many([b""] * 3)
                        with anyio.fail_after(10):
                            await box["answered"].wait()
                    waiting.cancel_scope.cancel()  # the job is stopped here
    assert len(got) == 2
    assert got[0] == got[1]
    if background and not batcher:
        assert box["again"] == got[0]
        assert box["took"] < 1
    return got[0], acked, max(took)


@pytest.mark.both_backends
async def test_a_checkpoint_completes_while_a_rank_waits_for_work(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [40, 40, 3])
    data, acked, took = await checkpoint_while_one_waits(ar.RayCluster(namespace=namespace), paths)
    assert took < 10
    tree = state_codec.decode(data)
    # The waiting rank took part with its tracked states as they were (one step).
    assert tree["ranks"] == [{"state/step": 1}] * 3
    [snapshot] = tree["queues"].values()
    assert snapshot["queued"] == [3, 3]  # every item taken; the two large ones leased
    assert sorted(lease[0] for lease in snapshot["leases"]) == [0, 1]
    await gone(ray_env, namespace)

    for after in (3, 2):
        again = ray_env.namespace()
        delivered, restored = await run_after(ar.RayCluster(namespace=again), paths, data, n=after)
        await gone(ray_env, again)
        assert ledger_of(keys, acked, delivered) == ([], {}, True)
        assert restored == ([1, 1, 1] if after == 3 else [None] * after)


@pytest.mark.both_backends
@pytest.mark.parametrize("batcher", [False, True], ids=["queue-runner", "batcher"])
async def test_a_checkpoint_completes_while_a_background_reader_waits_for_work(
    ray_env: RayEnv, namespace: str, tmp_path: Path, batcher: bool
) -> None:
    # The rank's reader runs in a background task, and its acknowledging task waits on
    # the local queue that reader fills (or for its batcher's next batch): the reader
    # takes part for the rank.
    paths, keys = await write_files(tmp_path, [40, 40, 3])
    cluster = ar.RayCluster(namespace=namespace)
    data, acked, took = await checkpoint_while_one_waits(
        cluster, paths, background=True, batcher=batcher
    )
    assert took < 10
    tree = state_codec.decode(data)
    parts = tree["ranks"]
    # Rank 2, with a batcher, saves its batch count too (the epoch's tail levels by it).
    counts = [part.pop("batch_counts", None) for part in parts]
    assert counts == [None, None, {"batch#0": 1} if batcher else None]
    assert parts == [{"state/step": 1}] * 3
    [snapshot] = tree["queues"].values()
    assert sorted(lease[0] for lease in snapshot["leases"]) == [0, 1]
    await gone(ray_env, namespace)
    again = ray_env.namespace()
    delivered, restored = await run_after(ar.RayCluster(namespace=again), paths, data, n=3)
    await gone(ray_env, again)
    assert ledger_of(keys, acked, delivered) == ([], {}, True)
    assert restored == [1, 1, 1]


async def test_a_rank_fenced_for_silence_leaves_the_job(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [20, 20])
    quiet = ar.Session(
        cluster=ar.RayCluster(namespace=namespace, lease_timeout=1.5), rank=1, world_size=2
    )
    loud = ar.Session(cluster=ar.RayCluster(namespace=namespace), rank=0, world_size=2)
    async with quiet:
        async with loud:
            works = [work_queue(loud), work_queue(quiet)]
            await works[0].enqueue_many(paths)
            await works[0].close()
            with anyio.fail_after(30):
                held, _ = await ar.TFRecordReader().read_up_to(works[1], 5)
                await quiet.ack(held[:2])
                backend: Any = quiet._backend
                # Rank 1 falls silent (as when its process is stopped).
                await anyio.to_thread.run_sync(backend._heartbeat.stop)
                st = await until(works[0], lambda st: st["dead"])
                assert [c.partition("-")[0] for c in st["dead"]] == ["1"]
                assert "silent" in next(iter(st["dead"].values()))
                # Its lease came back: rank 0 reads both files, less what rank 1 acked.
                reader = ar.TFRecordReader()
                delivered: list[bytes] = []
                while True:
                    try:
                        got, _ = await reader.read_up_to(works[0], 50)
                    except ar.OutOfRangeError:
                        break
                    delivered += got
                    await loud.ack(got)
            assert sorted(delivered + held[:2]) == sorted(keys)
            # A checkpoint does not wait for the fenced rank: it fails at once.
            with anyio.fail_after(10), pytest.raises(ar.FailedPreconditionError) as caught:
                await loud.checkpoint(timeout=45)
            assert "rank(s) [1] died" in str(caught.value)
        # Rank 0 left and rank 1 is fenced: the job is deleted, though rank 1's session
        # is still open (it never comes back to leave).
        with anyio.fail_after(20):
            await gone(ray_env, namespace)


async def test_a_checkpoint_keeps_the_pooled_records_of_a_released_lease() -> None:
    # The queue's actor side alone: a rank in the epoch's tail moved the records it had
    # read and not acknowledged to the pool, and died (its lease is released: another
    # rank acknowledges them from the pool). A checkpoint now (its rank restarted) does
    # not save the pool: the lease must be saved, or those records are lost.
    item = "part-0.tfrecord"
    keys = [f"{item}:{i}".encode() for i in range(6)]
    queue, log = ar.FIFOQueue(None), ItemLog()
    book = LeaseBook(queue, "files")
    log.note([item])
    await queue.enqueue_many([item])
    await queue.close()
    book._ranks["1-a"] = Rank(60.0, time.monotonic())  # registered (no anchor to watch)
    with anyio.fail_after(5):
        reply = await book.lease("1-a", [])
    assert isinstance(reply, tuple)
    assert reply[1] == item
    book.ack("1-a", [(reply[0], 6, None, 0, keys[:2])])
    book.pooled(keys[2:])
    book.read_out = lambda client: True  # it pushed its last example
    book.rank_died("1-a", "its process ended")
    snapshot = log.snapshot(queue, book, "files")
    assert snapshot["queued"] == [1, 1]
    assert [(lease[0], lease[1]) for lease in snapshot["leases"]] == [(0, keys[:2])]

    # Restored, the item is read again from its start, skipping the acknowledged keys:
    # the four pooled records are delivered once more (the pool itself is not saved).
    queue2, log2 = ar.FIFOQueue(None), ItemLog()
    book2 = LeaseBook(queue2, "files")
    log2.restore(snapshot, "files")
    await log2.enqueue(queue2, book2, "enqueue_many", ([item],))
    await queue2.close()
    with anyio.fail_after(5):
        again = await book2.lease("0-b", [])
    assert isinstance(again, tuple)
    assert again[1] == item
    assert again[3] == keys[:2]


async def test_a_checkpoint_completes_while_a_deterministic_rank_waits_after_its_share(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    """In a deterministic job the rank whose share is read waits for the schedule's end
    (another rank may die and leave it items): it takes part from there too."""
    paths, keys = await write_files(tmp_path, [40, 40, 3])
    data, acked, took = await checkpoint_while_one_waits(
        ar.RayCluster(namespace=namespace), paths, deterministic=True
    )
    assert took < 10
    tree = state_codec.decode(data)
    assert tree["ranks"] == [{"state/step": 1}] * 3
    await gone(ray_env, namespace)
    again = ray_env.namespace()
    delivered, _ = await run_after(ar.RayCluster(namespace=again), paths, data, n=2)
    await gone(ray_env, again)
    assert ledger_of(keys, acked, delivered) == ([], {}, True)
