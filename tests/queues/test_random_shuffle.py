"""RandomShuffleQueue: min_after_dequeue, draining after close, seeds (SPEC §2.5)."""

from __future__ import annotations

import ctypes
import mmap
import re
import sys
import threading

import anyio
import anyio.to_thread
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._queues.slab import SlabCodec

pytestmark = pytest.mark.anyio


def test_attributes() -> None:
    q = ar.RandomShuffleQueue(10, 3, seed=7)
    assert q.capacity == 10
    assert q.min_after_dequeue == 3
    assert q.seed == 7
    assert q.dtypes is None
    assert re.fullmatch(r"RandomShuffleQueue_\d+", q.name)
    assert ar.RandomShuffleQueue(None, 100).capacity is None


@pytest.mark.parametrize(
    ("args", "kwargs", "message"),
    [
        ((5, 5), {}, "min_after_dequeue 5 must be < capacity 5"),
        ((0, 0), {}, "min_after_dequeue 0 must be < capacity 0"),
        ((5, -1), {}, "min_after_dequeue -1 must be >= 0"),
        ((5, 1.5), {}, "min_after_dequeue must be an int"),
        ((5, 1), {"seed": "x"}, "seed must be an int or None"),
        ((5, 1), {"dtypes": ["int32"], "shapes": [[None]]}, "All shapes must be fully defined"),
    ],
)
def test_invalid_construction(
    args: tuple[object, ...], kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        ar.RandomShuffleQueue(*args, **kwargs)  # type: ignore[arg-type]


async def test_dequeue_respects_min_after_dequeue_while_open() -> None:
    q = ar.RandomShuffleQueue(10, 2, seed=1)
    await q.enqueue_many([1, 2, 3])
    first = await q.dequeue()
    assert q.size() == 2
    with pytest.raises(anyio.WouldBlock):
        q.dequeue_nowait()
    got: list[object] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                got.append(await q.dequeue())

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            await q.enqueue(4)
    assert q.size() == 2
    await q.close()
    rest = [await q.dequeue(), await q.dequeue()]
    assert sorted([first, *got, *rest]) == [1, 2, 3, 4]


@pytest.mark.both_backends
async def test_close_drains_ignoring_min_after_dequeue() -> None:
    q = ar.RandomShuffleQueue(10, 5, name="rsq", seed=3)
    await q.enqueue_many(range(4))
    await q.close()
    assert sorted([await q.dequeue() for _ in range(4)]) == [0, 1, 2, 3]
    with pytest.raises(
        ar.OutOfRangeError,
        match=re.escape(
            "RandomShuffleQueue 'rsq' is closed and has insufficient elements "
            "(requested 1, current size 0)"
        ),
    ):
        await q.dequeue()


async def test_close_wakes_dequeuer_held_by_min_after_dequeue() -> None:
    q = ar.RandomShuffleQueue(10, 3)
    await q.enqueue_many([1, 2])
    got: list[object] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                got.append(await q.dequeue_many(2))

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert got == []
            await q.close()
    assert sorted(got[0]) == [1, 2]  # type: ignore[call-overload]


async def test_dequeue_many_is_progressive_above_min_after_dequeue() -> None:
    q = ar.RandomShuffleQueue(10, 1, seed=5)
    await q.enqueue_many([1, 2, 3])
    result: list[int] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                result.extend(await q.dequeue_many(4))

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 1  # two taken and held, one kept back
            await q.enqueue_many([4, 5])
    assert q.size() == 1
    assert len(result) == 4
    assert len(set(result)) == 4
    assert set(result) < {1, 2, 3, 4, 5}


async def test_closed_dequeue_many_insufficient_puts_back() -> None:
    q = ar.RandomShuffleQueue(10, 0, name="s")
    await q.enqueue_many([1, 2])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                with pytest.raises(
                    ar.OutOfRangeError,
                    match=re.escape(
                        "RandomShuffleQueue 's' is closed and has insufficient elements "
                        "(requested 1, current size 0)"
                    ),
                ):
                    await q.dequeue_many(3)

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            await q.close()
    assert sorted(await q.dequeue_up_to(5)) == [1, 2]


async def test_dequeue_up_to_sizes_after_close() -> None:
    q = ar.RandomShuffleQueue(10, 8)
    await q.enqueue_many(range(5))
    await q.close()
    a = await q.dequeue_up_to(3)
    b = await q.dequeue_up_to(3)
    assert (len(a), len(b)) == (3, 2)
    assert sorted(a + b) == [0, 1, 2, 3, 4]


async def _order(seed: int | None, n: int = 50) -> list[int]:
    q = ar.RandomShuffleQueue(None, 3, seed=seed)
    await q.enqueue_many(range(n))
    out = [await q.dequeue() for _ in range(10)]
    out += await q.dequeue_many(20)
    await q.enqueue_many(range(n, n + 5))
    await q.close()
    out += await q.dequeue_up_to(1000)
    return out


async def test_same_seed_same_order() -> None:
    a = await _order(42)
    assert a == await _order(42)
    assert sorted(a) == list(range(55))
    assert a != sorted(a)
    assert a != await _order(43)


async def test_unseeded_order_is_a_permutation() -> None:
    assert sorted(await _order(None)) == list(range(55))


async def test_every_position_is_reachable() -> None:
    seen = set()
    for seed in range(60):
        q = ar.RandomShuffleQueue(None, 0, seed=seed)
        await q.enqueue_many(range(4))
        seen.add(await q.dequeue())
    assert seen == {0, 1, 2, 3}


async def test_typed_dequeue_many_keeps_components_paired() -> None:
    q = ar.RandomShuffleQueue(20, 0, ["int32", "string"], [[2], []], seed=9)
    await q.enqueue_many(([[i, -i] for i in range(10)], [str(i).encode() for i in range(10)]))
    ints, texts = await q.dequeue_many(10)
    assert ints.shape == (10, 2)
    assert sorted(ints[:, 0].tolist()) == list(range(10))
    for (a, b), t in zip(ints.tolist(), texts.tolist(), strict=True):
        assert b == -a
        assert t == str(a).encode()


async def test_typed_dequeue_many_requires_shapes() -> None:
    q = ar.RandomShuffleQueue(20, 0, ["int32"])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape(
            "RandomShuffleQueue's DequeueMany and DequeueUpTo require the components to have "
            "specified shapes."
        ),
    ):
        await q.dequeue_many(2)


