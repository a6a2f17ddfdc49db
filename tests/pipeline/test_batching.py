from __future__ import annotations

import functools
from collections import Counter
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._pipeline.batcher import BatcherStatistics

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

pytestmark = pytest.mark.anyio


def counter_source(n: int, make: Callable[[int], Any] = lambda i: i) -> Callable[[], Any]:
    """An async callable returning make(0) .. make(n-1), then raising OutOfRangeError."""
    state = {"next": 0}

    async def next_example() -> Any:
        await anyio.lowlevel.checkpoint()
        i = state["next"]
        if i >= n:
            raise ar.OutOfRangeError("no more examples")
        state["next"] = i + 1
        return make(i)

    return next_example


def offset(k: int) -> Callable[[int], int]:
    return lambda i: k * 1000 + i


def tagged(k: int) -> Callable[[int], tuple[int, int]]:
    return lambda i: (k, i)


async def chunks(n: int, size: int) -> AsyncIterator[np.ndarray]:
    for start in range(0, n, size):
        await anyio.lowlevel.checkpoint()
        yield np.arange(start, min(n, start + size), dtype=np.int64)


async def collect(b: ar.Batcher) -> list[Any]:
    return [batch async for batch in b]


async def run(make: Callable[[], ar.Batcher]) -> list[Any]:
    """Build a Batcher in a fresh Coordinator and take every batch."""
    with anyio.fail_after(10):
        async with ar.Coordinator():
            batches = await collect(make())
    return batches


def flat(batches: list[Any], index: int | str | None = None) -> list[Any]:
    parts = [b if index is None else b[index] for b in batches]
    return [x.item() if hasattr(x, "item") else x for x in np.concatenate(parts)]


# -- order, end of input ---------------------------------------------------------------------


@pytest.mark.both_backends
async def test_batch_with_one_thread_preserves_order_and_drops_the_remainder() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(10), 3, capacity=4)
            batches = await collect(b)
    assert [list(x) for x in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(isinstance(x, np.ndarray) and x.shape == (3,) for x in batches)


@pytest.mark.both_backends
async def test_allow_smaller_final_batch_delivers_the_remainder() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(10), 4, allow_smaller_final_batch=True)
            batches = await collect(b)
            with pytest.raises(ar.OutOfRangeError):
                await b.dequeue()
    assert [list(x) for x in batches] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


async def test_end_of_input_raises_out_of_range_from_dequeue() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(5), 2)
            assert list(await b.dequeue()) == [0, 1]
            assert list(await b.dequeue()) == [2, 3]
            with pytest.raises(ar.OutOfRangeError, match="insufficient elements"):
                await b.dequeue()


async def test_an_empty_source_ends_at_once() -> None:
    async def nothing() -> AsyncIterator[int]:
        empty: tuple[int, ...] = ()
        for i in empty:
            yield i

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(nothing(), 2)
            assert await collect(b) == []
            assert not await b.wait_ready()
            with pytest.raises(ar.OutOfRangeError, match="input ended before the first example"):
                await b.dequeue()
            assert b.queue is None
            assert b.statistics().closed


@pytest.mark.both_backends
async def test_async_iterable_source_with_many_threads_gives_each_example_once() -> None:
    async def examples() -> AsyncIterator[int]:
        for i in range(200):
            await anyio.lowlevel.checkpoint()
            yield i

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(examples(), 8, num_threads=4, capacity=16)
            got = flat(await collect(b))
    assert Counter(got) == Counter(range(200))


async def test_many_threads_on_a_callable_give_each_example_exactly_once() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(301), 10, num_threads=5, allow_smaller_final_batch=True)
            got = flat(await collect(b))
    assert Counter(got) == Counter(range(301))


async def test_sync_callables_returning_values_are_accepted() -> None:
    items = iter(range(4))

    def next_example() -> int:
        try:
            return next(items)
        except StopIteration:
            raise ar.OutOfRangeError("done") from None

    with anyio.fail_after(10):
        async with ar.Coordinator():
            assert flat(await collect(ar.batch(next_example, 2))) == [0, 1, 2, 3]


# -- example layouts -------------------------------------------------------------------------


