"""The Coordinator told to stop from threads: plain reader hooks on worker threads and
threads the program started itself, on both backends (TensorFlow's Coordinator is
thread-safe and meant to be called from threads)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

import anyio
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


class _StoppingReader(ar.ReaderBase):
    """A reader with plain (worker-thread) hooks whose third record requests a stop."""

    def __init__(self, coord: ar.Coordinator, exc: BaseException | None = None) -> None:
        super().__init__()
        self.coord = coord
        self.exc = exc
        self.count = 0
        self.seen_stop: list[bool] = []
        self.threads: set[int] = set()

    def on_work_started(self, work: bytes) -> None:
        pass

    def read_one(self) -> tuple[bytes, bytes]:
        self.threads.add(threading.get_ident())
        self.count += 1
        if self.count == 3:
            self.coord.request_stop(self.exc)
            self.seen_stop.append(self.coord.should_stop())
        return b"k%d" % self.count, b"v"


async def _pipeline(
    sess: ar.Session, exc: BaseException | None = None
) -> tuple[_StoppingReader, ar.FIFOQueue]:
    work = ar.FIFOQueue(None)
    await work.enqueue(b"item")
    reader = _StoppingReader(sess.coord, exc)
    out = ar.FIFOQueue(2)  # fills up: the runner then blocks until it is cancelled

    async def step() -> None:
        await out.enqueue(await reader.read(work))

    ar.QueueRunner(out, [step]).start()
    return reader, out


async def test_a_plain_reader_hook_stops_the_session() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            reader, _ = await _pipeline(sess)
            assert await sess.coord.wait_for_stop(timeout=5)
    assert reader.seen_stop == [True]  # recorded at once, in the hook's own thread
    assert threading.get_ident() not in reader.threads
    assert sess.coord.statistics().tasks_running == 0
    assert sess.coord.statistics().exception is None


async def test_a_plain_reader_hook_reports_an_error() -> None:
    error = ar.DataLossError("bad data in the hook")

    async def run() -> None:
        async with ar.Session() as sess:
            await _pipeline(sess, error)
            await anyio.sleep_forever()  # the recorded error cancels the body

    with anyio.fail_after(10), pytest.raises(ar.DataLossError, match="bad data in the hook"):
        await run()


async def _in_thread(fn: Callable[[], object]) -> threading.Thread:
    """Run ``fn`` in a thread started with threading (not anyio) and wait for it."""
    thread = threading.Thread(target=fn)
    thread.start()
    await anyio.to_thread.run_sync(thread.join)
    return thread


async def test_a_foreign_thread_stops_the_tasks_and_wakes_waiters() -> None:
    log: list[str] = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            log.append("cancelled")

    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            coord.start_soon(forever)
            await anyio.wait_all_tasks_blocked()
            async with anyio.create_task_group() as tg:
                tg.start_soon(coord.wait_for_stop)
                await anyio.wait_all_tasks_blocked()
                seen: list[bool] = []

                def stop() -> None:
                    coord.request_stop()
                    seen.append(coord.should_stop())

                await _in_thread(stop)
                assert seen == [True]
            # The waiter woke up; leaving the block ends the cancelled task.
    assert log == ["cancelled"]
    assert coord.joined


async def test_an_error_from_a_foreign_thread_cancels_the_body_and_comes_out() -> None:
    def fail() -> None:
        with coord.stop_on_exception():
            raise ar.InvalidArgumentError("from a thread")

    async def run() -> None:
        async with coord:
            await _in_thread(fail)
            await anyio.sleep_forever()

    coord = ar.Coordinator()
    with anyio.fail_after(10), pytest.raises(ar.InvalidArgumentError, match="from a thread"):
        await run()


async def test_the_grace_period_applies_to_a_stop_from_a_thread() -> None:
    finished: list[str] = []

    async def finishes_its_item() -> None:
        await anyio.sleep(0.05)
        finished.append("item")
        await anyio.sleep_forever()  # then cancelled when the grace period ends

    with anyio.fail_after(10):
        async with ar.Coordinator(stop_grace_period=0.5) as coord:
            coord.start_soon(finishes_its_item)
            await _in_thread(coord.request_stop)
    assert finished == ["item"]


async def test_a_stop_from_a_thread_after_the_block_and_after_clear_stop() -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:
            pass
        await _in_thread(coord.request_stop)  # the loop has no block: nothing to cancel
        assert coord.should_stop()
        raised: list[BaseException] = []

        def late_error() -> None:
            try:
                coord.request_stop(ar.DataLossError("too late"))
            except ar.DataLossError as exc:
                raised.append(exc)

        await _in_thread(late_error)  # joined: nobody is left to report it
        assert [str(e) for e in raised] == ["too late"]
        await _in_thread(coord.clear_stop)
        assert not coord.should_stop()
        ran: list[int] = []

        async def runs() -> None:
            ran.append(1)

        async with coord:  # usable again: tasks started now run
            coord.start_soon(runs)
    assert ran == [1]


def test_a_stop_from_a_thread_after_the_event_loop_ended(anyio_backend: str) -> None:
    coord = ar.Coordinator()

    async def main() -> None:
        async with coord:
            pass

    anyio.run(main, backend=anyio_backend)
    thread = threading.Thread(target=coord.request_stop)
    thread.start()
    thread.join(10)
    assert not thread.is_alive()
    assert coord.should_stop()
