"""Checkpoints of queued reader records as (work item, record key) references.

With ``record_refs`` a queue or batcher saves each queued record as a reference and its
CRC32C, and a restore reads the values again before the queue hands anything out: the
stream after the restore is the same as with payloads, the checkpoint holds none of them,
and a file that changed or vanished fails the restore clearly.
"""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from refs_pipeline import Seen, refs_batches

import asyncreader as ar
from asyncreader._runtime import state_codec

pytestmark = pytest.mark.anyio

RECORDS_PER_FILE = 40
#: Signs the checkpoints of pipelines whose work items come from queues of our own.
KEY = b"record-refs test key"


def _payload(f: int, i: int) -> bytes:
    return b"%03d-%03d|" % (f, i) * 60  # 480 bytes, unique per record


def _write_tfrecords(directory: Path, compression: str = "") -> list[str]:
    paths = []
    for f in range(3):
        paths.append(str(directory / f"part-{f}.tfrecord{compression.lower()}"))
        with ar.TFRecordWriter(paths[-1], compression) as w:
            for i in range(RECORDS_PER_FILE):
                w.write(_payload(f, i))
    return paths


async def _batches(
    paths: list[str],
    *,
    compression: str = "",
    refs: bool = True,
    shuffle: bool = True,
    many: bool = True,
    restore: bytes | None = None,
    take: int | None = None,
) -> tuple[Seen, bytes | None]:
    """Run producer -> TFRecordReader -> (shuffle_)batch of (key, value) records."""

    async def read(reader: Any, files: ar.FIFOQueue) -> Any:
        return await (reader.read_up_to(files, 7) if many else reader.read(files))

    return await refs_batches(
        paths,
        lambda: ar.TFRecordReader(compression),
        read,
        many=many,
        refs=refs,
        shuffle=shuffle,
        restore=restore,
        take=take,
    )


@pytest.mark.parametrize("compression", ["", "GZIP"])
@pytest.mark.parametrize("shuffle", [True, False], ids=["shuffle_batch", "batch"])
@pytest.mark.parametrize("many", [True, False], ids=["read_up_to", "read"])
async def test_resume_from_references_is_the_uninterrupted_stream(
    tmp_path: Path, compression: str, shuffle: bool, many: bool
) -> None:
    paths = _write_tfrecords(tmp_path, compression)
    options: dict[str, Any] = {"compression": compression, "shuffle": shuffle, "many": many}
    everything, _ = await _batches(paths, **options)
    assert sum(len(k) for k, _ in everything) == 2 * 3 * RECORDS_PER_FILE
    for take in (0, 1, 6, 17):
        first, state = await _batches(paths, take=take, **options)
        assert state is not None
        rest, _ = await _batches(paths, restore=state, **options)
        assert first + rest == everything, f"take={take}"


@pytest.mark.both_backends
async def test_a_checkpoint_of_references_holds_no_payloads(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)
    _, with_refs = await _batches(paths, take=3)
    _, with_payloads = await _batches(paths, refs=False, take=3)
    assert with_refs is not None
    assert with_payloads is not None
    payloads = [_payload(f, i) for f in range(3) for i in range(RECORDS_PER_FILE)]
    # The shuffle queue holds at least 30 records after 3 batches: all saved as payloads ...
    assert sum(p in with_payloads for p in payloads) >= 30
    # ... or as references only.
    assert not any(p[:8] in with_refs for p in payloads)
    assert len(with_refs) < len(with_payloads) / 2
    rest, _ = await _batches(paths, restore=with_refs)
    rest_from_payloads, _ = await _batches(paths, refs=False, restore=with_payloads)
    assert rest == rest_from_payloads


def _write_text(path: Path, lines: int) -> None:
    path.write_bytes(b"id,label\n" + b"".join(b"%d,%d\n" % (i, i % 3) for i in range(lines)))


