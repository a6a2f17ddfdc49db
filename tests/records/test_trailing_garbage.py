"""Bytes after the end of a compressed stream that are not another stream.

Every record inflated before the garbage is delivered, whatever the piece sizes, and then
:class:`~asyncreader.DataLossError` names the byte where the garbage starts in the file.
"""

from __future__ import annotations

import gzip
import random
import zlib
from typing import TYPE_CHECKING

import anyio
import pytest
from framer_util import cuts_every, feed_until_error

import asyncreader as ar
from asyncreader._records.compression import Decompressor, TFRecordCompressionType
from asyncreader._records.fixed_length import FixedLengthFramer
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from asyncreader._records.framer import Framer

RECORDS = 100_000
PAYLOAD = 100
GARBAGE = b"this is not a compressed stream" * 4
COMPRESS: dict[str, Callable[[bytes], bytes]] = {"GZIP": gzip.compress, "ZLIB": zlib.compress}


def _payload(i: int) -> bytes:
    return i.to_bytes(8, "little") + bytes(PAYLOAD - 8)


def _ids(values: list[bytes]) -> list[int]:
    return [int.from_bytes(v[:8], "little") for v in values]


def _tfrecords(count: int = RECORDS) -> bytes:
    return b"".join(b"".join(frame_record(_payload(i))) for i in range(count))


async def _iterate(path: str, kind: str, got: list[bytes]) -> None:
    async with ar.async_tf_record_iterator(path, kind) as records:
        async for value in records:
            got.append(value)


async def _read_all(reader: ar.ReaderBase, queue: ar.FIFOQueue, got: list[bytes]) -> None:
    while True:
        got += (await reader.read_up_to(queue, 1000))[1]


def _drain(framer: Framer, data: bytes, chunk: int) -> tuple[list[bytes], ar.DataLossError]:
    """Feed ``data`` in chunks; return the values delivered and the error raised."""
    _keys, values, error = feed_until_error(framer, data, cuts_every(chunk, data))
    assert isinstance(error, ar.DataLossError), f"no DataLossError: {error!r}"
    return values, error


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("chunk", [1 << 20, 4 << 20, 64 << 20])
def test_every_record_before_trailing_garbage_is_delivered(kind: str, chunk: int) -> None:
    stream = COMPRESS[kind](_tfrecords())
    framer = TFRecordFramer(compression_type=kind, work_item="a.tfrecord")
    values, error = _drain(framer, stream + GARBAGE, chunk)
    assert _ids(values) == list(range(RECORDS))
    assert error.offset == len(stream)
    assert f"trailing garbage at byte {len(stream)} of the file" in str(error)
    assert "a.tfrecord" in str(error)
    # The framer keeps failing with the same error.
    with pytest.raises(ar.DataLossError) as again:
        framer.decode(b"")
    assert again.value is framer.error


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_garbage_after_concatenated_streams_names_its_own_offset(kind: str) -> None:
    data = _tfrecords(1000)
    first, second = COMPRESS[kind](data[: 116 * 500]), COMPRESS[kind](data[116 * 500 :])
    framer = TFRecordFramer(compression_type=kind)
    values, error = _drain(framer, first + second + GARBAGE, 1 << 20)
    assert _ids(values) == list(range(1000))
    assert error.offset == len(first) + len(second)


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_fixed_length_records_before_trailing_garbage_are_delivered(kind: str) -> None:
    raw = b"".join(_payload(i) for i in range(RECORDS))
    stream = COMPRESS[kind](raw)
    framer = FixedLengthFramer(PAYLOAD, encoding=kind, work_item="f.bin")
    values, error = _drain(framer, stream + GARBAGE, 4 << 20)
    assert _ids(values) == list(range(RECORDS))
    assert error.offset == len(stream)


def test_the_decompressor_returns_output_first_and_raises_next() -> None:
    body = bytes(range(256)) * 4096  # 1 MiB
    d = Decompressor(TFRecordCompressionType.GZIP, max_output=8 << 20)
    out = d.decompress(gzip.compress(body) + GARBAGE)
    assert out == body
    assert d.pending
    with pytest.raises(ar.DataLossError, match="trailing garbage at byte"):
        d.decompress(b"")
    with pytest.raises(ar.DataLossError, match="trailing garbage at byte"):
        d.finish()


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_tf_record_iterator_yields_every_record_then_raises(tmp_path: Path, kind: str) -> None:
    stream = COMPRESS[kind](_tfrecords())
    path = tmp_path / "a.tfrecord"
    path.write_bytes(stream + GARBAGE)
    got: list[bytes] = []
    with pytest.raises(ar.DataLossError) as info:
        got.extend(ar.tf_record_iterator(str(path), kind))
    assert _ids(got) == list(range(RECORDS))
    assert info.value.offset == len(stream)


@pytest.mark.anyio
@pytest.mark.both_backends
@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
async def test_async_iterator_and_reader_deliver_every_record(tmp_path: Path, kind: str) -> None:
    stream = COMPRESS[kind](_tfrecords())
    path = tmp_path / "a.tfrecord"
    path.write_bytes(stream + GARBAGE)
    got: list[bytes] = []
    with anyio.fail_after(30):
        with pytest.raises(ar.DataLossError) as info:
            await _iterate(str(path), kind, got)
        assert _ids(got) == list(range(RECORDS))
        assert info.value.offset == len(stream)

        queue = ar.FIFOQueue(None)
        await queue.enqueue(str(path))
        await queue.close()
        got = []
        async with ar.TFRecordReader(kind) as reader:
            with pytest.raises(ar.DataLossError) as info:
                await _read_all(reader, queue, got)
            assert _ids(got) == list(range(RECORDS))
            assert reader.num_records_produced() == RECORDS
            assert info.value.offset == len(stream)
            assert str(path) in str(info.value)
            # The work item stays in progress: the same error again, no record twice.
            with pytest.raises(ar.DataLossError):
                await reader.read(queue)


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_fixed_length_reader_delivers_every_record(tmp_path: Path) -> None:
    raw = b"".join(_payload(i) for i in range(RECORDS))
    stream = gzip.compress(raw)
    path = tmp_path / "f.bin.gz"
    path.write_bytes(stream + GARBAGE)
    queue = ar.FIFOQueue(None)
    await queue.enqueue(str(path))
    await queue.close()
    got: list[bytes] = []
    with anyio.fail_after(30):
        async with ar.FixedLengthRecordReader(PAYLOAD, encoding="GZIP") as reader:
            with pytest.raises(ar.DataLossError) as info:
                await _read_all(reader, queue, got)
    assert _ids(got) == list(range(RECORDS))
    assert info.value.offset == len(stream)


@pytest.mark.parametrize("kind", ["GZIP", "ZLIB"])
def test_records_before_trailing_garbage_can_be_read_again_by_key(
    tmp_path: Path, kind: str
) -> None:
    # Reading records again from a checkpoint's references frames the file the same way.
    rng = random.Random(3)
    payloads = [rng.randbytes(100) for _ in range(1000)]
    stream = COMPRESS[kind](b"".join(b"".join(frame_record(p)) for p in payloads))
    assert len(stream) > 64 << 10  # more than one piece of a re-read
    path = tmp_path / "a.tfrecord"
    path.write_bytes(stream + GARBAGE)
    reader = ar.TFRecordReader(kind)
    wanted = [0, 116 * 500, 116 * 999]
    assert reader._reread(str(path).encode(), wanted) == [payloads[0], payloads[500], payloads[999]]
    with pytest.raises(ar.DataLossError, match="trailing garbage"):
        reader._reread(str(path).encode(), [116 * 1000])
