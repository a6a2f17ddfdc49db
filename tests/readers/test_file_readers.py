"""The concrete file readers: keys, edge cases, errors, recovery and file handles."""

from __future__ import annotations

import gzip
import zlib
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from queue_util import work_queue
from readers_util import (
    frame_in_small_pieces,
    open_fds,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)

import asyncreader as ar
from asyncreader._io import filesystem

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def _all(
    reader: ar.ReaderBase, q: ar.FIFOQueue, n: int | None = None
) -> list[tuple[bytes, bytes]]:
    out: list[tuple[bytes, bytes]] = []
    while True:
        try:
            if n is None:
                out.append(await reader.read(q))
            else:
                keys, values = await reader.read_up_to(q, n)
                assert len(keys) == len(values) <= n
                out += zip(keys, values, strict=True)
        except ar.OutOfRangeError:
            return out


@pytest.mark.both_backends
async def test_text_line_reader_keys_and_line_endings(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"head\r\none\n\ntwo\rx\r\nlast\r")
    q = await work_queue([str(a)])
    async with ar.TextLineReader(skip_header_lines=1) as reader:
        got = await _all(reader, q)
    p = str(a)
    assert got == [
        (f"{p}:2".encode(), b"one"),
        (f"{p}:3".encode(), b""),
        (f"{p}:4".encode(), b"two\rx"),
        (f"{p}:5".encode(), b"last"),
    ]


async def test_text_line_reader_header_longer_than_file_yields_nothing(tmp_path: Path) -> None:
    a = tmp_path / "a.txt"
    a.write_bytes(b"x\ny\n")
    b = tmp_path / "b.txt"
    b.write_bytes(b"1\n2\n3\n")
    q = await work_queue([str(a), str(b)])
    async with ar.TextLineReader(skip_header_lines=2) as reader:
        assert await reader.read(q) == (f"{b}:3".encode(), b"3")
        assert reader.num_work_units_completed() == 1


def test_text_line_reader_validates_arguments() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="skip_header_lines must be >= 0 not -1"):
        ar.TextLineReader(skip_header_lines=-1)


async def test_long_lines_and_records_crossing_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 7)
    a = tmp_path / "a.txt"
    lines = [b"x" * n for n in (0, 1, 30, 6, 7, 8)]
    a.write_bytes(b"\n".join(lines))
    t = tmp_path / "a.tfrecord"
    t.write_bytes(tfrecord_bytes(lines))
    async with ar.TextLineReader() as text, ar.TFRecordReader() as tfr:
        assert [v for _, v in await _all(text, await work_queue([str(a)]), 4)] == lines
        assert [v for _, v in await _all(tfr, await work_queue([str(t)]))] == lines


async def test_consecutive_keys_across_small_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Keys built a thousand at a time must match across block and thousand boundaries.
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 997)
    t = tmp_path / "l%d.txt"
    t.write_bytes(b"".join(b"%d\r\n" % i for i in range(2500)))
    b = tmp_path / "f.bin"
    b.write_bytes(bytes(range(256)) * 40)
    async with ar.TextLineReader() as text, ar.FixedLengthRecordReader(3, 2) as fixed:
        got = await _all(text, await work_queue([str(t)]), 700)
        assert got == [(f"{t}:{i + 1}".encode(), b"%d" % i) for i in range(2500)]
        got = await _all(fixed, await work_queue([str(b)]), 1000)
        data = b.read_bytes()
        assert got == [(f"{b}:{i}".encode(), data[2 + 3 * i : 5 + 3 * i]) for i in range(3412)]


@pytest.mark.parametrize("n", [None, 1, 4, 1000])
async def test_fixed_length_reader_formula(tmp_path: Path, n: int | None) -> None:
    data = bytes(range(100))
    f = tmp_path / "f.bin"
    f.write_bytes(data)
    H, R, F = 3, 10, 4
    for P in (0, 4, 13):
        hop = P or R
        expected = []
        i = 0
        while H + i * hop + R + F <= len(data):
            expected.append((f"{f}:{i}".encode(), data[H + i * hop : H + i * hop + R]))
            i += 1
        async with ar.FixedLengthRecordReader(R, H, F, P) as reader:
            assert await _all(reader, await work_queue([str(f)]), n) == expected


