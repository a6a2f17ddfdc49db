"""TFRecordWriter: sync and async verbs, closing, compression and leaks."""

from __future__ import annotations

import gc
import gzip
import zlib
from typing import TYPE_CHECKING

import anyio
import pytest

import asyncreader as ar
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


def framed(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


def test_write_flush_close(tmp_path: Path) -> None:
    path = tmp_path / "a.tfrecord"
    writer = ar.TFRecordWriter(path)
    writer.write(b"one")
    writer.write(bytearray(b"two"))
    writer.write(memoryview(b"three"))
    writer.write("four")
    writer.flush()
    assert path.read_bytes() == framed([b"one", b"two", b"three", b"four"])
    writer.close()
    assert writer.closed


def test_file_is_created_lazily_and_at_close(tmp_path: Path) -> None:
    path = tmp_path / "empty.tfrecord"
    writer = ar.TFRecordWriter(path)
    assert not path.exists()
    writer.close()
    assert path.read_bytes() == b""


def test_context_manager_creates_the_file(tmp_path: Path) -> None:
    path = tmp_path / "x.tfrecord"
    with ar.TFRecordWriter(path) as writer:
        assert path.exists()
        writer.write_many([b"a", b"b"])
    assert path.read_bytes() == framed([b"a", b"b"])


def test_small_buffer_writes_through(tmp_path: Path) -> None:
    path = tmp_path / "x.tfrecord"
    writer = ar.TFRecordWriter(path, buffer_size=1)
    writer.write(b"abc")
    assert path.read_bytes() == framed([b"abc"])
    writer.write_many([b"d", b"e"])
    assert path.read_bytes() == framed([b"abc", b"d", b"e"])
    writer.close()


def test_write_after_close_is_failed_precondition(tmp_path: Path) -> None:
    writer = ar.TFRecordWriter(tmp_path / "x")
    writer.close()
    writer.close()  # idempotent
    for call in (
        lambda: writer.write(b"x"),
        lambda: writer.write_many([b"x"]),
        writer.flush,
        writer.__enter__,
    ):
        with pytest.raises(ar.FailedPreconditionError, match=r"^Writer is closed\.") as info:
            call()
        assert info.value.work_item == str(tmp_path / "x")


def test_bad_record_type(tmp_path: Path) -> None:
    with (
        ar.TFRecordWriter(tmp_path / "x") as writer,
        pytest.raises(TypeError, match="bytes-like or str, not int"),
    ):
        writer.write(5)  # type: ignore[arg-type]


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="compression_type"):
        ar.TFRecordWriter(tmp_path / "x", "LZ4")
    with pytest.raises(ar.InvalidArgumentError, match="compression_level"):
        ar.TFRecordWriter(tmp_path / "x", "ZLIB", compression_level=10)
    with pytest.raises(ar.InvalidArgumentError, match="buffer_size"):
        ar.TFRecordWriter(tmp_path / "x", buffer_size=0)


def test_missing_directory_is_not_found(tmp_path: Path) -> None:
    writer = ar.TFRecordWriter(tmp_path / "missing" / "x.tfrecord")
    writer.write(b"a")
    with pytest.raises(ar.NotFoundError):
        writer.close()
    assert writer.closed


@pytest.mark.parametrize(
    ("kind", "inflate"),
    [
        ("ZLIB", zlib.decompress),
        ("GZIP", gzip.decompress),
        (ar.TFRecordCompressionType.GZIP, gzip.decompress),
    ],
)
def test_compressed_output(tmp_path: Path, kind: str, inflate: object) -> None:
    path = tmp_path / "c"
    payloads = [b"x" * 1000, b"", b"y"]
    with ar.TFRecordWriter(path, kind, compression_level=9) as writer:
        writer.write_many(payloads)
        writer.flush()
        # A sync flush makes everything so far decodable before the stream ends.
        partial = zlib.decompressobj(15 if kind == "ZLIB" else 31).decompress(path.read_bytes())
        assert partial == framed(payloads)
    assert inflate(path.read_bytes()) == framed(payloads)  # type: ignore[operator]


