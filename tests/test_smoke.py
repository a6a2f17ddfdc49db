from __future__ import annotations

import pytest

import asyncreader as ar
from asyncreader._io.executor import run_io

pytestmark = pytest.mark.anyio


@pytest.mark.both_backends
async def test_io_executor_runs_blocking_work_off_the_loop() -> None:
    import threading

    loop_thread = threading.get_ident()
    worker = await run_io(threading.get_ident)
    assert worker != loop_thread


def test_errors_name_the_work_item() -> None:
    err = ar.DataLossError("corrupted record at 12", work_item="a.tfrecord", record=3)
    assert str(err) == "corrupted record at 12 (work item 'a.tfrecord', record 3)"
