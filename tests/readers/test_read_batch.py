"""``read_batch``: the records of ``read_up_to`` as a RecordBatch, with the same keys,
counters, state, errors and cancellation behaviour, mixed freely with the other verbs.

(The rest of the reader tests also run with ``read_up_to`` served by ``read_batch``: see
``readers_util.read_verb``.)
"""

from __future__ import annotations

import functools
import gc
import gzip
import random
import sys
import zlib
from typing import TYPE_CHECKING, Any
from unittest import mock

import anyio
import anyio.from_thread
import anyio.lowlevel
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from queue_util import work_queue

import asyncreader as ar
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = pytest.mark.anyio

Record = tuple[bytes, bytes]


def _tfrecord(payloads: list[bytes], compression: str = "") -> bytes:
    data = b"".join(b"".join(frame_record(p)) for p in payloads)
    if compression == "ZLIB":
        return zlib.compress(data)
    if compression == "GZIP":
        return gzip.compress(data)
    return data


#: name -> (reader factory, file contents). Headers, footers, hops, CRLF, empty files,
#: compressed streams.
CASES: dict[str, tuple[Callable[[], ar.ReaderBase], list[bytes]]] = {
    "text": (
        lambda: ar.TextLineReader(skip_header_lines=2),
        [
            b"".join(b"line %d\r\n" % i for i in range(700)),
            b"",
            b"h\nx\n\ny\rz\r\nlast",
        ],
    ),
    "fixed": (
        lambda: ar.FixedLengthRecordReader(7, header_bytes=3, footer_bytes=2, hop_bytes=5),
        [bytes(range(256)) * 10, b"", bytes(range(100))],
    ),
    "fixed-zlib": (
        lambda: ar.FixedLengthRecordReader(7, 3, 2, 5, encoding="ZLIB"),
        [zlib.compress(bytes(range(256)) * 10), zlib.compress(bytes(range(40)))],
    ),
    "tfrecord": (
        ar.TFRecordReader,
        [_tfrecord([b"r%d" % i * (i % 7) for i in range(600)]), b"", _tfrecord([b"x"])],
    ),
    "tfrecord-zlib": (
        lambda: ar.TFRecordReader("ZLIB"),
        [_tfrecord([b"r%d" % i * (i % 5) for i in range(400)], "ZLIB"), _tfrecord([], "ZLIB")],
    ),
    "tfrecord-gzip": (
        lambda: ar.TFRecordReader("GZIP"),
        [_tfrecord([b"g%d" % i for i in range(300)], "GZIP")],
    ),
    "whole-file": (ar.WholeFileReader, [b"alpha", b"", b"gamma" * 100]),
}


def _files(case: str, tmp_path: Path) -> list[str]:
    names = []
    for i, data in enumerate(CASES[case][1]):
        path = tmp_path / f"{case}-{i}"
        path.write_bytes(data)
        names.append(str(path))
    return names


async def _read_all(reader: ar.ReaderBase, q: ar.FIFOQueue) -> list[Record]:
    out = []
    while True:
        try:
            out.append(await reader.read(q))
        except ar.OutOfRangeError:
            return out


async def _next_after_restore(
    make: Callable[[], ar.ReaderBase], state: bytes, names: list[str]
) -> Record | None:
    """The record a fresh reader restored from ``state`` reads next (``None``: none)."""
    async with make() as fresh:
        fresh.restore_state(state)
        q = await work_queue(names)
        # The restored reader has the work item in progress; the queue still holds the
        # items the original reader had not taken yet.
        for _ in range(state_taken(fresh)):
            await q.dequeue()
        try:
            return await fresh.read(q)
        except ar.OutOfRangeError:
            return None


def state_taken(reader: ar.ReaderBase) -> int:
    return reader.statistics().work_units_started


@pytest.mark.both_backends
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("n", [1, 3, 250, 5000])
async def test_read_batch_matches_read_up_to_step_by_step(
    tmp_path: Path, case: str, n: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 1009)  # many hops
    make = CASES[case][0]
    names = _files(case, tmp_path)
    with anyio.fail_after(20):
        async with make() as lists, make() as batches:
            expected = await _read_all(make(), await work_queue(names))
            q1, q2 = await work_queue(names), await work_queue(names)
            got: list[Record] = []
            while True:
                try:
                    keys, values = await lists.read_up_to(q1, n)
                except ar.OutOfRangeError:
                    with pytest.raises(ar.OutOfRangeError):
                        await batches.read_batch(q2, n)
                    break
                batch = await batches.read_batch(q2, n)
                assert isinstance(batch, ar.RecordBatch)
                assert batch.keys() == keys
                assert batch.tolist() == values
                assert list(batch) == values
                assert all(batch.work_item(i) == k.rsplit(b":", 1)[0] for i, k in enumerate(keys))
                assert batches.num_records_produced() == lists.num_records_produced()
                assert batches.num_work_units_completed() == lists.num_work_units_completed()
                got += zip(keys, values, strict=True)
                # Saved state resumes at the same next record (the bytes may differ: the
                # two modes frame runs of different sizes).
                if len(got) % 7 < 3 and not case.startswith("whole"):
                    state = batches.serialize_state()
                    following = expected[len(got)] if len(got) < len(expected) else None
                    assert await _next_after_restore(make, state, names) == following
    assert got == expected