class Pair(NamedTuple):
    image: Any
    label: Any


async def test_tuple_examples_give_tuples_of_stacked_components() -> None:
    def make(i: int) -> Any:
        return (np.full((2, 2), i, dtype=np.float32), i, f"name-{i}".encode())

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(4, make), 2)
            images, labels, names = await b.dequeue()
    assert images.shape == (2, 2, 2)
    assert images.dtype == np.float32
    assert labels.dtype == np.int64
    assert list(labels) == [0, 1]
    assert names.dtype == object
    assert list(names) == [b"name-0", b"name-1"]


async def test_dict_named_tuple_list_and_bare_examples_keep_their_layout() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            as_dict = ar.batch(counter_source(2, lambda i: {"z": i, "a": str(i)}), 2)
            as_named = ar.batch(counter_source(2, lambda i: Pair(np.ones(3) * i, i)), 2)
            as_list = ar.batch(counter_source(2, lambda i: [i]), 2)
            bare = ar.batch(counter_source(2, lambda i: np.arange(3) + i), 2)
            d, n, li, x = (
                await as_dict.dequeue(),
                await as_named.dequeue(),
                await as_list.dequeue(),
                await bare.dequeue(),
            )
    assert isinstance(d, dict)
    assert list(d) == ["a", "z"]
    assert list(d["z"]) == [0, 1]
    assert list(d["a"]) == ["0", "1"]
    assert isinstance(n, Pair)
    assert n.image.shape == (2, 3)
    assert isinstance(li, list)
    assert len(li) == 1
    assert list(li[0]) == [0, 1]
    assert isinstance(x, np.ndarray)
    np.testing.assert_array_equal(x, [[0, 1, 2], [1, 2, 3]])


async def test_first_example_is_kept_when_inferring_shapes() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(3, lambda i: np.full(2, i)), 3)
            await b.wait_ready()
            assert b.queue.shapes == [(2,)]
            np.testing.assert_array_equal(await b.dequeue(), [[0, 0], [1, 1], [2, 2]])


async def test_explicit_shapes_are_used_and_checked() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(2, lambda i: {"x": [i, i]}), 2, shapes={"x": [2]})
            await b.wait_ready()
            assert b.queue.shapes == [(2,)]
            np.testing.assert_array_equal((await b.dequeue())["x"], [[0, 0], [1, 1]])

        with pytest.raises(ar.InvalidArgumentError, match=r"Expected \[3\], got \[2\]"):
            await run(
                lambda: ar.batch(counter_source(2, lambda i: np.array([i, i])), 2, shapes=[[3]])
            )


async def test_a_shape_change_without_dynamic_pad_is_an_error() -> None:
    with anyio.fail_after(10):
        with pytest.raises(ar.InvalidArgumentError, match="Shape mismatch in tuple component 0"):
            await run(lambda: ar.batch(counter_source(3, lambda i: np.zeros(i + 1)), 3))


async def test_examples_of_another_layout_are_an_error() -> None:
    def make(i: int) -> Any:
        return (i, i) if i == 0 else (i,)

    with anyio.fail_after(10):
        with pytest.raises(ar.InvalidArgumentError, match="Expected types to be consistent"):
            await run(lambda: ar.batch(counter_source(3, make), 2))


# -- enqueue_many ----------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_enqueue_many_slices_chunks_in_order() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(chunks(1000, 128), 64, enqueue_many=True, capacity=100)
            got = flat(await collect(b))
    assert got == list(range(960))


async def test_enqueue_many_with_many_threads_and_tuples_gives_each_example_once() -> None:
    state = {"start": 0}

    async def chunk() -> tuple[np.ndarray, list[str]]:
        await anyio.lowlevel.checkpoint()
        start = state["start"]
        if start >= 1000:
            raise ar.OutOfRangeError("done")
        state["start"] = start + 37
        ids = np.arange(start, min(1000, start + 37))
        return ids, [str(i) for i in ids]

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(
                chunk, 50, num_threads=3, enqueue_many=True, allow_smaller_final_batch=True
            )
            batches = await collect(b)
    ids = flat(batches, 0)
    assert Counter(ids) == Counter(range(1000))
    assert all(str(i) == s for i, s in zip(ids, flat(batches, 1), strict=True))