def test_never_closed_writer_warns(tmp_path: Path) -> None:
    path = tmp_path / "leak"

    def leak() -> None:
        writer = ar.TFRecordWriter(path)
        writer.write(b"data")

    with pytest.warns(ResourceWarning, match="unclosed <TFRecordWriter"):
        leak()
    gc.collect()
    # The finaliser still wrote what was buffered.
    assert path.read_bytes() == framed([b"data"])


def test_statistics_and_repr(tmp_path: Path) -> None:
    writer = ar.TFRecordWriter(tmp_path / "s", "GZIP")
    writer.write(b"abc")
    assert writer.statistics() == ar._records.writer.WriterStatistics(
        records_written=1, bytes_written=19, bytes_buffered=19, closed=False
    )
    assert repr(writer) == f"<TFRecordWriter {tmp_path / 's'!r} GZIP open records=1 buffered=19>"
    writer.close()
    assert writer.statistics().closed
    assert writer.path == tmp_path / "s"


@pytest.mark.both_backends
async def test_async_verbs(tmp_path: Path) -> None:
    path = tmp_path / "async.tfrecord"
    async with ar.TFRecordWriter(path, buffer_size=64) as writer:
        for i in range(20):
            await writer.awrite(b"record %d" % i)
        await writer.awrite_many([b"a", b"b"])
        await writer.aflush()
    expected = [b"record %d" % i for i in range(20)] + [b"a", b"b"]
    assert await anyio.Path(path).read_bytes() == framed(expected)
    await writer.aclose()  # idempotent
    with pytest.raises(ar.FailedPreconditionError):
        await writer.awrite(b"x")
    with pytest.raises(ar.FailedPreconditionError):
        await writer.aflush()


@pytest.mark.both_backends
async def test_async_compressed_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "async.gz"
    payloads = [bytes([i]) * i for i in range(200)]
    writer = ar.TFRecordWriter(path, "GZIP", buffer_size=1000)
    await writer.awrite_many(payloads)
    await writer.aclose()
    got = [r async for r in ar.async_tf_record_iterator(path, "GZIP")]
    assert got == payloads


async def test_concurrent_awrites_keep_every_record(tmp_path: Path) -> None:
    path = tmp_path / "concurrent"
    async with (
        ar.TFRecordWriter(path, buffer_size=50) as writer,
        anyio.create_task_group() as tg,
    ):
        for t in range(4):

            async def produce(t: int = t) -> None:
                for i in range(50):
                    await writer.awrite(b"%d-%d" % (t, i))

            tg.start_soon(produce)
    got = list(ar.tf_record_iterator(path))
    assert sorted(got) == sorted(b"%d-%d" % (t, i) for t in range(4) for i in range(50))
    for t in range(4):
        mine = [r for r in got if r.startswith(b"%d-" % t)]
        assert mine == [b"%d-%d" % (t, i) for i in range(50)]


async def test_cancelled_awrite_while_waiting_keeps_buffered_records(tmp_path: Path) -> None:
    path = tmp_path / "cancel"
    writer = ar.TFRecordWriter(path, buffer_size=1)
    async with writer._lock:  # hold the write-out so awrite waits for it
        with anyio.CancelScope() as scope:
            scope.cancel()
            await writer.awrite(b"never")
        async with anyio.create_task_group() as tg:
            tg.start_soon(writer.awrite, b"kept")
            await anyio.wait_all_tasks_blocked()
            tg.cancel_scope.cancel()
    await writer.aclose()
    assert list(ar.tf_record_iterator(path)) == [b"kept"]


async def test_aclose_missing_directory(tmp_path: Path) -> None:
    writer = ar.TFRecordWriter(tmp_path / "nope" / "x")
    with pytest.raises(ar.NotFoundError):
        await writer.aclose()
    assert writer.closed
