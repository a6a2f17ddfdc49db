"""Many readers on one work queue, and stop requests reaching reads on the I/O executor."""

from __future__ import annotations

import random
import threading
from collections import Counter
from typing import TYPE_CHECKING

import anyio
import anyio.from_thread
import pytest
from pipeline_harness import HANG_GUARD, Snapshot, write_dataset

import asyncreader as ar
from asyncreader._io.executor import io_threads

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio


@pytest.mark.both_backends
async def test_64_readers_on_one_work_queue_deliver_each_record_exactly_once(
    tmp_path: Path,
) -> None:
    data = write_dataset(tmp_path, files=96, records=12)
    before = Snapshot.take()
    received: list[int] = []
    rng = random.Random(64)
    with anyio.fail_after(HANG_GUARD):
        async with ar.Session() as sess:
            work = ar.string_input_producer(data.paths, num_epochs=1, seed=3, capacity=8)
            readers = [ar.TFRecordReader(name=f"r{i}") for i in range(64)]

            async def drain(reader: ar.TFRecordReader, n: int) -> None:
                while True:
                    try:
                        _, values = await reader.read_up_to(work, n)
                    except ar.OutOfRangeError:
                        return
                    received.extend(int.from_bytes(v[:8], "little") for v in values)

            async with anyio.create_task_group() as tg:
                for reader in readers:
                    tg.start_soon(drain, reader, rng.randint(1, 20))
            assert sum(r.num_records_produced() for r in readers) == len(data.ids)
            assert sum(r.num_work_units_completed() for r in readers) == len(data.paths)
            sess.coord.request_stop()
    assert Counter(received) == Counter(data.ids)
    assert not before.leaks(data.directory)


_log_lock = threading.Lock()


class StalledDiskReader(ar.ReaderBase):
    """A reader whose ``read_one`` hook (on the I/O executor) blocks like a stalled disk.

    The very first read of all passes (a Batcher builds its queue from the first example
    before it starts its other tasks); every later one waits for ``gate`` and, like any
    well-behaved long hook, checks for cancellation of the read that runs it meanwhile.
    """

    def __init__(
        self,
        gate: threading.Event,
        log: Counter[str],
        name: str,
        all_entered: anyio.Event,
        expected: int,
    ) -> None:
        super().__init__(name)
        self._gate = gate
        self._log = log
        self._all_entered = all_entered
        self._expected = expected

    def _note(self, what: str) -> None:
        with _log_lock:
            self._log[what] += 1

    async def on_work_started(self, work: bytes) -> None:
        pass  # nothing to open; on the loop, so only read_one needs an executor thread

    def read_one(self) -> tuple[bytes, bytes, bool]:
        with _log_lock:
            first = not self._log["passed"]
            self._log["passed"] = 1
        if first:
            return self._work + b":0", b"value", True
        self._note("entered")
        if self._log["entered"] == self._expected:
            anyio.from_thread.run_sync(self._all_entered.set)
        try:
            while not self._gate.wait(0.002):
                anyio.from_thread.check_cancelled()
        except BaseException:
            self._note("cancelled")
            raise
        finally:
            self._note("exited")
        return self._work + b":0", b"value", True


@pytest.mark.both_backends
async def test_stop_reaches_reads_waiting_on_the_io_executor(tmp_path: Path) -> None:
    gate = threading.Event()
    log: Counter[str] = Counter()
    threads = io_threads()
    count = threads + 4  # some reads run on executor threads, the rest wait for one
    before = Snapshot.take()
    with anyio.fail_after(HANG_GUARD):
        async with ar.Session() as sess:
            work = ar.string_input_producer(
                [f"item-{i}" for i in range(2 * count)], num_epochs=1, shuffle=False
            )
            all_entered = anyio.Event()
            readers = [
                StalledDiskReader(gate, log, f"stalled-{i}", all_entered, threads)
                for i in range(count)
            ]

            def source(reader: ar.ReaderBase) -> Callable[[], Awaitable[tuple[bytes]]]:
                async def read() -> tuple[bytes]:
                    _, value = await reader.read(work)
                    return (value,)

                return read

            batcher = ar.batch_join([source(r) for r in readers], batch_size=2)
            outcome: list[str] = []

            async def consume() -> None:
                try:
                    await batcher.dequeue()
                    outcome.append("batch")
                except ar.OutOfRangeError:
                    outcome.append("end of input")

            async with anyio.create_task_group() as tg:
                tg.start_soon(consume)
                await all_entered.wait()
                await anyio.wait_all_tasks_blocked()
                # The readers are the stalled stage: every one is inside a read.
                stages = sess.stage_statistics()
                readers_state = {s.name: s.state for s in stages if s.kind == "reader"}
                assert set(readers_state.values()) == {"reading"}, stages
                # ... and the consumer waits on the batch queue that they fill.
                assert batcher.queue is not None
                by_name = {s.name: s for s in stages if s.kind == "queue"}
                batch_stage = by_name[batcher.queue.name]
                assert (batch_stage.state, batch_stage.tasks_blocked_dequeue) == ("starved", 1)
                assert by_name[work.name].state == "closed"  # all work handed out
                sess.coord.request_stop()
    assert outcome == ["end of input"]
    assert not gate.is_set()
    # Reads running on a thread saw the stop; reads waiting for a thread never started.
    assert log == Counter(passed=1, entered=threads, cancelled=threads, exited=threads)
    assert all(r.statistics().closed for r in readers)
    assert not before.leaks(tmp_path)
