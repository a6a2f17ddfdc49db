"""What a type checker sees of the public surface: checked with ``mypy --strict``.

Not run: ``tests/test_typing.py`` type-checks it, and each ``assert_type`` fails the check
if a public name's type becomes less precise (``Any``) or wrong.
"""

from __future__ import annotations

from typing import assert_type

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
