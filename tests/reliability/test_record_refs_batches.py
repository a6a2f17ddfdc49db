"""``record_refs`` with ``read_batch``: a RecordBatch's keys become the references.

A batcher whose ``tensors`` returns ``await reader.read_batch(files, n)`` with
``enqueue_many=True`` gets the example ``(keys, values)``, so ``record_refs=reader`` saves
its queued records as references exactly as it does for ``read_up_to``, and a restore
continues the uninterrupted stream.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import pytest
from refs_pipeline import Seen, refs_batches

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

RECORDS_PER_FILE = 40
FIXED = 240


def _payload(f: int, i: int) -> bytes:
    return b"%03d-%03d|" % (f, i) * 30  # 240 bytes, unique per record


def _write(directory: Path, kind: str) -> list[str]:
    paths = []
    for f in range(3):
        path = directory / f"part-{f}.{kind}"
        if kind == "tfrecord":
            with ar.TFRecordWriter(str(path)) as w:
                for i in range(RECORDS_PER_FILE):
                    w.write(_payload(f, i))
        else:
            path.write_bytes(b"".join(_payload(f, i) for i in range(RECORDS_PER_FILE)))
        paths.append(str(path))
    return paths


READERS: dict[str, Callable[[], ar.ReaderBase]] = {
    "tfrecord": ar.TFRecordReader,
    "fixed": lambda: ar.FixedLengthRecordReader(FIXED),
}


async def _batches(
    paths: list[str],
    kind: str,
    *,
    shuffle: bool = True,
    refs: bool = True,
    restore: bytes | None = None,
    take: int | None = None,
) -> tuple[Seen, bytes | None]:
    """Run producer -> reader.read_batch -> (shuffle_)batch of (key, value) records."""

    async def read(reader: ar.ReaderBase, files: ar.FIFOQueue) -> ar.RecordBatch:
        return await reader.read_batch(files, 7)

    return await refs_batches(
        paths, READERS[kind], read, shuffle=shuffle, refs=refs, restore=restore, take=take
    )


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", READERS.keys())
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffle_batch", "batch"])
async def test_resume_from_references_of_record_batches_is_the_uninterrupted_stream(
    tmp_path: Path, kind: str, shuffle: bool
) -> None:
    paths = _write(tmp_path, kind)
    everything, _ = await _batches(paths, kind, shuffle=shuffle)
    assert sorted(v for _, values in everything for v in values) == sorted(
        _payload(f, i) for f in range(3) for i in range(RECORDS_PER_FILE) for _ in range(2)
    )
    for take in (0, 1, 6, 17):
        first, state = await _batches(paths, kind, shuffle=shuffle, take=take)
        assert state is not None
        # References only: no queued record's bytes are in the checkpoint.
        assert not any(v in state for _, values in everything for v in values)
        rest, _ = await _batches(paths, kind, shuffle=shuffle, restore=state)
        assert first + rest == everything, f"take={take}"


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", READERS.keys())
async def test_record_batches_restore_as_read_up_to_results_do(tmp_path: Path, kind: str) -> None:
    """The same pipeline with payloads gives the same stream after a restore."""
    paths = _write(tmp_path, kind)
    _, with_refs = await _batches(paths, kind, take=3)
    _, with_payloads = await _batches(paths, kind, refs=False, take=3)
    assert with_refs is not None
    assert with_payloads is not None
    assert len(with_refs) < len(with_payloads) / 2
    rest, _ = await _batches(paths, kind, restore=with_refs)
    assert rest == (await _batches(paths, kind, refs=False, restore=with_payloads))[0]


async def test_dict_examples_of_record_batches_save_references(tmp_path: Path) -> None:
    paths = _write(tmp_path, "tfrecord")

    async def run(restore: bytes | None = None, take: int | None = None) -> Any:
        got: list[Any] = []
        with anyio.fail_after(30):
            async with ar.Session(restore=restore, deterministic=True) as sess:
                files = ar.string_input_producer(paths, num_epochs=1, seed=1)
                reader = ar.TFRecordReader()

                async def examples() -> dict[str, Any]:
                    batch = await reader.read_batch(files, 9)
                    return {"key": batch.keys(), "record": batch, "size": batch.lengths}

                batcher = ar.shuffle_batch(
                    examples,
                    8,
                    capacity=50,
                    min_after_dequeue=20,
                    seed=5,
                    enqueue_many=True,
                    allow_smaller_final_batch=True,
                    record_refs=ar.RecordRefs(reader, key="key", value="record"),
                )
                async for batch in batcher:
                    got.append({k: v.tolist() for k, v in batch.items()})
                    if len(got) == take:
                        return got, await sess.checkpoint()
        return got, None

    everything, _ = await run()
    first, state = await run(take=4)
    assert state is not None
    assert not any(v in state for b in everything for v in b["record"])
    rest, _ = await run(restore=state)
    assert first + rest == everything
    assert all(len(v) == n for b in everything for v, n in zip(b["record"], b["size"], strict=True))


async def test_record_batches_of_another_reader_type_are_refused(tmp_path: Path) -> None:
    """As for read_up_to: keys that are not the record_refs reader's fail the checkpoint,
    and records of another format fail the restore, naming the file."""
    paths = _write(tmp_path, "fixed")

    async def run(
        source: Callable[[], ar.ReaderBase], restore: bytes | None = None
    ) -> bytes | None:
        with anyio.fail_after(10):
            async with ar.Session(restore=restore, deterministic=True) as sess:
                files = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
                reader = source()
                refs = ar.TFRecordReader()

                async def records() -> ar.RecordBatch:
                    return await reader.read_batch(files, 5)

                batcher = ar.batch(records, 2, capacity=20, enqueue_many=True, record_refs=refs)
                await batcher.dequeue()
                state = None if restore else await sess.checkpoint()
        return state

    with pytest.raises(ar.InvalidArgumentError, match="is not a record key of a TFRecordReader"):
        await run(ar.WholeFileReader)
    state = await run(READERS["fixed"])
    assert state is not None
    with pytest.raises(ar.DataLossError) as info:
        await run(READERS["fixed"], restore=state)
    assert info.value.work_item in {p.encode() for p in paths}
    # The message gives both causes: a changed file, or records of another reader.
    assert "the file changed since the checkpoint" in info.value.message
    assert "were not read by a TFRecordReader(" in info.value.message


async def test_record_refs_must_name_components_of_the_keys_and_values(tmp_path: Path) -> None:
    paths = _write(tmp_path, "fixed")

    async def pipeline() -> None:
        async with ar.Session():
            files = ar.string_input_producer(paths, num_epochs=1)
            reader = READERS["fixed"]()

            async def records() -> ar.RecordBatch:
                return await reader.read_batch(files, 5)

            refs = ar.RecordRefs(reader, 0, 2)
            await ar.batch(records, 4, enqueue_many=True, record_refs=refs).dequeue()

    with (
        anyio.fail_after(10),
        pytest.raises(
            ar.InvalidArgumentError,
            match=r"record_refs component 2 is not in the examples \(a tuple of 2 components\)",
        ),
    ):
        await pipeline()


#: Signs checkpoints whose work items come from a queue of our own, not a producer.
KEY = b"record-refs batches test key"


@pytest.mark.both_backends
@pytest.mark.parametrize("typed", [True, False], ids=["typed", "untyped"])
async def test_queues_given_record_batches_save_references(tmp_path: Path, typed: bool) -> None:
    paths = _write(tmp_path, "tfrecord")

    def build(reader: ar.ReaderBase) -> ar.FIFOQueue:
        if typed:
            return ar.FIFOQueue(None, [object, object], shapes=[[], []], record_refs=reader)
        return ar.FIFOQueue(None, record_refs=reader)

    with anyio.fail_after(10):
        async with ar.Session(checkpoint_key=KEY) as sess:
            reader = ar.TFRecordReader()
            queue = build(reader)
            files = ar.FIFOQueue(None)
            await files.enqueue_many(paths)
            await files.close()
            for _ in paths:
                await queue.enqueue_many(await reader.read_batch(files, 1000))
            expected = await queue.dequeue_many(10)
            state = await sess.checkpoint()
            expected_rest = await queue.dequeue_many(3 * RECORDS_PER_FILE - 10)
        assert not any(_payload(f, i) in state for f in range(3) for i in range(RECORDS_PER_FILE))
        async with ar.Session(restore=state, checkpoint_key=KEY):
            reader = ar.TFRecordReader()
            queue = build(reader)
            ar.FIFOQueue(None)
            rest = await queue.dequeue_many(3 * RECORDS_PER_FILE - 10)
    if typed:
        assert [c.tolist() for c in rest] == [c.tolist() for c in expected_rest]
    else:
        assert rest == expected_rest
        assert all(type(e) is tuple and len(e) == 2 for e in expected + rest)
