"""PriorityQueue: smallest priority first, all-or-nothing batches (SPEC §2.7)."""

from __future__ import annotations

import re
from typing import Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

pytestmark = pytest.mark.anyio


def test_attributes() -> None:
    q = ar.PriorityQueue(10, [bytes, "float32"], [[], [2]])
    assert q.dtypes == [np.dtype("int64"), np.dtype(object), np.dtype("float32")]
    assert q.shapes == [(), (), (2,)]
    assert re.fullmatch(r"PriorityQueue_\d+", q.name)


@pytest.mark.both_backends
async def test_smallest_priority_first_with_values_paired() -> None:
    q = ar.PriorityQueue(10, [bytes], [[]])
    for prio in [5, -1, 3, 3, 10]:
        await q.enqueue((prio, str(prio).encode()))
    got = [await q.dequeue() for _ in range(5)]
    assert [int(p) for p, _ in got] == [-1, 3, 3, 5, 10]
    assert all(v == str(int(p)).encode() for p, v in got)


async def test_enqueue_many_and_sorted_batches() -> None:
    q = ar.PriorityQueue(10, ["int32"], [[]])
    await q.enqueue_many(([4, 1, 3, 2], [40, 10, 30, 20]))
    prios, values = await q.dequeue_many(3)
    np.testing.assert_array_equal(prios, [1, 2, 3])
    np.testing.assert_array_equal(values, [10, 20, 30])
    assert prios.dtype == np.int64


async def test_dequeue_many_is_all_or_nothing_while_open() -> None:
    q = ar.PriorityQueue(10, ["int32"], [[]])
    await q.enqueue_many(([3, 1], [3, 1]))
    result: list[Any] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                result.append(await q.dequeue_many(3))

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 2  # nothing taken yet
            await q.enqueue((2, 2))
    prios, _ = result[0]
    np.testing.assert_array_equal(prios, [1, 2, 3])


async def test_closed_dequeue_many_takes_nothing() -> None:
    q = ar.PriorityQueue(10, ["int32"], [[]], name="pq")
    await q.enqueue_many(([2, 1], [2, 1]))
    await q.close()
    with pytest.raises(
        ar.OutOfRangeError,
        match=re.escape(
            "PriorityQueue 'pq' is closed and has insufficient elements "
            "(requested 3, current size 2)"
        ),
    ):
        await q.dequeue_many(3)
    assert q.size() == 2


async def test_closed_dequeue_up_to_returns_sorted_remainder() -> None:
    q = ar.PriorityQueue(10, ["int32"], [[]])
    await q.enqueue_many(([9, 4, 7], [9, 4, 7]))
    result: list[Any] = []
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:

            async def consumer() -> None:
                result.append(await q.dequeue_up_to(5))

            tg.start_soon(consumer)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 3
            await q.close()
    prios, values = result[0]
    np.testing.assert_array_equal(prios, [4, 7, 9])
    np.testing.assert_array_equal(values, [4, 7, 9])
    with pytest.raises(ar.OutOfRangeError):
        await q.dequeue_up_to(5)


@pytest.mark.parametrize(
    ("shapes", "vals", "message"),
    [
        ([[]], (1.5, 1), "Type mismatch in tuple component 0. Expected int64, got double"),
        ([[]], ([1, 2], 1), "Shape mismatch in tuple component 0. Expected [], got [2]"),
        (
            None,
            ([1, 2], 1),
            "Expected the priority element to be a scalar, but received shape: [2]",
        ),
        ([[]], (1,), "Wrong number of components in tuple. Expected 2, got 1"),
    ],
)
async def test_enqueue_priority_errors(shapes: object, vals: object, message: str) -> None:
    q = ar.PriorityQueue(10, ["int32"], shapes)
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        await q.enqueue(vals)
    assert q.size() == 0


async def test_enqueue_many_priority_must_be_a_vector() -> None:
    q = ar.PriorityQueue(10, ["int32"], None)
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Expected the priority element to be a vector, but received shape: [2,2]"),
    ):
        await q.enqueue_many(([[1, 2], [3, 4]], [1, 2]))


async def test_dequeue_many_requires_shapes() -> None:
    q = ar.PriorityQueue(10, ["int32"], None)
    await q.enqueue((1, 1))
    assert await q.dequeue() == (1, 1)
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape(
            "PriorityQueue's DequeueMany requires the components to have specified shapes."
        ),
    ):
        await q.dequeue_many(1)
    with pytest.raises(ar.InvalidArgumentError, match=re.escape("DequeueUpToOp requested -2 < 0")):
        await q.dequeue_up_to(-2)


async def test_names_cover_the_priority() -> None:
    q = ar.PriorityQueue(10, [bytes], [[]], names=["priority", "value"])
    await q.enqueue({"priority": 2, "value": b"b"})
    await q.enqueue({"priority": 1, "value": b"a"})
    assert await q.dequeue() == {"priority": 1, "value": b"a"}
    batch = await q.dequeue_many(1)
    assert batch["priority"].tolist() == [2]


def test_invalid_construction() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="needs the types"):
        ar.PriorityQueue(10, None, None)
    with pytest.raises(ar.InvalidArgumentError, match="same length as dtypes"):
        ar.PriorityQueue(10, ["int32"], [[], []])


async def test_closed_enqueue_message() -> None:
    q = ar.PriorityQueue(10, ["int32"], [[]], name="p")
    await q.close()
    with pytest.raises(ar.QueueClosedError, match=re.escape("PriorityQueue 'p' is closed.")):
        await q.enqueue((1, 1))
