"""Blocking I/O that never returns must not hold up cancellation, stops or shutdown.

A named pipe (FIFO) with no writer blocks ``open()`` for good: the reader's worker thread
is stuck until the test opens the pipe for writing. Every test unblocks it at the end and
checks that the thread returned and the pipe's file descriptor was closed.
"""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest
from queue_util import work_queue

import asyncreader as ar
from asyncreader._io.executor import abandoned_io, get_io_limiter

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

#: How long a cancelled call may take to return although its thread is stuck.
PROMPT = 2.0


#: A watchdog unblocks the FIFO after this long, so that a regression (a wait for the stuck
#: thread, which no cancellation interrupts) fails the test's timing checks instead of hanging.
WATCHDOG = 8.0


#: How long a test waits for threads that earlier tests of its process abandoned.
EARLIER = 20.0


@pytest.fixture(autouse=True)
def _no_earlier_abandoned_threads() -> None:
    """These tests count the process's abandoned threads: start when every thread an
    earlier test abandoned (in any module run by this process) has returned."""
    deadline = time.monotonic() + EARLIER
    while abandoned_io()[0] and time.monotonic() < deadline:
        time.sleep(0.02)
    assert abandoned_io()[0] == 0, (
        f"{abandoned_io()[0]} thread(s) abandoned by earlier tests still running after "
        f"{EARLIER:g} s"
    )


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "stuck.fifo"
    os.mkfifo(path)
    done = threading.Event()

    def watchdog() -> None:
        while not done.wait(WATCHDOG):
            with contextlib.suppress(OSError):  # ENXIO: no reader is waiting
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    yield path
    done.set()
    thread.join()


def _open_fds(path: Path) -> int:
    """How many of this process's file descriptors are open on ``path``."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") == str(path):
                count += 1
        except OSError:
            pass
    return count


def _write_fifo(path: Path, data: bytes) -> None:
    """Open the FIFO for writing (its reader is waiting in open), write, close."""
    deadline = time.monotonic() + 5
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:  # ENXIO: the reader's open has not started yet
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        try:
            os.set_blocking(fd, True)
            if data:
                os.write(fd, data)
        except BrokenPipeError:
            pass  # a discarded reader closed the pipe as soon as its open returned
        finally:
            os.close(fd)
        return


async def _unblock_and_check_closed(path: Path, data: bytes = b"") -> None:
    """Unblock the stuck thread, then wait until it returned and the FIFO is closed."""
    await anyio.to_thread.run_sync(_write_fifo, path, data)
    with anyio.fail_after(5):
        while True:
            if not abandoned_io()[0] and not await anyio.to_thread.run_sync(_open_fds, path):
                break
            await anyio.sleep(0.01)


async def test_fail_after_returns_promptly_and_the_next_read_gets_every_line(
    fifo: Path,
) -> None:
    queue = await work_queue([str(fifo)])
    async with ar.TextLineReader() as reader:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.3):
                await reader.read(queue)
        assert time.monotonic() - start < PROMPT
        stats = reader.statistics()
        assert stats.abandoned_threads == 1
        assert stats.abandoned_total == 1
        # The abandoned thread does not hold an I/O executor token.
        assert get_io_limiter().borrowed_tokens == 0
        assert abandoned_io()[0] == 1

        # The pipe gets its data: the open returns, and the next read takes it up.
        await anyio.to_thread.run_sync(_write_fifo, fifo, b"a\nb\nc\n")
        with anyio.fail_after(5):
            keys, values = await reader.read_up_to(queue, 10)
        assert values == [b"a", b"b", b"c"]
        assert keys == [b"%s:%d" % (os.fsencode(fifo), i) for i in (1, 2, 3)]
        with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
            await reader.read(queue)
        stats = reader.statistics()
        assert (stats.abandoned_threads, stats.abandoned_total) == (0, 1)
        assert stats.records_produced == 3
        assert stats.work_units_completed == 1
    assert abandoned_io()[0] == 0
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


async def test_a_read_after_the_abandoned_one_waits_cancellably(fifo: Path) -> None:
    queue = await work_queue([str(fifo)])
    async with ar.TextLineReader() as reader:
        for _ in range(2):
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.2):
                    await reader.read(queue)
            assert time.monotonic() - start < PROMPT
        # The second read waited for the first one's thread: it started no second open.
        assert reader.statistics().abandoned_total == 1
        assert abandoned_io()[0] == 1
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.2):
                await reader.reset()
    await _unblock_and_check_closed(fifo)


async def test_closing_the_reader_does_not_wait_and_the_thread_closes_the_file(
    fifo: Path,
) -> None:
    queue = await work_queue([str(fifo)])
    reader = ar.TextLineReader()
    with anyio.move_on_after(0.2):
        await reader.read(queue)
    start = time.monotonic()
    with anyio.fail_after(PROMPT):
        await reader.aclose()
    assert time.monotonic() - start < PROMPT
    assert reader.statistics().closed
    # The open returns once there is a writer; the discarded call closes the file.
    await _unblock_and_check_closed(fifo, b"x\n")
    with pytest.raises(ar.FailedPreconditionError):
        await reader.read(queue)


async def test_leaving_a_session_with_a_reader_stuck_in_its_runner(fifo: Path) -> None:
    start = time.monotonic()
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            filenames = ar.string_input_producer([str(fifo)], shuffle=False)
            reader = ar.TextLineReader()

            async def read_chunk() -> tuple[list[bytes]]:
                _keys, values = await reader.read_up_to(filenames, 16)
                return (values,)

            batcher = ar.batch(read_chunk, batch_size=4, capacity=16, enqueue_many=True)
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.5):
                    await sess.run(batcher.dequeue)
            # The runner's read is stuck in the FIFO's open.
            assert reader.statistics().abandoned_threads == 0
            assert abandoned_io()[0] == 0
    # Leaving cancelled the runner's read, which abandoned the thread, and closed the reader.
    assert time.monotonic() - start < 0.5 + PROMPT + 1
    assert reader.statistics().closed
    assert reader.statistics().abandoned_total == 1
    await _unblock_and_check_closed(fifo, b"x\n")


async def test_a_stop_request_returns_promptly(fifo: Path) -> None:
    reader = ar.TextLineReader()
    queue = await work_queue([str(fifo)])
    start = time.monotonic()
    with anyio.fail_after(10):
        async with ar.Coordinator() as coord:

            async def read_forever() -> None:
                with coord.stop_on_exception():
                    await reader.read(queue)

            coord.start_soon(read_forever)
            await anyio.sleep(0.2)
            coord.request_stop()
    assert time.monotonic() - start < 0.2 + PROMPT
    assert reader.statistics().abandoned_threads == 1
    await reader.aclose()
    await _unblock_and_check_closed(fifo)


class _Blocking(ar.ReaderBase):
    """Records 1..3 of each work item; record 2's hook blocks until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.i = 0
        self.gate = threading.Event()
        self.calls = 0

    def on_work_started(self, work: bytes) -> None:
        self.i = 0

    def read_one(self) -> tuple[bytes, bytes] | None:
        self.calls += 1
        self.i += 1
        if self.i > 3:
            return None
        if self.i == 2:
            self.gate.wait(10)
        return b"k%d" % self.i, b"v%d" % self.i


