"""Queues shared across processes on Ray: same verbs and semantics as a local queue.

Each test runs a Session with a RayCluster in its own namespace (the cluster comes from
``conftest.py``) and checks, through the remote queue, what the local queue's tests check:
blocking, close, ``cancel_pending_enqueues``, arrival-order fairness, errors re-raised as
the library's own, batched verbs, and that a cancelled call loses nothing.
"""

from __future__ import annotations

import itertools
import os
import signal
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


def cluster(namespace: str, **kwargs: Any) -> ar.RayCluster:
    return ar.RayCluster(namespace=namespace, **kwargs)


@pytest.mark.both_backends
async def test_verbs_blocking_and_close(namespace: str) -> None:
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        q: Any = ar.FIFOQueue(3, shared_name="work")
        assert isinstance(q, ar.RemoteQueue)
        again: Any = ar.FIFOQueue(3, shared_name="work")
        assert again is q  # one queue per name
        assert (q.name, q.kind, q.capacity) == ("work", "FIFOQueue", 3)
        await q.enqueue_many(["a", "b"])
        await q.enqueue("c")
        assert q.size() == 3
        assert await q.dequeue() == "a"
        assert await q.dequeue_many(2) == ["b", "c"]

        got: list[Any] = []

        async def consume() -> None:
            got.append(await q.dequeue())

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await anyio.sleep(0.3)
                assert got == []  # blocked on the empty queue, in the actor
                await q.enqueue("d")
        assert got == ["d"]
        await q.enqueue_many(["x", "y"])
        await q.close()
        assert q.is_closed()
        assert await q.dequeue_up_to(5) == ["x", "y"]
        with pytest.raises(ar.OutOfRangeError, match="'work' is closed and has insufficient"):
            await q.dequeue()
        with pytest.raises(ar.QueueClosedError, match="'work' is closed"):
            await q.enqueue("z")
        with pytest.raises(ar.QueueClosedError, match="already closed"):
            await q.close()
        stats = q.statistics()
        assert (stats.total_enqueued, stats.total_dequeued, stats.closed) == (6, 6, True)


@pytest.mark.both_backends
async def test_cancel_pending_enqueues_fails_a_blocked_remote_enqueue(namespace: str) -> None:
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        q = ar.FIFOQueue(1, shared_name="work")
        await q.enqueue(1)
        errors: list[BaseException] = []

        async def blocked() -> None:
            try:
                await q.enqueue(2)
            except ar.QueueClosedError as exc:
                errors.append(exc)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(blocked)
                await anyio.sleep(0.3)
                await q.close(cancel_pending_enqueues=True)
        assert len(errors) == 1
        assert await q.dequeue() == 1
        assert q.size() == 0


@pytest.mark.both_backends
async def test_blocked_callers_are_served_in_arrival_order(namespace: str) -> None:
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        q = ar.FIFOQueue(None, shared_name="work")
        order: list[tuple[int, Any]] = []

        async def take(i: int) -> None:
            order.append((i, await q.dequeue_many(2)))

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                for i in range(3):
                    tg.start_soon(take, i)
                    await anyio.sleep(0.2)  # each call reaches the actor before the next
                await q.enqueue_many(list(range(6)))
        assert sorted(order) == [(0, [0, 1]), (1, [2, 3]), (2, [4, 5])]


async def test_errors_come_back_as_the_librarys_own(namespace: str) -> None:
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        q = ar.FIFOQueue(4, [np.int64], shapes=[()], shared_name="typed")
        await q.enqueue_many(np.arange(3))
        assert list(await q.dequeue_many(3)) == [0, 1, 2]
        with pytest.raises(ar.InvalidArgumentError):
            await q.enqueue(("not", "an", "int"))
        # Another configuration under the same name: the same error as locally.
        with pytest.raises(ar.InvalidArgumentError, match="Shared queue 'typed' has capacity 4"):
            ar.FIFOQueue(5, [np.int64], shapes=[()], shared_name="typed")
        with pytest.raises(ar.InvalidArgumentError, match="expected RandomShuffleQueue"):
            ar.RandomShuffleQueue(4, 0, [np.int64], shapes=[()], shared_name="typed")
        with pytest.raises(ar.FailedPreconditionError, match="dequeue_nowait"):
            q.dequeue_nowait()
        with pytest.raises(ar.FailedPreconditionError, match="cluster"):
            await ar.Session(cluster=cluster(namespace)).checkpoint()


async def test_every_queue_type_is_hosted(namespace: str) -> None:
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        shuffle: Any = ar.RandomShuffleQueue(10, 2, seed=1, shared_name="shuffle")
        padding: Any = ar.PaddingFIFOQueue(10, [np.int64], shapes=[(None,)], shared_name="pad")
        priority: Any = ar.PriorityQueue(10, [object], shapes=[()], shared_name="prio")
        await shuffle.enqueue_many(list(range(5)))
        first = await shuffle.dequeue_many(3)  # leaves min_after_dequeue = 2
        await shuffle.close()
        assert sorted(first + await shuffle.dequeue_up_to(5)) == list(range(5))
        await padding.enqueue(np.array([1, 2]))
        await padding.enqueue(np.array([3]))
        assert (await padding.dequeue_many(2)).tolist() == [[1, 2], [3, 0]]
        await priority.enqueue_many(([5, 1, 3], np.array([b"e", b"a", b"c"], dtype=object)))
        prios, vals = await priority.dequeue_many(3)
        assert prios.tolist() == [1, 3, 5]
        assert vals.tolist() == [b"a", b"c", b"e"]
        assert [type(x).__name__ for x in (shuffle, padding, priority)] == ["RemoteQueue"] * 3
        assert [x.kind for x in (shuffle, padding, priority)] == [
            "RandomShuffleQueue",
            "PaddingFIFOQueue",
            "PriorityQueue",
        ]


