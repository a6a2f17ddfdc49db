"""Reading records again from their keys: how a restore refills queues saved with
``record_refs``. ``_reread`` is sans-event-loop (it runs on a worker thread), so most of
these call it directly; ``reread`` adds grouping by file, duplicates and checksums."""

from __future__ import annotations

import gzip
import random
import re
import zlib
from typing import TYPE_CHECKING

import numpy as np
import pytest
from queue_util import work_queue
from readers_util import (
    drain,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)

import asyncreader as ar
from asyncreader._readers.reread import checksums, reread

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

_RNG = random.Random(5)
#: Mostly small records, a few larger than the 64 KiB pieces a re-read reads at a time.
PAYLOADS = [
    bytes(_RNG.getrandbits(8) for _ in range(150_000 if i % 97 == 5 else _RNG.randrange(300)))
    for i in range(600)
]
LINES = [b"header", *(b"line %d %s" % (i, b"x" * (i % 50)) for i in range(3000))]
TEXT = b"\r\n".join(LINES)  # CRLF, no final newline
FIXED = b"HEAD" + b"".join(i.to_bytes(4, "little") * 3 + b"--" for i in range(5000)) + b"FOOT"


def _fixed(encoding: str | None = None) -> ar.FixedLengthRecordReader:
    return ar.FixedLengthRecordReader(
        12, header_bytes=4, footer_bytes=4, hop_bytes=14, encoding=encoding
    )


# (name, reader factory, file contents)
CASES: list[tuple[str, Callable[[], ar.ReaderBase], bytes]] = [
    ("tfrecord", ar.TFRecordReader, tfrecord_bytes(PAYLOADS)),
    ("tfrecord-zlib", lambda: ar.TFRecordReader("ZLIB"), zlib.compress(tfrecord_bytes(PAYLOADS))),
    ("tfrecord-gzip", lambda: ar.TFRecordReader("GZIP"), gzip.compress(tfrecord_bytes(PAYLOADS))),
    ("text", lambda: ar.TextLineReader(skip_header_lines=1), TEXT),
    ("fixed", _fixed, FIXED),
    ("fixed-gzip", lambda: _fixed("GZIP"), gzip.compress(FIXED)),
    ("whole-file", ar.WholeFileReader, TEXT),
]


async def _records(reader: ar.ReaderBase, paths: list[str]) -> list[tuple[bytes, bytes]]:
    return await drain(reader, await work_queue(paths))


@pytest.mark.parametrize(("name", "make", "data"), CASES, ids=[c[0] for c in CASES])
async def test_reread_returns_the_records_the_reader_read(
    tmp_path: Path, name: str, make: Callable[[], ar.ReaderBase], data: bytes
) -> None:
    path = tmp_path / f"{name}.data"
    path.write_bytes(data)
    reader = make()
    records = await _records(reader, [str(path)])
    by_record = {}
    for key, value in records:
        work, record = reader._split_key(key)
        assert work == str(path).encode()
        assert reader._record_keys(work, [record]) == [key]
        by_record[record] = value
    every = sorted(by_record)
    rng = random.Random(name)
    subsets = [
        every,  # read on from one record to the next
        every[:1] + every[-1:],  # a seek over (nearly) the whole file
        rng.sample(every, min(len(every), 40)),  # gaps of all sizes
        [every[i] for i in range(0, len(every), 150)],
    ]
    for subset in subsets:
        wanted = sorted(set(subset))
        got = reader._reread(str(path).encode(), wanted)
        assert got == [by_record[r] for r in wanted]
    # The reader's own position is untouched: it reads the file again from the start.
    assert await _records(reader, [str(path)]) == records


async def test_reread_groups_by_file_keeps_duplicates_and_order(tmp_path: Path) -> None:
    paths = []
    for f in range(3):
        paths.append(str(tmp_path / f"part-{f}.tfrecord"))
        with ar.TFRecordWriter(paths[-1]) as w:
            for i in range(50):
                w.write(b"%d-%d" % (f, i) * (i + 1))
    reader = ar.TFRecordReader()
    records = await _records(reader, paths)
    rng = random.Random(1)
    picked = [rng.choice(records) for _ in range(120)]  # duplicates, files interleaved
    works = [p.encode() for p in paths]
    split = [reader._split_key(k) for k, _ in picked]
    keys, values = await reread(
        reader,
        works,
        np.array([works.index(w) for w, _ in split], dtype=np.uint32),
        np.array([r for _, r in split], dtype=np.int64),
        checksums([v for _, v in picked]),
    )
    assert list(zip(keys, values, strict=True)) == picked


async def test_identity_reader_rereads_without_io() -> None:
    reader = ar.IdentityReader()
    works = [b"a:1", b"no such file"]
    keys, values = await reread(
        reader,
        works,
        np.array([1, 0, 1], dtype=np.uint32),
        np.zeros(3, dtype=np.int64),
        checksums([b"no such file", b"a:1", b"no such file"]),
    )
    assert keys == values == [b"no such file", b"a:1", b"no such file"]


