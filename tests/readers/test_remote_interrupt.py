"""Interrupting the I/O call a remote read waits in, without a server.

A closing reader interrupts the hook call it abandoned (``IoCall.interrupt``): the range
file the call's thread waits on cancels its requests on the client's loop, retries
included, and fails the wait with "the file was closed during the read"; a file opened
on that thread afterwards asks for nothing. The readers' own tests do this against real
servers (test_remote.py, test_s3_faults.py).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from typing import TYPE_CHECKING, Any, NoReturn

import anyio
import anyio.to_thread
import pytest

import asyncreader as ar
from asyncreader._io.executor import IoCall, run_io_abandoning
from asyncreader._io.remote import RangeFile, RemoteReading

if TYPE_CHECKING:
    from collections.abc import Callable

fsspec_asyn = pytest.importorskip("fsspec.asyn", reason="fsspec is not installed")

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

SIZE = 1 << 20
SETTINGS = RemoteReading(
    read_ahead=SIZE, concurrency=2, request_timeout=None, retry_budget=60.0, max_attempts=1000
)


class Client:
    """A file of ``SIZE`` zero bytes whose server never answers (``answer_size``: but for
    the size), or with ``fail`` fails every request in a way worth asking again, or with
    ``answer`` answers."""

    def __init__(
        self, *, answer_size: bool = True, fail: bool = False, answer: bool = False
    ) -> None:
        self.loop: asyncio.AbstractEventLoop = fsspec_asyn.get_loop()
        self.answer_size = answer_size
        self.fail = fail
        self.answer = answer
        self.asked = 0  # requests begun (sizes and ranges)
        self.cancelled = 0  # requests cancelled while they waited

    def setup(self) -> None:
        return None

    async def first(self, start: int, end: int) -> Any:
        return None

    async def size(self) -> int:
        if self.answer_size:
            return SIZE
        await self._hang()

    async def get(self, start: int, end: int) -> bytes:
        if self.answer:
            self.asked += 1
            return bytes(end - start)
        if self.fail:
            self.asked += 1
            raise ConnectionResetError("reset by peer")
        await self._hang()

    async def _hang(self) -> NoReturn:
        self.asked += 1
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        raise AssertionError("never answered: cancelled long before")


async def _abandoned(fn: Callable[[], object]) -> IoCall[object]:
    """Run ``fn`` as a reader runs a hook, and give it up after a moment, still blocked."""
    call: IoCall[object] = IoCall(fn)
    with anyio.move_on_after(0.3):
        await run_io_abandoning(call)
    assert call.running
    return call


async def _until(done: Callable[[], bool]) -> None:
    with anyio.fail_after(5):  # generous: it happens as soon as the loop runs it
        while not done():  # noqa: ASYNC110 - other threads' state
            await anyio.sleep(0.01)


async def test_an_interrupted_read_fails_at_once_and_its_requests_end() -> None:
    client = Client()
    f = await anyio.to_thread.run_sync(RangeFile, client, "s3://bucket/hang.bin", SETTINGS)
    call = await _abandoned(functools.partial(f.read, 100))
    assert client.asked >= 1
    call.interrupt()
    await call.wait()
    with pytest.raises(ar.FailedPreconditionError, match="closed during the read") as info:
        call.outcome()
    assert info.value.work_item == "s3://bucket/hang.bin"
    await _until(lambda: client.cancelled == client.asked)  # cancelled on the loop
    # Interrupted for good: a later read asks for nothing.
    asked = client.asked
    with pytest.raises(ar.FailedPreconditionError, match="closed during the read"):
        await anyio.to_thread.run_sync(f.read, 100)
    assert client.asked == asked
    f.close()


async def test_a_file_opened_on_an_interrupted_call_asks_for_nothing() -> None:
    # As a reader's open does when the file it opened ahead failed: it opens it again.
    hanging, second = Client(answer_size=False), Client()
    errors: list[Exception] = []

    def open_twice() -> RangeFile:
        try:
            RangeFile(hanging, "s3://bucket/hang.bin", SETTINGS)
        except ar.FailedPreconditionError as exc:
            errors.append(exc)
        return RangeFile(second, "s3://bucket/hang.bin", SETTINGS)

    call = await _abandoned(open_twice)
    call.interrupt()
    await call.wait()
    with pytest.raises(ar.FailedPreconditionError, match="closed during the read"):
        call.outcome()
    assert len(errors) == 1
    assert "closed during the read" in str(errors[0])
    assert second.asked == 0
    await _until(lambda: hanging.cancelled == hanging.asked == 1)


async def test_an_interrupted_read_is_not_asked_again_nor_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncreader.remote")
    client = Client(fail=True)
    f = await anyio.to_thread.run_sync(RangeFile, client, "s3://bucket/fail.bin", SETTINGS)
    call = await _abandoned(functools.partial(f.read, 100))
    assert any("asking again in" in r.getMessage() for r in caplog.records)
    call.interrupt()
    logged, asked = len(caplog.records), client.asked
    await call.wait()
    with pytest.raises(ar.FailedPreconditionError, match="closed during the read"):
        call.outcome()
    await anyio.sleep(1.0)  # retried, the next attempt would come within that
    assert [r.getMessage() for r in caplog.records[logged:]] == []
    assert client.asked == asked
    f.close()


async def test_interrupting_a_call_that_returned_leaves_its_files_alone() -> None:
    client = Client(answer=True)
    f = await anyio.to_thread.run_sync(RangeFile, client, "s3://bucket/ok.bin", SETTINGS)
    call: IoCall[object] = IoCall(functools.partial(f.read, 100))
    assert await run_io_abandoning(call) == bytes(100)
    call.interrupt()  # no longer waited on by the call: the file reads on
    assert await anyio.to_thread.run_sync(f.read, SIZE) == bytes(SIZE - 100)
    f.close()
