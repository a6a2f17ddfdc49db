"""The queues a Batcher makes: in a deterministic Session, shuffle batches from a full queue."""

from __future__ import annotations

from typing import Any

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._queues.random_shuffle import deterministic_shuffle_queue

pytestmark = pytest.mark.anyio


@pytest.mark.both_backends
async def test_deterministic_shuffle_queue_hands_out_a_batch_only_when_full() -> None:
    queue = deterministic_shuffle_queue(4, 2, ["int64"], [[]], seed=3)
    assert isinstance(queue, ar.RandomShuffleQueue)
    assert queue.min_after_dequeue == 2  # capacity - batch_size
    await queue.enqueue_many(np.arange(3))
    got: list[Any] = []

    async def take() -> None:
        got.append(await queue.dequeue_many(2))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(take)
            await anyio.wait_all_tasks_blocked()
            # One element above the hold: a plain queue would hand it over now and wait
            # for the second one; this one takes nothing until a whole batch is there.
            assert queue.size() == 3
            assert got == []
            await queue.enqueue(3)
        assert queue.size() == 2
        (batch,) = got
        assert len(batch) == 2
        await queue.close()
        rest = await queue.dequeue_many(2)
    assert sorted([*batch.tolist(), *rest.tolist()]) == [0, 1, 2, 3]


async def test_deterministic_shuffle_queue_refuses_a_batch_bigger_than_its_capacity() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="min_after_dequeue -1"):
        deterministic_shuffle_queue(2, 3, ["int64"], [[]], seed=3)


@pytest.mark.both_backends
async def test_a_deterministic_session_shuffles_through_that_queue() -> None:
    async def source() -> Any:
        return np.int64(1)

    with anyio.fail_after(10):
        async with ar.Session(deterministic=True) as session:
            batcher = ar.shuffle_batch(source, 2, capacity=6, min_after_dequeue=1, seed=7)
            assert await batcher.wait_ready()
            # The queue keeps capacity - batch_size, not min_after_dequeue.
            assert batcher.queue.min_after_dequeue == 4
            assert (await batcher.dequeue()).tolist() == [1, 1]
            session.coord.request_stop()
