"""Queue checkpoints taken mid-operation: held elements and generator state come back exactly.

A ``dequeue_many`` waiting for more elements holds the ones it took; a checkpoint taken at
that moment must save them with the queue (nothing lost, nothing twice). A seeded
RandomShuffleQueue restored from a checkpoint must draw the same single elements as the
uninterrupted queue.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest
from queue_util import dequeue_all

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def _fifo() -> ar.FIFOQueue:
    return ar.FIFOQueue(10, dtypes=["int64"], shapes=[[]])


def _shuffle() -> ar.RandomShuffleQueue:
    return ar.RandomShuffleQueue(10, 2, dtypes=["int64"], shapes=[[]], seed=5)


async def _drain(queue: Any) -> list[int]:
    """Close ``queue`` and take every element left, one at a time."""
    await queue.close()
    with anyio.fail_after(5):
        return [int(x) for x in await dequeue_all(queue)]


async def test_fifo_checkpoint_keeps_what_a_waiting_dequeue_many_holds() -> None:
    held: list[list[int]] = []
    async with ar.Session() as sess:
        queue = _fifo()
        await queue.enqueue_many(np.arange(3))

        async def take_five() -> None:
            held.append((await queue.dequeue_many(5)).tolist())

        sess.start_soon(take_five)
        with anyio.fail_after(5):
            await anyio.wait_all_tasks_blocked()
        assert queue.size() == 0  # the three elements are held, not stored
        # Woken but not yet run, the dequeue still holds 0, 1, 2; 3 is stored behind them.
        queue.enqueue_nowait(3)
        state = await sess.checkpoint()
        # The checkpoint does not disturb the waiting dequeue.
        queue.enqueue_nowait(4)
        with anyio.fail_after(5):
            while not held:
                await anyio.wait_all_tasks_blocked()
        assert held == [[0, 1, 2, 3, 4]]
    async with ar.Session(restore=state):
        queue = _fifo()
        assert queue.size() == 4
        assert await _drain(queue) == [0, 1, 2, 3]


async def test_shuffle_checkpoint_keeps_what_a_waiting_dequeue_many_holds() -> None:
    held: list[list[int]] = []
    async with ar.Session() as sess:
        queue = _shuffle()
        await queue.enqueue_many(np.arange(5))

        async def take_six() -> None:
            held.append((await queue.dequeue_many(6)).tolist())

        sess.start_soon(take_six)
        with anyio.fail_after(5):
            await anyio.wait_all_tasks_blocked()
        # Three taken and held, min_after_dequeue=2 stay stored.
        assert queue.size() == 2
        state = await sess.checkpoint()
        # The checkpoint does not disturb the waiting dequeue.
        await queue.enqueue_many(np.arange(5, 8))
        with anyio.fail_after(5):
            while not held:
                await anyio.wait_all_tasks_blocked()
        assert len(held[0]) == 6
        assert sorted(held[0] + await _drain(queue)) == list(range(8))
    async with ar.Session(restore=state):
        queue = _shuffle()
        assert queue.size() == 5
        assert sorted(await _drain(queue)) == [0, 1, 2, 3, 4]


async def test_a_stage_blocked_in_dequeue_many_is_checkpointed_with_its_elements() -> None:
    """A QueueRunner task blocked in ``dequeue_many`` holding elements: the pause counts it
    as settled, so what it holds must be in the checkpoint of its input queue."""

    async def pipeline(
        restore: bytes | None, build: Callable[[], Any], feed: list[int]
    ) -> tuple[list[list[int]], bytes]:
        batches: list[list[int]] = []
        async with ar.Session(restore=restore) as sess:
            source = build()
            batched = ar.FIFOQueue(None)

            async def batch_op() -> None:
                batch = await source.dequeue_many(4)
                await batched.enqueue(batch.tolist())

            ar.QueueRunner(batched, [batch_op]).start()
            await source.enqueue_many(np.array(feed, dtype=np.int64))
            with anyio.fail_after(5):
                for _ in range(len(feed) // 4):
                    batches.append(await batched.dequeue())
                await anyio.wait_all_tasks_blocked()
            # The runner's task now waits in dequeue_many, holding what it could take.
            assert source.size() == (0 if build is _fifo else 2)
            state = await sess.checkpoint()
            await source.close()
            with anyio.fail_after(5):
                while True:
                    try:
                        batches.append(await batched.dequeue())
                    except ar.OutOfRangeError:
                        break
        return batches, state

    for build in (_fifo, _shuffle):
        # Eleven make two batches; the task then holds what it may take of the last three.
        first, state = await pipeline(None, build, list(range(11)))
        assert len(first) == 2
        # Resumed: the three come back and, with five more, make two more batches.
        rest, _ = await pipeline(state, build, list(range(11, 16)))
        assert len(rest) == 2
        assert sorted(x for b in first + rest for x in b) == list(range(16)), build
        if build is _fifo:
            assert rest == [[8, 9, 10, 11], [12, 13, 14, 15]]


async def test_seeded_shuffle_resumes_single_draws_exactly() -> None:
    def build() -> ar.RandomShuffleQueue:
        return ar.RandomShuffleQueue(100, 0, dtypes=["int64"], shapes=[[]], seed=9)

    async def fill_and_take(queue: ar.RandomShuffleQueue) -> list[int]:
        await queue.enqueue_many(np.arange(40))
        with anyio.fail_after(5):
            return [int(await queue.dequeue()) for _ in range(7)]

    async with ar.Session():
        queue = build()
        head = await fill_and_take(queue)
        reference = head + await _drain(queue)
    assert sorted(reference) == list(range(40))
    async with ar.Session() as sess:
        queue = build()
        assert await fill_and_take(queue) == head
        state = await sess.checkpoint()
        # The checkpoint does not disturb the running queue.
        assert head + await _drain(queue) == reference
    async with ar.Session(restore=state):
        queue = build()
        assert head + await _drain(queue) == reference


@pytest.mark.both_backends
async def test_a_queue_without_record_refs_saves_elements_held_outside_as_payloads() -> None:
    queue = ar.FIFOQueue(4, ["string"], [()])
    assert queue._save_outside({"rows": [[b"x"]]}) is None
    with anyio.fail_after(5), pytest.raises(ar.InvalidArgumentError, match="saves payloads"):
        await queue._restore_outside({"works": []})