async def test_closed_enqueue_message() -> None:
    q = ar.RandomShuffleQueue(3, 0, name="c")
    await q.close()
    with pytest.raises(ar.QueueClosedError, match=re.escape("RandomShuffleQueue 'c' is closed.")):
        await q.enqueue(1)


async def test_statistics_count_put_back_elements_once() -> None:
    q = ar.RandomShuffleQueue(10, 0)
    await q.enqueue_many([1, 2])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue_many, 3)
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    stats = q.statistics()
    assert (stats.size, stats.total_enqueued, stats.total_dequeued) == (2, 2, 0)
    np.testing.assert_array_equal(sorted(await q.dequeue_many(2)), [1, 2])


# -- memory: stored elements, not the chunks they came in -------------------------------


async def test_typed_memory_follows_stored_elements_not_enqueued_chunks() -> None:
    """Drawn in random order, rows of an enqueue_many chunk leave at scattered times; the
    queue must not keep whole chunks alive for their last rows."""
    import tracemalloc

    row_bytes, chunk_rows, capacity = 1024, 512, 4096
    q = ar.RandomShuffleQueue(
        capacity, capacity // 2, dtypes=[np.uint8, np.int64], shapes=[[row_bytes], []], seed=1
    )
    chunk = np.zeros((chunk_rows, row_bytes), dtype=np.uint8)
    tracemalloc.start()
    try:
        seen = 0
        for c in range(64):
            ids = np.arange(c * chunk_rows, (c + 1) * chunk_rows, dtype=np.int64)
            await q.enqueue_many((chunk, ids))
            while q.size() > capacity - chunk_rows:
                _, got = await q.dequeue_many(128)
                seen += len(got)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    stored_bytes = q.size() * (row_bytes + 8)
    # The slab doubles as it grows: at most twice what was stored at the peak, plus
    # small change; rows pinning whole chunks would hold several times more.
    assert held < 2 * capacity * (row_bytes + 8) + (1 << 20), (held, stored_bytes)
    assert seen + q.size() == 64 * chunk_rows