async def test_user_queues_of_dicts_and_tuples_keep_their_other_components(
    tmp_path: Path,
) -> None:
    """Typed queue with names (a label component too) and an untyped queue of tuples."""
    paths = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for p in paths:
        _write_text(p, 50)

    def build(reader: ar.TextLineReader) -> tuple[Any, Any]:
        named = ar.RandomShuffleQueue(
            100,
            0,
            dtypes=[object, object, "int64"],
            shapes=[[], [], []],
            names=["key", "line", "label"],
            seed=3,
            record_refs=ar.RecordRefs(reader, key="key", value="line"),
        )
        untyped = ar.FIFOQueue(100, record_refs=ar.RecordRefs(reader, key=1, value=0))
        return named, untyped

    async def fill(reader: ar.TextLineReader) -> None:
        files = ar.FIFOQueue(None)
        await files.enqueue_many([str(p) for p in paths])
        await files.close()
        keys, values = await reader.read_up_to(files, 50)
        keys2, values2 = await reader.read_up_to(files, 50)
        for k, v in zip(keys + keys2, values + values2, strict=True):
            await named.enqueue({"key": k, "line": v, "label": int(v.split(b",")[1])})
            await untyped.enqueue((v, k, "extra"))

    async def drain(named: Any, untyped: Any) -> tuple[list[Any], list[Any]]:
        got = await named.dequeue_many(40)
        rows = list(
            zip(got["key"].tolist(), got["line"].tolist(), got["label"].tolist(), strict=True)
        )
        return rows, await untyped.dequeue_many(60)

    async with ar.Session():
        reader = ar.TextLineReader(skip_header_lines=1)
        named, untyped = build(reader)
        await fill(reader)
        await named.dequeue_many(20)
        reference = await drain(named, untyped)
    # The reader's work items come from a queue of our own, not from a producer: only a
    # signed checkpoint may make a restore read them.
    secret = b"record-refs test key"
    async with ar.Session(checkpoint_key=secret) as sess:
        reader = ar.TextLineReader(skip_header_lines=1)
        named, untyped = build(reader)
        await fill(reader)
        await named.dequeue_many(20)
        state = await sess.checkpoint()
    async with ar.Session(restore=state, checkpoint_key=secret) as sess:
        reader = ar.TextLineReader(skip_header_lines=1)
        named, untyped = build(reader)
        assert named.size() == 0  # nothing is handed out before the records are back
        # A checkpoint taken before they are back saves the references again.
        again = await sess.checkpoint()
        with anyio.fail_after(10):
            assert await drain(named, untyped) == reference
    for key, line, label in reference[0]:
        assert key.endswith(b":%d" % (int(line.split(b",")[0]) + 2))
        assert label == int(line.split(b",")[1])
    async with ar.Session(restore=again, checkpoint_key=secret):
        reader = ar.TextLineReader(skip_header_lines=1)
        named, untyped = build(reader)
        with anyio.fail_after(10):
            assert await drain(named, untyped) == reference


async def test_pending_enqueues_and_close_wait_behind_the_reread(tmp_path: Path) -> None:
    path = tmp_path / "records.bin"
    path.write_bytes(b"".join(b"%07d|" % i for i in range(8)))

    def build(reader: ar.FixedLengthRecordReader) -> ar.FIFOQueue:
        return ar.FIFOQueue(2, dtypes=[object, object], shapes=[[], []], record_refs=reader)

    with anyio.fail_after(10):
        async with ar.Session(checkpoint_key=KEY) as sess:
            reader = ar.FixedLengthRecordReader(8)
            queue = build(reader)
            files = ar.FIFOQueue(None)
            await files.enqueue(str(path))
            keys, values = await reader.read_up_to(files, 8)
            await queue.enqueue_many((keys[:2], values[:2]))

            async def fill() -> None:
                await queue.enqueue_many((keys[2:], values[2:]))

            sess.start_soon(fill)
            await anyio.wait_all_tasks_blocked()
            sess.start_soon(queue.close)  # a plain close waits behind the enqueue
            await anyio.wait_all_tasks_blocked()
            state = await sess.checkpoint()
        assert b"0000005|" not in state  # the blocked enqueue's records are references too
        async with ar.Session(restore=state, checkpoint_key=KEY):
            queue = build(ar.FixedLengthRecordReader(8))
            assert not queue.is_closed()  # the close waits behind the restored records
            with anyio.fail_after(10):
                got = [await queue.dequeue() for _ in range(8)]
                assert [v for _, v in got] == [b"%07d|" % i for i in range(8)]
                assert [k for k, _ in got] == [b"%s:%d" % (str(path).encode(), i) for i in range(8)]
                assert queue.is_closed()
                with pytest.raises(ar.OutOfRangeError):
                    await queue.dequeue()