async def test_enqueue_many_needs_batched_components() -> None:
    with anyio.fail_after(10):
        with pytest.raises(ar.InvalidArgumentError, match="rank 0"):
            await run(lambda: ar.batch(counter_source(2), 2, enqueue_many=True))


async def test_limit_epochs_feeds_a_fixed_batch_a_number_of_times() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(ar.limit_epochs(np.arange(5), 3), 5, enqueue_many=True)
            got = await collect(b)
    assert [list(x) for x in got] == [list(range(5))] * 3


# -- dynamic_pad -----------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_dynamic_pad_pads_each_batch_to_its_longest_example() -> None:
    def make(i: int) -> Any:
        # (An empty first list would make the component float, as in TensorFlow.)
        return np.arange(1, i + 2, dtype=np.int32), [b"w"] * ((i + 1) % 3), i

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch(counter_source(6, make), 3, dynamic_pad=True)
            (v1, s1, n1), (v2, _, n2) = await collect(b)
    assert v1.shape == (3, 3)
    np.testing.assert_array_equal(v1, [[1, 0, 0], [1, 2, 0], [1, 2, 3]])
    assert v2.shape == (3, 6)
    assert s1.shape == (3, 2)
    assert s1.tolist() == [[b"w", b""], [b"w", b"w"], [b"", b""]]
    assert n1.shape == (3,)
    assert list(n2) == [3, 4, 5]


async def test_dynamic_pad_with_partial_shapes_and_batch_join() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch_join(
                [counter_source(2, lambda i: np.ones((i + 1, 2)))],
                2,
                shapes=[[None, 2]],
                dynamic_pad=True,
            )
            await b.wait_ready()
            assert b.queue.shapes == [(None, 2)]
            out = await b.dequeue()
    assert out.shape == (2, 2, 2)
    np.testing.assert_array_equal(out[0], [[1, 1], [0, 0]])


# -- keep_input ------------------------------------------------------------------------------


async def test_maybe_batch_keeps_what_a_callable_accepts() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.maybe_batch(counter_source(20), lambda x: x % 2 == 0, 5)
            got = await collect(b)
            stats = b.statistics()
    assert flat(got) == list(range(0, 20, 2))
    assert (stats.examples_enqueued, stats.examples_dropped) == (10, 10)


async def test_maybe_batch_with_a_vector_keeps_rows() -> None:
    async def keep(batch: np.ndarray) -> Any:
        await anyio.lowlevel.checkpoint()
        return batch % 3 == 0

    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.maybe_batch(
                chunks(30, 7), keep, 2, enqueue_many=True, allow_smaller_final_batch=True
            )
            got = await collect(b)
    assert flat(got) == list(range(0, 30, 3))


async def test_a_static_keep_vector_selects_the_same_rows_of_every_batch() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.maybe_batch(
                ar.limit_epochs(np.arange(4), 2), [True, False, False, True], 4, enqueue_many=True
            )
            assert [list(x) for x in await collect(b)] == [[0, 3, 0, 3]]


@pytest.mark.both_backends
@pytest.mark.parametrize("keep", [[True, True, True], [True, False, True]], ids=["all", "some"])
async def test_a_keep_vector_keeps_binary_records_whole(keep: list[bool]) -> None:
    # Rows are selected from the strings themselves: a fixed-width numpy copy of them
    # would drop each record's trailing NUL bytes.
    records = [b"a\x00", b"b\x00\x00", b"\x00"]
    source = counter_source(1, lambda i: ([b"k0", b"k1", b"k2"], records))
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.maybe_batch(source, keep, sum(keep), enqueue_many=True)
            keys, values = await b.dequeue()
    picked = [i for i, k in enumerate(keep) if k]
    assert values.tolist() == [records[i] for i in picked]
    assert keys.tolist() == [b"k%d" % i for i in picked]


async def test_keep_input_false_drops_everything() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.maybe_shuffle_batch(counter_source(5), 1, 10, 2, False)
            assert await collect(b) == []
            assert b.statistics().examples_dropped == 5