async def test_fixed_length_reader_compressed_and_unknown_encoding(tmp_path: Path) -> None:
    data = bytes(range(200)) * 3
    z = tmp_path / "f.gz"
    z.write_bytes(gzip.compress(data))
    plain = tmp_path / "f.bin"
    plain.write_bytes(data)
    async with ar.FixedLengthRecordReader(20, encoding="GZIP") as reader:
        got = await _all(reader, await work_queue([str(z)]))
    assert [v for _, v in got] == [data[i : i + 20] for i in range(0, 600, 20)]
    # Unlike TensorFlow, an unknown encoding is refused instead of read as uncompressed.
    with pytest.raises(ar.InvalidArgumentError, match=r"encoding must be .* not 'snappy-ish'"):
        ar.FixedLengthRecordReader(20, encoding="snappy-ish")
    # Any case, as TFRecordWriter takes compression types.
    async with ar.FixedLengthRecordReader(20, encoding="gzip") as reader:
        assert reader.encoding == "GZIP"
        got = await _all(reader, await work_queue([str(z)]))
    assert len(got) == 30
    async with ar.FixedLengthRecordReader(20, encoding="") as reader:
        got = await _all(reader, await work_queue([str(plain)]))
    assert len(got) == 30


async def test_fixed_length_reader_file_shorter_than_header_is_out_of_range(tmp_path: Path) -> None:
    short = tmp_path / "short.bin"
    short.write_bytes(b"abc")
    zshort = tmp_path / "short.zz"
    zshort.write_bytes(zlib.compress(b"abc"))
    exact = tmp_path / "exact.bin"
    exact.write_bytes(b"abcd")
    good = tmp_path / "good.bin"
    good.write_bytes(b"abcdXY")
    q = await work_queue([str(short), str(exact), str(good)])
    async with ar.FixedLengthRecordReader(2, header_bytes=4) as reader:
        with pytest.raises(ar.OutOfRangeError, match=r"short\.bin"):
            await reader.read(q)
        assert await reader.read(q) == (f"{good}:0".encode(), b"XY")
        assert reader.num_work_units_completed() == 1
    q = await work_queue([str(zshort), str(good)])
    async with ar.FixedLengthRecordReader(2, header_bytes=4, encoding="ZLIB") as reader:
        with pytest.raises(ar.OutOfRangeError, match=r"short\.zz"):
            await reader.read(q)
        assert reader.statistics().current_work is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"record_bytes": 0}, "record_bytes must be > 0 not 0"),
        ({"record_bytes": 4, "header_bytes": -1}, "header_bytes must be >= 0 not -1"),
        ({"record_bytes": 4, "footer_bytes": -2}, "footer_bytes must be >= 0 not -2"),
        ({"record_bytes": 4, "hop_bytes": -3}, "hop_bytes must be >= 0 not -3"),
    ],
)
def test_fixed_length_reader_validates_arguments(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ar.InvalidArgumentError, match=message):
        ar.FixedLengthRecordReader(**kwargs)


@pytest.mark.parametrize("compression", [None, "", "ZLIB", "GZIP"])
async def test_tfrecord_reader_compression_types(tmp_path: Path, compression: str | None) -> None:
    payloads = [b"", b"a", b"x" * 1000] * 5
    raw = tfrecord_bytes(payloads)
    f = tmp_path / "r.tfrecord"
    f.write_bytes(
        zlib.compress(raw)
        if compression == "ZLIB"
        else gzip.compress(raw)
        if compression == "GZIP"
        else raw
    )
    async with ar.TFRecordReader(compression_type=compression) as reader:
        got = await _all(reader, await work_queue([str(f)]), 4)
        assert reader.compression_type == (compression or "")
    offsets = [0]
    for p in payloads[:-1]:
        offsets.append(offsets[-1] + 16 + len(p))
    assert got == [(f"{f}:{o}".encode(), p) for o, p in zip(offsets, payloads, strict=True)]


