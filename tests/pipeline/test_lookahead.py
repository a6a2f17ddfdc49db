"""A runner task whose enqueue waits for room fetches its source's next example meanwhile.

The look-ahead keeps the order of source calls and of enqueues, surfaces the fetch's
errors (the end of input too) where the fetch would have happened, stops promptly, and a
checkpoint saves an example fetched ahead as an example in hand and restores it exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._runtime.checkpoint import current_stage

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

CHUNK = 4


class Chunks:
    """An async source of ``(ids,)`` chunks of CHUNK consecutive ids; ``fail`` maps a call
    number (1-based) to the exception it raises instead."""

    def __init__(self, chunks: int, fail: dict[int, Exception] | None = None) -> None:
        self.calls = 0
        self.chunks = chunks
        self.fail = fail or {}
        self.called = anyio.Event()

    async def __call__(self) -> tuple[np.ndarray[Any, Any]]:
        self.calls += 1
        call = self.calls
        self.called.set()
        self.called = anyio.Event()
        # Long enough to be worth fetching ahead (AHEAD_MIN_SECONDS).
        await anyio.sleep(0.001)
        if call in self.fail:
            raise self.fail[call]
        if call > self.chunks:
            raise ar.OutOfRangeError("no more chunks")
        start = (call - 1) * CHUNK
        return (np.arange(start, start + CHUNK, dtype=np.int64),)

    async def wait_calls(self, n: int) -> None:
        while self.calls < n:
            await self.called.wait()


async def _settle() -> None:
    """Let every task run until it blocks."""
    for _ in range(20):
        await anyio.lowlevel.checkpoint()


async def test_a_waiting_enqueue_fetches_the_next_example() -> None:
    source = Chunks(10)
    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True, coord=coord)
            # Call 1 fills the queue, call 2's enqueue waits: call 3 runs meanwhile.
            await source.wait_calls(3)
            await _settle()
            assert source.calls == 3  # one example ahead, no more
            assert b.size() == CHUNK
            got = [int(i) for _ in range(10) for i in (await b.dequeue())[0]]
            coord.request_stop()
    assert got == list(range(20))


async def test_an_enqueue_that_does_not_wait_fetches_nothing_ahead() -> None:
    source = Chunks(3)
    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            b = ar.batch(source, 2, capacity=100, enqueue_many=True, coord=coord)
            await source.wait_calls(4)  # the 4th call reports the end
            await anyio.sleep(0.05)
            assert b.size() == 3 * CHUNK
            assert source.calls == 4
            assert b.statistics().closed


async def test_a_source_that_returns_at_once_is_not_fetched_ahead() -> None:
    """A task to fetch ahead would cost more than such a call: the enqueue just waits."""
    calls = ahead = 0
    b: ar.Batcher[Any] | None = None

    async def source() -> tuple[np.ndarray[Any, Any]]:
        nonlocal calls, ahead
        calls += 1
        if b is not None and b.queue is not None:
            # A call made while this task's enqueue waits is a fetch ahead.
            ahead += b.queue.statistics().tasks_waiting_enqueue > 0
        if calls > 30:
            raise ar.OutOfRangeError("no more chunks")
        return (np.arange(CHUNK, dtype=np.int64),)

    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True, coord=coord)
            async for _ in b:
                await anyio.sleep(0.0005)  # a slow consumer: every enqueue waits
    assert calls == 31
    # (a call the OS happened to interrupt may look slow: one fetch ahead follows it)
    assert ahead <= 3


async def test_the_stream_and_the_source_calls_keep_their_order() -> None:
    """One task with look-ahead: the batches are the source's order, end included."""
    source = Chunks(25)
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            b = ar.batch(
                source,
                3,
                capacity=6,
                enqueue_many=True,
                allow_smaller_final_batch=True,
                coord=coord,
            )
            got: list[int] = []
            async for (ids,) in b:
                got.extend(int(i) for i in ids)
                await anyio.lowlevel.checkpoint()  # a slow consumer: the enqueues wait
                assert source.calls <= len(got) // CHUNK + 6 // CHUNK + 3
    assert got == list(range(25 * CHUNK))
    assert source.calls == 26


