from __future__ import annotations

import gc
import weakref
from collections import Counter
from typing import Any

import anyio
import numpy as np
import pytest
from queue_util import dequeue_all

import asyncreader as ar
from asyncreader._pipeline.input_producer import InputProducer, ProducerState
from asyncreader._pipeline.producers import SliceProducer, producer_of

pytestmark = pytest.mark.anyio

NAMES = [f"file-{i}" for i in range(7)]


def epochs_of(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


# -- epochs and order ------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_string_producer_enqueues_exactly_num_epochs_in_order() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            q = ar.string_input_producer(NAMES, num_epochs=3, shuffle=False, capacity=4)
            assert isinstance(q, ar.FIFOQueue)
            got = await dequeue_all(q)
            assert q.is_closed()
    assert got == NAMES * 3


@pytest.mark.both_backends
async def test_shuffled_epochs_are_fresh_permutations_that_never_interleave() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            # A capacity below the epoch size makes each epoch's enqueue_many block part-way.
            q = ar.string_input_producer(NAMES, num_epochs=4, seed=3, capacity=3)
            got = await dequeue_all(q)
    epochs = epochs_of(got, len(NAMES))
    assert len(epochs) == 4
    for epoch in epochs:
        assert sorted(epoch) == sorted(NAMES)
    assert len({tuple(e) for e in epochs}) > 1  # a fresh permutation each epoch
    assert epochs[0] != NAMES


async def test_seed_reproduces_the_whole_sequence() -> None:
    runs = []
    with anyio.fail_after(10):
        for seed in (11, 11, 12):
            async with ar.Coordinator():
                runs.append(await dequeue_all(ar.range_input_producer(20, num_epochs=3, seed=seed)))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert Counter(runs[0]) == Counter(runs[2]) == Counter(list(range(20)) * 3)


async def test_unlimited_epochs_run_until_stop() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            q = ar.range_input_producer(3, shuffle=False, capacity=2)
            got = [int(await q.dequeue()) for _ in range(10)]
            coord.request_stop()
    assert got == [0, 1, 2] * 3 + [0]
    assert q.is_closed()


async def test_range_producer_gives_int32_scalars() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            q = ar.range_input_producer(5, num_epochs=1, shuffle=False)
            got = await dequeue_all(q)
    assert [int(x) for x in got] == [0, 1, 2, 3, 4]
    assert all(np.asarray(x).dtype == np.int32 for x in got)
    assert q.dtypes == [np.dtype(np.int32)]
    assert q.shapes == [()]


async def test_input_producer_enqueues_rows() -> None:
    data = np.arange(12, dtype=np.float32).reshape(4, 3)
    with anyio.fail_after(10):
        async with ar.Coordinator():
            q = ar.input_producer(data, element_shape=[3], num_epochs=2, shuffle=False)
            got = await dequeue_all(q)
    assert q.shapes == [(3,)]
    np.testing.assert_array_equal(np.stack(got), np.concatenate([data, data]))


async def test_input_producer_checks_element_shape() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(
                ar.InvalidArgumentError, match=r"element_shape \[4\] does not match"
            ):
                ar.input_producer(np.zeros((2, 3)), element_shape=[4])


async def test_producer_queue_closes_after_last_epoch_and_reports_out_of_range() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            q = ar.string_input_producer([b"a"], num_epochs=1)
            assert await q.dequeue() == b"a"
            with pytest.raises(ar.OutOfRangeError, match="is closed and has insufficient elements"):
                await q.dequeue()


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [0, -2])
async def test_num_epochs_must_be_positive(n: int) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(ar.InvalidArgumentError, match=f"^num_epochs must be > 0 not {n}$"):
                ar.string_input_producer(NAMES, num_epochs=n)
            with pytest.raises(ar.InvalidArgumentError, match="num_epochs must be > 0"):
                ar.range_input_producer(3, num_epochs=n)
            with pytest.raises(ar.InvalidArgumentError, match="num_epochs must be > 0"):
                ar.limit_epochs(1, n)


async def test_empty_inputs_fail_at_once() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(
                ar.InvalidArgumentError, match="string_input_producer requires a non-null input"
            ):
                ar.string_input_producer([])
            with pytest.raises(ar.InvalidArgumentError, match="requires a non-null input"):
                ar.string_input_producer(np.array([], dtype=object))
            with pytest.raises(ar.InvalidArgumentError, match="requires a non-null input"):
                ar.range_input_producer(0)
            with pytest.raises(ar.InvalidArgumentError, match="requires a non-null input"):
                ar.input_producer(np.zeros((0, 3)))
            with pytest.raises(
                ar.InvalidArgumentError,
                match=r"^Expected at least one tensor in slice_input_producer\(\)\.$",
            ):
                ar.slice_input_producer([])
            with pytest.raises(ar.InvalidArgumentError, match="requires a non-null input"):
                ar.slice_input_producer([np.zeros(0)])