async def test_tfrecord_corruption_is_data_loss_at_the_exact_record_then_reset(
    tmp_path: Path,
) -> None:
    raw = bytearray(tfrecord_bytes([b"good%d" % i for i in range(300)]))
    offsets = [0]
    for i in range(299):
        offsets.append(offsets[-1] + 16 + len(b"good%d" % i))
    bad_at = offsets[150]
    raw[bad_at + 14] ^= 0xFF  # inside the payload: its CRC no longer matches
    f = tmp_path / "bad.tfrecord"
    f.write_bytes(bytes(raw))
    good = tmp_path / "good.tfrecord"
    good.write_bytes(tfrecord_bytes([b"fine"]))
    q = await work_queue([str(f), str(good)])
    async with ar.TFRecordReader() as reader:
        got = [await reader.read(q) for _ in range(150)]  # the good records come first
        assert got[-1] == (f"{f}:{offsets[149]}".encode(), b"good149")
        for _ in range(2):
            with pytest.raises(ar.DataLossError) as info:
                await reader.read(q)
            assert f"corrupted record at {bad_at + 12}" in str(info.value)
            assert "bad.tfrecord" in str(info.value)
        assert reader.num_records_produced() == 150
        await reader.reset()
        assert await reader.read(q) == (f"{good}:0".encode(), b"fine")
    # read_up_to returns the good records before the corrupt one (TensorFlow drops them
    # and counts them); the next call raises.
    q = await work_queue([str(f)])
    async with ar.TFRecordReader() as reader:
        keys, values = await reader.read_up_to(q, 1000)
        assert values == [b"good%d" % i for i in range(150)]
        assert keys == [f"{f}:{o}".encode() for o in offsets[:150]]
        with pytest.raises(ar.DataLossError, match=f"corrupted record at {bad_at + 12}"):
            await reader.read_up_to(q, 1000)