async def test_a_changed_record_fails_with_the_file_and_record(tmp_path: Path) -> None:
    path = tmp_path / "data.tfrecord"
    path.write_bytes(tfrecord_bytes([b"alpha", b"bravo", b"charlie"]))
    reader = ar.TFRecordReader()
    records = await _records(reader, [str(path)])
    saved = checksums([v for _, v in records])
    # Same sizes, other bytes: only the checksums can tell.
    path.write_bytes(tfrecord_bytes([b"alpha", b"BRAVO", b"charlie"]))
    offsets = np.array([reader._split_key(k)[1] for k, _ in records], dtype=np.int64)
    with pytest.raises(ar.DataLossError, match="differs from the one the checkpoint saved") as info:
        await reread(reader, [str(path).encode()], np.zeros(3, dtype=np.uint32), offsets, saved)
    assert info.value.work_item == str(path).encode()
    assert info.value.record == offsets[1]


@pytest.mark.parametrize(
    ("make", "data", "wanted", "message"),
    [
        # An offset inside a record: no record starts there.
        (
            ar.TFRecordReader,
            tfrecord_bytes([b"a" * 100, b"b" * 100]),
            [1],
            "corrupted record|no record",
        ),
        (ar.TFRecordReader, tfrecord_bytes([b"a" * 100]), [116], "not found"),
        (lambda: ar.TextLineReader(), b"one\ntwo\n", [1, 3], "not found"),
        (
            lambda: ar.TFRecordReader("GZIP"),
            gzip.compress(tfrecord_bytes([bytes(range(256)) * 4]))[:300],
            [0],
            "truncated compressed stream",
        ),
    ],
    ids=["inside-a-record", "past-the-end", "line-past-the-end", "truncated-gzip"],
)
async def test_records_not_in_the_file_raise_data_loss(
    tmp_path: Path, make: Callable[[], ar.ReaderBase], data: bytes, wanted: list[int], message: str
) -> None:
    path = tmp_path / "f"
    path.write_bytes(data)
    with pytest.raises(ar.DataLossError, match=message) as info:
        make()._reread(str(path).encode(), wanted)
    assert info.value.work_item == str(path).encode()


async def test_a_key_between_records_raises_data_loss_naming_it(tmp_path: Path) -> None:
    # Record 0 is framed first, and offset 50 lies inside it: framing reads on through
    # the short gap instead of seeking, and finds no record starting there.
    path = tmp_path / "f.tfrecord"
    path.write_bytes(tfrecord_bytes([b"a" * 100, b"b" * 100, b"c" * 100]))
    reader = ar.TFRecordReader()
    assert reader._reread(str(path).encode(), [0, 232]) == [b"a" * 100, b"c" * 100]
    with pytest.raises(ar.DataLossError, match="no record starts here") as info:
        reader._reread(str(path).encode(), [0, 50, 232])
    assert (info.value.work_item, info.value.record) == (str(path).encode(), 50)


async def test_lines_far_apart_are_picked_from_one_framing_pass(tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"line %d\n" % i for i in range(200_000)))
    wanted = [1, 2, 8, 65_535, 65_536, 150_001, 200_000]  # line numbers count from 1
    assert ar.TextLineReader()._reread(str(path).encode(), wanted) == [
        b"line %d" % (i - 1) for i in wanted
    ]


async def test_a_corrupt_record_raises_data_loss_naming_it(tmp_path: Path) -> None:
    data = bytearray(tfrecord_bytes([b"a" * 100, b"b" * 100]))
    data[116 + 12 + 5] ^= 1  # a payload byte of the second record
    path = tmp_path / "f.tfrecord"
    path.write_bytes(bytes(data))
    reader = ar.TFRecordReader()
    assert reader._reread(str(path).encode(), [0]) == [b"a" * 100]
    with pytest.raises(ar.DataLossError) as info:
        reader._reread(str(path).encode(), [116])
    assert info.value.record == 116


async def test_a_missing_file_raises_not_found(tmp_path: Path) -> None:
    with pytest.raises(ar.NotFoundError, match="gone"):
        ar.TFRecordReader()._reread(str(tmp_path / "gone").encode(), [0])


def test_keys_are_split_at_the_last_colon_and_checked() -> None:
    reader = ar.TFRecordReader()
    assert reader._split_key(b"http://host:8080/f.tfrecord:12") == (
        b"http://host:8080/f.tfrecord",
        12,
    )
    assert reader._split_key(b"f:0") == (b"f", 0)
    for bad in (b"f", b"f:", b"f:01", b"f:-1", b"f:1x", b"f: 1"):
        with pytest.raises(ar.InvalidArgumentError, match="not a record key of a TFRecordReader"):
            reader._split_key(bad)
    assert ar.WholeFileReader()._split_key(b"a:b") == (b"a:b", 0)


def test_keys_are_split_in_bulk_as_one_by_one() -> None:
    reader = ar.TFRecordReader()
    keys = [b"b:16", b"http://h:80/a:0", b"b:0", b"x:y:7", b"http://h:80/a:1200000000000"]
    works, index, records = reader._split_keys(keys)
    assert works == [b"b", b"http://h:80/a", b"x:y"]
    assert [(works[i], r) for i, r in zip(index, records, strict=True)] == [
        reader._split_key(k) for k in keys
    ]
    assert reader._split_keys([]) == ([], [], [])
    # A key with no colon whose digits would pass as a record key is refused too.
    for bad in (b"12", b"f:", b"f:01", b"f:-1", b"f:1\n", b"f:\n1", b"f:1_0"):
        with pytest.raises(ar.InvalidArgumentError, match=re.escape(repr(bad))):
            reader._split_keys([b"good:1", bad, b"good:2"])
    whole = ar.WholeFileReader()
    assert whole._split_keys([b"a:1", b"b", b"a:1"]) == ([b"a:1", b"b"], [0, 1, 0], [0, 0, 0])
