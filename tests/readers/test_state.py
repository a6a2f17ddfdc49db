"""serialize_state / restore_state: TensorFlow's proto for WholeFile and Identity readers,
asyncreader's resumable format for the others (SPEC §3.6)."""

from __future__ import annotations

import gzip
import zlib
from typing import TYPE_CHECKING

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
from asyncreader._readers import framed
from asyncreader._readers.state import ReaderState, decode_tf_proto, encode_tf_proto

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio


async def _read_all(reader: ar.ReaderBase, q: ar.FIFOQueue) -> list[tuple[bytes, bytes]]:
    out = []
    while True:
        try:
            out.append(await reader.read(q))
        except ar.OutOfRangeError:
            return out


@pytest.mark.both_backends
async def test_identity_reader_state_round_trips_as_tensorflow_does() -> None:
    reader = ar.IdentityReader("test_reader")
    assert reader.serialize_state() == b""
    q = await work_queue(["X"], close=False)
    assert await reader.read(q) == (b"X", b"X")
    state = reader.serialize_state()
    assert state == b'\x08\x01\x10\x01\x18\x01"\x01X'
    await q.enqueue_many(["Y", "Z"])
    await q.close()
    assert await reader.read(q) == (b"Y", b"Y")
    reader.restore_state(state)
    assert reader.num_records_produced() == 1
    assert await reader.read(q) == (b"Z", b"Z")
    assert reader.num_records_produced() == 2
    for bad in (
        state[1:],
        state[:-1],
        state + b"ExtraJunk",
        b"PREFIX" + state,
        b"BOGUS" + state[5:],
    ):
        with pytest.raises(
            ar.InvalidArgumentError, match="Could not parse state for IdentityReader 'test_reader'"
        ):
            reader.restore_state(bad)
        # Any failure resets the reader.
        assert reader.num_records_produced() == 0
    with pytest.raises(ValueError, match="must be bytes"):
        reader.restore_state([])  # type: ignore[arg-type]
    await reader.aclose()


async def test_tf_state_validation_messages() -> None:
    reader = ar.WholeFileReader("w")
    negative = encode_tf_proto(ReaderState(work_started=-1))
    with pytest.raises(
        ar.InvalidArgumentError,
        match="Unexpected negative value when restoring in WholeFileReader 'w': work_started: -1",
    ):
        reader.restore_state(negative)
    in_progress = encode_tf_proto(ReaderState(2, 1, 5, b"f"))
    with pytest.raises(
        ar.InvalidArgumentError,
        match=r"Inconsistent work started vs\. finished when restoring in WholeFileReader 'w'",
    ):
        reader.restore_state(in_progress)
    reader.restore_state(encode_tf_proto(ReaderState(3, 3, 7, b"f")))
    assert (reader.num_records_produced(), reader.num_work_units_completed()) == (7, 3)
    assert decode_tf_proto(reader.serialize_state()) == ReaderState(3, 3, 7, b"f")
    await reader.aclose()


def test_tf_proto_parser_skips_unknown_fields_and_rejects_malformed() -> None:
    assert decode_tf_proto(b"\x28\x05\x08\x02") == ReaderState(work_started=2)
    for bad in (b"\x08", b"\x22\x05ab", b"\x0b", b"\x00\x01", b"\x22\x01"):
        with pytest.raises(ValueError, match="not a ReaderBaseState"):
            decode_tf_proto(bad)


@pytest.mark.both_backends
async def test_whole_file_reader_missing_file_stays_in_progress(tmp_path: Path) -> None:
    """TensorFlow opens the file in the read hook: a missing file fails the read and the
    work item stays in progress, so every later read fails again until reset() (SPEC §3.3,
    §11 Q12); a file that appears meanwhile is then read under that same work item."""
    (tmp_path / "a").write_bytes(b"alpha")
    (tmp_path / "empty").write_bytes(b"")
    items = [str(tmp_path / "a"), str(tmp_path / "missing"), str(tmp_path / "empty")]
    q = await work_queue(items)
    async with ar.WholeFileReader() as reader:
        with anyio.fail_after(10):
            assert await reader.read(q) == (items[0].encode(), b"alpha")
            assert reader.num_work_units_completed() == 1
            for _ in range(2):
                with pytest.raises(ar.NotFoundError, match="missing"):
                    await reader.read(q)
                assert reader.statistics().work_units_started == 2
                assert reader.num_work_units_completed() == 1
            assert q.size() == 1  # the empty file was not taken
            (tmp_path / "missing").write_bytes(b"late")
            assert await reader.read(q) == (items[1].encode(), b"late")
            assert await reader.read(q) == (items[2].encode(), b"")
            assert reader.statistics().bytes_read == 9
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(q)