async def test_keep_input_is_validated() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            src = counter_source(1)
            with pytest.raises(
                ar.InvalidArgumentError,
                match=r"^`keep_input` cannot be a vector when `enqueue_many=False`\.$",
            ):
                ar.maybe_batch(src, [True, False], 2)
            with pytest.raises(
                ar.InvalidArgumentError, match=r"^`keep_input` must be 0 or 1 dimensions\.$"
            ):
                ar.maybe_batch(src, [[True]], 2, enqueue_many=True)
            with pytest.raises(ar.InvalidArgumentError, match="must be a bool"):
                ar.maybe_batch(src, 1, 2)

        with pytest.raises(ar.InvalidArgumentError, match="cannot be a vector"):
            await run(lambda: ar.maybe_batch(counter_source(3), lambda x: [True], 1))

        with pytest.raises(ar.InvalidArgumentError, match="`keep_input` has 2 entries"):
            await run(lambda: ar.maybe_batch(chunks(9, 3), [True, False], 1, enqueue_many=True))


# -- shuffle_batch ---------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_shuffle_batch_gives_every_example_once_in_a_new_order() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.shuffle_batch(
                counter_source(500), 25, capacity=100, min_after_dequeue=50, num_threads=3, seed=1
            )
            got = flat(await collect(b))
    assert Counter(got) == Counter(range(500))
    assert got != list(range(500))


async def test_shuffle_batch_with_a_seed_reproduces_its_batches() -> None:
    runs = []
    with anyio.fail_after(10):
        for seed in (7, 7, 8):
            async with ar.Coordinator():
                b = ar.shuffle_batch(chunks(300, 50), 30, 120, 60, seed=seed, enqueue_many=True)
                runs.append(flat(await collect(b)))
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]
    assert Counter(runs[0]) == Counter(runs[2]) == Counter(range(300))


async def test_shuffle_batch_final_smaller_batch_ignores_min_after_dequeue() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.shuffle_batch(
                counter_source(23), 10, 20, 15, seed=2, allow_smaller_final_batch=True
            )
            sizes = [len(x) for x in await collect(b)]
    assert sizes == [10, 10, 3]


async def test_shuffle_batch_join_and_maybe_variants_give_every_example_once() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            sources = [counter_source(50, offset(k)) for k in range(3)]
            joined = ar.shuffle_batch_join(sources, 10, 40, 10, seed=3)
            got = flat(await collect(joined))
        assert Counter(got) == Counter(k * 1000 + i for k in range(3) for i in range(50))

        async with ar.Coordinator():
            sources = [counter_source(30, offset(k)) for k in range(2)]
            b = ar.maybe_shuffle_batch_join(sources, 5, 20, 5, lambda x: x % 2 == 1, seed=4)
            got = flat(await collect(b))
        assert Counter(got) == Counter(k * 1000 + i for k in range(2) for i in range(1, 30, 2))

        async with ar.Coordinator():
            sources = [counter_source(9, tagged(k)) for k in range(2)]
            b = ar.maybe_batch_join(sources, lambda ex: ex[1] < 6, 4)
            pairs = [p for ks, js in await collect(b) for p in zip(ks, js, strict=True)]
    assert Counter((int(k), int(i)) for k, i in pairs) == Counter(
        (k, i) for k in range(2) for i in range(6)
    )


async def test_shuffle_statistics_report_the_fraction_over_min_after_dequeue() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            b = ar.shuffle_batch(counter_source(10**6), 5, capacity=40, min_after_dequeue=30)
            await anyio.wait_all_tasks_blocked()
            stats = b.statistics()
            assert isinstance(stats, BatcherStatistics)
            assert stats.size == 40
            assert stats.fill_fraction == b.fill_fraction() == 1.0
            assert stats.fraction_over_min_after_dequeue == 1.0
            await b.dequeue()
            await b.dequeue()
            stats = b.statistics()
            assert stats.batches_dequeued == 2
            assert stats.min_after_dequeue == 30
            coord.request_stop()


# -- batch_join ------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_batch_join_keeps_each_sources_order() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            sources = [counter_source(40, tagged(k)) for k in range(3)]
            b = ar.batch_join(sources, 6, capacity=8)
            batches = await collect(b)
    pairs = [(int(k), int(i)) for ks, js in batches for k, i in zip(ks, js, strict=True)]
    assert len(pairs) == 120
    for k in range(3):
        assert [i for kk, i in pairs if kk == k] == list(range(40))


