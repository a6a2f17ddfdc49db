"""Mistakes a user can act on: an unknown compression, a compressed file read as plain (or
the other way round), a list where a queue belongs. Each fails at once with a message that
says what to change."""

from __future__ import annotations

import gzip
import zlib
from typing import TYPE_CHECKING

import anyio
import pytest
from queue_util import work_queue
from readers_util import (
    drain_values,
    read_verb,  # noqa: F401 (runs each test with both verbs)
)

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def _records(path: Path, compression: str | None = None) -> str:
    with ar.TFRecordWriter(str(path), compression) as writer:
        for i in range(50):
            writer.write(b"record %d" % i)
    return str(path)


async def _drain(reader: ar.ReaderBase, path: str) -> list[bytes]:
    queue = await work_queue([path])
    with anyio.fail_after(10):
        return await drain_values(reader, queue, n=100)


@pytest.mark.parametrize("value", ["BZIP2", "SNAPPY", "gzip2", "none?", 3, 1.0])
async def test_an_unknown_compression_type_is_refused_at_construction(
    tmp_path: Path, value: object
) -> None:
    path = _records(tmp_path / "a.tfrecord")
    with pytest.raises(ar.InvalidArgumentError, match=r"compression_type must be None, '', "):
        ar.TFRecordReader(value)  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="compression_type must be"):
        ar.tf_record_iterator(path, value)  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="compression_type must be"):
        ar.async_tf_record_iterator(path, value)  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="compression_type must be"):
        ar.TFRecordWriter(str(tmp_path / "b.tfrecord"), value)  # type: ignore[arg-type]
    if isinstance(value, str):
        with pytest.raises(ar.InvalidArgumentError, match=r"^encoding must be None, '', "):
            ar.FixedLengthRecordReader(4, encoding=value)


@pytest.mark.parametrize("spelling", ["gzip", "Gzip", "GZIP"])
async def test_compression_names_are_taken_in_any_case_as_by_the_writer(
    tmp_path: Path, spelling: str
) -> None:
    path = _records(tmp_path / "a.tfrecord.gz", spelling)
    assert gzip.decompress((tmp_path / "a.tfrecord.gz").read_bytes())  # really GZIP
    async with ar.TFRecordReader(spelling) as reader:
        assert reader.compression_type == "GZIP"
        values = await _drain(reader, path)
    assert values == [b"record %d" % i for i in range(50)]
    assert list(ar.tf_record_iterator(path, spelling)) == values


@pytest.mark.parametrize(
    ("written", "read_as", "hint"),
    [
        ("GZIP", None, "looks GZIP-compressed: use compression_type='GZIP'"),
        ("ZLIB", "", "looks ZLIB-compressed: use compression_type='ZLIB'"),
        ("ZLIB", "GZIP", "looks ZLIB-compressed: use compression_type='ZLIB'"),
        ("GZIP", "ZLIB", "looks GZIP-compressed: use compression_type='GZIP'"),
        (None, "GZIP", "does not look GZIP-compressed: is compression_type right?"),
    ],
)
async def test_a_file_read_with_the_wrong_compression_says_what_it_looks_like(
    tmp_path: Path, written: str | None, read_as: str | None, hint: str
) -> None:
    path = _records(tmp_path / "a.tfrecord", written)
    async with ar.TFRecordReader(read_as) as reader:
        with pytest.raises(ar.DataLossError) as info:
            await _drain(reader, path)
    assert hint in str(info.value)
    assert path in str(info.value)
    with pytest.raises(ar.DataLossError, match=hint.replace("?", r"\?")):
        list(ar.tf_record_iterator(path, read_as))


async def test_a_fixed_length_file_with_the_wrong_encoding_names_the_encoding(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(zlib.compress(bytes(range(100))))
    async with ar.FixedLengthRecordReader(10, encoding="GZIP") as reader:
        with pytest.raises(ar.DataLossError, match="looks ZLIB-compressed: use encoding='ZLIB'"):
            await _drain(reader, str(path))


async def test_a_plain_file_whose_first_header_is_corrupt_gets_no_compression_hint(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.tfrecord"
    _records(path)
    data = bytearray(path.read_bytes())
    data[9] ^= 0xFF  # the header's CRC
    path.write_bytes(bytes(data))
    async with ar.TFRecordReader() as reader:
        with pytest.raises(ar.DataLossError, match=r"^corrupted record at 0 \(work item") as info:
            await _drain(reader, str(path))
    assert "looks" not in str(info.value)


@pytest.mark.parametrize(
    "reader_type",
    [ar.TFRecordReader, ar.TextLineReader, ar.WholeFileReader, ar.IdentityReader],
)
async def test_a_list_instead_of_a_queue_is_a_type_error(
    tmp_path: Path, reader_type: type[ar.ReaderBase]
) -> None:
    path = _records(tmp_path / "a.tfrecord")
    async with reader_type() as reader:
        with anyio.fail_after(10):
            with pytest.raises(TypeError, match=r"from a queue .* not a list"):
                await reader.read([path])  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"from a queue .* not a tuple"):
                await reader.read_up_to((path,), 10)  # type: ignore[arg-type]
            with pytest.raises(TypeError, match=r"from a queue .* not a str"):
                await reader.read(path)  # type: ignore[arg-type]
            # The reader is unharmed: a real queue works afterwards.
            key, _ = await reader.read(await work_queue([path]))
        assert key.startswith(path.encode())
        assert reader.num_records_produced() == 1
