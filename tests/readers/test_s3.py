"""``s3://`` work items against a real S3-protocol server (moto's, started on loopback).

The server is moto's standalone server (``moto[server]``, what the S3 ecosystem's own test
suites use), run as a subprocess on 127.0.0.1 for this module; the readers reach it
through fsspec and s3fs (``asyncreader[s3]``) with the endpoint set in fsspec's
configuration, as a user points ``s3://`` at MinIO or any other S3-compatible store.
Every built-in file reader reads its files there (both verbs), a reader restored
mid-file goes on exactly (a ranged read from the saved position), records saved as
references in a checkpoint are read again from the server, ``match_filenames_once`` lists
a bucket, and a missing object or bucket is ``NotFoundError`` naming the URL.
"""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from queue_util import work_queue
from readers_util import (
    drain,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)
from servers_util import s3_server as s3_server_process

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterator

fsspec = pytest.importorskip("fsspec", reason="fsspec (asyncreader[s3]) is not installed")
s3fs = pytest.importorskip("s3fs", reason="s3fs (asyncreader[s3]) is not installed")
pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")

pytestmark = [pytest.mark.anyio, pytest.mark.network]

BUCKET = "asyncreader-test"
PAYLOADS = [b"record %d " % i * (i % 9 + 1) for i in range(3000)]  # ~130 KB
LINES = [b"line %d" % i for i in range(20_000)]
FIXED = 37


@pytest.fixture(scope="module")
def s3_server() -> Iterator[str]:
    """moto's S3 server on a free loopback port, with the test objects uploaded."""
    with s3_server_process() as endpoint:
        fs = s3fs.S3FileSystem(
            endpoint_url=endpoint, key="test", secret="test", skip_instance_cache=True
        )
        fs.mkdir(BUCKET)
        fs.pipe(f"{BUCKET}/data.tfrecord", tfrecord_bytes(PAYLOADS))
        fs.pipe(f"{BUCKET}/data.tfrecord.gz", gzip.compress(tfrecord_bytes(PAYLOADS)))
        fs.pipe(f"{BUCKET}/lines.txt", b"\n".join(LINES) + b"\n")
        fs.pipe(f"{BUCKET}/records.bin", b"".join(b"%*d" % (FIXED, i) for i in range(5000)))
        for i in range(3):
            fs.pipe(f"{BUCKET}/shards/train-{i}.tfrecord", tfrecord_bytes([b"shard %d" % i]))
        yield endpoint


@pytest.fixture
def s3(s3_server: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point ``s3://`` at the server, as a user does with fsspec's configuration."""
    monkeypatch.setitem(
        fsspec.config.conf, "s3", {"endpoint_url": s3_server, "key": "test", "secret": "test"}
    )
    s3fs.S3FileSystem.clear_instance_cache()
    return f"s3://{BUCKET}"


async def _read(reader: ar.ReaderBase, urls: list[str]) -> list[tuple[bytes, bytes]]:
    with anyio.fail_after(30):
        async with reader:
            return await drain(reader, await work_queue(urls), n=700)


@pytest.mark.both_backends
async def test_every_file_reader_reads_its_files_from_s3(s3: str) -> None:
    got = await _read(ar.TFRecordReader(), [f"{s3}/data.tfrecord"])
    assert [v for _, v in got] == PAYLOADS
    assert got[1][0] == f"{s3}/data.tfrecord:{16 + len(PAYLOADS[0])}".encode()
    got = await _read(ar.TFRecordReader("GZIP"), [f"{s3}/data.tfrecord.gz"])
    assert [v for _, v in got] == PAYLOADS
    got = await _read(ar.TextLineReader(), [f"{s3}/lines.txt"])
    assert [v for _, v in got] == LINES
    assert got[-1][0] == f"{s3}/lines.txt:{len(LINES)}".encode()
    got = await _read(ar.FixedLengthRecordReader(FIXED), [f"{s3}/records.bin"])
    assert [int(v) for _, v in got] == list(range(5000))
    async with ar.WholeFileReader() as whole:
        key, value = await whole.read(await work_queue([f"{s3}/lines.txt"]))
    assert (key, value) == (f"{s3}/lines.txt".encode(), b"\n".join(LINES) + b"\n")


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("name", "compression"), [("data.tfrecord", ""), ("data.tfrecord.gz", "GZIP")]
)
async def test_a_reader_restored_mid_file_goes_on_exactly(
    s3: str, name: str, compression: str
) -> None:
    url = f"{s3}/{name}"
    queue = await work_queue([url])
    with anyio.fail_after(30):
        async with ar.TFRecordReader(compression) as reader:
            _, first = await reader.read_up_to(queue, 1234)
            state = reader.serialize_state()
        async with ar.TFRecordReader(compression) as reader:
            reader.restore_state(state)
            rest = [v for _, v in await drain(reader, queue, n=500)]
    assert first + rest == PAYLOADS
    assert len(first) == 1234