@pytest.mark.parametrize("pieces", [False, True], ids=["blocks", "pieces"])
async def test_tfrecord_truncated_and_broken_compressed_stream(
    tmp_path: Path, pieces: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pieces:
        frame_in_small_pieces(monkeypatch)
    raw = tfrecord_bytes([b"a" * 50, b"b" * 50])
    trunc = tmp_path / "trunc.tfrecord"
    trunc.write_bytes(raw[:-10])
    broken = tmp_path / "broken.zz"
    broken.write_bytes(b"\x00" + zlib.compress(raw)[1:])  # bad zlib header
    cut = tmp_path / "cut.zz"
    cut.write_bytes(zlib.compress(raw)[:-8])
    async with ar.TFRecordReader() as reader:
        q = await work_queue([str(trunc)])
        assert (await reader.read(q))[1] == b"a" * 50
        with pytest.raises(
            ar.DataLossError, match=r"^truncated record at 66\b.*\(work item '.*trunc"
        ):
            await reader.read(q)
    async with ar.TFRecordReader("ZLIB") as reader:
        q = await work_queue([str(broken)])
        with pytest.raises(ar.DataLossError, match=r"inflate\(\) failed.*broken\.zz"):
            await _all(reader, q, 1000)
        await reader.reset()
        q = await work_queue([str(cut)])
        with pytest.raises(ar.DataLossError, match=r"truncated.*cut\.zz"):
            await _all(reader, q, 1000)


async def test_missing_files_are_not_found_and_skipped(tmp_path: Path) -> None:
    good = tmp_path / "g.tfrecord"
    good.write_bytes(tfrecord_bytes([b"ok"]))
    for make in (ar.TextLineReader, ar.TFRecordReader, lambda: ar.FixedLengthRecordReader(1)):
        q = await work_queue([str(tmp_path / "nope"), str(tmp_path), str(good)])
        async with make() as reader:
            with pytest.raises(ar.NotFoundError, match="nope"):
                await reader.read(q)
            with pytest.raises(ar.NotFoundError):
                await reader.read(q)  # a directory
            assert (await reader.read(q))[0].startswith(str(good).encode())


async def test_no_file_handle_leaks(tmp_path: Path) -> None:
    files = []
    for i in range(5):
        f = tmp_path / f"{i}.tfrecord"
        f.write_bytes(tfrecord_bytes([b"r"] * 10))
        files.append(str(f))
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(b"\x01" * 40)
    before = open_fds()
    # Read everything, fail mid-file, reset, close mid-file: nothing stays open.
    async with ar.TFRecordReader() as reader:
        await _all(reader, await work_queue(files))
        assert open_fds() == before
        q = await work_queue([str(bad), *files])
        with pytest.raises(ar.DataLossError):
            await reader.read(q)
        assert open_fds() == before + 1
        await reader.reset()
        assert open_fds() == before
        await reader.read(q)
        assert open_fds() == before + 1
    assert open_fds() == before
    async with ar.WholeFileReader() as whole:
        await _all(whole, await work_queue(files))
    assert open_fds() == before


async def test_cancelled_read_leaves_the_reader_usable(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_bytes(b"a\nb\n")
    q = await work_queue([], close=False)
    async with ar.TextLineReader() as reader:
        with anyio.move_on_after(0):
            await reader.read(q)
        await q.enqueue(str(f))
        await q.close()
        assert await reader.read(q) == (f"{f}:1".encode(), b"a")


async def test_statistics_count_bytes_and_buffered_records(tmp_path: Path) -> None:
    f = tmp_path / "t.txt"
    f.write_bytes(b"a\nb\nc\n")
    async with ar.TextLineReader() as reader:
        await reader.read(await work_queue([str(f)]))
        stats = reader.statistics()
    assert stats.bytes_read == 6
    assert stats.buffered == 2
    assert stats.records_produced == 1


def test_fsspec_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "fsspec", None)
    with pytest.raises(ar.FailedPreconditionError, match=r"asyncreader\[remote\]"):
        filesystem.open_work_item("s3://bucket/key")


def test_file_urls_are_local(tmp_path: Path) -> None:
    f = tmp_path / "x"
    f.write_bytes(b"12345")
    assert filesystem.read_whole(f"file://{f}") == b"12345"
    assert filesystem.read_whole(bytes(f)) == b"12345"
    assert filesystem.is_url("memory://x")
    assert not filesystem.is_url(str(f))


@pytest.mark.both_backends
async def test_buffered_reads_make_no_thread_hop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    f = tmp_path / "t.txt"
    f.write_bytes(b"".join(b"%d\n" % i for i in range(5000)))
    fills = 0
    original = ar.TextLineReader._fill

    def counting_fill(self: ar.TextLineReader) -> tuple[list[bytes], list[bytes], bool]:
        nonlocal fills
        fills += 1
        return original(self)

    monkeypatch.setattr(ar.TextLineReader, "_fill", counting_fill)
    q = await work_queue([str(f)])
    async with ar.TextLineReader() as reader:
        got = [await reader.read(q) for _ in range(3000)]
        keys, _ = await reader.read_up_to(q, 1024)
        assert fills == 1  # one hop framed the whole file
        assert got[-1] == (f"{f}:3000".encode(), b"2999")
        assert keys[0] == f"{f}:3001".encode()
        assert reader.statistics().buffered == 5000 - 3000 - 1024


async def test_fixed_length_short_file_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    short = tmp_path / "short.bin"
    short.write_bytes(b"ab")
    async with ar.FixedLengthRecordReader(2, header_bytes=4) as reader:
        with pytest.raises(ar.OutOfRangeError):
            await reader.read(await work_queue([str(short)]))
    assert "short.bin" in caplog.text


@pytest.mark.both_backends
@pytest.mark.parametrize("verb", ["read", "read_up_to"])
async def test_buffered_reads_yield_periodically(tmp_path: Path, verb: str) -> None:
    """Reads served from the read-ahead buffer still reach a cancellation point."""
    from asyncreader._readers.base import _YIELD_INTERVAL

    a = tmp_path / "a.txt"
    a.write_bytes(b"".join(b"%d\n" % i for i in range(10 * _YIELD_INTERVAL)))
    q = await work_queue([str(a)])
    async with ar.TextLineReader() as reader:

        async def one() -> bytes:
            if verb == "read":
                return (await reader.read(q))[1]
            [value] = (await reader.read_up_to(q, 1))[1]
            return value

        with anyio.fail_after(10):
            assert await one() == b"0"
            got = 0
            with anyio.CancelScope() as scope:
                scope.cancel()
                while True:
                    assert await one() == b"%d" % (got + 1)
                    got += 1
            assert scope.cancelled_caught
            assert 0 < got < _YIELD_INTERVAL
            # Nothing was lost: the next read returns the next line.
            assert await one() == b"%d" % (got + 1)