@pytest.mark.both_backends
async def test_typed_elements_round_trip_through_the_slab() -> None:
    q = ar.RandomShuffleQueue(
        100, 0, dtypes=[np.float32, object, np.int16], shapes=[[2, 3], [], [4]], seed=3
    )
    images = np.arange(10 * 6, dtype=np.float32).reshape(10, 2, 3)
    names = np.array([f"n{i}".encode() for i in range(10)], dtype=object)
    codes = np.arange(40, dtype=np.int16).reshape(10, 4)
    await q.enqueue_many((images[:8], names[:8], codes[:8]))
    await q.enqueue((images[8], b"n8", codes[8]))
    await q.enqueue((images[9], "n9", codes[9]))
    one = await q.dequeue()
    rest = await q.dequeue_many(9)
    got_images = np.concatenate([one[0][None], rest[0]])
    got_names = [one[1], *rest[1]]
    got_codes = np.concatenate([one[2][None], rest[2]])
    order = [int(n[1:]) for n in got_names]
    assert sorted(order) == list(range(10))
    np.testing.assert_array_equal(got_images, images[order])
    np.testing.assert_array_equal(got_codes, codes[order])
    # What a dequeue returned is the caller's: later enqueues reuse the slots.
    snapshot = got_images.copy()
    await q.enqueue_many((images * 0 - 1, names, codes))
    np.testing.assert_array_equal(got_images, snapshot)
    np.testing.assert_array_equal(one[0], snapshot[0])


# -- a fresh slab's pages are faulted in ahead, off the event loop ----------------------


def _rss_bytes() -> int:
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * mmap.PAGESIZE


def _populate_write_works() -> bool:
    """Whether this kernel knows MADV_POPULATE_WRITE (Linux 5.14 and later)."""
    from asyncreader._queues import slab

    madvise = slab._load_madvise()
    if madvise is None:
        return False
    m = mmap.mmap(-1, mmap.PAGESIZE)
    try:
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        return bool(madvise(addr, mmap.PAGESIZE, slab._MADV_POPULATE_WRITE) == 0)
    finally:
        m.close()


@pytest.mark.both_backends
@pytest.mark.skipif(
    not sys.platform.startswith("linux") or not _populate_write_works(),
    reason="needs Linux's MADV_POPULATE_WRITE",
)
async def test_rows_the_queue_must_fill_are_faulted_in_ahead_on_another_thread() -> None:
    """Nothing is dequeued before min_after_dequeue elements are stored, so as soon as the
    slab is reserved their pages are faulted in by a helper thread instead of one page
    at a time on the event loop as rows are stored; the rest of the reserve is left
    untouched, and the stored values are what was enqueued."""
    row, mad = 64 * 1024, 1000
    q = ar.RandomShuffleQueue(mad + 100, mad, dtypes=[np.uint8], shapes=[[row]], seed=1)
    before = _rss_bytes()
    await q.enqueue_many(np.full((4, row), 7, np.uint8))
    codec = q._codec
    assert isinstance(codec, SlabCodec)
    thread = codec.prefaulting
    assert thread is not None
    assert thread is not threading.current_thread()
    with anyio.fail_after(20):
        await anyio.to_thread.run_sync(thread.join, 15)
    assert not thread.is_alive()
    grown = _rss_bytes() - before
    # min_after_dequeue rows resident (64 MB), not the whole reserve of 1,375 rows (86 MB).
    assert 0.95 * mad * row <= grown <= mad * row + (8 << 20), grown
    values = np.arange(20, dtype=np.uint8)[:, None].repeat(row, axis=1)
    await q.enqueue_many(values)
    await q.close()
    got = await q.dequeue_many(24)
    firsts = sorted(got[:, 0].tolist())
    assert firsts == [0, 1, 2, 3, 4, 5, 6, 7, 7, 7, 7, 7, *range(8, 20)]
    assert all((r == r[0]).all() for r in got)


async def test_small_slabs_are_not_faulted_in_ahead() -> None:
    q = ar.RandomShuffleQueue(100, 50, dtypes=[np.float32], shapes=[[4]], seed=1)
    await q.enqueue_many(np.zeros((8, 4), np.float32))
    codec = q._codec
    assert isinstance(codec, SlabCodec)
    assert codec.prefaulting is None
