"""Files that change under a reader: shrink or vanish mid-read, or cannot be read at all.

Whatever happens to a file, the reader delivers each good record once, reports the rest
with an error naming the file (and the byte offset where its data ends), or, with
``on_error="skip"``, a dead letter, and then goes on; it never hangs or leaks the file.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import pytest
from queue_util import work_queue
from readers_util import read_verb  # noqa: F401 (runs each test with both verbs)

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

RECORDS = 12_000  # ~12 MB: several of the reader's read blocks
PAYLOAD = 1000


def _write(path: Path, first_id: int = 0) -> str:
    with ar.TFRecordWriter(str(path)) as writer:
        for i in range(first_id, first_id + RECORDS):
            writer.write(i.to_bytes(8, "little") + bytes(PAYLOAD))
    return str(path)


def _size(path: str) -> int:
    return os.stat(path).st_size


def _ids(values: list[bytes]) -> list[int]:
    return [int.from_bytes(v[:8], "little") for v in values]


async def _read_all(reader: ar.ReaderBase, queue: ar.FIFOQueue, got: list[int]) -> None:
    while True:
        try:
            _, values = await reader.read_up_to(queue, 500)
        except ar.OutOfRangeError:
            return
        got.extend(_ids(values))


async def test_a_file_that_shrinks_mid_read_ends_in_data_loss_at_its_end(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.tfrecord")
    queue = await work_queue([path])
    got: list[int] = []
    async with ar.TFRecordReader() as reader:
        _, values = await reader.read_up_to(queue, 100)
        got.extend(_ids(values))
        os.truncate(path, _size(path) // 3 + 17)  # cuts a record in two
        with pytest.raises(ar.DataLossError) as info:
            await _read_all(reader, queue, got)
        assert path in str(info.value)
        assert info.value.offset is not None
        assert "shrank" in str(info.value) or "truncated" in str(info.value)
        # Every record before the error came exactly once, in order; none is missing.
        assert got == list(range(len(got)))
        assert len(got) >= (_size(path) - 16) // (PAYLOAD + 8 + 16)
        await reader.reset()
        assert reader.num_records_produced() == 0


async def test_a_shrunken_file_is_a_dead_letter_when_skipping(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.tfrecord")
    second = _write(tmp_path / "b.tfrecord", first_id=RECORDS)
    queue = await work_queue([first, second])
    got: list[int] = []
    async with ar.TFRecordReader(on_error="skip") as reader:
        _, values = await reader.read_up_to(queue, 100)
        got.extend(_ids(values))
        os.truncate(first, _size(first) // 2 + 5)
        await _read_all(reader, queue, got)
        (letter,) = reader.dead_letters
    assert letter.work_item == first.encode()
    assert letter.rest_of_work_item
    assert isinstance(letter.error, ar.DataLossError)
    cut = [i for i in got if i < RECORDS]
    assert cut == list(range(len(cut)))  # the first file up to the cut, once each
    assert [i for i in got if i >= RECORDS] == list(range(RECORDS, 2 * RECORDS))


async def test_a_cut_at_a_record_boundary_is_still_data_loss(tmp_path: Path) -> None:
    """Without the size at open, the cut would look like a clean end of file."""
    path = _write(tmp_path / "a.tfrecord")
    queue = await work_queue([path])
    got: list[int] = []
    async with ar.TFRecordReader() as reader:
        _, values = await reader.read_up_to(queue, 100)
        got.extend(_ids(values))
        os.truncate(path, (RECORDS // 2) * (PAYLOAD + 8 + 16))
        with pytest.raises(ar.DataLossError, match="shrank"):
            await _read_all(reader, queue, got)
    assert got == list(range(len(got)))


async def test_a_file_deleted_while_open_is_read_to_its_end(tmp_path: Path) -> None:
    path = _write(tmp_path / "a.tfrecord")
    queue = await work_queue([path])
    got: list[int] = []
    async with ar.TFRecordReader() as reader:
        _, values = await reader.read_up_to(queue, 100)
        got.extend(_ids(values))
        os.unlink(path)  # the open file stays readable (POSIX)
        await _read_all(reader, queue, got)
    assert got == list(range(RECORDS))


async def test_a_file_that_vanished_before_its_turn(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.tfrecord")
    gone = _write(tmp_path / "gone.tfrecord", first_id=RECORDS)
    queue = await work_queue([first, gone])
    async with ar.TFRecordReader() as reader:
        _, values = await reader.read_up_to(queue, 100)
        os.unlink(gone)
        got = _ids(values)
        with pytest.raises(ar.NotFoundError, match=r"gone\.tfrecord"):
            await _read_all(reader, queue, got)
    assert got == list(range(RECORDS))


@pytest.mark.parametrize("reader_type", [ar.TFRecordReader, ar.TextLineReader])
async def test_a_work_item_that_cannot_be_read_is_named(tmp_path: Path, reader_type: type) -> None:
    directory = tmp_path / "not-a-file"
    directory.mkdir()
    good = _write(tmp_path / "a.tfrecord")
    async with reader_type() as reader:
        with pytest.raises(ar.NotFoundError, match="not-a-file"):
            await reader.read(await work_queue([str(directory), good]))
    async with reader_type(on_error="skip") as reader:
        queue = await work_queue([str(directory), good])
        await reader.read(queue)
        (letter,) = reader.dead_letters
        assert letter.work_item == str(directory).encode()
        assert letter.record is None


@pytest.mark.parametrize("kind", ["fixed", "text"])
async def test_other_readers_see_a_shrinking_file_too(tmp_path: Path, kind: str) -> None:
    data = tmp_path / "data"
    path = str(data)
    if kind == "fixed":
        data.write_bytes(bytes(range(256)) * (RECORDS * 4))
        reader: ar.ReaderBase = ar.FixedLengthRecordReader(record_bytes=256)
    else:
        data.write_bytes(b"".join(b"line %09d\n" % i for i in range(RECORDS * 50)))
        reader = ar.TextLineReader()
    queue = await work_queue([path])
    async with reader:
        await reader.read_up_to(queue, 100)
        os.truncate(path, _size(path) // 3)
        with pytest.raises(ar.DataLossError, match="shrank") as info:
            await _read_all(reader, queue, [])
        assert info.value.work_item is not None