@pytest.mark.both_backends
@pytest.mark.parametrize("case", ["text", "fixed", "tfrecord", "tfrecord-gzip", "whole-file"])
async def test_verbs_mixed_at_random_give_every_record_once_and_exact_state(
    tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 1009)
    make = CASES[case][0]
    names = _files(case, tmp_path)
    rng = random.Random(case)
    with anyio.fail_after(20):
        expected = await _read_all(make(), await work_queue(names))
        q = await work_queue(names)
        got: list[Record] = []
        async with make() as reader:
            while True:
                verb = rng.choice(["read", "read_up_to", "read_batch"])
                n = rng.choice([1, 2, 5, 40, 300])
                try:
                    if verb == "read":
                        got.append(await reader.read(q))
                    elif verb == "read_up_to":
                        keys, values = await reader.read_up_to(q, n)
                        got += zip(keys, values, strict=True)
                    else:
                        batch = await reader.read_batch(q, n)
                        got += zip(batch.keys(), batch.tolist(), strict=True)
                except ar.OutOfRangeError:
                    break
                assert reader.num_records_produced() == len(got)
                assert got == expected[: len(got)]
                if not case.startswith("whole") and rng.random() < 0.3:
                    state = reader.serialize_state()
                    following = expected[len(got)] if len(got) < len(expected) else None
                    assert await _next_after_restore(make, state, names) == following
    assert got == expected


async def test_read_batch_after_a_partly_delivered_list_run_saves_exact_state(
    tmp_path: Path,
) -> None:
    # read_up_to leaves a list run part-delivered; read_batch turns the rest into a batch,
    # dropping the delivered head: saved state must move past it.
    path = tmp_path / "lines.txt"
    path.write_bytes(b"".join(b"%d\n" % i for i in range(100)))
    q = await work_queue([str(path)])
    with anyio.fail_after(10):
        async with ar.TextLineReader() as reader:
            assert (await reader.read_up_to(q, 10))[1][-1] == b"9"
            batch = await reader.read_batch(q, 5)
            assert batch.tolist() == [b"10", b"11", b"12", b"13", b"14"]
            state = reader.serialize_state()
            assert reader.statistics().buffered == 85
        async with ar.TextLineReader() as fresh:
            fresh.restore_state(state)
            assert await fresh.read(await work_queue([])) == (f"{path}:16".encode(), b"15")


async def test_read_batch_arguments_and_closed_reader(tmp_path: Path) -> None:
    path = tmp_path / "a.txt"
    path.write_bytes(b"a\nb\n")
    reader = ar.TextLineReader()
    q = await work_queue([str(path)])
    with pytest.raises(ar.InvalidArgumentError, match="max_records must be >= 0, not -1"):
        await reader.read_batch(q, -1)
    empty = await reader.read_batch(q, 0)
    assert len(empty) == 0
    assert empty.keys() == []
    assert reader.num_records_produced() == 0
    batch = await reader.read_batch(q, 10)
    assert batch.tolist() == [b"a", b"b"]
    assert (
        repr(batch) == f"<RecordBatch 2 records, 1 bytes each, 2 bytes from {str(path).encode()!r}>"
    )
    with pytest.raises(ar.OutOfRangeError):
        await reader.read_batch(q, 10)
    await reader.aclose()
    with pytest.raises(ar.FailedPreconditionError, match="is closed"):
        await reader.read_batch(q, 1)
    with pytest.raises(ar.FailedPreconditionError, match="is closed"):
        await reader.read_batch(q, 0)


