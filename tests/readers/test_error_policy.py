"""on_error: skipping bad records and work items, dead letters, and error limits."""

from __future__ import annotations

import gzip
from typing import TYPE_CHECKING

import pytest
from queue_util import work_queue
from readers_util import (
    drain_values,
    frame_in_small_pieces,
    open_fds,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

PAYLOADS = [b"rec%03d" % i for i in range(200)]


def _offsets(payloads: list[bytes]) -> list[int]:
    out = [0]
    for p in payloads[:-1]:
        out.append(out[-1] + 16 + len(p))
    return out


OFFSETS = _offsets(PAYLOADS)


def _damaged(where: str, index: int) -> bytes:
    raw = bytearray(tfrecord_bytes(PAYLOADS))
    at = OFFSETS[index]
    if where == "payload":
        raw[at + 12] ^= 0xFF  # the payload's CRC no longer matches
    elif where == "header":
        raw[at] ^= 0x01  # the length's CRC no longer matches
    return bytes(raw)


@pytest.mark.both_backends
@pytest.mark.parametrize("compression", [None, "GZIP"])
@pytest.mark.parametrize("pieces", [False, True], ids=["blocks", "pieces"])
async def test_a_bad_payload_skips_that_record_alone(
    tmp_path: Path, compression: str | None, pieces: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if pieces:
        frame_in_small_pieces(monkeypatch)
    data = _damaged("payload", 120)
    path = tmp_path / "f.tfrecord"
    path.write_bytes(gzip.compress(data) if compression else data)
    good = tmp_path / "good.tfrecord"
    good.write_bytes(tfrecord_bytes([b"next"]))
    async with ar.TFRecordReader(compression, on_error="skip") as reader:
        got = await drain_values(reader, await work_queue([str(path)]), n=64)
        assert got == PAYLOADS[:120] + PAYLOADS[121:]
        (letter,) = reader.dead_letters
        assert letter.work_item == str(path).encode()
        assert letter.record == f"{path}:{OFFSETS[120]}".encode()
        assert not letter.rest_of_work_item
        assert isinstance(letter.error, ar.DataLossError)
        assert f"corrupted record at {OFFSETS[120] + 12}" in str(letter.error)
        assert reader.statistics().errors_skipped == 1
        assert reader.num_records_produced() == 199


async def test_read_keys_after_a_skipped_record_are_exact(tmp_path: Path) -> None:
    path = tmp_path / "f.tfrecord"
    path.write_bytes(_damaged("payload", 3))
    async with ar.TFRecordReader(on_error="skip") as reader:
        q = await work_queue([str(path)])
        got = [await reader.read(q) for _ in range(5)]
    assert got == [(f"{path}:{OFFSETS[i]}".encode(), PAYLOADS[i]) for i in (0, 1, 2, 4, 5)]


async def test_a_bad_length_skips_the_rest_of_the_file_and_reads_on(tmp_path: Path) -> None:
    path = tmp_path / "f.tfrecord"
    path.write_bytes(_damaged("header", 50))
    good = tmp_path / "good.tfrecord"
    good.write_bytes(tfrecord_bytes([b"next"]))
    async with ar.TFRecordReader(on_error="skip") as reader:
        got = await drain_values(reader, await work_queue([str(path), str(good)]), n=64)
        assert got == [*PAYLOADS[:50], b"next"]
        (letter,) = reader.dead_letters
        assert letter.rest_of_work_item
        assert letter.record == f"{path}:{OFFSETS[50]}".encode()
        assert reader.num_work_units_completed() == 2


async def test_missing_truncated_and_broken_files_are_skipped(tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.tfrecord"
    truncated.write_bytes(tfrecord_bytes(PAYLOADS[:3])[:-5])
    broken = tmp_path / "broken.tfrecord.gz"
    broken.write_bytes(gzip.compress(tfrecord_bytes(PAYLOADS[:3]))[:-12])
    good = tmp_path / "good.tfrecord"
    good.write_bytes(tfrecord_bytes([b"ok"]))
    before = open_fds()
    items = [str(tmp_path / "missing"), str(truncated), str(good)]
    async with ar.TFRecordReader(on_error="skip") as reader:
        got = await drain_values(reader, await work_queue(items), n=64)
        kinds = [(type(d.error), d.work_item, d.rest_of_work_item) for d in reader.dead_letters]
    assert got == [*PAYLOADS[:2], b"ok"]
    assert kinds == [
        (ar.NotFoundError, items[0].encode(), True),
        (ar.DataLossError, items[1].encode(), True),
    ]
    async with ar.TFRecordReader("GZIP", on_error="skip") as reader:
        got = await drain_values(reader, await work_queue([str(broken)]), n=64)
        assert [type(d.error) for d in reader.dead_letters] == [ar.DataLossError]
    assert got == PAYLOADS[: len(got)]
    assert open_fds() == before


async def test_the_default_still_raises_as_tensorflow_does(tmp_path: Path) -> None:
    path = tmp_path / "f.tfrecord"
    path.write_bytes(_damaged("payload", 10))
    async with ar.TFRecordReader() as reader:
        assert reader.on_error == ar.ErrorPolicy()
        q = await work_queue([str(path)])
        assert (await reader.read_up_to(q, 100))[1] == PAYLOADS[:10]
        for _ in range(2):
            with pytest.raises(ar.DataLossError):
                await reader.read_up_to(q, 100)
        assert reader.dead_letters == ()


async def test_max_errors_turns_too_many_skips_into_the_error(tmp_path: Path) -> None:
    items = [str(tmp_path / f"missing{i}") for i in range(3)]
    policy = ar.ErrorPolicy(skip=True, max_errors=2)
    async with ar.TextLineReader(on_error=policy) as reader:
        with pytest.raises(ar.NotFoundError, match="missing2") as info:
            await reader.read(await work_queue(items))
        assert "more than 2 bad records" in "".join(info.value.__notes__)
        assert len(reader.dead_letters) == 3


async def test_max_error_fraction_counts_good_records_too(tmp_path: Path) -> None:
    path = tmp_path / "f.tfrecord"
    raw = bytearray(tfrecord_bytes(PAYLOADS))
    for i in (100, 120, 140, 160):
        raw[OFFSETS[i] + 12] ^= 0xFF
    path.write_bytes(bytes(raw))
    lenient = ar.ErrorPolicy(skip=True, max_error_fraction=0.05, min_records=10)
    async with ar.TFRecordReader(on_error=lenient) as reader:
        assert len(await drain_values(reader, await work_queue([str(path)]), n=64)) == 196
    strict = ar.ErrorPolicy(skip=True, max_error_fraction=0.005, min_records=10)
    async with ar.TFRecordReader(on_error=strict) as reader:
        with pytest.raises(ar.DataLossError) as info:
            await drain_values(reader, await work_queue([str(path)]), n=1)
        assert "over 0.5%" in "".join(info.value.__notes__)


async def test_skipping_never_stalls_on_a_queue_of_bad_files(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(_damaged("header", 0))
    async with ar.TFRecordReader(on_error="skip") as reader:
        with pytest.raises(ar.OutOfRangeError):
            await reader.read(await work_queue([str(bad)] * 50))
        assert len(reader.dead_letters) == 50


class _Flaky(ar.ReaderBase):
    """Work item b"<n>,<bad>": n records, the one at index bad fails to read."""

    def on_work_started(self, work: bytes) -> None:
        n, bad = work.split(b",")
        self.i, self.n, self.bad = 0, int(n), int(bad)

    def read_one(self) -> tuple[bytes, bytes] | None:
        if self.i == self.n:
            return None
        if self.i == self.bad:
            raise ar.InvalidArgumentError("undecodable", record=self.i)
        self.i += 1
        return b"k", b"%d" % (self.i - 1)


async def test_a_hook_readers_error_skips_the_rest_of_its_work_item() -> None:
    async with _Flaky(on_error="skip") as reader:
        got = await drain_values(reader, await work_queue([b"5,2", b"3,9"]), n=10)
        assert got == [b"0", b"1", b"0", b"1", b"2"]
        (letter,) = reader.dead_letters
        assert (letter.record, letter.rest_of_work_item) == (b"5,2:2", True)


async def test_contract_errors_are_never_skipped() -> None:
    class Broken(ar.ReaderBase):
        def read_one(self) -> tuple[bytes, bytes] | None:
            return 42  # type: ignore[return-value]

    async with Broken(on_error="skip") as reader:
        with pytest.raises(ar.AsyncReaderError, match="must return"):
            await reader.read(await work_queue([b"x"]))


def test_policy_arguments_are_checked() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="max_errors"):
        ar.ErrorPolicy(skip=True, max_errors=-1)
    with pytest.raises(ar.InvalidArgumentError, match="max_error_fraction"):
        ar.ErrorPolicy(skip=True, max_error_fraction=1.5)
    with pytest.raises(ar.InvalidArgumentError, match="only apply with skip"):
        ar.ErrorPolicy(max_errors=3)
    with pytest.raises(ar.InvalidArgumentError, match="on_error must be"):
        ar.TFRecordReader(on_error="ignore")  # type: ignore[arg-type]
    assert ar.TFRecordReader(on_error="skip").on_error == ar.ErrorPolicy(skip=True)
