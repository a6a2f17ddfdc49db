"""Many producers and consumers, cancellation at random points: nothing lost or duplicated."""

from __future__ import annotations

import contextlib
import functools
import random
import subprocess
import sys
from collections import Counter, deque
from collections.abc import Awaitable, Callable  # noqa: TC003 (dataclass fields)
from dataclasses import dataclass, field
from typing import Any

import anyio
import numpy as np
import pytest
from anyio.lowlevel import checkpoint
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._queues.base import (
    YIELD_INTERVAL,
    QueueBase,
)

pytestmark = pytest.mark.anyio

Label = tuple[int, int, int]  # (producer, batch, index in batch)


@dataclass
class Kind:
    """How to build a queue type and move labelled elements through it."""

    name: str
    build: Callable[[random.Random, int], QueueBase]
    encode_one: Callable[[random.Random, int], Any]
    encode_many: Callable[[random.Random, list[int]], Any]
    decode_one: Callable[[Any], int]
    decode_many: Callable[[Any], list[int]]


def _untyped(name: str, build: Callable[[random.Random, int], QueueBase]) -> Kind:
    return Kind(
        name,
        build,
        lambda rng, label: label,
        lambda rng, labels: labels,
        lambda x: int(x),
        lambda xs: [int(x) for x in xs],
    )


KINDS = [
    _untyped("fifo", lambda rng, cap: ar.FIFOQueue(cap)),
    _untyped(
        "shuffle",
        lambda rng, cap: ar.RandomShuffleQueue(
            cap, rng.randint(0, cap - 1), seed=rng.randrange(1 << 30)
        ),
    ),
    Kind(
        "fifo-typed",
        lambda rng, cap: ar.FIFOQueue(cap, ["int64", "string"], [[], []]),
        lambda rng, label: (label, b"x"),
        lambda rng, labels: (labels, [b"x"] * len(labels)),
        lambda x: int(x[0]),
        lambda xs: [int(v) for v in xs[0]],
    ),
    Kind(
        "padding",
        lambda rng, cap: ar.PaddingFIFOQueue(cap, ["int64", "int8"], [[], [None]]),
        lambda rng, label: (label, [1] * (label % 3)),
        lambda rng, labels: (labels, np.ones((len(labels), 2), np.int8)),
        lambda x: int(x[0]),
        lambda xs: [int(v) for v in xs[0]],
    ),
    Kind(
        "priority",
        lambda rng, cap: ar.PriorityQueue(cap, ["int64"], [[]]),
        lambda rng, label: (rng.randint(0, 4), label),
        lambda rng, labels: ([rng.randint(0, 4) for _ in labels], labels),
        lambda x: int(x[1]),
        lambda xs: [int(v) for v in xs[1]],
    ),
]


@dataclass
class Run:
    """Book-keeping of one randomised run."""

    rng: random.Random
    queue: QueueBase
    kind: Kind
    ids: dict[int, Label] = field(default_factory=dict)
    sent_whole: list[list[int]] = field(default_factory=list)
    sent_partial: list[list[int]] = field(default_factory=list)
    received: list[int] = field(default_factory=list)
    scopes: list[anyio.CancelScope] = field(default_factory=list)

    def new_batch(self, producer: int, batch: int, size: int) -> list[int]:
        labels = []
        for i in range(size):
            label = len(self.ids)
            self.ids[label] = (producer, batch, i)
            labels.append(label)
        return labels

    async def guarded(
        self, fn: Callable[[], Awaitable[Any]], cancellable: bool
    ) -> tuple[bool, Any]:
        """Run ``fn()`` in a cancel scope the chaos task may cancel; (completed, result)."""
        with anyio.CancelScope() as scope:
            if cancellable:
                self.scopes.append(scope)
            try:
                return True, await fn()
            finally:
                if cancellable:
                    self.scopes.remove(scope)
        return False, None


async def _random_points(rng: random.Random, most: int) -> None:
    for _ in range(rng.randint(0, most)):
        await checkpoint()