@pytest.mark.both_backends
async def test_corrupt_record_deferred_then_raised_naming_file_and_offset(tmp_path: Path) -> None:
    good = _tfrecord([b"a" * 10, b"b" * 10])
    bad = bytearray(_tfrecord([b"c" * 10]))
    bad[-1] ^= 0xFF  # the payload's CRC
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(good + bytes(bad))
    q = await work_queue([str(path)])
    with anyio.fail_after(10):
        async with ar.TFRecordReader() as reader:
            batch = await reader.read_batch(q, 10)
            assert batch.tolist() == [b"a" * 10, b"b" * 10]
            with pytest.raises(ar.DataLossError) as info:
                await reader.read_batch(q, 10)
            assert str(path) in str(info.value)
            assert str(len(good)) in str(info.value)
            assert reader.num_records_produced() == 2
            # The work item stays in progress: the error repeats.
            with pytest.raises(ar.DataLossError):
                await reader.read_batch(q, 10)


async def test_skip_policy_with_dead_letters_under_read_batch(tmp_path: Path) -> None:
    payloads = [b"p%d" % i for i in range(6)]
    data = bytearray(_tfrecord(payloads))
    data[len(_tfrecord(payloads[:3])) + 12] ^= 0xFF  # corrupt record 3's payload
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))
    missing = str(tmp_path / "missing")
    q = await work_queue([missing, str(path)])
    got: list[bytes] = []
    with anyio.fail_after(10):
        async with ar.TFRecordReader(on_error="skip") as reader:
            while True:
                try:
                    got += (await reader.read_batch(q, 100)).tolist()
                except ar.OutOfRangeError:
                    break
            dead = reader.dead_letters
    assert got == payloads[:3] + payloads[4:]
    assert [d.work_item for d in dead] == [missing.encode(), str(path).encode()]
    assert isinstance(dead[1].error, ar.DataLossError)
    assert dead[1].rest_of_work_item is False


async def _call(
    reader: ar.ReaderBase,
    q: ar.FIFOQueue,
    n: int,
    scope: anyio.CancelScope,
    result: list[ar.RecordBatch],
    ended: list[bool],
) -> None:
    with scope:
        try:
            result.append(await reader.read_batch(q, n))
        except ar.OutOfRangeError:
            ended.append(True)


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", range(6))
async def test_read_batch_cancelled_at_random_points_loses_and_duplicates_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # Small blocks: a read_batch spans many refills (thread hops), each a point where a
    # cancellation can land; records it had taken must go back to the buffer.
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 64)
    payloads = [b"r%03d" % i for i in range(300)]
    path = tmp_path / "f.tfrecord"
    path.write_bytes(_tfrecord(payloads))
    rng = random.Random(seed)
    q = await work_queue([str(path), str(path)])
    got: list[bytes] = []
    cancelled = 0
    with anyio.fail_after(30):
        async with ar.TFRecordReader() as reader:
            while True:
                n = rng.choice([1, 7, 50, 200])
                ticks = rng.randrange(12)
                result: list[ar.RecordBatch] = []
                ended: list[bool] = []
                async with anyio.create_task_group() as tg:
                    scope = anyio.CancelScope()
                    tg.start_soon(_call, reader, q, n, scope, result, ended)
                    for _ in range(ticks):
                        if result or ended:
                            break
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()
                done = bool(ended)
                if done:
                    break
                if result:
                    got += result[0].tolist()
                else:
                    cancelled += 1
                assert reader.num_records_produced() == len(got)
                if rng.random() < 0.2:
                    # Saved state resumes right after what was delivered.
                    state = reader.serialize_state()
                    async with ar.TFRecordReader() as fresh:
                        fresh.restore_state(state)
                        if len(got) % 300:
                            following = await fresh.read(await work_queue([]))
                            assert following[1] == payloads[len(got) % 300]
    assert got == payloads + payloads
    assert cancelled  # the test did cancel calls part-way


async def test_held_views_stay_valid_across_many_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("asyncreader._readers.framed.READ_BLOCK", 3073 * 7 + 100)
    rng = np.random.default_rng(3)
    data = rng.integers(0, 256, 3073 * 200, dtype=np.uint8).tobytes()
    path = tmp_path / "cifar.bin"
    path.write_bytes(data)
    tf_path = tmp_path / "r.tfrecord"
    payloads = [bytes([i % 256]) * (50 + i) for i in range(200)]
    tf_path.write_bytes(_tfrecord(payloads))
    views: list[np.ndarray] = []
    batches: list[ar.RecordBatch] = []
    with anyio.fail_after(20):
        async with ar.FixedLengthRecordReader(3073) as reader:
            q = await work_queue([str(path)] * 3)
            while True:
                try:
                    views.append((await reader.read_batch(q, 3)).to_numpy())
                except ar.OutOfRangeError:
                    break
        async with ar.TFRecordReader() as tf_reader:
            q = await work_queue([str(tf_path)] * 3)
            while True:
                try:
                    batches.append(await tf_reader.read_batch(q, 7))
                except ar.OutOfRangeError:
                    break
    gc.collect()
    expected = np.frombuffer(data, np.uint8).reshape(200, 3073)
    assert np.array_equal(np.concatenate(views), np.concatenate([expected] * 3))
    assert any(v.base is not None for v in views)  # views, not copies
    assert [r for b in batches for r in b.tolist()] == payloads * 3