async def _checkpoint_of_queued_records(
    paths: list[str], reader: ar.ReaderBase, key: bytes | None = KEY
) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """Records read from files named by a queue of our own (not a producer): a restore
    needs the checkpoint signed to read them again."""
    async with ar.Session(checkpoint_key=key) as sess:
        queue = ar.FIFOQueue(None, record_refs=reader)
        files = ar.FIFOQueue(None)
        await files.enqueue_many(paths)
        await files.close()
        records: list[tuple[bytes, bytes]] = []
        for _ in paths:
            keys, values = await reader.read_up_to(files, 1000)
            records += zip(keys, values, strict=True)
        await queue.enqueue_many(records)
        state = await sess.checkpoint()
    return state, records


def _write_gzip_files(directory: Path) -> list[str]:
    paths = [directory / f"f{f}" for f in range(3)]
    for f, path in enumerate(paths):
        path.write_bytes(gzip.compress(b"%05d" % f * (f + 2)))
    return [str(p) for p in paths]


async def _restore_and_dequeue(state: bytes, key: bytes | None = KEY) -> None:
    with anyio.fail_after(10):
        async with ar.Session(restore=state, checkpoint_key=key):
            queue = ar.FIFOQueue(None, record_refs=ar.TFRecordReader())
            await queue.dequeue()


@pytest.mark.parametrize(
    "make",
    [ar.WholeFileReader, ar.IdentityReader, lambda: ar.FixedLengthRecordReader(5, encoding="GZIP")],
    ids=["whole-file", "identity", "fixed-gzip"],
)
async def test_every_builtin_reader_restores_its_references(tmp_path: Path, make: Any) -> None:
    paths = _write_gzip_files(tmp_path)
    state, records = await _checkpoint_of_queued_records(paths, make())
    async with ar.Session(restore=state, checkpoint_key=KEY):
        queue = ar.FIFOQueue(None, record_refs=make())
        with anyio.fail_after(10):
            assert await queue.dequeue_many(len(records)) == [tuple(r) for r in records]


async def test_a_changed_file_fails_the_restore_naming_file_and_record(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)
    state, records = await _checkpoint_of_queued_records(paths, ar.TFRecordReader())
    with ar.TFRecordWriter(paths[1]) as w:  # same sizes, one record changed
        for i in range(RECORDS_PER_FILE):
            w.write(_payload(1, i) if i != 7 else _payload(1, i).replace(b"|", b"!"))
    with pytest.raises(ar.DataLossError) as info:
        await _restore_and_dequeue(state)
    assert info.value.work_item == paths[1].encode()
    assert isinstance(info.value.record, int)
    assert b"%s:%d" % (paths[1].encode(), info.value.record) in {k for k, _ in records}
    assert "changed since" in str(info.value)


def _remove(path: str) -> None:
    Path(path).unlink()


async def test_a_vanished_file_fails_the_restore(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)
    state, _ = await _checkpoint_of_queued_records(paths, ar.TFRecordReader())
    _remove(paths[2])
    with pytest.raises(ar.NotFoundError, match="part-2"):
        await _restore_and_dequeue(state)


async def test_a_restore_that_does_not_fit_is_refused(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)
    state, _ = await _checkpoint_of_queued_records(paths, ar.TFRecordReader(), key=None)
    async with ar.Session(restore=state):
        with pytest.raises(ar.InvalidArgumentError, match="build it with the same record_refs"):
            ar.FIFOQueue(None)
    async with ar.Session(restore=state):
        with pytest.raises(ar.InvalidArgumentError, match="do not fit its record_refs"):
            ar.FIFOQueue(None, record_refs=ar.TFRecordReader("GZIP"))
    async with ar.Session() as sess:
        unread = ar.FIFOQueue(None)
        await unread.enqueue((b"a.tfrecord:0", b"record"))
        payloads = await sess.checkpoint()
    async with ar.Session(restore=payloads):
        with pytest.raises(ar.InvalidArgumentError, match="saved payloads"):
            ar.FIFOQueue(None, record_refs=ar.TFRecordReader())


