"""Leased work items: a reader of a shared queue holds what it takes until it is acked.

Ranks here are Sessions of this process (each its own client of the queue's actor, with
its own anchor actor); killing a rank's anchor with ``ray.kill`` is the rank's death as
the queue sees it. ``test_ledger.py`` kills real rank processes.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar

from .shuffled_steps import local_keys

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def write_files(root: Path, sizes: list[int]) -> tuple[list[str], list[bytes]]:
    """TFRecord files of ``sizes`` records; return the paths and every record's key, in
    order (from one local read)."""
    paths = []
    for f, size in enumerate(sizes):
        path = root / f"part-{f:03d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for r in range(size):
                writer.write(f"{f}-{r}".encode())
        paths.append(str(path))
    return paths, await local_keys(paths)


def host(queue: Any) -> Any:
    """The actor hosting a shared queue (to look at its leases)."""
    return queue._actor


async def status(queue: Any) -> dict[str, Any]:
    from asyncreader._distributed.awaiting import wait_ref

    result: dict[str, Any] = await wait_ref(host(queue).lease_status.remote())
    return result


async def drain(reader: ar.TFRecordReader, queue: Any) -> None:
    """Read until the reader raises (at most a few calls)."""
    for _ in range(5):
        await reader.read_up_to(queue, 100)


def anchor_of(sess: ar.Session) -> Any:
    """The anchor actor of a rank's session: killing it is the rank's death."""
    backend: Any = sess._backend
    return backend._anchor


async def until_dead(queue: Any) -> dict[str, Any]:
    """Wait until the queue's actor declared a rank dead; return its lease status."""
    with anyio.fail_after(30):
        while True:
            st = await status(queue)
            if st["dead"]:
                return st
            await anyio.sleep(0.05)


async def filled(paths: list[str]) -> Any:
    work: Any = ar.FIFOQueue(None, shared_name="files")
    await work.enqueue_many(paths)
    await work.close()
    return work


@pytest.mark.both_backends
async def test_a_lease_is_held_until_acked_and_commits_on_the_next_take(
    namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [5, 3])
    cluster = ar.RayCluster(namespace=namespace)
    async with ar.Session(cluster=cluster, rank=0, world_size=1) as sess:
        work = await filled(paths)
        reader = ar.TFRecordReader()
        with anyio.fail_after(30):
            got, _ = await reader.read_up_to(work, 3)
            assert got == keys[:3]
            [(_, item, offset, acked, reading)] = (await status(work))["leases"]
            assert (item, offset, acked, reading) == (paths[0], 0, 0, True)
            await sess.ack(got[:2])  # the step consumed two of the three records
            [(_, _, offset, acked, reading)] = (await status(work))["leases"]
            assert (offset, acked, reading) == (3, 2, True)  # the position is reported
            rest, _ = await reader.read_up_to(work, 10)  # to the end of the first file
            assert rest == keys[3:5]
            more, _ = await reader.read_up_to(work, 10)  # takes the second file
            assert more == keys[5:]
            leases = (await status(work))["leases"]
            # The first file is read to its end (committed) but not acked to the end.
            assert [(i, o, a, r) for _, i, o, a, r in leases] == [
                (paths[0], 5, 2, False),
                (paths[1], 0, 0, True),
            ]
            await sess.ack([keys[2], *rest, *more])
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(work)
            await sess.ack([])
            assert (await status(work))["leases"] == []  # all read and acked: done
            with pytest.raises(ar.InvalidArgumentError, match="not records of a work item"):
                await sess.ack([keys[0]])  # twice
            with pytest.raises(ar.InvalidArgumentError, match="not records"):
                await sess.ack([b"elsewhere:1"])


async def test_ack_needs_a_cluster() -> None:
    async with ar.Session() as sess:
        with pytest.raises(ar.FailedPreconditionError, match="needs a Session with a cluster"):
            await sess.ack([b"a:1"])


