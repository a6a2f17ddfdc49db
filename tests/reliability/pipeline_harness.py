"""A full input pipeline to cancel at seeded points, and the leak checks run after it.

The pipeline: ``string_input_producer`` over TFRecord files -> several TFRecordReaders
reading with ``read_up_to`` -> ``decode_raw`` of each record's id -> ``shuffle_batch`` (or
``shuffle_batch_join``, one source per reader) -> a consumer. Every record carries a unique
id, so the consumer's ids show losses and duplicates directly.

Ways a run ends (:data:`MODES`):

* ``deadline``: a CancelScope deadline cancels the whole Session block at a random time;
* ``stop``: a task calls ``coord.request_stop()`` after a random number of scheduling
  rounds; the consumer drains what is left;
* ``cooperative_stop``: the same with ``stop_grace_period=None``, so nothing is cancelled:
  the stop must reach blocked operations through the runners closing their queues;
* ``consumer``: the consumer's dequeues are cancelled at random points while the pipeline
  runs to the end of its single epoch; every record must arrive exactly once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import sniffio
from anyio.lowlevel import checkpoint

import asyncreader as ar

MODES = ("deadline", "stop", "cooperative_stop", "consumer")

PACKAGE_DIR = str(Path(ar.__file__).resolve().parent)
HERE = str(Path(__file__).resolve().parent)

#: Turns a hang into a failure; generous so that a slow machine never trips it.
HANG_GUARD = 30.0


@dataclass(frozen=True)
class Dataset:
    """TFRecord files whose records carry unique int64 ids (the first 8 bytes)."""

    directory: Path
    paths: list[str]
    ids: list[int]


def write_dataset(directory: Path, files: int, records: int, *, seed: int = 0) -> Dataset:
    """Write ``files`` TFRecord files of ``records`` records each, with varied sizes."""
    rng = random.Random(seed)
    paths, ids = [], []
    next_id = itertools.count(1)
    for f in range(files):
        path = directory / f"part-{f:03d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for _ in range(records):
                rid = next(next_id)
                ids.append(rid)
                writer.write(rid.to_bytes(8, "little") + bytes(rng.randrange(0, 64)))
        paths.append(str(path))
    return Dataset(directory, paths, ids)


# -- leak checks --------------------------------------------------------------------------------


def live_tasks() -> set[object]:
    """Return every task of the running event loop (asyncio or trio)."""
    if sniffio.current_async_library() == "trio":
        import trio

        tasks: set[object] = set()
        stack = [trio.lowlevel.current_root_task()]
        while stack:
            task = stack.pop()
            if task is None:
                continue
            tasks.add(task)
            for nursery in task.child_nurseries:
                stack.extend(nursery.child_tasks)
        return tasks
    return {t for t in asyncio.all_tasks() if not t.done()}


def open_files_under(directory: Path) -> list[str]:
    """Return the targets of this process's file descriptors that lie in ``directory``."""
    found = []
    prefix = str(directory.resolve())
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed meanwhile (the listing's own descriptor)
            continue
        if target.startswith(prefix):
            found.append(target)
    return found


def busy_threads(baseline: set[int]) -> list[str]:
    """Return the threads not in ``baseline`` that are running library or test code.

    anyio (and trio) keep idle worker threads alive for a while after use; those wait
    inside the thread pool's own code and are fine. A thread with a frame of asyncreader
    or of these tests is still doing work for a pipeline that has ended.
    """
    frames = sys._current_frames()
    busy = []
    for thread in threading.enumerate():
        if thread.ident in baseline or thread.ident is None:
            continue
        frame = frames.get(thread.ident)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith((PACKAGE_DIR, HERE)):
                busy.append(f"{thread.name}: {filename}:{frame.f_lineno}")
                break
            frame = frame.f_back
    return busy


@dataclass
class Snapshot:
    """What exists before a run, so that the checks after it can tell what is new."""

    tasks: set[object]
    threads: set[int]
    fds: int

    @classmethod
    def take(cls) -> Snapshot:
        return cls(
            live_tasks(),
            {t.ident for t in threading.enumerate() if t.ident is not None},
            len(os.listdir("/proc/self/fd")),
        )

    def leaks(self, directory: Path) -> list[str]:
        """Return a description of every task, busy thread or open file left over."""
        problems = [f"task outlived the session: {t!r}" for t in live_tasks() - self.tasks]
        problems += [f"thread still busy: {t}" for t in busy_threads(self.threads)]
        problems += [f"file still open: {p}" for p in open_files_under(directory)]
        fds = len(os.listdir("/proc/self/fd"))
        if fds > self.fds:
            problems.append(f"{fds - self.fds} more file descriptors open than before")
        return problems


# -- the pipeline -------------------------------------------------------------------------------


@dataclass
class Outcome:
    """What one run delivered and the counters it ended with."""

    mode: str
    received: list[int] = field(default_factory=list)
    batch_queue: Any = None  # QueueStatistics of the shuffle queue, after the run
    examples_enqueued: int = 0
    readers: list[ar.ReaderBase] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Params:
    """The shape of one run, drawn from its seed."""

    mode: str
    readers: int
    read_up_to: int
    batch_size: int
    capacity: int
    min_after_dequeue: int
    join: bool
    files_capacity: int
    cancel_after: float  # deadline: seconds; stop: scheduling rounds; consumer: probability

    @classmethod
    def draw(cls, seed: int, mode: str | None = None) -> Params:
        rng = random.Random(seed)
        mode = mode or MODES[seed % len(MODES)]
        min_after = rng.randrange(0, 24)
        cancel_after: float
        if mode == "deadline":
            cancel_after = rng.uniform(0.0, 0.04)
        elif mode in ("stop", "cooperative_stop"):
            cancel_after = rng.randrange(0, 400)
        else:
            cancel_after = rng.uniform(0.2, 0.9)
        return cls(
            mode=mode,
            readers=rng.randint(1, 6),
            read_up_to=rng.randint(1, 48),
            batch_size=rng.randint(1, 16),
            capacity=min_after + rng.randint(1, 48),
            min_after_dequeue=min_after,
            join=rng.random() < 0.5,
            files_capacity=rng.randint(1, 8),
            cancel_after=cancel_after,
        )


async def run_pipeline(data: Dataset, seed: int, mode: str | None = None) -> Outcome:
    """Run the pipeline once, end it as ``Params.draw(seed, mode)`` says, and check leaks."""
    p = Params.draw(seed, mode)
    rng = random.Random(seed ^ 0x5EED)
    out = Outcome(p.mode)
    before = Snapshot.take()
    batcher: ar.Batcher | None = None
    with anyio.fail_after(HANG_GUARD):
        deadline = anyio.current_time() + p.cancel_after if p.mode == "deadline" else float("inf")
        with anyio.CancelScope(deadline=deadline):
            grace = None if p.mode == "cooperative_stop" else 0.0
            async with ar.Session(stop_grace_period=grace) as sess:
                files = ar.string_input_producer(
                    data.paths, num_epochs=1, seed=seed, capacity=p.files_capacity
                )
                # shuffle_batch_join: one source per reader; shuffle_batch: TensorFlow's
                # classic form, one reader shared by ``num_threads`` tasks.
                count = p.readers if p.join else 1
                readers: list[ar.ReaderBase] = [
                    ar.TFRecordReader(name=f"reader-{i}") for i in range(count)
                ]
                out.readers = readers

                def source(reader: ar.ReaderBase) -> Any:
                    async def read_batch() -> tuple[np.ndarray]:
                        _, values = await reader.read_up_to(files, p.read_up_to)
                        ids = ar.decode_raw([v[:8] for v in values], np.int64)[:, 0]
                        return (ids,)

                    return read_batch

                common: dict[str, Any] = {
                    "batch_size": p.batch_size,
                    "capacity": p.capacity,
                    "min_after_dequeue": p.min_after_dequeue,
                    "seed": seed,
                    "enqueue_many": True,
                    "allow_smaller_final_batch": True,
                }
                if p.join:
                    batcher = ar.shuffle_batch_join([source(r) for r in readers], **common)
                else:
                    batcher = ar.shuffle_batch(source(readers[0]), num_threads=p.readers, **common)

                if p.mode in ("stop", "cooperative_stop"):

                    async def stop_later() -> None:
                        for _ in range(int(p.cancel_after)):
                            await checkpoint()
                        sess.coord.request_stop()

                    # Not a coordinator task: a stop must not cancel the one requesting it.
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(stop_later)
                        await _consume(batcher, out.received)
                elif p.mode == "consumer":
                    await _consume_interrupted(batcher, out.received, rng, p.cancel_after)
                else:
                    await _consume(batcher, out.received)
    if batcher is not None and batcher.queue is not None:
        out.batch_queue = batcher.queue.statistics()
        out.examples_enqueued = batcher.statistics().examples_enqueued
    out.leaks = before.leaks(data.directory)
    return out


async def _consume(batcher: ar.Batcher, received: list[int]) -> None:
    async for (ids,) in batcher:
        # No await between the dequeue returning and this line: nothing can be lost here.
        received.extend(ids.tolist())


async def _consume_interrupted(
    batcher: ar.Batcher, received: list[int], rng: random.Random, rate: float
) -> None:
    """Consume to the end while a helper cancels dequeues at random scheduling points."""

    async def cancel_soon(scope: anyio.CancelScope, rounds: int) -> None:
        for _ in range(rounds):
            await checkpoint()
        scope.cancel()

    async with anyio.create_task_group() as tg:
        while True:
            with anyio.CancelScope() as scope:
                if rng.random() < rate:
                    tg.start_soon(cancel_soon, scope, rng.randrange(0, 6))
                try:
                    (ids,) = await batcher.dequeue()
                except ar.OutOfRangeError:
                    break
                received.extend(ids.tolist())
            await checkpoint()


def check_outcome(data: Dataset, out: Outcome, seed: int) -> None:
    """Assert the invariants every run keeps, whatever ended it."""
    context = f"seed={seed} params={Params.draw(seed, out.mode)}"
    counts = Counter(out.received)
    duplicates = sorted(rid for rid, n in counts.items() if n > 1)
    assert not duplicates, f"delivered more than once: {duplicates[:10]} ({context})"
    unknown = set(counts) - set(data.ids)
    assert not unknown, f"ids that were never written: {sorted(unknown)[:10]} ({context})"
    assert not out.leaks, f"{out.leaks} ({context})"
    for reader in out.readers:
        assert reader.statistics().closed, f"{reader!r} not closed ({context})"
    q = out.batch_queue
    if q is not None:
        # Everything that left the batch queue reached the consumer, and the queue's
        # counters balance: nothing vanished in a cancelled dequeue.
        assert q.total_dequeued == len(out.received), context
        assert q.total_enqueued == q.total_dequeued + q.size, context
        assert q.total_enqueued == out.examples_enqueued, (q, out.examples_enqueued, context)
        assert q.closed, context
    if out.mode in ("stop", "cooperative_stop") and q is not None:
        # The consumer drained the queue after the stop closed it.
        assert q.size == 0, context
    if out.mode == "consumer":
        assert counts == Counter(data.ids), f"lost: {sorted(set(data.ids) - set(counts))[:10]}"
        produced = sum(r.num_records_produced() for r in out.readers)
        assert produced == len(data.ids), context