async def test_malformed_references_fail_the_restore(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)
    state, _ = await _checkpoint_of_queued_records(paths, ar.TFRecordReader(), key=None)
    tree = state_codec.decode(state)
    stored = tree["components"]["queue/0"]["stored"]
    stored["record"] = stored["record"][:-1]  # one reference short
    with pytest.raises(ar.InvalidArgumentError, match="malformed record references"):
        await _restore_and_dequeue(state_codec.encode(tree), key=None)
    stored["record"] = np.append(stored["record"], -5)
    with pytest.raises(ar.InvalidArgumentError, match="out of range"):
        await _restore_and_dequeue(state_codec.encode(tree), key=None)


async def test_elements_that_are_not_reader_records_are_named_at_checkpoint() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(None, record_refs=ar.TFRecordReader())
            await queue.enqueue((b"a.tfrecord:0", b"ok"))
            await queue.enqueue((b"a.tfrecord", b"no record key"))
            with pytest.raises(ar.InvalidArgumentError, match="not a record key") as info:
                await sess.checkpoint()
            assert "element 1" in "".join(info.value.__notes__)
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(None, record_refs=ar.TFRecordReader())
            await queue.enqueue((b"a.tfrecord:0", np.float32(1)))
            with pytest.raises(ar.InvalidArgumentError, match="not the bytes a reader returned"):
                await sess.checkpoint()
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(None, record_refs=ar.TFRecordReader())
            await queue.enqueue(b"a bare value")
            with pytest.raises(ar.InvalidArgumentError, match="has no components 0 and 1"):
                await sess.checkpoint()


async def test_record_refs_arguments_are_checked() -> None:
    class Custom(ar.ReaderBase):
        def read_one(self) -> None:
            return None

    with pytest.raises(ar.InvalidArgumentError, match="Custom cannot read a record again"):
        ar.RecordRefs(Custom())
    with pytest.raises(ar.InvalidArgumentError, match="needs a reader"):
        ar.FIFOQueue(None, record_refs="reader")  # type: ignore[arg-type]
    reader = ar.TFRecordReader()
    with pytest.raises(ar.InvalidArgumentError, match="one component"):
        ar.RecordRefs(reader, key=1, value=1)
    with pytest.raises(ar.InvalidArgumentError, match="index or name"):
        ar.RecordRefs(reader, key=True)
    with pytest.raises(ar.InvalidArgumentError, match="must be a scalar string"):
        ar.FIFOQueue(4, dtypes=["int64", object], record_refs=reader)
    with pytest.raises(ar.InvalidArgumentError, match="has 2 components, not 3"):
        ar.FIFOQueue(4, dtypes=[object, object], record_refs=ar.RecordRefs(reader, 0, 2))
    with pytest.raises(ar.InvalidArgumentError, match="no component named 'v'"):
        ar.FIFOQueue(
            4, [object, object], names=["k", "x"], record_refs=ar.RecordRefs(reader, "k", "v")
        )


async def test_a_batcher_names_record_refs_its_examples_do_not_have(tmp_path: Path) -> None:
    paths = _write_tfrecords(tmp_path)

    async def pipeline() -> None:
        async with ar.Session():
            files = ar.string_input_producer(paths, num_epochs=1)
            reader = ar.TFRecordReader()

            async def example() -> dict[str, bytes]:
                key, value = await reader.read(files)
                return {"key": key, "record": value}

            batcher = ar.batch(example, 4, record_refs=ar.RecordRefs(reader, "key", "value"))
            await batcher.dequeue()

    with anyio.fail_after(10), pytest.raises(ar.InvalidArgumentError, match="'value'"):
        await pipeline()
