"""What a type checker sees of the public surface: checked with ``mypy --strict``.

Not run: ``tests/test_typing.py`` type-checks it, and each ``assert_type`` fails the check
if a public name's type becomes less precise (``Any``) or wrong.
"""

from __future__ import annotations

from typing import Any, assert_type

import numpy as np

import asyncreader as ar


async def producers(coord: ar.Coordinator) -> None:
    files = ar.string_input_producer(["a.txt"], coord=coord)
    assert_type(files, ar.FIFOQueue)
    assert_type(ar.range_input_producer(3, coord=coord), ar.FIFOQueue)
    assert_type(ar.input_producer(np.zeros((2, 3)), coord=coord), ar.FIFOQueue)
    rows = ar.slice_input_producer([np.zeros(2)], coord=coord)
    assert_type(rows.queue, ar.FIFOQueue)
    assert_type(rows.statistics(), ar.ProducerStatistics)
    once = ar.limit_epochs(b"x", num_epochs=1)
    assert_type(await once(), bytes)


def parsing(serialized: list[bytes]) -> None:
    dense = ar.parse_example(serialized, {"x": ar.FixedLenFeature([1], "float")})
    assert_type(dense["x"], np.ndarray)
    sparse = ar.parse_example(serialized, {"ids": ar.VarLenFeature("int64")})
    assert_type(sparse["ids"], ar.SparseTensorValue)
    mixed = ar.parse_example(
        serialized, {"x": ar.FixedLenFeature([1], "float"), "ids": ar.VarLenFeature("int64")}
    )
    assert_type(mixed["ids"], np.ndarray | ar.SparseTensorValue)
    one = ar.parse_single_example(serialized[0], {"x": ar.FixedLenFeature([], "int64")})
    assert_type(one["x"], np.ndarray)
    single = ar.parse_single_example(serialized[0], {"ids": ar.VarLenFeature("string")})
    assert_type(single["ids"], ar.SparseTensorValue)


def statistics(queue: ar.FIFOQueue, writer: ar.TFRecordWriter, session: ar.Session) -> None:
    assert_type(queue.statistics(), ar.QueueStatistics)
    assert_type(writer.statistics(), ar.WriterStatistics)
    assert_type(session.statistics(), ar.SessionStatistics)
    assert_type(session.coord.statistics(), ar.CoordinatorStatistics)


async def batches(coord: ar.Coordinator, plain: ar.Batcher) -> None:
    # A plain ``ar.Batcher`` is accepted (its batch type defaults to Any) ...
    assert_type(await plain.dequeue(), Any)

    async def pairs() -> tuple[bytes, int]:
        return b"x", 1

    # ... and a declared batch type is what dequeue() and ``async for`` give.
    typed: ar.Batcher[tuple[np.ndarray, np.ndarray]] = ar.batch(pairs, 4, coord=coord)
    assert_type(await typed.dequeue(), tuple[np.ndarray, np.ndarray])
    async for images, labels in typed:
        assert_type(images, np.ndarray)
        assert_type(labels, np.ndarray)
    assert_type(typed.statistics(), ar.BatcherStatistics)


async def queues(plain: ar.FIFOQueue) -> None:
    assert_type(await plain.dequeue(), Any)
    names: ar.FIFOQueue[bytes] = ar.FIFOQueue(8)
    assert_type(await names.dequeue(), bytes)
    assert_type(names.dequeue_nowait(), bytes)
    shuffled: ar.RandomShuffleQueue[tuple[np.ndarray, np.ndarray]] = ar.RandomShuffleQueue(
        8, 2, ["float32", "int64"]
    )
    assert_type(await shuffled.dequeue(), tuple[np.ndarray, np.ndarray])
    padded = ar.PaddingFIFOQueue[np.ndarray](8, ["int32"], [[None]])
    assert_type(await padded.dequeue(), np.ndarray)
    ranked = ar.PriorityQueue[tuple[np.ndarray, np.ndarray]](8, ["string"], [()])
    assert_type(await ranked.dequeue(), tuple[np.ndarray, np.ndarray])
