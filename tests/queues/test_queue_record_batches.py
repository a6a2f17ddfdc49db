"""Queues take a ``RecordBatch`` (what ``read_batch`` returns) as ``read_up_to``'s result.

As the whole ``enqueue_many`` argument a batch is the two components ``(keys, values)``
(in an untyped queue one ``(key, value)`` tuple per record); as one component it is its
records. It is never one element.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

#: Fixed-length records ending in NUL bytes: a fixed-width numpy copy would lose them.
RECORDS = [b"%03d\x00\x00" % i for i in range(12)]


async def _read(path: Path) -> tuple[list[bytes], list[bytes], ar.RecordBatch]:
    """Read ``path`` with ``read_up_to`` and again with ``read_batch``."""
    out: list[Any] = []
    for verb in ("read_up_to", "read_batch"):
        files = ar.FIFOQueue(None)
        await files.enqueue(str(path))
        await files.close()
        async with ar.FixedLengthRecordReader(5) as reader:
            out.append(await getattr(reader, verb)(files, 100))
    (keys, values), batch = out
    assert len(batch) == len(RECORDS)
    return keys, values, batch


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    path = tmp_path / "records.bin"
    path.write_bytes(b"".join(RECORDS))
    return path


QUEUES: dict[str, Callable[[], ar.FIFOQueue | ar.RandomShuffleQueue | ar.PaddingFIFOQueue]] = {
    "fifo": lambda: ar.FIFOQueue(8, [object, object], shapes=[[], []]),
    "shuffle": lambda: ar.RandomShuffleQueue(100, 0, [object, object], shapes=[[], []], seed=4),
    "padding": lambda: ar.PaddingFIFOQueue(None, ["string", "string"], shapes=[[], []]),
    "no-shapes": lambda: ar.FIFOQueue(None, ["string", "string"]),
}


@pytest.mark.both_backends
@pytest.mark.parametrize("make", QUEUES.values(), ids=QUEUES.keys())
async def test_a_record_batch_enqueues_as_the_keys_and_values_of_read_up_to(
    records_file: Path, make: Callable[[], Any]
) -> None:
    keys, values, batch = await _read(records_file)
    got = []
    with anyio.fail_after(10):
        for element in ((keys, values), batch):
            queue = make()
            async with anyio.create_task_group() as tg:
                # A small queue takes the batch progressively, as room frees.
                tg.start_soon(queue.enqueue_many, element)
                got.append([await queue.dequeue() for _ in RECORDS])
    assert got[1] == got[0]
    assert sorted(v for _, v in got[1]) == RECORDS
    assert all(type(k) is bytes and type(v) is bytes for k, v in got[1])


async def test_enqueue_many_nowait_takes_a_record_batch(records_file: Path) -> None:
    keys, values, batch = await _read(records_file)
    queue = ar.FIFOQueue(len(RECORDS), [object, object], shapes=[[], []])
    queue.enqueue_many_nowait(batch)
    out = await queue.dequeue_many(len(RECORDS))
    assert (out[0].tolist(), out[1].tolist()) == (keys, values)


async def test_a_record_batch_is_a_string_component(records_file: Path) -> None:
    keys, values, batch = await _read(records_file)
    labels = np.arange(len(RECORDS))
    three = ar.FIFOQueue(None, ["int64", object, object], shapes=[[], [], []])
    await three.enqueue_many((labels, batch.keys(), batch))
    out = await three.dequeue_many(len(RECORDS))
    assert [c.tolist() for c in out] == [labels.tolist(), keys, values]
    named = ar.RandomShuffleQueue(None, 0, [object, object], [[], []], ["key", "value"], seed=1)
    await named.enqueue_many({"key": batch.keys(), "value": batch})
    got = await named.dequeue_many(len(RECORDS))
    assert sorted(zip(got["key"].tolist(), got["value"].tolist(), strict=True)) == sorted(
        zip(keys, values, strict=True)
    )
    # In one element it is a vector of strings.
    vectors = ar.PaddingFIFOQueue(None, ["string"], shapes=[[None]])
    await vectors.enqueue((batch,))
    await vectors.enqueue((batch[:2],))
    padded = await vectors.dequeue_many(2)
    assert padded.shape == (2, len(RECORDS))
    assert padded[0].tolist() == values
    assert padded[1].tolist() == values[:2] + [b""] * (len(RECORDS) - 2)


async def test_a_record_batch_is_not_a_number(records_file: Path) -> None:
    _, _, batch = await _read(records_file)
    queue = ar.FIFOQueue(None, ["int64", object], shapes=[[], []])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=r"^Type mismatch in tuple component 0\. Expected int64, got string$",
    ):
        await queue.enqueue_many((batch, batch.keys()))
    with pytest.raises(
        ar.InvalidArgumentError,
        match=r"^Type mismatch in tuple component 0\. Expected int64, got string$",
    ):
        await queue.enqueue_many(batch)  # (keys, values): the keys are strings
    assert queue.size() == 0


async def test_a_record_batch_needs_an_element_of_two_components(records_file: Path) -> None:
    _, values, batch = await _read(records_file)
    one = ar.FIFOQueue(None, [object], shapes=[[]])
    with pytest.raises(
        ar.InvalidArgumentError, match=r"stands for the two components \(keys, values\).* have 1"
    ) as info:
        await one.enqueue_many(batch)
    assert "enqueue (batch,) for its records alone" in str(info.value)
    await one.enqueue_many((batch,))
    assert (await one.dequeue_many(len(RECORDS))).tolist() == values
    three = ar.FIFOQueue(None, [object, object, "int64"], shapes=[[], [], []])
    with pytest.raises(ar.InvalidArgumentError, match=r"\(keys, values\).* have 3"):
        await three.enqueue_many(batch)
    priority = ar.PriorityQueue(None, [object, object], shapes=[[], []])
    with pytest.raises(ar.InvalidArgumentError, match=r"\(keys, values\).* have 3"):
        await priority.enqueue_many(batch)
    named = ar.FIFOQueue(None, [object, object], shapes=[[], []], names=["k", "v"])
    with pytest.raises(ar.InvalidArgumentError, match=r"takes \{'k': batch.keys\(\), 'v': batch\}"):
        named.enqueue_many_nowait(batch)
    for queue in (one, three, priority, named):
        assert queue.size() == 0


async def test_a_record_batch_is_not_one_element(records_file: Path) -> None:
    _, _, batch = await _read(records_file)
    for queue in (
        ar.FIFOQueue(None, [object, object], shapes=[[], []]),
        ar.PaddingFIFOQueue(None, [object], shapes=[[None]]),
        ar.RandomShuffleQueue(None, 0, [object]),
    ):
        with pytest.raises(ar.InvalidArgumentError, match="not one element: enqueue it with"):
            await queue.enqueue(batch)
        with pytest.raises(ar.InvalidArgumentError, match="not one element"):
            queue.enqueue_nowait(batch)
        assert queue.size() == 0


@pytest.mark.both_backends
async def test_an_untyped_queue_takes_one_key_and_value_tuple_per_record(
    records_file: Path,
) -> None:
    keys, values, batch = await _read(records_file)
    queue = ar.FIFOQueue(None)
    with anyio.fail_after(10):
        await queue.enqueue_many(batch)
        assert await queue.dequeue_many(len(RECORDS)) == list(zip(keys, values, strict=True))
        # One element is any object, a batch too.
        await queue.enqueue(batch)
        assert await queue.dequeue() is batch