@pytest.mark.both_backends
async def test_whole_file_reader_reset_or_skip_policy_moves_past_a_missing_file(
    tmp_path: Path,
) -> None:
    (tmp_path / "b").write_bytes(b"beta")
    items = [str(tmp_path / "missing"), str(tmp_path / "b")]
    async with ar.WholeFileReader() as reader:
        q = await work_queue(items)
        with anyio.fail_after(10):
            with pytest.raises(ar.NotFoundError, match="missing"):
                await reader.read(q)
            await reader.reset()  # drops the work item in progress
            assert await reader.read(q) == (items[1].encode(), b"beta")
    async with ar.WholeFileReader(on_error="skip") as reader:
        q = await work_queue(items)
        with anyio.fail_after(10):
            assert await reader.read(q) == (items[1].encode(), b"beta")
            with pytest.raises(ar.OutOfRangeError):
                await reader.read(q)
        (letter,) = reader.dead_letters
        assert isinstance(letter.error, ar.NotFoundError)
        assert letter.work_item == items[0].encode()
        assert letter.rest_of_work_item
        assert reader.num_work_units_completed() == 2


def _tfrecord(path: Path, payloads: list[bytes], compression: str) -> None:
    data = tfrecord_bytes(payloads)
    if compression == "ZLIB":
        data = zlib.compress(data)
    elif compression == "GZIP":
        data = gzip.compress(data)
    path.write_bytes(data)


READERS: dict[str, Callable[[], ar.ReaderBase]] = {
    "tfrecord": ar.TFRecordReader,
    "tfrecord-zlib": lambda: ar.TFRecordReader("ZLIB"),
    "tfrecord-gzip": lambda: ar.TFRecordReader("GZIP"),
    "text": lambda: ar.TextLineReader(skip_header_lines=2),
    "fixed": lambda: ar.FixedLengthRecordReader(7, header_bytes=3, footer_bytes=2, hop_bytes=5),
    "fixed-zlib": lambda: ar.FixedLengthRecordReader(7, 3, 2, 5, encoding="ZLIB"),
}


def _write(kind: str, path: Path) -> None:
    if kind.startswith("tfrecord"):
        comp = kind.split("-")[1].upper() if "-" in kind else ""
        _tfrecord(path, [b"r%d" % i * (i % 7) for i in range(500)], comp)
    elif kind == "text":
        path.write_bytes(b"".join(b"line %d\r\n" % i for i in range(500)))
    else:
        data = bytes(range(256)) * 10
        path.write_bytes(zlib.compress(data) if kind.endswith("zlib") else data)


async def _two_files(kind: str, tmp_path: Path) -> tuple[list[str], list[tuple[bytes, bytes]]]:
    """Write two files for reader ``kind``; return their names and all their records."""
    files = [tmp_path / "one", tmp_path / "two"]
    for f in files:
        _write(kind, f)
    names = [str(f) for f in files]
    async with READERS[kind]() as reference:
        return names, await _read_all(reference, await work_queue(names))


@pytest.mark.parametrize("kind", sorted(READERS))
@pytest.mark.parametrize("stop", [0, 1, 137, 10_000])
async def test_fresh_reader_resumes_at_the_next_record(
    tmp_path: Path, kind: str, stop: int
) -> None:
    names, expected = await _two_files(kind, tmp_path)
    stop = min(stop, len(expected) - 1)
    q = await work_queue(names)
    first = READERS[kind]()
    got = [await first.read(q) for _ in range(stop)]
    # Read ahead but not delivered: nothing of the buffer counts yet.
    assert first.num_records_produced() == stop
    state = first.serialize_state()
    await first.aclose()
    async with READERS[kind]() as second:
        second.restore_state(state)
        assert second.num_records_produced() == stop
        assert second.serialize_state() == state
        rest = await _read_all(second, q)
    assert got + rest == expected