async def test_text_keeps_trailing_nul_bytes_and_queues_get_their_name() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            q = ar.input_producer([b"a\x00", b"b"], num_epochs=1, shuffle=False, name="files")
            assert await dequeue_all(q) == [b"a\x00", b"b"]
            assert q.name == "files"
            slices = ar.slice_input_producer([[b"x\x00"]], num_epochs=1)
            assert await slices() == [b"x\x00"]


async def test_string_producer_rejects_non_strings_and_other_ranks() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(ar.InvalidArgumentError, match="needs strings"):
                ar.string_input_producer([1, 2])  # type: ignore[list-item]
            with pytest.raises(ar.InvalidArgumentError, match=r"1-D input, got shape \[1,2\]"):
                ar.string_input_producer([["a", "b"]])  # type: ignore[list-item]


async def test_producers_need_a_coordinator() -> None:
    with pytest.raises(ar.FailedPreconditionError, match="needs a Coordinator"):
        ar.string_input_producer(NAMES)
    with pytest.raises(
        ar.FailedPreconditionError, match=r"^slice_input_producer\(\) needs a Coordinator"
    ):
        ar.slice_input_producer([[1, 2]])


async def test_explicit_coord_is_used_outside_its_block_scope() -> None:
    async def consume(coord: Any) -> None:
        q = ar.range_input_producer(2, num_epochs=1, shuffle=False, coord=coord)
        assert [int(x) for x in await dequeue_all(q)] == [0, 1]

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord, anyio.create_task_group() as tg:
            tg.start_soon(consume, coord)


# -- slice_input_producer --------------------------------------------------------------------


@pytest.mark.both_backends
async def test_slice_producer_keeps_rows_aligned() -> None:
    xs = np.arange(10) * 10
    names = [f"n{i}" for i in range(10)]
    with anyio.fail_after(10):
        async with ar.Coordinator():
            slices = ar.slice_input_producer([xs, names], num_epochs=2, seed=5)
            assert isinstance(slices, SliceProducer)
            rows = [row async for row in slices]
    assert len(rows) == 20
    for x, name in rows:
        assert isinstance(rows[0], list)
        assert name == f"n{int(x) // 10}"
    assert Counter(int(x) for x, _ in rows) == Counter(list(xs) * 2)


async def test_slice_producer_keeps_the_input_layout() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            as_tuple = ar.slice_input_producer((np.arange(3), np.arange(3) * 2), shuffle=False)
            as_dict = ar.slice_input_producer(
                {"a": np.arange(3), "b": ["x", "y", "z"]}, shuffle=False, num_epochs=1
            )
            first = await as_tuple()
            assert isinstance(first, tuple)
            assert (int(first[0]), int(first[1])) == (0, 0)
            rows = [row async for row in as_dict]
            assert [(int(r["a"]), r["b"]) for r in rows] == [(0, "x"), (1, "y"), (2, "z")]
            as_tuple.queue  # noqa: B018 - the index queue is reachable
            assert producer_of(as_tuple) is as_tuple.producer
            assert as_tuple.statistics().epoch_size == 3
            assert "SliceProducer" in repr(as_tuple)
            coord.request_stop()


async def test_slice_producer_checks_first_dimensions() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(
                ar.InvalidArgumentError,
                match=r"same size in the 0th dimension\. Tensor 1 has 2, and should have 3",
            ):
                ar.slice_input_producer([np.arange(3), np.arange(2)])


async def test_slice_producer_feeds_batch_directly() -> None:
    images = np.arange(24, dtype=np.float32).reshape(6, 4)
    labels = np.arange(6, dtype=np.int64)
    with anyio.fail_after(10):
        async with ar.Coordinator():
            slices = ar.slice_input_producer([images, labels], num_epochs=1, shuffle=False)
            b = ar.batch(slices, 3)
            got = [batch async for batch in b]
    assert len(got) == 2
    np.testing.assert_array_equal(np.concatenate([g[0] for g in got]), images)
    np.testing.assert_array_equal(np.concatenate([g[1] for g in got]), labels)


# -- limit_epochs ----------------------------------------------------------------------------


async def test_limit_epochs_returns_the_value_n_times() -> None:
    limited = ar.limit_epochs(b"x", 2)
    assert await limited() == b"x"
    assert await limited() == b"x"
    with pytest.raises(ar.OutOfRangeError, match=r"^Reached limit of 2$"):
        await limited()
    forever = ar.limit_epochs(1)
    assert [await forever() for _ in range(5)] == [1] * 5


# -- state, restore and statistics -----------------------------------------------------------