async def test_a_hook_reader_loses_and_repeats_nothing() -> None:
    queue = await work_queue(["w"])
    reader = _Blocking()
    async with reader:
        assert await reader.read(queue) == (b"k1", b"v1")
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.2):
                await reader.read(queue)
        # Saved meanwhile, the state counts the one record delivered.
        saved = reader.serialize_state()
        assert reader.statistics().abandoned_threads == 1
        reader.gate.set()
        with anyio.fail_after(5):
            assert await reader.read(queue) == (b"k2", b"v2")
            assert await reader.read(queue) == (b"k3", b"v3")
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(queue)
        assert reader.calls == 4  # the abandoned call was not made again
        assert reader.num_records_produced() == 3
    restored = _Blocking()
    restored.restore_state(saved)
    assert restored.num_records_produced() == 1
    await restored.aclose()


async def test_abandoned_threads_do_not_starve_other_readers(fifo: Path, tmp_path: Path) -> None:
    ar.set_io_threads(1)
    try:
        plain = tmp_path / "plain.txt"
        plain.write_bytes(b"1\n2\n")
        stuck = ar.TextLineReader()
        with anyio.move_on_after(0.2):
            await stuck.read(await work_queue([str(fifo)]))
        assert stuck.statistics().abandoned_threads == 1
        # The only I/O token is free again: another reader reads at once.
        async with ar.TextLineReader() as other:
            with anyio.fail_after(5):
                _, values = await other.read_up_to(await work_queue([str(plain)]), 5)
        assert values == [b"1", b"2"]
        await stuck.aclose()
    finally:
        ar.set_io_threads(8)
    await _unblock_and_check_closed(fifo)


def _open_writer(path: Path) -> int:
    """Open the FIFO for writing once a reader waits on it; return the descriptor."""
    deadline = time.monotonic() + 5
    while True:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError as exc:
            if exc.errno != errno.ENXIO or time.monotonic() > deadline:
                raise
            time.sleep(0.01)
            continue
        os.set_blocking(fd, True)
        return fd


