"""Session checkpoints keep the work item in progress of readers with TensorFlow's state.

WholeFileReader and IdentityReader save TensorFlow's ``ReaderBaseState``, whose restore
refuses work in progress. A session checkpoint must still save such a work item (a file
that was missing, one whose read or open a cancellation abandoned) so that the restored
reader retries that same item, and an unsigned restore checks it against the program's
inputs like any other work item.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest
from test_stuck_io import _open_fds, _write_fifo, fifo  # noqa: F401 - the fixture

import asyncreader as ar
from asyncreader._runtime import state_codec

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


async def _checkpoint_after_missing(files: list[str]) -> bytes:
    async with ar.Session() as sess:
        queue = ar.string_input_producer(files, num_epochs=1, shuffle=False)
        reader = ar.WholeFileReader()
        with anyio.fail_after(5), pytest.raises(ar.NotFoundError, match=files[0]):
            await reader.read(queue)
        # TensorFlow's state keeps the item in progress (SPEC §3.6): it cannot be restored.
        with pytest.raises(ar.InvalidArgumentError, match="Inconsistent work started"):
            ar.WholeFileReader().restore_state(reader.serialize_state())
        with anyio.fail_after(5):
            checkpoint = await sess.checkpoint()
    return checkpoint


async def test_a_missing_file_in_progress_is_retried_after_a_restore(tmp_path: Path) -> None:
    missing, there = str(tmp_path / "missing"), str(tmp_path / "there")
    (tmp_path / "there").write_bytes(b"T")
    checkpoint = await _checkpoint_after_missing([missing, there])

    async with ar.Session(restore=checkpoint):
        queue = ar.string_input_producer([missing, there], num_epochs=1, shuffle=False)
        reader = ar.WholeFileReader()
        assert reader.statistics().current_work == os.fsencode(missing)
        with anyio.fail_after(5):
            # Still missing: the same item fails again, and stays in progress.
            with pytest.raises(ar.NotFoundError, match="missing"):
                await reader.read(queue)
            (tmp_path / "missing").write_bytes(b"M")
            assert await reader.read(queue) == (os.fsencode(missing), b"M")
            assert await reader.read(queue) == (os.fsencode(there), b"T")
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(queue)
        assert reader.num_work_units_completed() == 2


async def test_an_unsigned_restore_checks_the_work_item_in_progress(tmp_path: Path) -> None:
    secret = str(tmp_path / "secret")
    files = [str(tmp_path / "gone"), str(tmp_path / "there")]
    foreign = state_codec.decode(await _checkpoint_after_missing([secret, files[1]]))
    tree = state_codec.decode(await _checkpoint_after_missing(files))
    # An edited checkpoint: the reader's work item in progress is one no producer names.
    tree["components"]["reader/0"] = foreign["components"]["reader/0"]

    async def restore() -> None:
        async with ar.Session(restore=state_codec.encode(tree)):
            ar.string_input_producer(files, num_epochs=1, shuffle=False)
            ar.WholeFileReader()

    with anyio.fail_after(5), pytest.raises(ar.InvalidArgumentError, match="no input") as info:
        await restore()
    assert repr(secret.encode()) in str(info.value)
    assert "reader/0" in "".join(getattr(info.value, "__notes__", []))


async def test_a_read_abandoned_in_a_fifo_is_taken_up_after_a_restore(
    fifo: Path,  # noqa: F811 - the fixture
) -> None:
    async with ar.Session() as sess:
        queue = ar.string_input_producer([str(fifo)], num_epochs=1, shuffle=False)
        reader = ar.WholeFileReader()
        with pytest.raises(TimeoutError), anyio.fail_after(0.3):
            await reader.read(queue)
        assert reader.statistics().abandoned_threads == 1
        with anyio.fail_after(5):
            checkpoint = await sess.checkpoint()
        # The abandoned open returns (and its discarded outcome is closed) as the session ends.
        await anyio.to_thread.run_sync(_write_fifo, fifo, b"")
    async with ar.Session(restore=checkpoint):
        queue = ar.string_input_producer([str(fifo)], num_epochs=1, shuffle=False)
        reader = ar.WholeFileReader()
        async with anyio.create_task_group() as tg:
            tg.start_soon(anyio.to_thread.run_sync, _write_fifo, fifo, b"data")
            with anyio.fail_after(5):
                assert await reader.read(queue) == (os.fsencode(fifo), b"data")
        with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
            await reader.read(queue)
    assert await anyio.to_thread.run_sync(_open_fds, fifo) == 0


class _SlowStart(ar.IdentityReader):
    """An IdentityReader whose start hook blocks until ``gate`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()

    def on_work_started(self, work: bytes) -> None:
        self.gate.wait(10)


async def test_a_work_item_an_abandoned_start_holds_is_kept() -> None:
    async with ar.Session() as sess:
        queue = ar.string_input_producer(["a", "b"], num_epochs=1, shuffle=False)
        reader = _SlowStart()
        with pytest.raises(TimeoutError), anyio.fail_after(0.3):
            await reader.read(queue)
        assert reader.statistics().abandoned_threads == 1
        with anyio.fail_after(5):
            checkpoint = await sess.checkpoint()
        reader.gate.set()
    async with ar.Session(restore=checkpoint):
        queue = ar.string_input_producer(["a", "b"], num_epochs=1, shuffle=False)
        reader = _SlowStart()
        reader.gate.set()
        with anyio.fail_after(5):
            assert await reader.read(queue) == (b"a", b"a")
            assert await reader.read(queue) == (b"b", b"b")
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(queue)