async def sequence(
    seed: int, state: ProducerState | None = None, take: int | None = None
) -> tuple[list[int], ProducerState]:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            q = ar.range_input_producer(6, num_epochs=3, seed=seed, capacity=4)
            producer = producer_of(q)
            if state is not None:
                producer.restore(state)
            if take is None:
                got = [int(x) for x in await dequeue_all(q)]
            else:
                got = [int(await q.dequeue()) for _ in range(take)]
            saved = producer.state()
            coord.request_stop()
    return got, saved


@pytest.mark.parametrize("take", [0, 4, 6, 9, 17, 18])
async def test_state_and_restore_continue_exactly(take: int) -> None:
    full, _ = await sequence(seed=21)
    head, saved = await sequence(seed=21, take=take)
    assert head == full[:take]
    assert (saved.epoch, saved.position) == divmod(take, 6)
    tail, _ = await sequence(seed=99, state=saved)  # the state carries the generator
    assert head + tail == full


async def test_a_restored_producer_can_be_checkpointed_again() -> None:
    full, _ = await sequence(seed=5)
    first, saved = await sequence(seed=5, take=4)
    second, saved_again = await sequence(seed=0, state=saved, take=5)
    assert (saved_again.epoch, saved_again.position) == (1, 3)
    rest, _ = await sequence(seed=0, state=saved_again)
    assert first + second + rest == full


async def test_restore_after_start_and_bad_states_are_rejected() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            q = ar.range_input_producer(4, capacity=2)
            producer = producer_of(q)
            with pytest.raises(ar.InvalidArgumentError, match="cannot restore epoch 0 position 9"):
                producer.restore(ProducerState(epoch=0, position=9, rng_state=None))
            with pytest.raises(ar.InvalidArgumentError, match="needs the state's rng_state"):
                producer.restore(ProducerState(epoch=1, position=0, rng_state=None))
            with pytest.raises(ar.InvalidArgumentError, match="invalid rng_state"):
                producer.restore(ProducerState(epoch=1, position=0, rng_state={"x": 1}))
            await q.dequeue()
            with pytest.raises(ar.FailedPreconditionError, match="before the first epoch"):
                producer.restore(producer.state())
            coord.request_stop()
    with pytest.raises(ar.InvalidArgumentError, match="no input producer fills"):
        producer_of(ar.FIFOQueue(3))


async def test_producer_statistics_show_fill_and_epochs() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            q = ar.string_input_producer(NAMES, capacity=4, num_epochs=5)
            producer = producer_of(q)
            assert isinstance(producer, InputProducer)
            await anyio.wait_all_tasks_blocked()
            stats = producer.statistics()
            assert stats.size == 4
            assert stats.capacity == 4
            assert stats.fill_fraction == producer.fill_fraction() == 1.0
            assert (stats.epochs_started, stats.epochs_completed) == (1, 0)
            assert (stats.num_epochs, stats.epoch_size, stats.closed) == (5, 7, False)
            assert "epoch=1/5" in repr(producer)
            for _ in range(3):
                await q.dequeue()
            await anyio.wait_all_tasks_blocked()
            assert producer.statistics().epochs_completed == 1
            coord.request_stop()
    assert producer.statistics().closed


async def test_stop_request_ends_a_blocked_producer_promptly() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            q = ar.string_input_producer(NAMES, capacity=1)
            await anyio.wait_all_tasks_blocked()
            coord.request_stop()
    assert q.is_closed()
    assert q.size() <= 1


async def test_state_after_the_last_epoch_points_past_it() -> None:
    async with ar.Coordinator():
        q = ar.range_input_producer(2, num_epochs=200, capacity=3)
        assert len(await dequeue_all(q)) == 400
    producer = producer_of(q)
    state = producer.state()
    assert (state.epoch, state.position) == (200, 0)


# -- lifetime --------------------------------------------------------------------------------


async def _producers_in_a_session() -> list[weakref.ref[Any]]:
    async with ar.Session():
        names = ar.string_input_producer(NAMES, num_epochs=1, shuffle=False, capacity=4)
        indices = ar.range_input_producer(5, num_epochs=1, seed=1)
        rows = ar.input_producer(np.arange(8).reshape(4, 2), num_epochs=1, seed=2)
        slices = ar.slice_input_producer([np.arange(6)], num_epochs=2, seed=3)
        batches = ar.batch(slices, batch_size=2)
        with anyio.fail_after(10):
            assert await names.dequeue() == NAMES[0]
            (batch,) = await batches.dequeue()
            assert len(batch) == 2
        held = [names, indices, rows, slices.queue, slices.producer, batches]
        held += [producer_of(q) for q in (names, indices, rows)]
        refs = [weakref.ref(obj) for obj in held]
    return refs


@pytest.mark.both_backends
async def test_closed_sessions_free_their_producers_and_queues() -> None:
    refs: list[weakref.ref[Any]] = []
    for _ in range(20):
        refs += await _producers_in_a_session()
    gc.collect()
    alive = [ref() for ref in refs if ref() is not None]
    assert alive == []
