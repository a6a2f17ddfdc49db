"""Pipelines driven the way a user's own pytest-asyncio suite drives them.

asyncreader's own tests run on anyio's pytest plugin; a user's suite for an asyncio
service more often uses pytest-asyncio: ``@pytest.mark.asyncio`` tests, async fixtures
(``pytest_asyncio.fixture``) that build a pipeline and tear it down, and event loops
shared by a module (``loop_scope="module"``). This module is such a suite (the testing
guide shows its fixture): every record arrives exactly once, a test that stops early
leaves nothing running when its fixture's teardown leaves the Session, and a read
cancelled by ``asyncio.timeout`` loses nothing.

pytest-asyncio runs an async generator fixture's setup and teardown in different tasks
(pytest-dev/pytest-asyncio#1191), and a Session is a task group, which must be left in the
task that entered it. So the fixtures run the Session in a task of its own
(:func:`pipeline_in_own_task`) and hand the test what it built.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import pytest_asyncio

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable
    from pathlib import Path

FILES, PER_FILE = 4, 50
T = TypeVar("T")


@asynccontextmanager
async def pipeline_in_own_task(build: Callable[[], Awaitable[T]]) -> AsyncIterator[T]:
    """Run a Session in a task of its own, build a pipeline in it, and yield what
    ``build`` returns; leaving ends the Session (cancelling what is still blocked) and
    re-raises an error of its tasks."""
    built: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    leave = asyncio.Event()

    async def host() -> None:
        try:
            async with ar.Session():
                built.set_result(await build())
                await leave.wait()
        except BaseException as exc:
            if not built.done():
                built.set_exception(exc)
            raise

    task = asyncio.create_task(host())
    try:
        yield await built
    finally:
        leave.set()
        await task


def _write_files(folder: Path) -> list[str]:
    paths = []
    for f in range(FILES):
        path = folder / f"train-{f}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for i in range(PER_FILE):
                writer.write(b"%d" % (f * PER_FILE + i))
        paths.append(str(path))
    return paths


def _others() -> set[asyncio.Task[object]]:
    """The tasks of the running loop other than the current one."""
    return asyncio.all_tasks() - {asyncio.current_task()}


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    return _write_files(tmp_path)


@pytest_asyncio.fixture
async def batches(files: list[str]) -> AsyncIterator[ar.Batcher[Any]]:
    """A shuffled pipeline over ``files``, one epoch, left when the test is done."""
    before = _others()

    async def build() -> ar.Batcher[Any]:
        queue = ar.string_input_producer(files, num_epochs=1, seed=1)
        reader = ar.TFRecordReader()

        async def record() -> tuple[bytes, bytes]:
            return await reader.read(queue)

        return ar.shuffle_batch(
            record,
            batch_size=16,
            capacity=64,
            min_after_dequeue=16,
            seed=2,
            allow_smaller_final_batch=True,
        )

    async with pipeline_in_own_task(build) as batcher:
        yield batcher
    # Leaving the Session cancelled whatever the test left blocked: no task outlives it.
    assert _others() <= before


@pytest.mark.asyncio
async def test_every_record_arrives_once(batches: ar.Batcher[Any]) -> None:
    seen: list[int] = []
    async with asyncio.timeout(30):
        async for _keys, values in batches:
            seen += [int(v) for v in values]
    assert sorted(seen) == list(range(FILES * PER_FILE))
    assert seen != sorted(seen)  # shuffled


@pytest.mark.asyncio
async def test_a_test_that_stops_early_leaves_nothing_running(
    batches: ar.Batcher[Any],
) -> None:
    async with asyncio.timeout(30):
        keys, _values = await batches.dequeue()
    assert len(keys) == 16
    # The runner tasks are now blocked on a full queue; the fixture's teardown ends them.


@pytest.mark.asyncio
async def test_a_read_cancelled_by_timeout_loses_nothing(files: list[str]) -> None:
    queue = ar.FIFOQueue(None)
    async with ar.TFRecordReader() as reader:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.05):
                await reader.read(queue)  # nothing queued yet: waits for work
        await queue.enqueue(files[0])
        await queue.close()
        got = []
        while True:
            try:
                _, value = await reader.read(queue)
            except ar.OutOfRangeError:
                break
            got.append(int(value))
    assert got == list(range(PER_FILE))


# -- one pipeline shared by a module's tests, on the module's event loop ------------------


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def service(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[ar.Batcher[Any]]:
    """A long-lived pipeline, as a service keeps one for all its requests."""
    paths = _write_files(tmp_path_factory.mktemp("service"))

    async def build() -> ar.Batcher[Any]:
        queue = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
        reader = ar.TFRecordReader()

        async def records() -> tuple[list[bytes], list[bytes]]:
            return await reader.read_up_to(queue, 10)

        return ar.batch(records, batch_size=25, enqueue_many=True, allow_smaller_final_batch=True)

    async with pipeline_in_own_task(build) as batcher:
        yield batcher


@pytest.mark.asyncio(loop_scope="module")
async def test_the_shared_pipeline_serves_the_first_test(
    service: ar.Batcher[Any],
) -> None:
    _, values = await service.dequeue()
    assert [int(v) for v in values] == list(range(25))


@pytest.mark.asyncio(loop_scope="module")
async def test_and_goes_on_where_it_was_for_the_next(
    service: ar.Batcher[Any],
) -> None:
    rest: list[int] = []
    async with asyncio.timeout(30):
        async for _keys, values in service:
            rest += [int(v) for v in values]
    assert rest == list(range(25, FILES * PER_FILE))