async def _producer(run: Run, pid: int, ops: int, cancellable: bool) -> None:
    rng, q, kind = run.rng, run.queue, run.kind
    for b in range(ops):
        await _random_points(rng, 2)
        many = rng.random() < 0.4
        labels = run.new_batch(pid, b, rng.randint(0, 6) if many else 1)
        try:
            if many:
                done, _ = await run.guarded(
                    functools.partial(q.enqueue_many, kind.encode_many(rng, labels)),
                    cancellable,
                )
            else:
                done, _ = await run.guarded(
                    functools.partial(q.enqueue, kind.encode_one(rng, labels[0])), cancellable
                )
        except ar.QueueClosedError:
            done = False
            if not many:
                labels = []  # a failed single enqueue inserted nothing
        (run.sent_whole if done else run.sent_partial).append(labels)
        if not done and not many:
            run.sent_partial[-1] = []


async def _consumer(run: Run, cancellable: bool) -> None:
    rng, q, kind = run.rng, run.queue, run.kind
    while True:
        await _random_points(rng, 2)
        op = rng.choice(["one", "one", "many", "up_to"])
        # An all-or-nothing batch larger than the capacity would wait forever (as in TF).
        n = rng.randint(0, min(5, q.capacity or 5) if kind.name == "priority" else 5)
        try:
            if op == "one":
                done, got = await run.guarded(q.dequeue, cancellable)
                if done:
                    run.received.append(kind.decode_one(got))
            else:
                method = q.dequeue_many if op == "many" else q.dequeue_up_to
                done, got = await run.guarded(functools.partial(method, n), cancellable)
                if done:
                    run.received.extend(kind.decode_many(got))
        except ar.OutOfRangeError:
            if op != "many":
                return


async def _chaos(run: Run, stop: anyio.Event) -> None:
    rng = run.rng
    while not stop.is_set():
        await _random_points(rng, 6)
        if run.scopes and rng.random() < 0.5:
            rng.choice(run.scopes).cancel()


async def _drain(run: Run) -> None:
    q, kind = run.queue, run.kind
    while True:
        try:
            run.received.extend(kind.decode_many(await q.dequeue_up_to(7)))
        except ar.OutOfRangeError:
            return


def _check(run: Run, ordered: bool) -> None:
    counts = Counter(run.received)
    duplicated = [label for label, c in counts.items() if c > 1]
    assert not duplicated, f"duplicated: {duplicated}"
    got = set(counts)
    for labels in run.sent_whole:
        assert set(labels) <= got, f"lost from a completed enqueue: {set(labels) - got}"
    allowed = {label for labels in run.sent_whole for label in labels}
    for labels in run.sent_partial:
        present = [label in got for label in labels]
        # A cancelled or closed enqueue_many inserted a prefix of its batch.
        assert present == sorted(present, reverse=True), f"not a prefix: {labels} {present}"
        allowed.update(labels)
    assert got <= allowed, f"received elements never sent: {got - allowed}"
    if ordered:
        assert run.received == sorted(run.received), "FIFO order broken"


async def _one_run(seed: int, kind: Kind, *, producers: int, consumers: int, chaos: bool) -> None:
    rng = random.Random(seed)
    capacity = rng.choice([1, 2, 3, 5, 8])
    run = Run(rng, kind.build(rng, capacity), kind)
    stop = anyio.Event()
    cancel_close = chaos and rng.random() < 0.3
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            if chaos:
                tg.start_soon(_chaos, run, stop)
            for _ in range(consumers):
                tg.start_soon(_consumer, run, chaos)
            async with anyio.create_task_group() as producing:
                for pid in range(producers):
                    producing.start_soon(_producer, run, pid, rng.randint(3, 12), chaos)
                if cancel_close:
                    await _random_points(rng, 30)
                    await run.queue.close(cancel_pending_enqueues=True)
            if not cancel_close:
                await run.queue.close()
            stop.set()
    await _drain(run)
    stats = run.queue.statistics()
    assert stats.tasks_waiting_enqueue == 0
    assert stats.tasks_waiting_dequeue == 0
    assert stats.size == 0
    assert stats.total_dequeued == len(run.received)
    _check(run, ordered=kind.name in ("fifo", "fifo-typed", "padding") and producers == 1)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
async def test_many_producers_and_consumers_lose_nothing(kind: Kind) -> None:
    for seed in range(25):
        await _one_run(seed, kind, producers=4, consumers=4, chaos=False)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