async def test_batch_join_with_an_empty_source_uses_the_others() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            b = ar.batch_join([counter_source(0), counter_source(4, lambda i: i + 10)], 2)
            assert flat(await collect(b)) == [10, 11, 12, 13]


async def test_batch_join_sources_must_agree() -> None:
    sources = [counter_source(3, lambda i: {"a": i}), counter_source(3, lambda i: {"b": i})]
    with anyio.fail_after(10):
        with pytest.raises(ar.InvalidArgumentError, match="must have the same keys"):
            await run(lambda: ar.batch_join(sources, 2))

        sources = [counter_source(3, lambda i: float(i)), counter_source(3, lambda i: f"s{i}")]
        with pytest.raises(ar.InvalidArgumentError, match="Type mismatch in tuple component 0"):
            await run(lambda: ar.batch_join(sources, 2))


# -- validation ------------------------------------------------------------------------------


async def test_arguments_are_validated_with_tensorflows_messages() -> None:
    src = counter_source(1)
    with anyio.fail_after(10):
        async with ar.Coordinator():
            with pytest.raises(
                ar.InvalidArgumentError,
                match=r"^capacity 10 must be bigger than min_after_dequeue 10\.$",
            ):
                ar.shuffle_batch(src, 2, 10, 10)
            with pytest.raises(
                ar.InvalidArgumentError, match=r"^Expected at least one tensor in batch\(\)\.$"
            ):
                ar.batch(None, 2)  # type: ignore[arg-type]
            with pytest.raises(
                ar.InvalidArgumentError, match="Expected at least one set of tensors"
            ):
                ar.batch_join([], 2)
            with pytest.raises(
                ar.InvalidArgumentError, match="async callable or an async iterable"
            ):
                ar.batch([1, 2, 3], 2)  # type: ignore[arg-type]
            with pytest.raises(
                ar.InvalidArgumentError, match=r"pass the generator itself \(chunks\(\)\)"
            ):
                ar.batch(chunks, 2)  # type: ignore[arg-type]
            with pytest.raises(ar.InvalidArgumentError, match="batch_size must be an integer >= 1"):
                ar.batch(src, 0)
            with pytest.raises(
                ar.InvalidArgumentError, match="num_threads must be an integer >= 1"
            ):
                ar.batch(src, 2, num_threads=0)
            with pytest.raises(ar.InvalidArgumentError, match="All shapes must be fully defined"):
                ar.batch(src, 2, shapes=[[None]])
            with pytest.raises(ar.InvalidArgumentError, match="shapes must be a list"):
                ar.batch(src, 2, shapes=3)
            with pytest.raises(ar.InvalidArgumentError, match="invalid dimension"):
                ar.batch(src, 2, shapes=[["x"]])

        with pytest.raises(ar.InvalidArgumentError, match="shapes has 2 entries but examples"):
            await run(lambda: ar.batch(counter_source(2), 1, shapes=[[], []]))


async def test_an_empty_example_is_an_error() -> None:
    with anyio.fail_after(10):
        with pytest.raises(ar.InvalidArgumentError, match=r"Expected at least one tensor in batch"):
            await run(lambda: ar.batch(counter_source(2, lambda i: ()), 1))


async def test_batching_needs_a_coordinator() -> None:
    with pytest.raises(ar.FailedPreconditionError, match=r"shuffle_batch\(\) needs a Coordinator"):
        ar.shuffle_batch(counter_source(1), 1, 10, 2)


# -- errors and stopping ---------------------------------------------------------------------


class Boom(Exception):
    pass


@pytest.mark.both_backends
@pytest.mark.parametrize("fail_at", [0, 7])
async def test_errors_in_the_source_leave_the_coordinator_as_themselves(fail_at: int) -> None:
    def make(i: int) -> int:
        if i == fail_at:
            raise Boom(f"bad example {i}")
        return i

    with anyio.fail_after(10):
        with pytest.raises(Boom, match=f"bad example {fail_at}"):
            await run(lambda: ar.batch(counter_source(100, make), 2, num_threads=2))


