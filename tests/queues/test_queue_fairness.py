"""Arrival order per side at the moment between a waiter's wakeup and its task running.

A blocked attempt that was woken stays at the head of its side until its task runs; a
newcomer calling in the same scheduling step (before that task ran) must queue behind it,
never take its element or its room (SPEC §2.3, API.md "Blocked callers are served in
arrival order per side"). Each test wakes a waiter and, without yielding, lets a newcomer
call; no sleeps, so the interleaving is the same on every run and on both backends.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from asyncreader._queues.base import QueueBase

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


@dataclass
class Kind:
    """How to build a queue type and move int elements through it."""

    name: str
    build: Callable[[int], QueueBase]
    one: Callable[[int], Any]
    many: Callable[[list[int]], Any]
    read_one: Callable[[Any], int]
    read_many: Callable[[Any], list[int]]


def _plain(name: str, build: Callable[[int], QueueBase]) -> Kind:
    return Kind(
        name,
        build,
        lambda v: v,
        lambda vs: (np.array(vs, np.int64),),
        int,
        lambda xs: [int(x) for x in xs],
    )


KINDS = [
    _plain("fifo", lambda cap: ar.FIFOQueue(cap, ["int64"], [[]])),
    _plain("shuffle", lambda cap: ar.RandomShuffleQueue(cap, 0, ["int64"], [[]], seed=3)),
    _plain("padding", lambda cap: ar.PaddingFIFOQueue(cap, ["int64"], [[]])),
    Kind(
        "priority",
        lambda cap: ar.PriorityQueue(cap, ["int64"], [[]]),
        lambda v: (0, v),
        lambda vs: ([0] * len(vs), np.array(vs, np.int64)),
        lambda x: int(x[1]),
        lambda xs: [int(v) for v in xs[1]],
    ),
]

DEQUEUES_NOWAIT: dict[str, Callable[[QueueBase], object]] = {
    "dequeue_nowait": lambda q: q.dequeue_nowait(),
    "dequeue_many_nowait": lambda q: q.dequeue_many_nowait(1),
    "dequeue_up_to_nowait": lambda q: q.dequeue_up_to_nowait(1),
}


async def _dequeue(kind: Kind, q: QueueBase) -> list[int]:
    return [kind.read_one(await q.dequeue())]


async def _dequeue_many(kind: Kind, q: QueueBase) -> list[int]:
    return kind.read_many(await q.dequeue_many(1))


async def _dequeue_up_to(kind: Kind, q: QueueBase) -> list[int]:
    return kind.read_many(await q.dequeue_up_to(1))


# A newcomer on the dequeue side: it returns the ints it got.
DEQUEUES: dict[str, Callable[[Kind, QueueBase], Awaitable[list[int]]]] = {
    "dequeue": _dequeue,
    "dequeue_many": _dequeue_many,
    "dequeue_up_to": _dequeue_up_to,
}


async def _enqueue(kind: Kind, q: QueueBase, v: int) -> None:
    await q.enqueue(kind.one(v))


async def _enqueue_many(kind: Kind, q: QueueBase, v: int) -> None:
    await q.enqueue_many(kind.many([v]))


ENQUEUES: dict[str, Callable[[Kind, QueueBase, int], Awaitable[None]]] = {
    "enqueue": _enqueue,
    "enqueue_many": _enqueue_many,
}
ENQUEUES_NOWAIT: dict[str, Callable[[Kind, QueueBase, int], None]] = {
    "enqueue_nowait": lambda kind, q, v: q.enqueue_nowait(kind.one(v)),
    "enqueue_many_nowait": lambda kind, q, v: q.enqueue_many_nowait(kind.many([v])),
}

_kinds = pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)


@_kinds
@pytest.mark.parametrize("newcomer", list(DEQUEUES_NOWAIT))
async def test_a_nowait_dequeue_does_not_take_a_woken_dequeuers_element(
    kind: Kind, newcomer: str
) -> None:
    q = kind.build(10)
    got: list[int] = []

    async def first() -> None:
        got.append(kind.read_one(await q.dequeue()))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            await anyio.wait_all_tasks_blocked()
            q.enqueue_nowait(kind.one(1))  # wakes ``first``; it has not run yet
            with pytest.raises(anyio.WouldBlock):
                DEQUEUES_NOWAIT[newcomer](q)
    assert got == [1]
    assert q.size() == 0


@_kinds
@pytest.mark.parametrize("newcomer", list(DEQUEUES))
async def test_a_new_dequeue_queues_behind_a_woken_dequeuer(kind: Kind, newcomer: str) -> None:
    q = kind.build(10)
    got: list[int] = []
    first_done = anyio.Event()

    async def first() -> None:
        got.append(kind.read_one(await q.dequeue()))
        first_done.set()

    async def feed_after_first() -> None:
        await first_done.wait()
        q.enqueue_nowait(kind.one(2))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(feed_after_first)
            await anyio.wait_all_tasks_blocked()
            q.enqueue_nowait(kind.one(1))  # wakes ``first``; it has not run yet
            # In the same step: the newcomer must wait behind ``first``, not take 1.
            mine = await DEQUEUES[newcomer](kind, q)
            assert got == [1], "the newcomer overtook the woken dequeuer"
            assert mine == [2]
    assert q.size() == 0


@_kinds
@pytest.mark.parametrize("newcomer", list(ENQUEUES_NOWAIT))
async def test_a_nowait_enqueue_does_not_take_a_woken_enqueuers_room(
    kind: Kind, newcomer: str
) -> None:
    q = kind.build(1)
    q.enqueue_nowait(kind.one(0))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(_enqueue, kind, q, 1)
            await anyio.wait_all_tasks_blocked()
            assert kind.read_one(q.dequeue_nowait()) == 0  # wakes the enqueue of 1
            with pytest.raises(anyio.WouldBlock):
                ENQUEUES_NOWAIT[newcomer](kind, q, 2)
    assert kind.read_one(q.dequeue_nowait()) == 1
    assert q.size() == 0


@_kinds
@pytest.mark.parametrize("newcomer", list(ENQUEUES))
async def test_a_new_enqueue_queues_behind_a_woken_enqueuer(kind: Kind, newcomer: str) -> None:
    q = kind.build(1)
    q.enqueue_nowait(kind.one(0))
    first_done = anyio.Event()
    drained: list[int] = []

    async def first() -> None:
        await q.enqueue(kind.one(1))
        first_done.set()

    async def drain_after_first() -> None:
        await first_done.wait()
        drained.append(kind.read_one(q.dequeue_nowait()))

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(first)
            tg.start_soon(drain_after_first)
            await anyio.wait_all_tasks_blocked()
            assert kind.read_one(q.dequeue_nowait()) == 0  # wakes ``first``; not run yet
            # In the same step: the newcomer must wait behind ``first``, not take its room.
            await ENQUEUES[newcomer](kind, q, 2)
            assert first_done.is_set(), "the newcomer overtook the woken enqueuer"
            assert drained == [1]
    assert kind.read_one(q.dequeue_nowait()) == 2
    assert q.size() == 0