async def test_random_cancellation_loses_and_duplicates_nothing(kind: Kind) -> None:
    for seed in range(200 if kind.name == "fifo" else 60):
        await _one_run(seed, kind, producers=3, consumers=3, chaos=True)


async def test_single_producer_fifo_order_survives_cancellation() -> None:
    kind = KINDS[0]
    for seed in range(200):
        await _one_run(1000 + seed, kind, producers=1, consumers=4, chaos=True)


@pytest.mark.both_backends
async def test_random_cancellation_on_both_backends() -> None:
    for seed in range(40):
        await _one_run(seed, KINDS[seed % len(KINDS)], producers=3, consumers=3, chaos=True)


@pytest.mark.stress
@pytest.mark.both_backends
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
async def test_random_cancellation_stress(kind: Kind) -> None:
    for seed in range(5000):
        await _one_run(
            10_000 + seed, kind, producers=1 + seed % 5, consumers=1 + seed % 4, chaos=True
        )


# -- targeted cancellation cases ---------------------------------------------------------------


@pytest.mark.both_backends
async def test_cancelled_dequeue_many_puts_back_at_front_in_order() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many([1, 2, 3])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue_many, 5)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            await q.enqueue(4)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0  # 1..4 held by the waiting batch
            tg.cancel_scope.cancel()
    assert q.statistics().tasks_waiting_dequeue == 0
    assert q.statistics().total_dequeued == 0
    await q.enqueue(5)
    assert await q.dequeue_many(5) == [1, 2, 3, 4, 5]


async def test_cancelled_dequeue_up_to_puts_back() -> None:
    q = ar.FIFOQueue(10)
    await q.enqueue_many(["a", "b"])
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.dequeue_up_to, 3)
            await anyio.wait_all_tasks_blocked()
            assert q.size() == 0
            tg.cancel_scope.cancel()
    assert q.dequeue_many_nowait(2) == ["a", "b"]


@pytest.mark.both_backends
async def test_dequeuer_woken_then_cancelled_loses_nothing() -> None:
    q = ar.FIFOQueue(10)
    got: list[object] = []
    first = anyio.CancelScope()

    async def consumer(scope: anyio.CancelScope) -> None:
        with scope, contextlib.suppress(ar.OutOfRangeError):
            got.append(await q.dequeue())

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consumer, first)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(consumer, anyio.CancelScope())
            await anyio.wait_all_tasks_blocked()
            q.enqueue_nowait("x")  # wakes the first consumer ...
            first.cancel()  # ... whose cancellation arrives before it runs
            await anyio.wait_all_tasks_blocked()
            await q.close()
    # Either the first consumer completed or it withdrew and the second got it.
    assert got == ["x"]
    assert q.size() == 0


@pytest.mark.both_backends
async def test_enqueuer_woken_then_cancelled_inserts_at_most_once() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue("old")
    scope = anyio.CancelScope()
    outcome: list[str] = []

    async def producer() -> None:
        with scope:
            await q.enqueue("cancelled")
            outcome.append("completed")

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(q.enqueue, "next")
            await anyio.wait_all_tasks_blocked()
            assert q.dequeue_nowait() == "old"  # wakes the first producer ...
            scope.cancel()  # ... whose cancellation arrives before it runs
            await anyio.wait_all_tasks_blocked()
            rest = [q.dequeue_nowait()]
            await anyio.wait_all_tasks_blocked()
            if q.size():
                rest.append(q.dequeue_nowait())
    assert rest == (["cancelled", "next"] if outcome else ["next"])
    assert q.size() == 0


async def test_cancelled_enqueue_many_keeps_inserted_prefix() -> None:
    q = ar.FIFOQueue(2)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue_many, [1, 2, 3, 4, 5])
            await anyio.wait_all_tasks_blocked()
            assert q.dequeue_nowait() == 1
            await anyio.wait_all_tasks_blocked()  # 3 inserted
            tg.cancel_scope.cancel()
    assert q.statistics().tasks_waiting_enqueue == 0
    assert q.dequeue_many_nowait(2) == [2, 3]
    assert q.size() == 0