async def test_read_batch_allocates_no_object_per_record(tmp_path: Path) -> None:
    path = tmp_path / "small.bin"
    path.write_bytes(bytes(range(256)) * 16 * 40)  # 40,960 four-byte records, one block
    growth: dict[tuple[str, int], int] = {}
    for verb in ("read_batch", "read_up_to"):
        for n in (10_000, 30_000):
            async with ar.FixedLengthRecordReader(4) as reader:
                q = await work_queue([str(path)])
                gc.collect()
                before = sys.getallocatedblocks()
                # The call reads the block; the records it does not return wait in the
                # reader's buffer.
                got = await getattr(reader, verb)(q, n)
                growth[verb, n] = sys.getallocatedblocks() - before
                assert len(got) == (n if verb == "read_batch" else 2)
                del got
    # A handful of arrays and objects per call, whatever the count...
    assert growth["read_batch", 10_000] < 300, growth
    assert growth["read_batch", 30_000] < 300, growth
    # ... where lists hold two objects per record (the measure sees them).
    assert growth["read_up_to", 10_000] > 40_960, growth


class _ManyBatches(ar.ReaderBase):
    """A custom reader whose read_many returns RecordBatches (or a shape of choice)."""

    def __init__(self, shape: str = "batch") -> None:
        super().__init__()
        self.shape = shape
        self.i = 0

    def on_work_started(self, work: bytes) -> None:
        self.i = 0
        self.work = work

    def read_many(self, n: int) -> Any:
        count = min(n, 10 - self.i)
        keys = [b"%s:%d" % (self.work, self.i + j) for j in range(count)]
        values = [b"v%d" % (self.i + j) for j in range(count)]
        self.i += count
        at_end = self.i >= 10
        if self.shape == "lists":
            return keys, values, at_end
        if self.shape == "too-many":
            return ar.RecordBatch.from_records(keys + keys, values + values), at_end
        if self.shape == "empty":
            return ar.RecordBatch.from_records([], []), False
        return ar.RecordBatch.from_records(keys, values, work=self.work), at_end


@pytest.mark.both_backends
@pytest.mark.parametrize("n", [1, 3, 10, 25])
async def test_custom_read_many_may_return_a_record_batch(n: int) -> None:
    with anyio.fail_after(10):
        expected = []
        async with _ManyBatches("lists") as lists:
            q = await work_queue(["a", "b"])
            while True:
                try:
                    keys, values = await lists.read_up_to(q, n)
                except ar.OutOfRangeError:
                    break
                expected.append((keys, values))
        for verb in ("read_up_to", "read_batch"):
            async with _ManyBatches() as reader:
                q = await work_queue(["a", "b"])
                got = []
                while True:
                    try:
                        if verb == "read_up_to":
                            got.append(await reader.read_up_to(q, n))
                        else:
                            batch = await reader.read_batch(q, n)
                            got.append((batch.keys(), batch.tolist()))
                    except ar.OutOfRangeError:
                        break
                assert got == expected
                assert reader.num_records_produced() == 20


@pytest.mark.parametrize("shape", ["too-many", "empty"])
async def test_custom_read_many_batch_breaking_the_contract_is_an_error(shape: str) -> None:
    async with _ManyBatches(shape) as reader:
        q = await work_queue(["a"])
        with pytest.raises(ar.AsyncReaderError, match=r"\(RecordBatch, at_end\)"):
            await reader.read_batch(q, 4)