async def test_a_dead_ranks_leases_continue_on_another_rank_exactly_there(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [40, 40])
    cluster = ar.RayCluster(namespace=namespace)
    delivered: list[bytes] = []
    async with (
        ar.Session(cluster=cluster, rank=0, world_size=2) as s0,
        ar.Session(cluster=cluster, rank=1, world_size=2) as s1,
    ):
        with anyio.fail_after(60):
            work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
            work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
            await work0.enqueue_many(paths)
            await work0.close()
            # Rank 1 leases the first file, reads 25 records, acks 10 of them (a shuffle
            # buffer holds the others), then dies.
            reader1 = ar.TFRecordReader()
            first, _ = await reader1.read_up_to(work1, 25)
            assert first == keys[:25]
            acked = first[3:13]
            await s1.ack(acked)
            st = await status(work0)
            [(_, _, offset, count, _)] = st["leases"]
            assert (offset, count) == (25, 10)
            await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(s1))
            st = await until_dead(work0)
            assert (st["pending"], st["leases"]) == (1, [])
            with pytest.raises(ar.FailedPreconditionError, match="declared dead"):
                await s1.ack(first[13:15])  # fenced: its late ack is refused
            # Rank 0 continues the first file: everything but the acked records, once.
            reader0 = ar.TFRecordReader()
            while True:
                try:
                    got, _ = await reader0.read_up_to(work0, 7)
                except ar.OutOfRangeError:
                    break
                delivered += got
                await s0.ack(got)
    assert sorted(delivered + acked) == sorted(keys)


def in_session(sess: ar.Session, build: Any) -> Any:
    """Build a resource with ``sess`` as the current session."""
    from asyncreader._runtime import context

    token = context._session.set(sess)
    try:
        return build()
    finally:
        context._session.reset(token)


async def test_a_fully_acked_lease_resumes_at_its_reported_position(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [60])
    cluster = ar.RayCluster(namespace=namespace)
    async with (
        ar.Session(cluster=cluster, rank=0, world_size=2) as s0,
        ar.Session(cluster=cluster, rank=1, world_size=2) as s1,
    ):
        with anyio.fail_after(60):
            work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
            work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
            await work0.enqueue_many(paths)
            await work0.close()
            reader1 = ar.TFRecordReader()
            first, _ = await reader1.read_up_to(work1, 25)
            await s1.ack(first)  # everything read so far is consumed: a clean position
            await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(s1))
            await until_dead(work0)
            reader0 = ar.TFRecordReader()
            rest, _ = await reader0.read_up_to(work0, 100)
            assert rest == keys[25:]  # continued exactly there
            # ... by seeking: the acked keys before the position were never read again.
            [held] = work0._leases._held.values()
            assert (len(held.skip), held.base) == (25, 25)
            await s0.ack(rest)
            with pytest.raises(ar.OutOfRangeError):
                await reader0.read(work0)


@pytest.mark.both_backends
async def test_a_silent_rank_times_out_and_is_fenced(namespace: str, tmp_path: Path) -> None:
    paths, keys = await write_files(tmp_path, [30])
    quiet = ar.RayCluster(namespace=namespace, lease_timeout=1.0)
    async with (
        ar.Session(cluster=ar.RayCluster(namespace=namespace), rank=0, world_size=2) as s0,
        ar.Session(cluster=quiet, rank=1, world_size=2) as s1,
    ):
        with anyio.fail_after(60):
            work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
            work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
            await work0.enqueue_many(paths)
            await work0.close()
            reader1 = ar.TFRecordReader()
            first, _ = await reader1.read_up_to(work1, 10)
            await s1.ack(first[:4])
            await anyio.sleep(1.5)  # heartbeats keep a rank alive while it computes
            assert (await status(work0))["dead"] == {}
            backend: Any = s1._backend
            await anyio.to_thread.run_sync(backend._heartbeat.stop)  # the rank falls silent
            st = await until_dead(work0)
            [why] = st["dead"].values()
            assert "silent for more than 1 s" in why
            with pytest.raises(ar.FailedPreconditionError, match="declared dead"):
                await s1.ack(first[4:])
            with pytest.raises(ar.FailedPreconditionError, match="declared dead"):
                await drain(reader1, work1)  # what its reader holds, then its next take
            reader0 = ar.TFRecordReader()
            rest, _ = await reader0.read_up_to(work0, 100)
            assert rest == keys[4:]  # the unacked records, from the silent rank's lease
            await s0.ack(rest)


