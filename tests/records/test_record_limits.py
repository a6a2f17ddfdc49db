"""Memory stays bounded whatever a record's header declares, and a text file without
newlines cannot be buffered whole.

A declared length is checked when its header is read, before anything is buffered or
inflated: beyond the bytes left in an uncompressed file it is ``DataLossError``
(``truncated record``); over ``max_record_bytes`` it is ``ResourceExhaustedError`` naming
the file, offset, length and limit. Memory is measured with ``tracemalloc`` (all threads).
"""

from __future__ import annotations

import struct
import tracemalloc
import zlib
from typing import TYPE_CHECKING

import anyio
import pytest
from framer_util import cuts_every, feed
from queue_util import work_queue

import asyncreader as ar
from asyncreader._io.crc import masked_crc32c
from asyncreader._records import DEFAULT_MAX_RECORD_BYTES
from asyncreader._records.lines import LineFramer
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator
    from pathlib import Path

MiB = 1 << 20
#: Bytes of zeros inflated by the bomb, and what its header declares.
BOMB_INFLATES = 256 * MiB
BOMB_DECLARES = 2**62


def _header(length: int) -> bytes:
    raw = struct.pack("<Q", length)
    return raw + struct.pack("<I", masked_crc32c(raw))


def _encode(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


@pytest.fixture(scope="module")
def bomb(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A GZIP TFRecord file of about 256 KB that inflates to 256 MiB: one header declaring
    2**62 bytes, then zeros."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    parts = [packer.compress(_header(BOMB_DECLARES))]
    zeros = bytes(MiB)
    parts += [packer.compress(zeros) for _ in range(BOMB_INFLATES // MiB)]
    parts.append(packer.flush())
    path = tmp_path_factory.mktemp("bomb") / "bomb.tfrecord.gz"
    path.write_bytes(b"".join(parts))
    assert path.stat().st_size < 2 * MiB
    return str(path)


@pytest.fixture
def peak_memory() -> Iterator[Callable[[], int]]:
    """``peak()`` returns the most memory allocated at once since the test started."""
    tracemalloc.start()
    try:
        yield lambda: tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _sparse_file(path: Path, head: bytes, size: int) -> str:
    with open(path, "wb") as f:
        f.write(head)
        f.truncate(size)  # zeros, without writing them
    return str(path)


async def _read_all(reader: ar.ReaderBase, queue: ar.FIFOQueue, got: list[bytes]) -> None:
    with anyio.fail_after(30):
        while True:
            try:
                got += (await reader.read_up_to(queue, 1000))[1]
            except ar.OutOfRangeError:
                return


def _raises(
    kind: type[ar.AsyncReaderError], step: Callable[[], Awaitable[None]]
) -> Callable[[], Awaitable[ar.AsyncReaderError]]:
    async def run() -> ar.AsyncReaderError:
        with pytest.raises(kind) as info:
            await step()
        return info.value

    return run


# -- the decompression bomb -------------------------------------------------------------


def test_a_gzip_bomb_fails_at_its_header_without_inflating_it(
    bomb: str, peak_memory: Callable[[], int]
) -> None:
    framer = TFRecordFramer(compression_type="GZIP", work_item=bomb)
    with open(bomb, "rb") as f:
        data = f.read()
    with pytest.raises(ar.ResourceExhaustedError) as info:
        feed(framer, data, cuts_every(MiB, data))
    assert peak_memory() < 16 * MiB
    stats = framer.statistics()
    assert stats.buffered < MiB
    message = str(info.value)
    assert message.startswith(f"record at 0 is {BOMB_DECLARES} bytes, over max_record_bytes=")
    assert f"max_record_bytes={DEFAULT_MAX_RECORD_BYTES};" in message
    assert f"pass max_record_bytes={BOMB_DECLARES} or more" in message
    assert bomb in message
    assert info.value.offset == 0


def test_tf_record_iterator_stops_the_bomb_too(bomb: str, peak_memory: Callable[[], int]) -> None:
    with pytest.raises(ar.ResourceExhaustedError, match="over max_record_bytes"):
        list(ar.tf_record_iterator(bomb, "GZIP"))
    assert peak_memory() < 16 * MiB


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_reader_stops_the_bomb_with_bounded_memory(
    bomb: str, peak_memory: Callable[[], int]
) -> None:
    async with ar.TFRecordReader("GZIP") as reader:
        got: list[bytes] = []
        queue = await work_queue([bomb])
        error = await _raises(ar.ResourceExhaustedError, lambda: _read_all(reader, queue, got))()
    assert got == []
    assert peak_memory() < 24 * MiB
    assert error.work_item == bomb.encode()
    assert "max_record_bytes=" in str(error)


# -- a length beyond the end of an uncompressed file --------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
@pytest.mark.parametrize("declared", [2**40, 200 * MiB])
async def test_a_length_beyond_the_file_fails_before_the_file_is_buffered(
    tmp_path: Path, peak_memory: Callable[[], int], declared: int
) -> None:
    good = _encode([b"first", b"second"])
    path = _sparse_file(tmp_path / "junk.tfrecord", good + _header(declared), 100 * MiB)
    got: list[bytes] = []
    async with ar.TFRecordReader() as reader:
        queue = await work_queue([path])
        error = await _raises(ar.DataLossError, lambda: _read_all(reader, queue, got))()
        read = reader.statistics().bytes_read
    assert got == [b"first", b"second"]
    at = len(good)
    assert str(error).startswith(f"truncated record at {at}: its header declares {declared}")
    assert error.offset == at
    assert path in str(error)
    assert read <= 8 * MiB  # a block or two, not the 100 MB
    assert peak_memory() < 24 * MiB
    with pytest.raises(ar.DataLossError, match=f"^truncated record at {at}: its header"):
        list(ar.tf_record_iterator(path))


def test_the_framer_checks_a_header_split_across_chunks() -> None:
    data = _encode([b"abc"]) + _header(1000) + bytes(100)
    framer = TFRecordFramer(stream_size=len(data) + 500)
    assert framer.decode(data[:25]) == ([0], [b"abc"])  # 6 bytes of the next header
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 19: its header declares"):
        framer.decode(data[25:40])
    # Within the file and the limit: buffered as before, and complete at the end.
    framer = TFRecordFramer(stream_size=len(data) + 4 + 900)
    assert framer.decode(data) == ([0], [b"abc"])


# -- an honest record over max_record_bytes -------------------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
@pytest.mark.parametrize("compression", [None, "GZIP", "ZLIB"])
async def test_a_record_over_the_limit_raises_or_is_skipped_alone(
    tmp_path: Path, compression: str | None
) -> None:
    path = str(tmp_path / "a.tfrecord")
    with ar.TFRecordWriter(path, compression) as writer:
        writer.write_many([b"before", b"x" * 2000, b"after"])
    big_at = 16 + len(b"before")
    got: list[bytes] = []
    async with ar.TFRecordReader(compression, max_record_bytes=1000) as reader:
        assert reader.max_record_bytes == 1000
        queue = await work_queue([path])
        error = await _raises(ar.ResourceExhaustedError, lambda: _read_all(reader, queue, got))()
    assert got == [b"before"]
    assert str(error).startswith(
        f"record at {big_at} is 2000 bytes, over max_record_bytes=1000; if the file is "
        "intact, pass max_record_bytes=2000 or more to read it"
    )
    assert error.offset == big_at
    got = []
    async with ar.TFRecordReader(compression, max_record_bytes=1000, on_error="skip") as reader:
        await _read_all(reader, await work_queue([path]), got)
        (letter,) = reader.dead_letters
    assert got == [b"before", b"after"]
    assert isinstance(letter.error, ar.ResourceExhaustedError)
    assert letter.record == f"{path}:{big_at}".encode()
    assert not letter.rest_of_work_item
    async with ar.TFRecordReader(compression, max_record_bytes=2000) as reader:
        got = []
        await _read_all(reader, await work_queue([path]), got)
    assert got == [b"before", b"x" * 2000, b"after"]
    with pytest.raises(ar.ResourceExhaustedError, match="over max_record_bytes=1000"):
        list(ar.tf_record_iterator(path, compression, max_record_bytes=1000))
    assert len(list(ar.tf_record_iterator(path, compression, max_record_bytes=2000))) == 3


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "1000"])
def test_max_record_bytes_must_be_a_positive_integer(tmp_path: Path, bad: object) -> None:
    path = tmp_path / "a.tfrecord"
    path.write_bytes(b"")
    for make in (
        lambda: ar.TFRecordReader(max_record_bytes=bad),  # type: ignore[arg-type]
        lambda: ar.TextLineReader(max_record_bytes=bad),  # type: ignore[arg-type]
        lambda: ar.tf_record_iterator(str(path), max_record_bytes=bad),  # type: ignore[arg-type]
        lambda: ar.async_tf_record_iterator(str(path), max_record_bytes=bad),  # type: ignore[arg-type]
    ):
        with pytest.raises(ar.InvalidArgumentError, match="max_record_bytes must be"):
            make()


# -- text lines ---------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_text_file_without_newlines_is_not_buffered_whole(
    tmp_path: Path, peak_memory: Callable[[], int]
) -> None:
    path = _sparse_file(tmp_path / "no-newline.txt", b"", 64 * MiB)
    got: list[bytes] = []
    async with ar.TextLineReader(max_record_bytes=MiB) as reader:
        queue = await work_queue([path])
        error = await _raises(ar.ResourceExhaustedError, lambda: _read_all(reader, queue, got))()
        read = reader.statistics().bytes_read
    assert got == []
    assert str(error).startswith(
        f"line 1 at 0 is longer than max_record_bytes={MiB} (its end is not read yet)"
    )
    assert path in str(error)
    assert read <= 8 * MiB
    assert peak_memory() < 24 * MiB


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_long_line_raises_after_the_lines_before_it_or_is_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"a\n" * 10 + b"x" * 5000 + b"\nb\nc")
    got: list[bytes] = []
    async with ar.TextLineReader(max_record_bytes=1000) as reader:
        assert reader.max_record_bytes == 1000
        queue = await work_queue([str(path)])
        error = await _raises(ar.ResourceExhaustedError, lambda: _read_all(reader, queue, got))()
    assert got == [b"a"] * 10
    assert str(error).startswith("line 11 at 20 is 5000 bytes, over max_record_bytes=1000")
    assert error.record == 11
    got = []
    async with ar.TextLineReader(max_record_bytes=1000, on_error="skip") as reader:
        await _read_all(reader, await work_queue([str(path)]), got)
        (letter,) = reader.dead_letters
    assert got == [b"a"] * 10 + [b"b", b"c"]
    assert letter.record == f"{path}:11".encode()
    assert not letter.rest_of_work_item