async def test_records_saved_as_references_are_read_again_from_s3(s3: str) -> None:
    urls = [f"{s3}/data.tfrecord", f"{s3}/lines.txt"]

    async def pipeline(restore: bytes | None, stop: int | None) -> tuple[list[Any], bytes | None]:
        seen: list[Any] = []
        state = None
        with anyio.fail_after(60):
            async with ar.Session(restore=restore, deterministic=True) as sess:
                files = ar.string_input_producer(urls[:1], num_epochs=1, shuffle=False)
                reader = ar.TFRecordReader()

                async def records() -> ar.RecordBatch:
                    return await reader.read_batch(files, 100)

                batches = ar.shuffle_batch(
                    records,
                    50,
                    capacity=600,
                    min_after_dequeue=400,
                    seed=3,
                    enqueue_many=True,
                    allow_smaller_final_batch=True,
                    record_refs=reader,
                )
                async for _keys, values in batches:
                    seen.append(values.tolist())
                    if len(seen) == stop:
                        state = await sess.checkpoint()
                        break
        return seen, state

    everything, _ = await pipeline(None, None)
    first, state = await pipeline(None, 5)
    assert state is not None
    assert PAYLOADS[500] not in state  # references, not the records
    rest, _ = await pipeline(state, None)
    assert first + rest == everything
    assert sorted(v for batch in everything for v in batch) == sorted(PAYLOADS)


@pytest.mark.both_backends
async def test_a_bucket_is_listed_by_pattern(s3: str) -> None:
    got = await ar.match_filenames_once(f"{s3}/shards/train-*.tfrecord")
    assert got == [f"{s3}/shards/train-{i}.tfrecord" for i in range(3)]
    values = [v for _, v in await _read(ar.TFRecordReader(), got)]
    assert values == [b"shard 0", b"shard 1", b"shard 2"]
    with pytest.raises(ar.NotFoundError, match="no file matches"):
        await ar.match_filenames_once(f"{s3}/shards/test-*.tfrecord")


@pytest.mark.both_backends
async def test_a_missing_object_or_bucket_is_not_found(s3: str) -> None:
    for url in (f"{s3}/nope.tfrecord", "s3://no-such-bucket/x.tfrecord"):
        with anyio.fail_after(30):
            async with ar.TFRecordReader() as reader:
                with pytest.raises(ar.NotFoundError) as info:
                    await reader.read(await work_queue([url]))
        assert url in str(info.value)


def test_without_s3fs_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncreader._io.filesystem import open_work_item

    def missing(url: str, **options: object) -> None:
        raise ImportError("Install s3fs to access S3")

    monkeypatch.setattr(fsspec.core, "url_to_fs", missing)
    with pytest.raises(ar.FailedPreconditionError, match=r"pip install 'asyncreader\[s3\]'"):
        open_work_item("s3://bucket/data.tfrecord")