async def read_to_the_end_then_kill_rank_1(
    ray_env: RayEnv, s0: ar.Session, s1: ar.Session, paths: list[str]
) -> Any:
    """Ranks 0 and 1 each lease a file and read the queue to its end (both readers end),
    rank 0 acknowledges everything and rank 1 five records; then rank 1 dies. Return
    rank 0's work queue."""
    with anyio.fail_after(60):
        work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
        work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
        await work0.enqueue_many(paths)
        await work0.close()
        reader0, reader1 = ar.TFRecordReader(), ar.TFRecordReader()
        got0, _ = await reader0.read_up_to(work0, 100)
        got1, _ = await reader1.read_up_to(work1, 100)
        ended: list[str] = []

        async def end(reader: ar.TFRecordReader, work: Any) -> None:
            try:
                await reader.read(work)
            except ar.OutOfRangeError:
                ended.append("ended")

        async with anyio.create_task_group() as tg:  # every file read: both end
            tg.start_soon(end, reader1, work1)  # waits while rank 0 still reads
            tg.start_soon(end, reader0, work0)
        assert ended == ["ended", "ended"]
        await s0.ack(got0)
        await s1.ack(got1[:5])  # rank 1 dies with 15 records in its buffer
        await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(s1))
        await until_dead(work0)
    return work0


