"""FIFOQueue: construction, every verb, ordering, closing and error messages (SPEC §2)."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable  # noqa: TC003 (annotations in nested defs)
from functools import partial

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._queues.statistics import QueueStatistics

pytestmark = pytest.mark.anyio


# -- construction ----------------------------------------------------------------------------


def test_attributes_untyped() -> None:
    q = ar.FIFOQueue(10)
    assert q.capacity == 10
    assert q.dtypes is None
    assert q.shapes is None
    assert q.names is None
    assert q.size() == 0
    assert not q.is_closed()


@pytest.mark.parametrize("capacity", [None, -1, -100])
def test_unbounded_capacity(capacity: int | None) -> None:
    assert ar.FIFOQueue(capacity).capacity is None


def test_attributes_typed() -> None:
    q = ar.FIFOQueue(5, ["float32", bytes, "int64"], [[2], [], (3, 4)], ["a", "b", "c"])
    assert q.dtypes == [np.dtype("float32"), np.dtype(object), np.dtype("int64")]
    assert q.shapes == [(2,), (), (3, 4)]
    assert q.names == ["a", "b", "c"]


@pytest.mark.parametrize("spelling", [object, bytes, str, "string", "object"])
def test_string_dtype_spellings(spelling: object) -> None:
    assert ar.FIFOQueue(1, [spelling]).dtypes == [np.dtype(object)]


def test_single_dtype_and_bare_shape_mean_one_component() -> None:
    q = ar.FIFOQueue(1, np.int32, [3])
    assert q.dtypes == [np.dtype("int32")]
    assert q.shapes == [(3,)]
    scalar = ar.FIFOQueue(1, np.int32, [])
    assert scalar.shapes == [()]


def test_default_names_are_unique_and_quoted() -> None:
    a, b = ar.FIFOQueue(1), ar.FIFOQueue(1)
    assert re.fullmatch(r"FIFOQueue_\d+", a.name)
    assert a.name != b.name
    assert ar.FIFOQueue(1, name="work").name == "work"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"dtypes": ["int32"], "shapes": [[None]]}, "All shapes must be fully defined: [[?]]"),
        (
            {"dtypes": ["int32", "int32"], "shapes": [[1]]},
            "Queue shapes must have the same length as dtypes",
        ),
        (
            {"dtypes": ["int32"], "names": ["a", "b"]},
            "Queue names must have the same length as dtypes",
        ),
        ({"dtypes": []}, "a queue needs at least one component dtype"),
        ({"shapes": [[1]]}, "shapes and names need dtypes"),
        ({"dtypes": ["no-such-type"]}, "not a dtype"),
    ],
)
def test_invalid_construction(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        ar.FIFOQueue(3, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("capacity", [1.5, "3", True])
def test_invalid_capacity(capacity: object) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="capacity must be an int or None"):
        ar.FIFOQueue(capacity)  # type: ignore[arg-type]


def test_invalid_construction_is_also_value_error() -> None:
    with pytest.raises(ValueError, match="All shapes must be fully defined"):
        ar.FIFOQueue(3, ["int32"], [[None, 2]])


# -- basic verbs -----------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_enqueue_dequeue_in_order() -> None:
    q = ar.FIFOQueue(10)
    for x in ["a", {"b": 1}, None, 3]:
        await q.enqueue(x)
    assert q.size() == 4
    assert [await q.dequeue() for _ in range(4)] == ["a", {"b": 1}, None, 3]
    assert q.size() == 0


async def test_enqueue_many_and_dequeue_many_untyped_return_lists() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many(range(5))
    assert await q.dequeue_many(3) == [0, 1, 2]
    assert await q.dequeue_many(2) == [3, 4]
    assert await q.dequeue_many(0) == []


async def test_enqueue_many_copies_the_input_list() -> None:
    q = ar.FIFOQueue(10)
    batch = [1, 2]
    await q.enqueue_many(batch)
    batch.append(3)
    assert q.size() == 2


@pytest.mark.parametrize("bad", ["abc", b"abc", 5])
async def test_untyped_enqueue_many_needs_a_sequence(bad: object) -> None:
    q = ar.FIFOQueue(10)
    with pytest.raises(ar.InvalidArgumentError, match="enqueue_many needs a sequence"):
        await q.enqueue_many(bad)
    assert q.size() == 0


async def test_nowait_variants() -> None:
    q = ar.FIFOQueue(2)
    with pytest.raises(anyio.WouldBlock):
        q.dequeue_nowait()
    q.enqueue_nowait(1)
    with pytest.raises(anyio.WouldBlock):
        q.enqueue_many_nowait([2, 3])
    q.enqueue_many_nowait([2])
    with pytest.raises(anyio.WouldBlock):
        q.enqueue_nowait(3)
    with pytest.raises(anyio.WouldBlock):
        q.dequeue_many_nowait(3)
    with pytest.raises(anyio.WouldBlock):
        q.dequeue_up_to_nowait(3)
    assert q.dequeue_many_nowait(1) == [1]
    assert q.dequeue_nowait() == 2
    q.enqueue_many_nowait([])
    await q.close()
    with pytest.raises(ar.QueueClosedError):
        q.enqueue_nowait(1)
    with pytest.raises(ar.QueueClosedError):
        q.enqueue_many_nowait([1])
    with pytest.raises(ar.OutOfRangeError):
        q.dequeue_nowait()
    with pytest.raises(ar.OutOfRangeError):
        q.dequeue_up_to_nowait(2)


async def test_nowait_dequeue_up_to_after_close_returns_remainder() -> None:
    q = ar.FIFOQueue(5)
    await q.enqueue_many([1, 2])
    await q.close()
    assert q.dequeue_up_to_nowait(5) == [1, 2]
    assert q.dequeue_many_nowait(0) == []


async def test_nowait_refuses_to_overtake_waiters() -> None:
    q = ar.FIFOQueue(1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue)
            await anyio.wait_all_tasks_blocked()
            await q.enqueue(1)  # woken dequeuer has not run yet
            with pytest.raises(anyio.WouldBlock):
                q.dequeue_nowait()
        assert q.size() == 0
        await q.enqueue(1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue, 2)
            await anyio.wait_all_tasks_blocked()
            assert q.dequeue_nowait() == 1
            with pytest.raises(anyio.WouldBlock):
                q.enqueue_nowait(3)
    assert q.dequeue_nowait() == 2


async def test_statistics_and_repr() -> None:
    q = ar.FIFOQueue(3, name="stats")
    await q.enqueue_many([1, 2, 3])
    await q.dequeue()
    stats = q.statistics()
    assert stats == QueueStatistics(
        size=2,
        capacity=3,
        closed=False,
        tasks_waiting_enqueue=0,
        tasks_waiting_dequeue=0,
        peak_size=3,
        total_enqueued=3,
        total_dequeued=1,
    )
    with pytest.raises(AttributeError):
        stats.size = 5  # type: ignore[misc]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, [4, 5])
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_enqueue == 1
            assert repr(q) == (
                "<FIFOQueue 'stats' size=3 capacity=3 closed=False "
                "waiting_enqueue=1 waiting_dequeue=0>"
            )
            await q.dequeue_many(3)
    assert "capacity=unbounded" in repr(ar.FIFOQueue(None))


# -- blocking and ordering ---------------------------------------------------------------------


@pytest.mark.both_backends
async def test_dequeue_blocks_until_enqueue() -> None:
    q = ar.FIFOQueue(10)
    got: list[object] = []

    async def consumer() -> None:
        got.append(await q.dequeue())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_dequeue == 1
            await q.enqueue("x")
    assert got == ["x"]


@pytest.mark.both_backends
async def test_enqueue_blocks_while_full() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue(1)
    done = anyio.Event()

    async def producer() -> None:
        await q.enqueue(2)
        done.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await anyio.wait_all_tasks_blocked()
            assert not done.is_set()
            assert await q.dequeue() == 1
            await anyio.wait_all_tasks_blocked()
            assert done.is_set()
    assert await q.dequeue() == 2


async def test_capacity_zero_blocks_every_enqueue_until_close() -> None:
    q = ar.FIFOQueue(0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def producer() -> None:
                with pytest.raises(ar.QueueClosedError, match="Enqueue operation was cancelled"):
                    await q.enqueue(1)

            tg.start_soon(producer)
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_enqueue == 1
            await q.close(cancel_pending_enqueues=True)


async def test_blocked_dequeuers_served_in_arrival_order() -> None:
    q = ar.FIFOQueue(10)
    order: list[tuple[int, object]] = []

    async def consumer(i: int) -> None:
        order.append((i, await q.dequeue()))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(5):
                tg.start_soon(consumer, i)
                await anyio.wait_all_tasks_blocked()
            await q.enqueue_many(["a", "b", "c", "d", "e"])
    assert order == [(0, "a"), (1, "b"), (2, "c"), (3, "d"), (4, "e")]


async def test_blocked_enqueuers_served_in_arrival_order() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue(0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for i in range(1, 5):
                tg.start_soon(q.enqueue, i)
                await anyio.wait_all_tasks_blocked()
            got = [await q.dequeue() for _ in range(5)]
    assert got == [0, 1, 2, 3, 4]


async def test_enqueue_many_is_progressive_and_blocks_later_enqueues() -> None:
    q = ar.FIFOQueue(2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, [1, 2, 3, 4, 5])
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 2  # partial batch visible at once
            tg.start_soon(q.enqueue, "late")
            await anyio.wait_all_tasks_blocked()
            assert q.statistics().tasks_waiting_enqueue == 2
            got = [await q.dequeue() for _ in range(6)]
    assert got == [1, 2, 3, 4, 5, "late"]


async def test_enqueue_many_larger_than_capacity() -> None:
    q = ar.FIFOQueue(3)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, list(range(10)))
            got = await q.dequeue_many(10)
    assert got == list(range(10))


async def test_dequeue_many_is_progressive_and_blocks_later_dequeues() -> None:
    q = ar.FIFOQueue(10)
    results: dict[str, object] = {}

    async def many() -> None:
        results["many"] = await q.dequeue_many(3)

    async def single() -> None:
        results["single"] = await q.dequeue()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(many)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(single)
            await anyio.wait_all_tasks_blocked()
            await q.enqueue_many([1, 2])
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0  # taken and held by the batch
            assert results == {}
            await q.enqueue_many([3, 4])
    assert results == {"many": [1, 2, 3], "single": 4}


async def test_dequeue_up_to_waits_for_full_batch_while_open() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many([1, 2])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            result: list[object] = []

            async def up_to() -> None:
                result.extend(await q.dequeue_up_to(3))

            tg.start_soon(up_to)
            await anyio.wait_all_tasks_blocked()
            assert result == []
            await q.enqueue(3)
    assert result == [1, 2, 3]


# -- close -----------------------------------------------------------------------------------


@pytest.mark.both_backends
async def test_dequeue_from_closed_empty_queue() -> None:
    q = ar.FIFOQueue(10, name="q")
    await q.close()
    assert q.is_closed()
    with pytest.raises(
        ar.OutOfRangeError,
        match=re.escape(
            "FIFOQueue 'q' is closed and has insufficient elements (requested 1, current size 0)"
        ),
    ):
        await q.dequeue()


async def test_elements_present_at_close_are_delivered() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many([1, 2, 3])
    await q.close()
    assert await q.dequeue() == 1
    assert await q.dequeue_many(2) == [2, 3]
    with pytest.raises(ar.OutOfRangeError):
        await q.dequeue()


async def test_enqueue_to_closed_queue() -> None:
    q = ar.FIFOQueue(10, name="closed")
    await q.close()
    with pytest.raises(ar.QueueClosedError, match=re.escape("FIFOQueue 'closed' is closed.")):
        await q.enqueue(1)
    with pytest.raises(ar.QueueClosedError, match=re.escape("FIFOQueue 'closed' is closed.")):
        await q.enqueue_many([1])
    await q.enqueue_many([])  # an empty batch succeeds even when closed


async def test_second_plain_close_fails() -> None:
    q = ar.FIFOQueue(10, name="twice")
    await q.close()
    with pytest.raises(ar.QueueClosedError, match=re.escape("Queue 'twice' is already closed.")):
        await q.close()
    await q.close(cancel_pending_enqueues=True)  # never errors


@pytest.mark.both_backends
async def test_close_wakes_blocked_dequeuers() -> None:
    q = ar.FIFOQueue(10, name="w")
    errors: list[str] = []

    async def consumer() -> None:
        with pytest.raises(ar.OutOfRangeError) as info:
            await q.dequeue()
        errors.append(str(info.value))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(3):
                tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            await q.close()
    assert (
        errors
        == ["FIFOQueue 'w' is closed and has insufficient elements (requested 1, current size 0)"]
        * 3
    )


async def test_plain_close_waits_behind_pending_enqueues() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue(1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, [2, 3])
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(q.close)
            await anyio.wait_all_tasks_blocked()
            assert not q.is_closed()
            assert q.statistics().tasks_waiting_enqueue == 2
            assert await q.dequeue() == 1
            assert await q.dequeue() == 2
            assert not q.is_closed()
            assert await q.dequeue() == 3
            await anyio.wait_all_tasks_blocked()
            assert q.is_closed()
    with pytest.raises(ar.OutOfRangeError):
        await q.dequeue()


async def test_enqueue_after_queued_close_fails_when_close_runs() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue(1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue, 2)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(q.close)
            await anyio.wait_all_tasks_blocked()

            async def late() -> None:
                with pytest.raises(ar.QueueClosedError, match="is closed"):
                    await q.enqueue(3)

            tg.start_soon(late)
            await anyio.wait_all_tasks_blocked()
            assert await q.dequeue_many(2) == [1, 2]


async def test_cancel_pending_enqueues() -> None:
    q = ar.FIFOQueue(2)
    await q.enqueue_many([1, 2])
    messages: list[str] = []

    async def blocked(op: Callable[[], Awaitable[None]]) -> None:
        with pytest.raises(ar.QueueClosedError) as info:
            await op()
        messages.append(str(info.value))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for op in (partial(q.enqueue, 3), partial(q.enqueue_many, [4, 5]), q.close):
                tg.start_soon(blocked, op)
                await anyio.wait_all_tasks_blocked()
            await q.close(cancel_pending_enqueues=True)
            assert q.is_closed()
    assert messages == ["Enqueue operation was cancelled"] * 3
    assert await q.dequeue_many(2) == [1, 2]
    assert q.statistics().tasks_waiting_enqueue == 0


async def test_cancel_pending_enqueues_keeps_partial_enqueue_many() -> None:
    q = ar.FIFOQueue(2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def producer() -> None:
                with pytest.raises(ar.QueueClosedError):
                    await q.enqueue_many([1, 2, 3, 4])

            tg.start_soon(producer)
            await anyio.wait_all_tasks_blocked()
            assert await q.dequeue() == 1
            await anyio.wait_all_tasks_blocked()
            await q.close(cancel_pending_enqueues=True)
    assert await q.dequeue_up_to(10) == [2, 3]


async def test_dequeue_many_put_back_on_close() -> None:
    q = ar.FIFOQueue(10, name="pb")
    await q.enqueue_many([1, 2])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def many() -> None:
                with pytest.raises(
                    ar.OutOfRangeError,
                    match=re.escape(
                        "FIFOQueue 'pb' is closed and has insufficient elements "
                        "(requested 2, current size 1)"
                    ),
                ):
                    await q.dequeue_many(5)

            tg.start_soon(many)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            await q.enqueue(3)
            await anyio.wait_all_tasks_blocked()
            await q.enqueue(4)  # not yet taken when the queue closes
            await q.close()
    # Taken elements went back to the front, in order.
    assert await q.dequeue_many(4) == [1, 2, 3, 4]


async def test_dequeue_many_closed_insufficient_message() -> None:
    q = ar.FIFOQueue(10, name="m")
    await q.enqueue_many([1, 2])
    await q.close()
    with pytest.raises(
        ar.OutOfRangeError,
        match=re.escape(
            "FIFOQueue 'm' is closed and has insufficient elements (requested 3, current size 2)"
        ),
    ):
        await q.dequeue_many(3)
    assert q.size() == 2
    assert await q.dequeue_up_to(3) == [1, 2]
    with pytest.raises(ar.OutOfRangeError, match=re.escape("(requested 3, current size 0)")):
        await q.dequeue_up_to(3)


async def test_dequeue_up_to_returns_partial_batch_when_closed_while_waiting() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many([1, 2])
    result: list[object] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def up_to() -> None:
                result.extend(await q.dequeue_up_to(5))

            tg.start_soon(up_to)
            await anyio.wait_all_tasks_blocked()
            await q.enqueue(3)
            await q.close()
    assert result == [1, 2, 3]


async def test_dequeue_many_zero_succeeds_on_closed_queue() -> None:
    q = ar.FIFOQueue(10)
    await q.close()
    assert await q.dequeue_many(0) == []
    assert await q.dequeue_up_to(0) == []


@pytest.mark.parametrize(
    ("method", "op"), [("dequeue_many", "DequeueManyOp"), ("dequeue_up_to", "DequeueUpToOp")]
)
async def test_negative_batch_size(method: str, op: str) -> None:
    q = ar.FIFOQueue(10)
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(f"{op} requested -1 < 0 elements")):
        await getattr(q, method)(-1)
    with pytest.raises(ar.InvalidArgumentError, match="non-integer count"):
        await getattr(q, method)(1.5)


async def test_session_close_hook_cancels_pending_enqueues() -> None:
    q = ar.FIFOQueue(0)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def producer() -> None:
                with pytest.raises(ar.QueueClosedError):
                    await q.enqueue(1)

            tg.start_soon(producer)
            await anyio.wait_all_tasks_blocked()
            await q._session_close()
    assert q.is_closed()


# -- typed elements --------------------------------------------------------------------------


async def test_typed_tuple_elements_round_trip() -> None:
    q = ar.FIFOQueue(10, ["float32", "string"], [[2], []])
    await q.enqueue(([1, 2], b"x"))
    value, text = await q.dequeue()
    assert value.dtype == np.float32
    np.testing.assert_array_equal(value, [1.0, 2.0])
    assert text == b"x"


async def test_typed_list_is_components_when_several() -> None:
    q = ar.FIFOQueue(10, ["int32", "int32"])
    await q.enqueue([1, 2])
    assert await q.dequeue() == (1, 2)


async def test_typed_single_component_bare_value_and_list_value() -> None:
    q = ar.FIFOQueue(10, "int64", [3])
    await q.enqueue([1, 2, 3])
    await q.enqueue(([4, 5, 6],))
    np.testing.assert_array_equal(await q.dequeue(), [1, 2, 3])
    np.testing.assert_array_equal(await q.dequeue(), [4, 5, 6])


async def test_typed_scalar_components_are_numpy_scalars() -> None:
    q = ar.FIFOQueue(10, ["int32"], [[]])
    await q.enqueue(7)
    got = await q.dequeue()
    assert isinstance(got, np.int32)
    assert got == 7


async def test_typed_enqueue_copies_its_input() -> None:
    q = ar.FIFOQueue(10, ["int32"], [[2]])
    data = np.array([1, 2], dtype=np.int32)
    await q.enqueue(data)
    await q.enqueue_many(data.reshape(1, 2))
    data[:] = 0
    np.testing.assert_array_equal(await q.dequeue(), [1, 2])
    np.testing.assert_array_equal(await q.dequeue(), [1, 2])


async def test_typed_names_use_dicts() -> None:
    q = ar.FIFOQueue(10, ["int32", "string"], [[], []], names=["n", "s"])
    await q.enqueue({"n": 1, "s": "one"})
    await q.enqueue_many({"n": [2, 3], "s": [b"two", b"three"]})
    assert await q.dequeue() == {"n": 1, "s": "one"}
    batch = await q.dequeue_many(2)
    assert set(batch) == {"n", "s"}
    np.testing.assert_array_equal(batch["n"], [2, 3])
    assert batch["s"].tolist() == [b"two", b"three"]


@pytest.mark.parametrize(
    ("names", "vals", "message"),
    [
        (None, {"a": 1}, "Queue must have names to enqueue a dictionary"),
        (["a"], (1,), "You must enqueue a dictionary in a Queue with names"),
        (
            ["a"],
            {"b": 1},
            "Keys in dictionary to enqueue do not match names of Queue.  "
            "Dictionary: ['b'], Queue: ['a']",
        ),
    ],
)
async def test_names_errors(names: list[str] | None, vals: object, message: str) -> None:
    q = ar.FIFOQueue(10, ["int32"], names=names)
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.enqueue(vals)
    assert q.size() == 0


@pytest.mark.parametrize(
    ("vals", "message"),
    [
        ((1,), "Wrong number of components in tuple. Expected 2, got 1"),
        ((1, 2, 3), "Wrong number of components in tuple. Expected 2, got 3"),
        (5, "Wrong number of components in tuple. Expected 2, got 1"),
        (("x", b"a"), "Type mismatch in tuple component 0. Expected float, got string"),
        ((1.5, 2), "Type mismatch in tuple component 1. Expected string, got int64"),
        ((np.array([1.5]), b"a"), "Shape mismatch in tuple component 0. Expected [], got [1]"),
        ((np.float64(1.0), [b"a"]), "Shape mismatch in tuple component 1. Expected [], got [1]"),
    ],
)
async def test_enqueue_validation_errors(vals: object, message: str) -> None:
    q = ar.FIFOQueue(10, ["float32", "string"], [[], []])
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.enqueue(vals)
    assert q.size() == 0


async def test_float_into_int_component_is_a_type_mismatch() -> None:
    q = ar.FIFOQueue(10, ["int32"])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Type mismatch in tuple component 0. Expected int32, got double"),
    ):
        await q.enqueue(1.5)
    with pytest.raises(ar.InvalidArgumentError, match="Expected int32, got float"):
        await q.enqueue(np.float32(1.5))


@pytest.mark.parametrize(
    ("vals", "message"),
    [
        (
            ([[1, 2]], [b"a"]),
            "Shape mismatch in tuple component 0. Expected [1,3], got [1,2]",
        ),
        (
            ([[1, 2, 3]], [b"a", b"b"]),
            "Shape mismatch in tuple component 1. Expected [1], got [2]",
        ),
        ((5, [b"a"]), "Shape must be at least rank 1 but is rank 0 for component 0"),
    ],
)
async def test_enqueue_many_validation_errors(vals: object, message: str) -> None:
    q = ar.FIFOQueue(10, ["int32", "string"], [[3], []])
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.enqueue_many(vals)
    assert q.size() == 0


async def test_enqueue_many_without_shapes_needs_equal_batch_sizes() -> None:
    q = ar.FIFOQueue(10, ["int32", "int32"])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape(
            "All input tensors must have the same size in the 0th dimension. "
            "Component 1 has 3, and should have 2"
        ),
    ):
        await q.enqueue_many(([1, 2], [1, 2, 3]))
    await q.enqueue_many(([1, 2], [[1, 1], [2, 2]]))  # shapes may differ per component
    assert q.size() == 2


async def test_typed_dequeue_many_stacks_components() -> None:
    q = ar.FIFOQueue(10, ["int16", "float64", object], [[2], [], []])
    await q.enqueue_many(([[1, 2], [3, 4], [5, 6]], [0.5, 1.5, 2.5], [b"a", "b", b"c"]))
    ints, floats, objs = await q.dequeue_many(3)
    assert ints.dtype == np.int16
    assert ints.shape == (3, 2)
    np.testing.assert_array_equal(floats, [0.5, 1.5, 2.5])
    assert objs.dtype == object
    assert objs.tolist() == [b"a", "b", b"c"]


async def test_typed_dequeue_many_zero_gives_empty_batch_shapes() -> None:
    q = ar.FIFOQueue(10, ["int32", "string"], [[2, 3], []])
    a, b = await q.dequeue_many(0)
    assert a.shape == (0, 2, 3)
    assert a.dtype == np.int32
    assert b.shape == (0,)
    assert b.dtype == object


async def test_typed_dequeue_many_requires_shapes() -> None:
    q = ar.FIFOQueue(10, ["int32"])
    message = (
        "FIFOQueue's DequeueMany and DequeueUpTo require the components to have specified shapes."
    )
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.dequeue_many(1)
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.dequeue_up_to(0)


async def test_string_component_rejects_numbers_and_keeps_bytes_exact() -> None:
    q = ar.FIFOQueue(10, [bytes], [[2]])
    await q.enqueue([b"a\x00", b""])
    got = await q.dequeue()
    assert got.tolist() == [b"a\x00", b""]
    with pytest.raises(ar.InvalidArgumentError, match="Expected string, got int64"):
        await q.enqueue([b"a", 1])
    with pytest.raises(ar.InvalidArgumentError, match="Expected string, got float"):
        await q.enqueue(np.zeros(2, np.float32))


async def test_a_string_batch_is_checked_element_by_element() -> None:
    class Name(str):
        pass

    q = ar.FIFOQueue(None, [object], shapes=[[]])
    await q.enqueue_many(([b"a"] * 500 + [Name("b")],))  # a str subclass is a string
    assert (await q.dequeue_many(501))[-1] == "b"
    for bad, got in ((None, "NoneType"), (7, "int64"), (object(), "object")):
        with pytest.raises(
            ar.InvalidArgumentError,
            match=rf"^Type mismatch in tuple component 0\. Expected string, got {got}$",
        ):
            await q.enqueue_many(([b"a"] * 500 + [bad] + [b"c"],))
    assert q.size() == 0


# -- ported from TensorFlow's fifo_queue_test.py --------------------------------------------


async def test_tf_blocking_dequeue_many_from_closed_queue() -> None:
    q = ar.FIFOQueue(4, "float32", ())
    elems = [10.0, 20.0, 30.0, 40.0]
    await q.enqueue_many((elems,))
    np.testing.assert_array_equal(await q.dequeue_many(3), elems[:3])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def blocked() -> None:
                with pytest.raises(ar.OutOfRangeError, match="is closed and has insufficient"):
                    await q.dequeue_many(3)

            tg.start_soon(blocked)
            await anyio.wait_all_tasks_blocked()
            await q.close()
    assert await q.dequeue() == 40.0


async def test_tf_blocking_enqueue_many_before_close() -> None:
    q = ar.FIFOQueue(4, "float32")
    await q.enqueue_many(([10.0, 20.0, 30.0],))
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, ([50.0, 60.0],))
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(q.close)
            await anyio.wait_all_tasks_blocked()
            assert not q.is_closed()
            assert await q.dequeue() == 10.0  # unblocks the enqueue, then the close
    assert q.is_closed()
    assert [float(await q.dequeue()) for _ in range(4)] == [20.0, 30.0, 50.0, 60.0]


async def test_tf_multi_component_dequeue_many_shapes() -> None:
    q = ar.FIFOQueue(10, ("float32", "int32"), shapes=((), (2,)))
    floats = [float(10 * (i + 1)) for i in range(10)]
    ints = [[2 * i + 1, 2 * i + 2] for i in range(10)]
    await q.enqueue_many((floats, ints))
    f, i = await q.dequeue_many(4)
    np.testing.assert_array_equal(f, floats[:4])
    np.testing.assert_array_equal(i, ints[:4])
    assert (f.shape, i.shape) == ((4,), (4, 2))
    f, i = await q.dequeue_many(4)
    np.testing.assert_array_equal(i, ints[4:8])
    f1, i1 = await q.dequeue()
    assert f1 == floats[8]
    np.testing.assert_array_equal(i1, ints[8])
    assert (np.shape(f1), i1.shape) == ((), (2,))


@pytest.mark.parametrize(
    "cls", [ar.FIFOQueue, ar.RandomShuffleQueue, ar.PaddingFIFOQueue, ar.PriorityQueue]
)
def test_queue_types_are_public_at_top_level(cls: type) -> None:
    assert cls.__module__ == "asyncreader"
    assert getattr(ar, cls.__name__) is cls
    assert cls.__doc__


async def test_numpy_integers_are_accepted_as_sizes() -> None:
    q = ar.FIFOQueue(np.int64(3))
    assert q.capacity == 3
    await q.enqueue_many([1, 2, 3])
    assert await q.dequeue_many(np.int32(2)) == [1, 2]
    rsq = ar.RandomShuffleQueue(np.int64(5), np.int64(1), seed=np.uint32(3))
    assert (rsq.min_after_dequeue, rsq.seed) == (1, 3)
    assert type(rsq.seed) is int


async def test_out_of_range_python_int_is_a_type_mismatch() -> None:
    q = ar.FIFOQueue(10, ["uint8"], [[]])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Type mismatch in tuple component 0. Expected uint8, got int 300"),
    ):
        await q.enqueue(300)
    await q.enqueue(255)
    assert await q.dequeue() == 255


async def test_typed_batches_spanning_chunks_and_put_back() -> None:
    q = ar.FIFOQueue(100, ["int64", "string"], [[2], []])
    await q.enqueue_many(([[0, 0], [1, 1], [2, 2]], [b"0", b"1", b"2"]))
    await q.enqueue(([3, 3], b"3"))
    await q.enqueue_many(([[4, 4], [5, 5]], [b"4", b"5"]))
    ints, texts = await q.dequeue_many(2)  # inside the first chunk
    assert ints.tolist() == [[0, 0], [1, 1]]
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue_many, 10)  # takes 2..5, then waits
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            tg.cancel_scope.cancel()  # puts 2..5 back at the front, in order
    ints, texts = await q.dequeue_many(4)  # spans three chunks
    assert ints.tolist() == [[2, 2], [3, 3], [4, 4], [5, 5]]
    assert texts.tolist() == [b"2", b"3", b"4", b"5"]
    await q.enqueue_many(([[6, 6], [7, 7]], [b"6", b"7"]))
    assert (await q.dequeue())[0].tolist() == [6, 6]
    ints, _ = await q.dequeue_many(1)  # the last row of a chunk
    assert ints.tolist() == [[7, 7]]