async def test_a_block_read_abandoned_part_way_delivers_its_records_later(fifo: Path) -> None:
    """The thread has read two lines and waits for more: the record run it returns later is
    taken up by the next call, records in order, none twice."""
    queue = await work_queue([str(fifo)])
    fds: list[int] = []
    lock = threading.Lock()

    def finish() -> None:
        """Write the last line and close the pipe (once; a timer does it if the test
        does not, so that a regression, a wait for the thread, fails fast)."""
        with lock:
            if fds:
                fd = fds.pop()
                os.write(fd, b"c\n")
                os.close(fd)

    timer = threading.Timer(4.0, finish)
    timer.start()
    async with ar.TextLineReader() as reader:
        async with anyio.create_task_group() as tg:

            async def cancelled_read() -> None:
                with anyio.move_on_after(1.0):
                    await reader.read_up_to(queue, 10)

            tg.start_soon(cancelled_read)
            fd = await anyio.to_thread.run_sync(_open_writer, fifo)
            os.write(fd, b"a\nb\n")
            fds.append(fd)
        try:
            stats = reader.statistics()
            assert stats.abandoned_threads == 1
            assert stats.records_produced == 0
            assert stats.work_units_started == 1  # the open had returned
        finally:
            timer.cancel()
            finish()
        with anyio.fail_after(5):
            keys, values = await reader.read_up_to(queue, 10)
            assert values == [b"a", b"b", b"c"]
            assert keys[0] == os.fsencode(fifo) + b":1"
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(queue)
        assert reader.statistics().records_produced == 3
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