@pytest.mark.both_backends
async def test_a_stop_request_ends_blocked_sources_and_consumers_promptly() -> None:
    started = anyio.Event()

    async def stuck() -> int:
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            b = ar.batch(counter_source(10**9), 4, capacity=8)
            never = ar.shuffle_batch(stuck, 2, 10, 2)
            await started.wait()
            first = await b.dequeue()
            coord.request_stop()
            rest = await collect(b)  # drains what is queued, then ends
            assert await collect(never) == []
    assert list(first) == [0, 1, 2, 3]
    assert len(rest) <= 2
    assert b.statistics().closed


async def test_repr_and_statistics_before_and_after_start() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            b = ar.batch(counter_source(10**6), 3, capacity=9)
            assert "pending" in repr(b)
            assert b.fill_fraction() == 0.0
            assert b.size() == 0
            await anyio.wait_all_tasks_blocked()
            assert b.batch_size == 3
            text = repr(b)
            assert "batch_size=3" in text
            assert "size=9/9" in text
            assert "a single value" in text
            coord.request_stop()


@pytest.mark.stress
@pytest.mark.both_backends
@pytest.mark.parametrize("enqueue_many", [False, True])
async def test_stress_many_threads_and_epochs_deliver_every_example_once(
    enqueue_many: bool,
) -> None:
    n, epochs = 5000, 3
    async with ar.Coordinator():
        if enqueue_many:
            source: Any = ar.limit_epochs(np.arange(n), epochs)
        else:
            source = ar.slice_input_producer((np.arange(n),), num_epochs=epochs, capacity=64)
        b = ar.shuffle_batch(
            source,
            97,
            500,
            100,
            num_threads=8,
            enqueue_many=enqueue_many,
            allow_smaller_final_batch=True,
        )
        got = flat(await collect(b), None if enqueue_many else 0)
    assert Counter(got) == Counter(list(range(n)) * epochs)


@pytest.mark.both_backends
async def test_a_producer_queue_feeds_batch_inside_a_session() -> None:
    names = [f"f{i}" for i in range(5)]
    with anyio.fail_after(10):
        async with ar.Session():
            files = ar.string_input_producer(names, shuffle=False, capacity=3)
            b = ar.batch(files.dequeue, 5, capacity=6)
            first, second = await b.dequeue(), await b.dequeue()
    # The Session stops the endless producer when it ends.
    assert list(first) == list(second) == names
    assert files.is_closed()
    assert b.statistics().closed


# -- remainder (equal steps in a ranked session; nothing changes in one process) ---------


@pytest.mark.parametrize(
    "make",
    [
        lambda src, **kw: ar.batch(src, 4, **kw),
        lambda src, **kw: ar.maybe_batch(src, True, 4, **kw),
        lambda src, **kw: ar.shuffle_batch(src, 4, 20, 2, seed=1, **kw),
        lambda src, **kw: ar.maybe_shuffle_batch(src, 4, 20, 2, True, seed=1, **kw),
        lambda src, **kw: ar.batch_join([src], 4, **kw),
        lambda src, **kw: ar.maybe_batch_join([src], True, 4, **kw),
        lambda src, **kw: ar.shuffle_batch_join([src], 4, 20, 2, seed=1, **kw),
        lambda src, **kw: ar.maybe_shuffle_batch_join([src], 4, 20, 2, True, seed=1, **kw),
    ],
)
async def test_remainder_is_checked_and_changes_nothing_in_one_process(make: Any) -> None:
    async with ar.Coordinator():
        with pytest.raises(ar.InvalidArgumentError, match="remainder must be 'drop', 'pad'"):
            make(counter_source(10), remainder="all")
    for remainder in ("drop", "pad", "smaller"):
        batches = await run(functools.partial(make, counter_source(10), remainder=remainder))
        assert [len(b) for b in batches] == [4, 4]  # as without it: the last 2 dropped
        smaller = await run(
            functools.partial(
                make, counter_source(10), allow_smaller_final_batch=True, remainder=remainder
            )
        )
        assert sorted(flat(smaller)) == list(range(10))
