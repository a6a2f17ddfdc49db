"""tf_record_iterator and async_tf_record_iterator over real files."""

from __future__ import annotations

import gc
from typing import TYPE_CHECKING

import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

PAYLOADS = [b"", b"one", b"two" * 100, bytes(range(256)) * 40]


def write(path: Path, payloads: list[bytes], kind: str | None = None) -> Path:
    with ar.TFRecordWriter(path, kind) as writer:
        writer.write_many(payloads)
    return path


@pytest.mark.parametrize("kind", [None, "", "ZLIB", "GZIP"])
@pytest.mark.parametrize("read_size", [1, 13, 1 << 20])
def test_iterates_payloads(tmp_path: Path, kind: str | None, read_size: int) -> None:
    path = write(tmp_path / "f", PAYLOADS, kind)
    assert list(ar.tf_record_iterator(path, kind, read_size=read_size)) == PAYLOADS


def test_accepts_str_and_bytes_paths(tmp_path: Path) -> None:
    path = write(tmp_path / "f", PAYLOADS)
    assert list(ar.tf_record_iterator(str(path))) == PAYLOADS
    assert list(ar.tf_record_iterator(bytes(path))) == PAYLOADS


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path / "e", [])
    assert list(ar.tf_record_iterator(path)) == []


def test_missing_file_is_not_found_at_call(tmp_path: Path) -> None:
    with pytest.raises(ar.NotFoundError):
        ar.tf_record_iterator(tmp_path / "missing")


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="compression_type"):
        ar.tf_record_iterator(tmp_path / "x", "BZ2")
    with pytest.raises(ar.InvalidArgumentError, match="read_size"):
        ar.tf_record_iterator(tmp_path / "x", read_size=0)


def test_corruption_yields_good_records_then_raises_every_time(tmp_path: Path) -> None:
    path = write(tmp_path / "c", [b"good", b"bad!", b"after"])
    data = bytearray(path.read_bytes())
    data[20 + 12] ^= 0xFF
    path.write_bytes(bytes(data))
    it = ar.tf_record_iterator(path, read_size=8)
    assert next(it) == b"good"
    for _ in range(2):
        with pytest.raises(ar.DataLossError, match=r"^corrupted record at 32") as info:
            next(it)
        assert info.value.work_item == str(path)
    it.close()


def test_truncated_file_raises_after_good_records(tmp_path: Path) -> None:
    path = write(tmp_path / "t", [b"good", b"cut short"])
    path.write_bytes(path.read_bytes()[:-5])
    it = ar.tf_record_iterator(path)
    assert next(it) == b"good"
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 20"):
        next(it)
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 20"):
        next(it)


def test_close_ends_iteration_and_abandoning_leaks_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "f", PAYLOADS)
    with ar.tf_record_iterator(path) as it:
        assert next(it) == b""
    assert list(it) == []
    it.close()
    partial = ar.tf_record_iterator(path)
    next(partial)
    del partial
    gc.collect()  # no ResourceWarning for the file (warnings are errors here)
    assert repr(ar.tf_record_iterator(path)).startswith("<TFRecordIterator <TFRecordFramer")


@pytest.mark.both_backends
@pytest.mark.parametrize("kind", [None, "GZIP"])
async def test_async_iterator(tmp_path: Path, kind: str | None) -> None:
    path = write(tmp_path / "a", PAYLOADS * 3, kind)
    async with ar.async_tf_record_iterator(path, kind, read_size=100) as it:
        got = [record async for record in it]
    assert got == PAYLOADS * 3
    assert repr(it).startswith("<AsyncTFRecordIterator")


async def test_async_iterator_missing_file(tmp_path: Path) -> None:
    it = ar.async_tf_record_iterator(tmp_path / "missing")
    with pytest.raises(ar.NotFoundError):
        await it.__anext__()
    await it.aclose()


async def test_async_iterator_aclose_early(tmp_path: Path) -> None:
    path = write(tmp_path / "a", PAYLOADS)
    it = ar.async_tf_record_iterator(path)
    assert await it.__anext__() == b""
    await it.aclose()
    await it.aclose()
    with pytest.raises(StopAsyncIteration):
        await it.__anext__()


async def test_async_iterator_corruption(tmp_path: Path) -> None:
    path = write(tmp_path / "c", [b"good", b"bad!"])
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    it = ar.async_tf_record_iterator(path)
    assert await it.__anext__() == b"good"
    with pytest.raises(ar.DataLossError, match=r"^corrupted record at 32"):
        await it.__anext__()
    await it.aclose()