@pytest.mark.parametrize("chunk", [1, 7, 999, 1000, 1001, 4096, 100_000])
def test_the_line_limit_does_not_depend_on_chunk_sizes(chunk: int) -> None:
    data = b"ok\n" * 5 + b"y" * 1000 + b"\n" + b"z" * 1001 + b"\nnever\n"
    framer = LineFramer(max_record_bytes=1000)
    values = framer.decode(data[: 15 + 1001])[1]  # up to the long line
    rest = data[15 + 1001 :]
    with pytest.raises(ar.ResourceExhaustedError) as info:
        values += feed(framer, rest, cuts_every(chunk, rest))[1]
    assert values == [b"ok"] * 5 + [b"y" * 1000]  # exactly the limit is fine
    assert info.value.record == 7
    assert info.value.offset == 15 + 1001
    assert framer.skip_to in (None, (15 + 1001 + 1002, 8))
    if chunk > 1001:
        assert framer.skip_to == (15 + 1001 + 1002, 8)  # the line's end was seen


def test_a_line_limit_smaller_than_a_chunk_is_still_exact() -> None:
    framer = LineFramer(max_record_bytes=3)
    values = framer.decode(b"abc\nabcd\nx\n")[1]
    assert values == [b"abc"]
    with pytest.raises(ar.ResourceExhaustedError, match=r"^line 2 at 4 is 4 bytes"):
        framer.decode(b"")
    assert framer.skip_to == (9, 3)


