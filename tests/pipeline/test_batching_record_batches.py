"""Batchers take a ``RecordBatch`` from ``tensors`` as they take ``read_up_to``'s result.

With ``enqueue_many=True`` a bare ``RecordBatch`` is the example ``(keys, values)``: a
drop-in for ``read_up_to``; as a component of an example it is its records. Without
``enqueue_many`` it is refused: a batch of records is not one example.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

RECORD = 6
#: Records ending in NUL bytes: a fixed-width numpy copy of them would lose bytes.
RECORDS = [b"%04d\x00\x00" % i for i in range(50)]


@pytest.fixture
def paths(tmp_path: Path) -> list[str]:
    out = []
    for f in range(2):
        path = tmp_path / f"part-{f}.bin"
        path.write_bytes(b"".join(RECORDS[f * 25 : (f + 1) * 25]))
        out.append(str(path))
    return out


async def _batches(paths: list[str], verb: str, *, shuffle: bool) -> list[Any]:
    """Every batch of producer -> FixedLengthRecordReader.<verb>(7) -> (shuffle_)batch."""
    out = []
    with anyio.fail_after(10):
        async with ar.Session(deterministic=True):
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.FixedLengthRecordReader(RECORD)

            async def records() -> Any:
                return await getattr(reader, verb)(files, 7)

            common: dict[str, Any] = {"enqueue_many": True, "allow_smaller_final_batch": True}
            if shuffle:
                batches = ar.shuffle_batch(records, 8, 30, 10, seed=3, **common)
            else:
                batches = ar.batch(records, 8, capacity=20, **common)
            async for keys, values in batches:
                assert keys.dtype == values.dtype == np.dtype(object)
                out.append((keys.tolist(), values.tolist()))
    return out


@pytest.mark.both_backends
@pytest.mark.parametrize("shuffle", [False, True], ids=["batch", "shuffle_batch"])
async def test_read_batch_is_a_drop_in_for_read_up_to(paths: list[str], shuffle: bool) -> None:
    expected = await _batches(paths, "read_up_to", shuffle=shuffle)
    assert sorted(v for _, values in expected for v in values) == RECORDS
    assert await _batches(paths, "read_batch", shuffle=shuffle) == expected


@pytest.mark.both_backends
async def test_a_record_batch_is_not_one_example(paths: list[str]) -> None:
    async def pipeline() -> None:
        async with ar.Coordinator():
            files = ar.string_input_producer(paths, num_epochs=1)
            async with ar.FixedLengthRecordReader(RECORD) as reader:

                async def records() -> ar.RecordBatch:
                    return await reader.read_batch(files, 7)

                await ar.batch(records, 4).dequeue()

    with (
        anyio.fail_after(10),
        pytest.raises(
            ar.InvalidArgumentError,
            match=r"^batch\(\): example source 0 returned a RecordBatch, a batch of records "
            r"\(keys, values\), not one example: pass enqueue_many=True$",
        ),
    ):
        await pipeline()


async def test_a_record_batch_component_keeps_its_records_whole(paths: list[str]) -> None:
    """A dict example with a RecordBatch component, through a keep vector and a callable."""
    seen: list[Any] = []

    async def keep(example: Any) -> Any:
        seen.append(example)
        return np.arange(len(example["record"])) % 2 == 0

    with anyio.fail_after(10):
        async with ar.Coordinator():
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.FixedLengthRecordReader(RECORD)

            async def examples() -> dict[str, Any]:
                batch = await reader.read_batch(files, 10)
                return {"record": batch, "id": np.arange(len(batch))}

            batcher = ar.maybe_batch(
                examples, keep, 5, enqueue_many=True, allow_smaller_final_batch=True
            )
            got = [batch async for batch in batcher]
            stats = batcher.statistics()
    assert all(isinstance(example["record"], ar.RecordBatch) for example in seen)
    values = [v for batch in got for v in batch["record"].tolist()]
    # Each read's even rows: ids 0, 2, 4, ... of reads of 10, 10 and 5 records per file.
    kept = [
        r for f in range(2) for i, r in enumerate(RECORDS[f * 25 : (f + 1) * 25]) if i % 10 % 2 == 0
    ]
    assert values == kept
    assert stats.examples_dropped == len(RECORDS) - len(kept)


async def test_a_dropped_record_batch_counts_its_records(paths: list[str]) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.FixedLengthRecordReader(RECORD)

            async def examples() -> tuple[Any, ...]:
                batch = await reader.read_batch(files, 25)
                return (batch,)

            batcher = ar.maybe_batch(examples, False, 5, enqueue_many=True)
            assert [batch async for batch in batcher] == []
            assert batcher.statistics().examples_dropped == len(RECORDS)


async def test_record_batches_and_read_up_to_results_mix(paths: list[str]) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
            reader = ar.FixedLengthRecordReader(RECORD)
            calls = 0

            async def records() -> Any:
                nonlocal calls
                calls += 1
                verb = reader.read_batch if calls % 2 else reader.read_up_to
                return await verb(files, 6)

            batcher = ar.batch(records, 10, enqueue_many=True, allow_smaller_final_batch=True)
            got = [batch async for batch in batcher]
    assert all(isinstance(batch, tuple) and len(batch) == 2 for batch in got)
    assert [v for _, values in got for v in values.tolist()] == RECORDS


@pytest.mark.both_backends
async def test_a_record_batch_component_in_hand_is_checkpointed(paths: list[str]) -> None:
    """Without record_refs an example fetched ahead is saved as payloads: its RecordBatch
    component as the records it stands for."""

    async def run(restore: bytes | None = None, take: int | None = None) -> Any:
        got: list[Any] = []
        with anyio.fail_after(10):
            async with ar.Session(restore=restore, deterministic=True) as sess:
                files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
                reader = ar.FixedLengthRecordReader(RECORD)
                fetching = anyio.Event()

                async def examples() -> dict[str, Any]:
                    batch = await reader.read_batch(files, 5)
                    if not fetching.is_set():
                        fetching.set()
                        await anyio.sleep(0.02)  # the checkpoint starts meanwhile
                    return {"record": batch, "length": batch.lengths}

                batcher = ar.batch(examples, 4, enqueue_many=True, allow_smaller_final_batch=True)
                if take == 0:
                    # A checkpoint while the batcher fetches its first example waits for
                    # it, and saves it as the example in hand.
                    await fetching.wait()
                    return got, await sess.checkpoint()
                async for batch in batcher:
                    got.append(batch["record"].tolist())
                    if len(got) == take:
                        return got, await sess.checkpoint()
        return got, None

    everything, _ = await run()
    assert [v for values in everything for v in values] == RECORDS
    for take in (0, 3):
        first, state = await run(take=take)
        assert state is not None
        rest, _ = await run(restore=state)
        assert first + rest == everything, f"take={take}"