@pytest.mark.both_backends
async def test_a_cancelled_dequeue_loses_nothing(namespace: str) -> None:
    """Cancel remote dequeues at every moment (waiting, completing, result in flight):
    every element is still delivered exactly once."""
    n = 300
    async with ar.Session(cluster=cluster(namespace), rank=0, world_size=1):
        q = ar.FIFOQueue(None, shared_name="work")
        got: list[int] = []
        cancelled = 0

        async def feed() -> None:
            for i in range(0, n, 10):
                await q.enqueue_many(list(range(i, i + 10)))
                await anyio.sleep(0.002)
            await q.close()

        async def take() -> None:
            nonlocal cancelled
            for attempt in itertools.count():
                with anyio.CancelScope() as scope:
                    # From well under a round trip to several: every stage gets cancelled.
                    # Every twelfth take has no deadline, so a loaded machine (round trips
                    # longer than all of them) still makes progress.
                    if attempt % 12 != 11:
                        scope.deadline = anyio.current_time() + 0.001 * (attempt % 12)
                    try:
                        got.extend(await q.dequeue_up_to(7))
                    except ar.OutOfRangeError:
                        return
                cancelled += scope.cancelled_caught

        with anyio.fail_after(60):
            async with anyio.create_task_group() as tg:
                tg.start_soon(feed)
                tg.start_soon(take)
                tg.start_soon(take)
        assert cancelled > 0
        assert sorted(got) == list(range(n))


async def test_a_killed_actor_fails_waits_with_a_clear_error(
    ray_env: RayEnv, namespace: str
) -> None:
    c = cluster(namespace)
    async with ar.Session(cluster=c, rank=0, world_size=1):
        q = ar.FIFOQueue(None, shared_name="doomed")
        await q.enqueue(1)
        handle = ray_env.ray.get_actor("asyncreader:localhost/queue/doomed", namespace=namespace)
        errors: list[BaseException] = []

        async def wait() -> None:
            await q.dequeue()
            try:
                await q.dequeue()  # blocks in the actor
            except ar.FailedPreconditionError as exc:
                errors.append(exc)

        with anyio.fail_after(20):
            async with anyio.create_task_group() as tg:
                tg.start_soon(wait)
                await anyio.sleep(0.3)
                await anyio.to_thread.run_sync(ray_env.ray.kill, handle)
        assert "'doomed' died" in str(errors[0])
        with pytest.raises(ar.FailedPreconditionError, match="'doomed'"):
            await q.enqueue(2)


async def test_an_actor_that_stops_answering_fails_waits(ray_env: RayEnv, namespace: str) -> None:
    c = cluster(namespace, health_interval=0.5)
    async with ar.Session(cluster=c, rank=0, world_size=1):
        q: Any = ar.FIFOQueue(None, shared_name="stuck")
        with anyio.fail_after(20):
            pid = await q._actor.ping.remote()
        os.kill(pid, signal.SIGSTOP)
        try:
            with (
                anyio.fail_after(20),
                pytest.raises(
                    ar.FailedPreconditionError, match=r"'stuck' did not answer for 0\.5 s"
                ),
            ):
                await q.dequeue()
        finally:
            os.kill(pid, signal.SIGKILL)
            os.kill(pid, signal.SIGCONT)


async def test_the_last_session_out_deletes_the_jobs_actors(
    ray_env: RayEnv, namespace: str
) -> None:
    c = cluster(namespace)
    async with ar.Session(cluster=c, rank=0, world_size=2):
        ar.FIFOQueue(None, shared_name="a")
        async with ar.Session(cluster=c, rank=1, world_size=2):
            q = ar.FIFOQueue(None, shared_name="a")
            await q.enqueue("x")
        names = {a["name"] for a in ray_env.named_actors(namespace)}
        assert names == {"asyncreader:job", "asyncreader:localhost/queue/a"}
    assert ray_env.named_actors(namespace) == []


async def test_delete_job_cleans_up_after_ranks_that_never_ended(
    ray_env: RayEnv, namespace: str
) -> None:
    c = cluster(namespace)
    async with ar.Session(cluster=c, rank=0, world_size=2):
        ar.FIFOQueue(None, shared_name="a")
        with pytest.raises(ar.FailedPreconditionError, match="rank 0 of this job is already"):
            async with ar.Session(cluster=c, rank=0, world_size=2):
                pass
        with pytest.raises(ar.FailedPreconditionError, match="world_size=3"):
            async with ar.Session(cluster=c, rank=1, world_size=3):
                pass
    # Rank 1 never came (as if it died): the job's actors stay until deleted.
    names = {a["name"] for a in ray_env.named_actors(namespace)}
    assert names == {"asyncreader:job", "asyncreader:localhost/queue/a"}
    with anyio.fail_after(30):
        killed = await c.delete_job()
    assert sorted(killed) == sorted(names)
    for _ in range(600):  # the kills take effect within moments
        if not ray_env.named_actors(namespace):
            break
        await anyio.sleep(0.05)
    assert ray_env.named_actors(namespace) == []


async def test_a_job_that_does_not_answer_in_time_is_a_clear_error(namespace: str) -> None:
    # Joining waits for the job's actor at most connect_timeout: past it, the library's own
    # error naming the namespace, not a bare TimeoutError.
    impatient = cluster(namespace, connect_timeout=1e-4)
    with pytest.raises(ar.FailedPreconditionError, match="did not answer within connect_timeout"):
        async with ar.Session(cluster=impatient, rank=0, world_size=1):
            pass
    await cluster(namespace).delete_job()