@pytest.mark.parametrize("kind", sorted(READERS))
async def test_blocks_framed_in_pieces_resume_at_every_record(
    tmp_path: Path, kind: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    # Tiny blocks framed in pieces a few records long: pieces end inside records, CRLF
    # pairs, headers and compressed streams, and state is taken after every batch.
    names, expected = await _two_files(kind, tmp_path)
    frame_in_small_pieces(monkeypatch)
    pieces: list[int] = []
    real = framed.FramedReader._next_piece

    def spy(self: framed.FramedReader, *, whole: bool = False) -> tuple[bytes | memoryview, bool]:
        data, last = real(self, whole=whole)
        pieces.append(len(data))
        return data, last

    monkeypatch.setattr(framed.FramedReader, "_next_piece", spy)
    q = await work_queue(names)
    got: list[tuple[bytes, bytes]] = []
    state = b""
    while True:
        async with READERS[kind]() as reader:
            if state:
                reader.restore_state(state)
            try:
                keys, values = await reader.read_up_to(q, 3)
            except ar.OutOfRangeError:
                break
            got += zip(keys, values, strict=True)
            state = reader.serialize_state()
    assert got == expected
    if request.getfixturevalue("read_verb") == "read_up_to":
        assert 16 <= min(p for p in pieces if p) < 997
    # read_batch frames whole blocks (short ones at the ends of files).
    assert max(pieces) <= 997


async def test_state_is_taken_mid_read_up_to_batches(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(3000)))
    q = await work_queue([str(path)])
    async with ar.TextLineReader() as reader:
        keys, _ = await reader.read_up_to(q, 1000)
        state = reader.serialize_state()
    async with ar.TextLineReader() as again:
        again.restore_state(state)
        keys2, values2 = await again.read_up_to(q, 5)
    assert keys[-1] == f"{path}:1000".encode()
    assert keys2[0] == f"{path}:1001".encode()
    assert values2[0] == b"1000"


@pytest.mark.parametrize(
    "state",
    [b"", b"garbage", b"ARRS\x01", b"ARRS" + b"\x00" * 40],
)
async def test_garbage_state_is_invalid_and_resets(state: bytes, tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\n")
    q = await work_queue([str(path)])
    async with ar.TextLineReader(name="t") as reader:
        await reader.read(q)
        with pytest.raises(
            ar.InvalidArgumentError, match="Could not parse state for TextLineReader 't'"
        ):
            reader.restore_state(state)
        assert reader.num_records_produced() == 0
        assert reader.statistics().current_work is None
        with pytest.raises(ar.OutOfRangeError):
            await reader.read(q)


async def test_state_of_another_kind_or_other_arguments_is_rejected(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\n")
    q = await work_queue([str(path)])
    async with ar.TextLineReader() as reader:
        await reader.read(q)
        state = reader.serialize_state()
    async with ar.TFRecordReader() as other:
        with pytest.raises(ar.InvalidArgumentError, match="written by a TextLineReader"):
            other.restore_state(state)
    async with ar.TextLineReader(skip_header_lines=1) as different:
        with pytest.raises(ar.InvalidArgumentError, match="other arguments"):
            different.restore_state(state)
    damaged = bytearray(state)
    damaged[-6] ^= 1
    async with ar.TextLineReader() as same:
        with pytest.raises(ar.InvalidArgumentError, match="checksum"):
            same.restore_state(bytes(damaged))


async def test_restored_work_item_that_vanished_is_abandoned(tmp_path: Path) -> None:
    path = tmp_path / "gone.txt"
    path.write_bytes(b"a\nb\nc\n")
    q = await work_queue([str(path)])
    async with ar.TextLineReader() as reader:
        await reader.read(q)
        state = reader.serialize_state()
    path.unlink()
    async with ar.TextLineReader() as again:
        again.restore_state(state)
        with pytest.raises(ar.NotFoundError, match=r"gone\.txt"):
            await again.read(q)
        assert again.statistics().current_work is None
        with pytest.raises(ar.OutOfRangeError):
            await again.read(q)


async def test_restore_over_an_open_file_closes_it(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\nc\n")
    before = open_fds()
    q = await work_queue([str(path)] * 3)
    async with ar.TextLineReader() as reader:
        await reader.read(q)
        state = reader.serialize_state()
        for _ in range(3):
            reader.restore_state(state)
            assert await reader.read(q) == (f"{path}:2".encode(), b"b")
        assert open_fds() == before + 1
    assert open_fds() == before
