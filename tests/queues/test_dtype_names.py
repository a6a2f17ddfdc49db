"""dtype names mean what they mean in TensorFlow, in queues as in decoders, and survive a
checkpoint: a queue writes its dtypes' names into the checkpoint and reads them back on
restore, so ``"float"`` must be float32 on both sides."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._decoders.dtypes import resolve_dtype

if TYPE_CHECKING:
    from collections.abc import Callable

pytestmark = pytest.mark.both_backends

#: Every dtype a queue accepts by TensorFlow's name, with the numpy dtype it must be.
TF_NAMES = {
    "half": np.float16,
    "float": np.float32,
    "double": np.float64,
    "int8": np.int8,
    "int16": np.int16,
    "int32": np.int32,
    "int64": np.int64,
    "uint8": np.uint8,
    "uint16": np.uint16,
    "uint32": np.uint32,
    "uint64": np.uint64,
    "bool": np.bool_,
    "complex64": np.complex64,
    "complex128": np.complex128,
    "string": object,
}

#: Other spellings a queue accepts: numpy names, numpy types, Python types.
OTHER_SPELLINGS: list[tuple[Any, Any]] = [
    ("float16", np.float16),
    ("float32", np.float32),
    ("float64", np.float64),
    (float, np.float32),
    (bool, np.bool_),
    (np.float32, np.float32),
    (np.float64, np.float64),
    (np.dtype(">i4"), np.int32),
    ("<i8", np.int64),
    (bytes, object),
    (str, object),
]

SPECS = [*TF_NAMES.items(), *OTHER_SPELLINGS]
IDS = [
    spec if isinstance(spec, str) else f"{type(spec).__name__}:{getattr(spec, '__name__', spec)}"
    for spec, _ in SPECS
]


def _value(expected: Any, i: int) -> np.ndarray[Any, Any]:
    """Example ``i`` of a component of dtype ``expected``, shape [2]."""
    if expected is object:
        return np.array([b"v%d" % i, b"w%d" % i], dtype=object)
    if expected is np.bool_:
        return np.array([i % 2 == 0, i % 2 == 1])
    return np.array([i, i + 1]).astype(expected)


@pytest.mark.anyio
@pytest.mark.parametrize(("name", "expected"), list(TF_NAMES.items()), ids=list(TF_NAMES))
async def test_names_mean_the_same_in_queues_and_decoders(name: str, expected: Any) -> None:
    queue = ar.FIFOQueue(2, dtypes=[name])
    assert queue.dtypes == [np.dtype(expected)]
    assert resolve_dtype(name) == np.dtype(expected)


@pytest.mark.anyio
@pytest.mark.parametrize(("spec", "expected"), SPECS, ids=IDS)
async def test_queue_checkpoint_restores_every_dtype(spec: Any, expected: Any) -> None:
    kinds: list[Callable[[], Any]] = [
        lambda: ar.FIFOQueue(4, dtypes=[spec], shapes=[[2]]),
        lambda: ar.PaddingFIFOQueue(4, dtypes=[spec], shapes=[[None]]),
        lambda: ar.RandomShuffleQueue(4, 0, dtypes=[spec], shapes=[[2]], seed=1),
    ]
    async with ar.Session() as sess:
        queues = [make() for make in kinds]  # (a session tracks its queues weakly)
        for queue in queues:
            await queue.enqueue_many(np.stack([_value(expected, 0), _value(expected, 1)]))
        state = await sess.checkpoint()
    with anyio.fail_after(10):
        async with ar.Session(restore=state):
            for make in kinds:
                queue = make()
                assert queue.dtypes == [np.dtype(expected)]
                got = await queue.dequeue_many(2)
                assert got.dtype == np.dtype(expected)
                rows = sorted(got.tolist(), key=repr)
                expected_rows = [_value(expected, 0).tolist(), _value(expected, 1).tolist()]
                assert rows == sorted(expected_rows, key=repr)


@pytest.mark.anyio
@pytest.mark.parametrize(("spec", "expected"), SPECS, ids=IDS)
async def test_batcher_checkpoint_restores_every_dtype(spec: Any, expected: Any) -> None:
    """A batch of typed examples (the batcher names its queue's dtypes in the checkpoint
    and builds the queue from those names on restore) resumes where it stopped."""
    total = 9

    def make_source(limit: int) -> Any:
        count = 0

        async def example() -> np.ndarray[Any, Any]:
            nonlocal count
            await anyio.lowlevel.checkpoint()
            if count >= limit:
                raise ar.OutOfRangeError("end of examples")
            count += 1
            return _value(expected, count - 1).astype(expected)

        return example

    seen: list[list[Any]] = []
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            batches = ar.batch(make_source(total), 2, capacity=4, allow_smaller_final_batch=True)
            first = await batches.__anext__()
            assert first.dtype == np.dtype(expected)
            seen += first.tolist()
            state = await sess.checkpoint()
        async with ar.Session(restore=state):
            # The examples not yet batched come from the checkpoint, not the source.
            batches = ar.batch(make_source(0), 2, capacity=4, allow_smaller_final_batch=True)
            async for rest in batches:
                assert rest.dtype == np.dtype(expected)
                seen += rest.tolist()
    # FIFO batches of one runner task: every example saved at the checkpoint, in order,
    # none twice.
    assert seen == [_value(expected, i).tolist() for i in range(len(seen))]
    assert len(seen) > 2