class _FailingOpen(ar.ReaderBase):
    """``on_work_started`` blocks until ``gate`` is set, then fails as a missing file."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.opened = 0

    def on_work_started(self, work: bytes) -> None:
        self.opened += 1
        self.gate.wait(3)  # bounded: a regression (a wait for the thread) fails fast
        if work == b"missing":
            raise ar.NotFoundError("no such file", work_item=work)

    def read_one(self) -> tuple[bytes, bytes, bool]:
        return b"k", b"v", True


async def test_an_abandoned_open_that_fails_raises_from_the_next_call() -> None:
    queue = await work_queue(["missing", "there"])
    reader = _FailingOpen()
    async with reader:
        with pytest.raises(TimeoutError):
            with anyio.fail_after(0.2):
                await reader.read(queue)
        reader.gate.set()
        with anyio.fail_after(5):
            with pytest.raises(ar.NotFoundError, match="no such file"):
                await reader.read(queue)
            # The failed item was abandoned as any failed start: the next one is read.
            assert await reader.read(queue) == (b"k", b"v")
        assert reader.opened == 2
        stats = reader.statistics()
        assert (stats.errors, stats.work_units_completed, stats.abandoned_total) == (1, 1, 1)


async def test_state_saved_while_an_abandoned_open_runs_keeps_the_work_item(
    fifo: Path,
) -> None:
    first = ar.TextLineReader()
    with anyio.move_on_after(0.2):
        await first.read(await work_queue([str(fifo)]))
    state = first.serialize_state()
    await anyio.to_thread.run_sync(_write_fifo, fifo, b"")  # the abandoned open returns
    await first.aclose()
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0

    async with ar.TextLineReader() as second:
        second.restore_state(state)
        assert second.statistics().current_work == os.fsencode(fifo)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_fifo, fifo, b"x\ny\n")
            with anyio.fail_after(5):
                _, values = await second.read_up_to(await work_queue([]), 10)
        assert values == [b"x", b"y"]
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


async def test_a_cancelled_async_record_iterator_returns_promptly_and_closes_the_file(
    fifo: Path,
) -> None:
    iterator = ar.async_tf_record_iterator(str(fifo))
    start = time.monotonic()
    with pytest.raises(TimeoutError), anyio.fail_after(0.3):
        await iterator.__anext__()
    assert time.monotonic() - start < PROMPT
    assert abandoned_io()[0] == 1
    with anyio.fail_after(PROMPT):
        await iterator.aclose()
    with anyio.fail_after(5), pytest.raises(StopAsyncIteration):
        await iterator.__anext__()
    # The open returns once there is a writer; the abandoned step closes the file.
    await _unblock_and_check_closed(fifo)


async def test_the_step_after_an_abandoned_one_takes_its_records(
    fifo: Path, tmp_path: Path
) -> None:
    with ar.TFRecordWriter(str(tmp_path / "r.tfrecord")) as writer:
        for payload in (b"one", b"two"):
            writer.write(payload)
    data = (tmp_path / "r.tfrecord").read_bytes()
    async with ar.async_tf_record_iterator(str(fifo)) as iterator:
        with pytest.raises(TimeoutError), anyio.fail_after(0.3):
            await iterator.__anext__()
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_fifo, fifo, data)
            with anyio.fail_after(5):
                assert [r async for r in iterator] == [b"one", b"two"]
    assert abandoned_io()[0] == 0
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


async def test_leaving_a_session_whose_restore_rereads_from_a_stalled_file(
    fifo: Path, tmp_path: Path
) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nb\n")
    async with ar.Session() as sess:
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        reader = ar.TextLineReader()
        queue = ar.FIFOQueue(None, record_refs=reader)
        with anyio.fail_after(5):
            await queue.enqueue(await reader.read(files))
            checkpoint = await sess.checkpoint()
    # The file is now a pipe no one writes to: re-reading its record blocks in the open.
    path.unlink()
    path.symlink_to(fifo)
    start = time.monotonic()
    with anyio.fail_after(10):
        async with ar.Session(restore=checkpoint):
            ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
            queue = ar.FIFOQueue(None, record_refs=ar.TextLineReader())
            with pytest.raises(TimeoutError), anyio.fail_after(0.3):
                await queue.dequeue()
            assert abandoned_io()[0] == 0  # the re-read is still waited for
    assert time.monotonic() - start < 0.3 + PROMPT
    assert abandoned_io()[0] == 1
    await _unblock_and_check_closed(fifo)


async def test_resuming_a_pipe_part_way_is_a_failed_precondition(
    fifo: Path, tmp_path: Path
) -> None:
    path = tmp_path / "lines.txt"
    line = b"x" * (64 << 10) + b"\n"
    path.write_bytes(line * 100)  # more than one block: the state's position is past 0
    async with ar.TextLineReader() as first:
        with anyio.fail_after(5):
            queue = await work_queue([str(path)])
            for _ in range(90):
                await first.read(queue)
        state = first.serialize_state()
    # The work item is now a pipe: the restored reader cannot seek to its position.
    path.unlink()
    path.symlink_to(fifo)
    async with ar.TextLineReader() as second:
        second.restore_state(state)
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_fifo, fifo, b"")
            with anyio.fail_after(5), pytest.raises(ar.FailedPreconditionError) as info:
                await second.read(await work_queue([]))
        assert "does not support seeking" in str(info.value)
        assert info.value.work_item == os.fsencode(path)
        assert isinstance(info.value.offset, int)
        assert info.value.offset > 0
        # As a work item that fails to start, it is abandoned.
        with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
            await second.read(await work_queue([]))
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


async def test_leaving_a_session_closes_stuck_readers_at_once(fifo: Path) -> None:
    """Closing a reader waits half a second for its abandoned thread: a session closes its
    readers together, so leaving it takes that long whatever their number."""
    readers = 4
    with anyio.fail_after(10):
        async with ar.Session():
            stuck = [ar.TextLineReader() for _ in range(readers)]
            async with anyio.create_task_group() as tg:
                for reader in stuck:
                    queue = await work_queue([str(fifo)])

                    async def read(reader: ar.TextLineReader, queue: ar.FIFOQueue) -> None:
                        with anyio.move_on_after(0.3):
                            await reader.read(queue)

                    tg.start_soon(read, reader, queue)
            assert [r.statistics().abandoned_threads for r in stuck] == [1] * readers
            start = time.monotonic()
        elapsed = time.monotonic() - start
    assert all(r.statistics().closed for r in stuck)
    assert elapsed < 1.5  # one after another: 4 x 0.5 s
    await _unblock_and_check_closed(fifo)


async def test_a_reader_closed_while_every_io_thread_is_busy_closes_its_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reader's own calls to drop its file cannot start within their grace (the only
    # I/O thread is taken, as on a machine too busy to run them): closing the reader
    # still closes the file, without waiting for the I/O thread.
    from asyncreader._io.executor import io_threads, run_io
    from asyncreader._readers import work_items

    monkeypatch.setattr(work_items, "_SHIELD_GRACE", 0.1)
    path = tmp_path / "lines.txt"
    path.write_bytes(b"1\n2\n3\n")
    threads = io_threads()
    ar.set_io_threads(1)
    release = threading.Event()
    try:
        reader = ar.TextLineReader()
        with anyio.fail_after(5):
            assert await reader.read(await work_queue([str(path)])) == (
                f"{path}:1".encode(),
                b"1",
            )
        assert _open_fds(path) == 1
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_io, lambda: release.wait())  # the only I/O token, until released
            try:
                await anyio.sleep(0.05)
                start = time.monotonic()
                await reader.aclose()
                assert time.monotonic() - start < PROMPT
                assert _open_fds(path) == 0
            finally:
                release.set()  # the task group waits for that thread
    finally:
        ar.set_io_threads(threads)