async def test_cancelled_plain_close_does_not_close() -> None:
    q = ar.FIFOQueue(1)
    await q.enqueue(1)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(q.enqueue, 2)
            await anyio.wait_all_tasks_blocked()
            scope = anyio.CancelScope()

            async def closer() -> None:
                with scope:
                    await q.close()

            tg.start_soon(closer)
            await anyio.wait_all_tasks_blocked()
            scope.cancel()
            await anyio.wait_all_tasks_blocked()
            assert q.dequeue_nowait() == 1
    assert not q.is_closed()
    assert q.dequeue_nowait() == 2


async def test_event_loop_cancellation_is_never_swallowed() -> None:
    q = ar.FIFOQueue(1)
    with anyio.CancelScope() as scope:
        scope.cancel()
        await q.dequeue()
        pytest.fail("cancellation was swallowed")  # pragma: no cover
    assert scope.cancelled_caught


async def test_fast_path_checkpoints_periodically() -> None:
    """A loop over a never-blocking queue still reaches a cancellation point."""
    q = ar.FIFOQueue(None)
    count = 0
    with anyio.CancelScope() as scope:
        scope.cancel()
        while True:
            await q.enqueue(count)
            count += 1
    assert scope.cancelled_caught
    assert 0 < count <= YIELD_INTERVAL
    assert q.size() == count


# -- property test against a model -----------------------------------------------------------

_OPS = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.integers(0, 3)),
        st.tuples(st.just("enqueue_many"), st.integers(0, 4)),
        st.tuples(st.just("dequeue"), st.just(0)),
        st.tuples(st.just("dequeue_many"), st.integers(0, 4)),
        st.tuples(st.just("dequeue_up_to"), st.integers(0, 4)),
        st.tuples(st.just("close"), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops=_OPS, capacity=st.integers(0, 5))
async def test_nowait_operations_match_a_model(ops: list[tuple[str, int]], capacity: int) -> None:
    q = ar.FIFOQueue(capacity)
    model: deque[int] = deque()
    closed = False
    label = 0
    for op, n in ops:
        if op in ("enqueue", "enqueue_many"):
            batch = list(range(label, label + (1 if op == "enqueue" else n)))
            label += len(batch)
            fits = len(model) + len(batch) <= capacity
            try:
                if op == "enqueue":
                    q.enqueue_nowait(batch[0])
                else:
                    q.enqueue_many_nowait(batch)
                outcome = "ok"
            except anyio.WouldBlock:
                outcome = "block"
            except ar.QueueClosedError:
                outcome = "closed"
            if not batch:
                assert outcome == "ok"
            elif closed:
                assert outcome == "closed"
            else:
                assert outcome == ("ok" if fits else "block")
            if outcome == "ok":
                model.extend(batch)
        elif op == "close":
            if closed:
                with pytest.raises(ar.QueueClosedError):
                    await q.close()
            else:
                await q.close()
            closed = True
        else:
            want = 1 if op == "dequeue" else n
            try:
                if op == "dequeue":
                    got: Any = [q.dequeue_nowait()]
                elif op == "dequeue_many":
                    got = q.dequeue_many_nowait(n)
                else:
                    got = q.dequeue_up_to_nowait(n)
                outcome = "ok"
            except anyio.WouldBlock:
                outcome = "block"
            except ar.OutOfRangeError:
                outcome = "range"
            if want == 0 and op != "dequeue":
                expected, count = "ok", 0
            elif len(model) >= want:
                expected, count = "ok", want
            elif closed and op == "dequeue_up_to" and model:
                expected, count = "ok", len(model)
            else:
                expected, count = ("range" if closed else "block"), 0
            assert outcome == expected
            if outcome == "ok":
                assert got == [model.popleft() for _ in range(count)]
        assert q.size() == len(model)
        assert q.is_closed() == closed


def test_waiting_on_asyncio_does_not_import_trio() -> None:
    """Only a queue waiting on trio loads trio; asyncio programs never import it."""
    program = """
import sys
import anyio
import asyncreader as ar

async def main():
    q = ar.FIFOQueue(1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(q.dequeue)  # blocks: the queue makes a wakeup for it
        await anyio.sleep(0.01)
        await q.enqueue(1)
    assert q.size() == 0

anyio.run(main)
print("trio" in sys.modules)
"""
    out = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=50, check=True
    )
    assert out.stdout.strip() == "False"
