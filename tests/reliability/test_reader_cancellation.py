"""A reader's verbs cancelled part-way must not lose records they already took.

These cover ``ReaderBase`` (asyncreader/_readers/base.py) and a buffered reader: each test
cancels a read part-way (while a reader hook waits, or between the refills of one
``read_up_to``) and checks that every record is delivered exactly once, and that a state
saved afterwards resumes after exactly the records delivered.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.from_thread
import pytest
from queue_util import work_queue

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Awaitable

pytestmark = pytest.mark.anyio


class _Gated(ar.ReaderBase):
    """Five records per work item; the hook for record ``slow`` waits for ``gate``."""

    def __init__(self, slow: int, last_flag: bool = False, name: str | None = None) -> None:
        super().__init__(name)
        self.slow = slow
        self.last_flag = last_flag
        self.i = 0
        self.entered = anyio.Event()
        self.gate = threading.Event()
        self.finished_calls = 0

    def on_work_started(self, work: bytes) -> None:
        self.i = 0

    def read_one(self) -> tuple[bytes, bytes] | tuple[bytes, bytes, bool] | None:
        self.i += 1
        if self.i > 5:
            return None
        if self.i == self.slow:
            anyio.from_thread.run_sync(self.entered.set)
            self.gate.wait()
        key, value = b"k%d" % self.i, b"v%d" % self.i
        if self.last_flag and self.i == 5:
            return key, value, True
        return key, value

    def on_work_finished(self) -> None:
        self.finished_calls += 1


async def _cancel_while_hook_waits(reader: _Gated, call: Awaitable[Any]) -> list[Any]:
    """Run ``call``, cancel it while the slow hook runs, then open the gate.

    Returns what the call returned (empty when the cancellation made it raise): a call
    whose last step needs no checkpoint completes and delivers despite the cancellation.
    """
    returned: list[Any] = []

    async def run() -> None:
        returned.append(await call)

    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run)
            try:
                await reader.entered.wait()
                tg.cancel_scope.cancel()
            finally:
                reader.gate.set()  # a failed wait must not leave the hook's thread blocked
    return returned


async def _drain(reader: ar.ReaderBase, queue: ar.FIFOQueue) -> list[bytes]:
    values: list[bytes] = []
    while True:
        try:
            _, value = await reader.read(queue)
        except ar.OutOfRangeError:
            return values
        values.append(value)


async def test_cancelled_read_delivers_the_record_later() -> None:
    queue = await work_queue(["w"])
    reader = _Gated(slow=3)
    async with reader:
        assert await reader.read(queue) == (b"k1", b"v1")
        assert await reader.read(queue) == (b"k2", b"v2")
        returned = await _cancel_while_hook_waits(reader, reader.read(queue))
        got = [value for _, value in returned] + await _drain(reader, queue)
        # Record 3 reaches either the cancelled call or the next one, never both.
        assert got == [b"v3", b"v4", b"v5"]
        assert reader.num_records_produced() == 5


async def test_cancelled_read_up_to_keeps_the_records_it_collected() -> None:
    queue = await work_queue(["w"])
    reader = _Gated(slow=3)
    async with reader:
        returned = await _cancel_while_hook_waits(reader, reader.read_up_to(queue, 5))
        got = [v for _, values in returned for v in values] + await _drain(reader, queue)
        assert got == [b"v1", b"v2", b"v3", b"v4", b"v5"], "records taken before were lost"
        assert reader.num_records_produced() == 5


async def test_cancelled_read_keeps_a_work_items_last_record() -> None:
    queue = await work_queue(["w"])
    reader = _Gated(slow=5, last_flag=True)
    async with reader:
        for i in range(1, 5):
            assert await reader.read(queue) == (b"k%d" % i, b"v%d" % i)
        returned = await _cancel_while_hook_waits(reader, reader.read(queue))
        got = [value for _, value in returned] + await _drain(reader, queue)
        assert got == [b"v5"], "the last record was lost"
        assert reader.finished_calls == 1, "on_work_finished was skipped"


class _Stateful(_Gated):
    """A hook reader that saves and restores its position."""

    def serialize_extra(self) -> bytes:
        return b"%d" % self.i

    def restore_extra(self, extra: bytes) -> None:
        self.i = int(extra)


async def test_state_saved_after_a_cancelled_read_up_to_resumes_at_the_records_put_back() -> None:
    queue = await work_queue(["w"])
    reader = _Stateful(slow=4)
    async with reader:
        assert await reader.read(queue) == (b"k1", b"v1")
        returned = await _cancel_while_hook_waits(reader, reader.read_up_to(queue, 5))
        assert returned == []
        # One of the put-back records is delivered before the state is taken.
        assert await reader.read(queue) == (b"k2", b"v2")
        state = reader.serialize_state()
    fresh_queue = await work_queue([])
    fresh = _Stateful(slow=0)
    async with fresh:
        fresh.restore_state(state)
        assert await _drain(fresh, fresh_queue) == [b"v3", b"v4", b"v5"]


@pytest.mark.parametrize("cancel_after", [1, 3, 7])
async def test_buffered_reader_cancelled_across_refills_loses_nothing_and_resumes_exactly(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, cancel_after: int
) -> None:
    # Small read blocks: one read_up_to spans many refills, each a cancellation point.
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 64)
    payloads = [b"r%03d" % i for i in range(120)]
    path = tmp_path / "f.tfrecord"
    with ar.TFRecordWriter(str(path)) as writer:
        for payload in payloads:
            writer.write(payload)
    queue = await work_queue([str(path)])
    got: list[bytes] = []
    with anyio.fail_after(10):
        async with ar.TFRecordReader() as reader:
            got += (await reader.read_up_to(queue, 10))[1]
            real_fill = reader._fill
            calls = 0
            with anyio.CancelScope() as scope:

                def fill() -> Any:
                    # Cancel from inside the call's thread hops, after a few refills.
                    nonlocal calls
                    calls += 1
                    if calls == cancel_after:
                        anyio.from_thread.run_sync(scope.cancel)
                    return real_fill()

                reader._fill = fill  # type: ignore[method-assign]
                got += (await reader.read_up_to(queue, 100))[1]
            assert scope.cancelled_caught
            reader._fill = real_fill  # type: ignore[method-assign]
            assert reader.num_records_produced() == len(got)
            got += (await reader.read_up_to(queue, 3))[1]
            state = reader.serialize_state()
        async with ar.TFRecordReader() as fresh:
            fresh.restore_state(state)
            got += await _drain(fresh, await work_queue([]))
    assert got == payloads