async def test_the_end_found_ahead_ends_the_input_after_the_last_example() -> None:
    source = Chunks(2)
    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True, coord=coord)
            await source.wait_calls(3)  # the end, fetched while chunk 2 waits
            await _settle()
            assert not b.statistics().closed  # chunk 2 is still to be enqueued
            got = [int(i) for _ in range(4) for i in (await b.dequeue())[0]]
            with pytest.raises(ar.OutOfRangeError):
                await b.dequeue()
    assert got == list(range(8))


async def test_an_error_found_ahead_surfaces_after_the_example_before_it() -> None:
    source = Chunks(10, fail={3: ar.DataLossError("corrupt chunk", work_item="f", record=3)})
    got: list[int] = []

    async def consume() -> None:
        async with ar.Coordinator() as coord:
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True, coord=coord)
            await source.wait_calls(3)
            await _settle()
            # Held until the runner would have fetched it: nothing stopped yet.
            assert not coord.should_stop()
            while True:
                got.extend(int(i) for i in (await b.dequeue())[0])

    with anyio.fail_after(5), pytest.raises(ar.DataLossError, match="corrupt chunk"):
        await consume()
    # Both chunks fetched before the error were delivered.
    assert got == list(range(8))
    assert source.calls == 3


async def test_a_stop_cancels_the_fetch_ahead_and_loses_nothing_it_took() -> None:
    work: ar.FIFOQueue[Any] = ar.FIFOQueue(10, [np.int64])
    cancelled = anyio.Event()
    third = anyio.Event()
    calls = 0

    async def source() -> tuple[np.ndarray[Any, Any]]:
        nonlocal calls
        calls += 1
        await anyio.sleep(0.001)  # long enough to be worth fetching ahead
        if calls == 3:
            third.set()
        try:
            first = await work.dequeue()  # the third call waits here
        except anyio.get_cancelled_exc_class():
            cancelled.set()
            raise
        return (np.arange(first, first + CHUNK, dtype=np.int64),)

    with anyio.fail_after(5):
        async with ar.Coordinator() as coord:
            await work.enqueue_many(([0, 4],))
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True, coord=coord)
            await third.wait()
            await _settle()
            coord.request_stop()
            await cancelled.wait()
        assert b.statistics().closed
        assert work.size() == 0
        # What the cancelled fetch did not take is still there for a restart.
        await work.enqueue_many(([8],))
        assert work.size() == 1


def _write(tmp_path: Path) -> list[str]:
    paths = []
    for f in range(3):
        path = tmp_path / f"part-{f}.bin"
        path.write_bytes(b"".join(b"%06d" % (f * 30 + i) for i in range(30)))
        paths.append(str(path))
    return paths


async def _run(
    paths: list[str], *, restore: bytes | None = None, take: int | None = None
) -> tuple[list[list[bytes]], bytes | None]:
    """Every batch of producer -> reader.read_up_to(5) -> batch(4, capacity 5); with
    ``take``, a checkpoint after at least that many batches, taken while a look-ahead
    fetch is in flight (held at a gate until the checkpoint is waiting for it)."""
    got: list[list[bytes]] = []
    saved: list[bytes] = []
    with anyio.fail_after(10):
        async with ar.Session(restore=restore, deterministic=True) as sess:
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.FixedLengthRecordReader(6)
            gate = anyio.Event()
            at_gate = anyio.Event()
            gated = False

            async def records() -> Any:
                nonlocal gated
                stage = current_stage()
                ahead = stage is not None and stage.name.endswith("-ahead")
                if take is not None and len(got) >= take and ahead and not gated:
                    gated = True
                    at_gate.set()
                    await gate.wait()
                return await reader.read_up_to(files, 5)

            b = ar.batch(records, 4, capacity=5, enqueue_many=True, allow_smaller_final_batch=True)
            async for _, values in b:
                got.append(values.tolist())
                if take is None or len(got) < take:
                    continue
                with anyio.move_on_after(0.1):
                    await at_gate.wait()
                if not at_gate.is_set():
                    continue  # no fetch ahead started yet: take another batch
                async with anyio.create_task_group() as tg:

                    async def checkpoint() -> None:
                        saved.append(await sess.checkpoint())

                    tg.start_soon(checkpoint)
                    await anyio.sleep(0.05)
                    assert not saved  # it waits for the fetch in flight
                    gate.set()
                return got, saved[0]
    return got, None