@pytest.mark.both_backends
async def test_hook_readers_read_batch_names_the_work_item(tmp_path: Path) -> None:
    paths = [tmp_path / "a", tmp_path / "b"]
    for p in paths:
        p.write_bytes(p.name.encode() * 3)
    async with ar.WholeFileReader() as reader:
        q = await work_queue([str(p) for p in paths])
        batch = await reader.read_batch(q, 5)
        assert batch.keys() == [str(paths[0]).encode()]
        assert batch.tolist() == [b"aaa"]
        assert batch.work_item(0) == str(paths[0]).encode()
        assert batch.describe(0) == f"record {str(paths[0]).encode()!r}"
    async with ar.IdentityReader() as identity:
        q = await work_queue(["x", "y"])
        batch = await identity.read_batch(q, 5)
        assert (batch.keys(), batch.tolist()) == ([b"x"], [b"x"])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    lines=st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=80),
    crlf=st.booleans(),
    block=st.integers(min_value=1, max_value=300),
    sizes=st.lists(st.integers(min_value=1, max_value=50), min_size=1, max_size=10),
    kind=st.sampled_from(["text", "tfrecord", "tfrecord-zlib", "fixed", "fixed-gzip"]),
)
def test_property_read_batch_equals_read_up_to(
    tmp_path: Path,
    lines: list[bytes],
    crlf: bool,
    block: int,
    sizes: list[int],
    kind: str,
) -> None:
    path = tmp_path / "f"
    if kind == "text":
        path.write_bytes((b"\r\n" if crlf else b"\n").join(lines))
        make: Callable[[], ar.ReaderBase] = ar.TextLineReader
    elif kind.startswith("fixed"):
        data = b"".join(lines)
        path.write_bytes(gzip.compress(data) if kind.endswith("gzip") else data)
        encoding = "GZIP" if kind.endswith("gzip") else ""
        make = functools.partial(
            ar.FixedLengthRecordReader, 3, header_bytes=2, footer_bytes=1, encoding=encoding
        )
    else:
        path.write_bytes(_tfrecord(lines, "ZLIB" if kind.endswith("zlib") else ""))
        make = (lambda: ar.TFRecordReader("ZLIB")) if kind.endswith("zlib") else ar.TFRecordReader

    async def drain(verb: str) -> list[tuple[list[bytes], list[bytes]]]:
        out = []
        async with make() as reader:
            q = await work_queue([str(path), str(path)])
            for i in range(10_000):
                n = sizes[i % len(sizes)]
                try:
                    if verb == "read_up_to":
                        out.append(await reader.read_up_to(q, n))
                    else:
                        batch = await reader.read_batch(q, n)
                        out.append((batch.keys(), batch.tolist()))
                except ar.OutOfRangeError:
                    return out
        raise AssertionError("did not end")

    with mock.patch("asyncreader._readers.framed.READ_BLOCK", block):
        assert anyio.run(drain, "read_batch") == anyio.run(drain, "read_up_to")


@pytest.mark.both_backends
@pytest.mark.parametrize("case", ["tfrecord", "tfrecord-gzip", "fixed", "text", "whole-file"])
async def test_session_checkpoint_mid_file_resumes_read_batch_exactly(
    tmp_path: Path, case: str
) -> None:
    make = CASES[case][0]
    names = _files(case, tmp_path)
    with anyio.fail_after(20):
        expected = [v for _, v in await _read_all(make(), await work_queue(names))]
        got: list[bytes] = []
        # Signed: the work items come from a plain queue, not a producer.
        async with ar.Session(checkpoint_key=b"key") as sess:
            q = ar.FIFOQueue(None)
            await q.enqueue_many(names)
            await q.close()
            reader = make()
            got += (await reader.read_batch(q, 5)).tolist()
            got += (await reader.read_batch(q, 3)).tolist()
            state = await sess.checkpoint()
            assert reader.statistics().buffered > 0 or case == "whole-file"
        async with ar.Session(restore=state, checkpoint_key=b"key"):
            q = ar.FIFOQueue(None)
            reader = make()
            while True:
                try:
                    got += (await reader.read_batch(q, 50)).tolist()
                except ar.OutOfRangeError:
                    break
    assert got == expected


class _OneByOne(ar.ReaderBase):
    """A custom reader with only read_one: 3,000 records per work item."""

    def on_work_started(self, work: bytes) -> None:
        self.i = 0
        self.work = work

    def read_one(self) -> tuple[bytes, bytes] | None:
        self.i += 1
        if self.i > 3000:
            return None
        return b"%s:%d" % (self.work, self.i), b"v%d" % self.i


async def test_records_of_read_one_are_joined_once_per_read_batch() -> None:
    async with _OneByOne() as reader:
        q = await work_queue(["a", "b"])
        batch = await reader.read_batch(q, 2000)
        assert batch.tolist() == [b"v%d" % i for i in range(1, 2001)]
        assert batch.keys()[-1] == b"a:2000"
        assert batch.work_item(0) == b"a"
        # One buffer for the call, not one per hook call.
        assert len(batch._segments) == 1
        rest = await reader.read_batch(q, 2000)
        assert len(rest) == 1000
        assert (await reader.read_batch(q, 1)).keys() == [b"b:1"]