def test_the_default_limit_is_generous() -> None:
    assert DEFAULT_MAX_RECORD_BYTES == 256 << 20
    assert ar.TFRecordReader().max_record_bytes == DEFAULT_MAX_RECORD_BYTES
    assert ar.TextLineReader().max_record_bytes == DEFAULT_MAX_RECORD_BYTES


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_skipping_the_bomb_reports_the_stream_ending_before_the_record_does(
    tmp_path: Path, peak_memory: Callable[[], int]
) -> None:
    # Skipping the over-long record means inflating past it; the stream ends first, and
    # that is damage too, not a clean end of file.
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    head = _encode([b"first"]) + _header(BOMB_DECLARES)
    stream = packer.compress(head) + packer.compress(bytes(16 * MiB)) + packer.flush()
    path = tmp_path / "bomb.tfrecord.gz"
    path.write_bytes(stream)
    got: list[bytes] = []
    async with ar.TFRecordReader("GZIP", on_error="skip") as reader:
        await _read_all(reader, await work_queue([str(path)]), got)
        over, truncated = reader.dead_letters
    assert got == [b"first"]
    assert isinstance(over.error, ar.ResourceExhaustedError)
    assert not over.rest_of_work_item
    assert isinstance(truncated.error, ar.DataLossError)
    assert truncated.rest_of_work_item
    assert str(truncated.error).startswith(
        f"truncated compressed stream: it ends at byte {len(head) + 16 * MiB} of the "
        "decompressed data"
    )
    assert peak_memory() < 24 * MiB