async def test_a_checkpoint_during_a_fetch_ahead_restores_exactly(tmp_path: Path) -> None:
    paths = _write(tmp_path)
    everything, _ = await _run(paths)
    flat = [v for values in everything for v in values]
    assert flat == [b"%06d" % i for i in range(90)]
    for take in (1, 7):
        first, state = await _run(paths, take=take)
        assert state is not None
        rest, _ = await _run(paths, restore=state)
        assert first + rest == everything, f"take={take}"


async def test_an_end_held_in_a_checkpoint_is_restored() -> None:
    """The end of input fetched ahead is saved with the example in hand before it."""

    async def run(restore: bytes | None) -> tuple[list[int], bytes | None]:
        source = Chunks(2)
        got: list[int] = []
        with anyio.fail_after(5):
            async with ar.Session(restore=restore) as sess:
                b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True)
                if restore is None:
                    await source.wait_calls(3)
                    await _settle()
                    return got, await sess.checkpoint()
                async for (ids,) in b:
                    got.extend(int(i) for i in ids)
        assert source.calls == 0  # the restored pipeline did not ask the source again
        return got, None

    _, state = await run(None)
    assert state is not None
    rest, _ = await run(state)
    assert rest == list(range(8))


async def test_several_tasks_per_source_deliver_every_example_once() -> None:
    source = Chunks(30)
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            b = ar.batch(
                source,
                3,
                num_threads=3,
                capacity=CHUNK + 1,
                enqueue_many=True,
                allow_smaller_final_batch=True,
                coord=coord,
            )
            got: list[int] = []
            async for (ids,) in b:
                got.extend(int(i) for i in ids)
                await anyio.lowlevel.checkpoint()
    assert sorted(got) == list(range(30 * CHUNK))
    # Each task ends at the end of input once; nothing is fetched beyond it.
    assert source.calls == 30 + 3


async def test_a_source_error_found_ahead_is_restored_from_a_checkpoint() -> None:
    """An error that is not asyncreader's own is held as an AsyncReaderError naming it."""

    async def run(restore: bytes | None) -> bytes | None:
        source = Chunks(10, fail={3: ValueError("bad chunk")})
        async with ar.Session(restore=restore) as sess:
            b = ar.batch(source, 2, capacity=CHUNK, enqueue_many=True)
            if restore is None:
                await source.wait_calls(3)
                await _settle()
                return await sess.checkpoint()
            async for _ in b:
                pass
        assert source.calls == 0  # the error came from the checkpoint
        return None

    with anyio.fail_after(5):
        state = await run(None)
        assert state is not None
        with pytest.raises(ar.AsyncReaderError, match="raised ValueError: bad chunk"):
            await run(state)


@pytest.mark.parametrize(
    "tail",
    [{"joined": -1, "pushed": [], "window": None}, {"joined": 0, "pushed": 3, "window": None},
     {"joined": 0, "pushed": [], "window": [1]}, {"joined": 99, "pushed": [], "window": None}],
)  # fmt: skip
async def test_a_malformed_tail_in_a_batchers_checkpoint_is_refused(tail: dict[str, Any]) -> None:
    # A batcher of a rank in a job's tail saves its part of it (see the scale-out guide);
    # a checkpoint whose part is malformed is refused, naming the batcher.
    from asyncreader._runtime import state_codec

    async def run(restore: bytes | None) -> bytes:
        async with ar.Session(restore=restore) as sess:
            b = ar.batch(Chunks(10), 2, capacity=CHUNK, enqueue_many=True)
            await b.dequeue()
            state = await sess.checkpoint()
        return state

    with anyio.fail_after(5):
        state = await run(None)
        tree = state_codec.decode(state)
        [key] = [k for k in tree["components"] if k.startswith("batcher")]
        tree["components"][key]["tail"] = tail
        with pytest.raises(
            ar.InvalidArgumentError, match="batch: malformed checkpoint of its tail"
        ):
            await run(state_codec.encode(tree))