async def test_a_rank_dying_after_every_reader_ended_is_a_data_loss_not_silence(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, _ = await write_files(tmp_path, [20, 20])
    cluster = ar.RayCluster(namespace=namespace)
    async with (
        ar.Session(cluster=cluster, rank=0, world_size=2) as s0,
        ar.Session(cluster=cluster, rank=1, world_size=2) as s1,
    ):
        await read_to_the_end_then_kill_rank_1(ray_env, s0, s1, paths)
        with pytest.raises(ar.DataLossError, match=r"1 work item\(s\) given back") as info:
            await s0.ack([])
        assert paths[1] in str(info.value)


async def test_a_rank_that_acknowledged_everything_hears_of_a_loss_when_it_leaves(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    # As above, but rank 0 has made its last acknowledgement when rank 1 dies: leaving
    # the session raises the loss (the job's records were not all delivered), once.
    paths, _ = await write_files(tmp_path, [20, 20])
    cluster = ar.RayCluster(namespace=namespace)
    async with ar.Session(cluster=cluster, rank=1, world_size=2) as s1:
        async with contextlib.AsyncExitStack() as stack:
            s0 = await stack.enter_async_context(ar.Session(cluster=cluster, rank=0, world_size=2))
            await read_to_the_end_then_kill_rank_1(ray_env, s0, s1, paths)
            leave = stack.pop_all()
        with pytest.raises(ar.DataLossError, match=r"1 work item\(s\) given back") as info:
            await leave.aclose()  # rank 0 leaves
        assert paths[1] in str(info.value)


async def test_when_the_last_rank_inside_dies_the_job_deletes_itself(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    paths, _ = await write_files(tmp_path, [10])
    cluster = ar.RayCluster(namespace=namespace)
    async with ar.Session(cluster=cluster, rank=1, world_size=2) as s1:
        with anyio.fail_after(60):
            async with ar.Session(cluster=cluster, rank=0, world_size=2) as s0:
                work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
                await work0.enqueue_many(paths)
                await work0.close()
            work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
            got, _ = await ar.TFRecordReader().read_up_to(work1, 4)  # rank 1 leases
            assert len(got) == 4
            # Rank 0 left, rank 1 is inside: the job stays.
            names = {a["name"] for a in ray_env.named_actors(namespace)}
            assert names == {"asyncreader:job", "asyncreader:localhost/queue/files"}
            await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(s1))
            # Rank 1's process is gone as the job sees it, and nobody else is inside: the
            # registry deletes the job's actors, without a delete_job() call.
            while True:
                if not ray_env.named_actors(namespace):
                    break
                await anyio.sleep(0.05)
        with pytest.raises(ar.FailedPreconditionError, match="died or cannot be reached"):
            await s1.ack(got)


async def test_one_file_in_two_epochs_at_once_is_credited_to_the_right_lease(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    # One reader reads a file in epoch 1 and again in epoch 2 while a shuffle buffer
    # still holds records of both: the keys are the same in both epochs. Each ack goes
    # to a lease that read the record and had not acknowledged it, so no key is refused
    # as acknowledged twice and a rank taking the leases over re-reads the right ones.
    paths, keys = await write_files(tmp_path, [6])
    cluster = ar.RayCluster(namespace=namespace)
    acked: list[bytes] = []
    delivered: list[bytes] = []
    async with (
        ar.Session(cluster=cluster, rank=0, world_size=2) as s0,
        ar.Session(cluster=cluster, rank=1, world_size=2) as s1,
    ):
        with anyio.fail_after(60):
            from asyncreader._distributed.awaiting import wait_ref

            work0 = in_session(s0, lambda: ar.FIFOQueue(None, shared_name="files"))
            work1 = in_session(s1, lambda: ar.FIFOQueue(None, shared_name="files"))
            await wait_ref(host(work0).keep_ledger.remote())
            await work0.enqueue_many([paths[0], paths[0]])  # two epochs of one file
            await work0.close()
            reader1 = ar.TFRecordReader()
            epoch1, _ = await reader1.read_up_to(work1, 6)
            epoch2, _ = await reader1.read_up_to(work1, 6)  # the same file again
            assert epoch1 == epoch2 == keys
            step = [*epoch2[:3], *epoch1[:2]]  # the buffer mixes the epochs
            await s1.ack(step)
            acked += step
            leases = (await status(work0))["leases"]
            assert sorted((o, a, r) for _, _, o, a, r in leases) == [(6, 2, True), (6, 3, False)]
            await anyio.to_thread.run_sync(ray_env.ray.kill, anchor_of(s1))
            await until_dead(work0)
            reader0 = ar.TFRecordReader()
            while True:
                try:
                    got, _ = await reader0.read_up_to(work0, 4)
                except ar.OutOfRangeError:
                    break
                delivered += got
                await s0.ack(got)
            ledger = await wait_ref(host(work0).ledger.remote())
    # Every record of both epochs once: acked by rank 1 or re-read by rank 0.
    assert sorted(acked + delivered) == sorted(keys * 2)
    assert ledger == dict.fromkeys(keys, 2)


async def test_two_readers_of_a_rank_never_read_one_item_at_once(
    namespace: str, tmp_path: Path
) -> None:
    paths, keys = await write_files(tmp_path, [4, 3])
    cluster = ar.RayCluster(namespace=namespace)
    async with ar.Session(cluster=cluster, rank=0, world_size=1) as sess:
        with anyio.fail_after(60):
            work = await filled([paths[0], paths[0], paths[1]])
            first, second = ar.TFRecordReader(), ar.TFRecordReader()
            a, _ = await first.read_up_to(work, 2)
            # The next item is the file `first` is reading: set aside for later.
            b, _ = await second.read_up_to(work, 10)
            assert (a, b) == (keys[:2], keys[4:])
            rest, _ = await first.read_up_to(work, 10)
            again, _ = await first.read_up_to(work, 10)  # its file's second epoch
            assert (rest, again) == (keys[2:4], keys[:4])
            await sess.ack([*again[:2], *a, *rest, *again[2:], *b])
            with pytest.raises(ar.OutOfRangeError):
                await second.read(work)
            with pytest.raises(ar.OutOfRangeError):
                await first.read(work)
            assert (await status(work))["leases"] == []
