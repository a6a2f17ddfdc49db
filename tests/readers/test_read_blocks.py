"""``read_batch``'s blocks: warm pooled blocks, read ahead, several per hop.

A ``RecordBatch`` is made of views into the blocks its file was read into. Those blocks
come from a pool and are read into again only once nothing refers to them, so views held
across any number of later reads keep their bytes, dropped batches give their blocks
back, and no one can write through a batch into a block another batch shares. A local
file's next blocks are read ahead on helper threads; a hop frames as many blocks as the
call wants records; errors still come at the record they belong to.
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Literal

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._io import blocks
from asyncreader._io.blocks import BlockPool, BlockReader, block_pool
from asyncreader._io.filesystem import READ_BLOCK, open_work_item
from asyncreader._readers import framed
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from pathlib import Path

RECORD = 50_000  # bytes per TFRecord payload: 84 records per read block


def _payload(i: int) -> bytes:
    return i.to_bytes(8, "little") * (RECORD // 8)


def _tfrecord(path: Path, count: int) -> Path:
    path.write_bytes(b"".join(b"".join(frame_record(_payload(i))) for i in range(count)))
    return path


def _fixed(path: Path, count: int, size: int = 3073) -> Path:
    path.write_bytes(
        b"".join(i.to_bytes(8, "little") * (size // 8) + b"\0" * (size % 8) for i in range(count))
    )
    return path


async def _queue_of(*paths: Path) -> ar.FIFOQueue:
    q = ar.FIFOQueue(None)
    for path in paths:
        await q.enqueue(str(path))
    await q.close()
    return q


def _ids(batch: ar.RecordBatch) -> list[int]:
    return [int.from_bytes(record[:8], "little") for record in batch]


# -- buffers stay valid; dropped ones come back -----------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_views_held_across_many_reads_keep_their_bytes(tmp_path: Path) -> None:
    """Views of early batches, held while the rest of a 30 MB file is read (and the pool
    reuses every block nothing holds), still show the records they were given."""
    path = _tfrecord(tmp_path / "a.tfrecord", 600)
    fixed = _fixed(tmp_path / "b.bin", 6000)
    held: list[tuple[object, list[int]]] = []
    async with ar.TFRecordReader() as reader:
        q = await _queue_of(path)
        with anyio.fail_after(30):
            first = True
            while True:
                try:
                    batch = await reader.read_batch(q, 37)
                except ar.OutOfRangeError:
                    break
                if first or len(held) < 12:
                    # A slice (a batch of views), a record's memoryview through numpy.
                    held.append((batch[3:5], _ids(batch)[3:5]))
                    first = False
    async with ar.FixedLengthRecordReader(3073) as reader:
        q = await _queue_of(fixed)
        kept: list[tuple[np.ndarray, list[int]]] = []
        with anyio.fail_after(30):
            while True:
                try:
                    batch = await reader.read_batch(q, 500)
                except ar.OutOfRangeError:
                    break
                if len(kept) < 6:
                    kept.append((batch.to_numpy(), _ids(batch)))
    for view, ids in held:
        assert isinstance(view, ar.RecordBatch)
        assert [bytes(r) for r in view] == [_payload(i) for i in ids]
    # Most are views of their block (one that spans two blocks is gathered once).
    assert sum(array.base is not None for array, _ in kept) >= 3
    for array, ids in kept:
        assert [int.from_bytes(row[:8].tobytes(), "little") for row in array] == ids
        assert all(row[8:16].tobytes() == row[:8].tobytes() for row in array)


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_streaming_reuses_blocks_once_batches_are_dropped(tmp_path: Path) -> None:
    path = _tfrecord(tmp_path / "a.tfrecord", 800)  # 40 MB: ten read blocks
    pool = block_pool()
    pool.trim()
    before = pool.pooled
    seen: list[int] = []
    async with ar.TFRecordReader() as reader:
        q = await _queue_of(path)
        with anyio.fail_after(30):
            while True:
                try:
                    batch = await reader.read_batch(q, 20)
                except ar.OutOfRangeError:
                    break
                seen += _ids(batch)
                del batch
        # The batch in hand, the block being framed and the blocks read ahead: not one
        # block per block of the file.
        assert pool.pooled - before <= 2 + blocks.READ_AHEAD + 2
    assert seen == list(range(800))
    # Closing the reader lets the blocks nothing holds go (the pool is the process's: a
    # read an earlier test abandoned may still hold a block for a moment).
    with anyio.move_on_after(5):
        while pool.pooled != before:  # noqa: ASYNC110 - a counter, not an event
            await anyio.sleep(0.05)
    assert pool.pooled == before


@pytest.mark.anyio
async def test_arrays_of_a_batch_cannot_be_made_writable(tmp_path: Path) -> None:
    """Blocks are shared and reused: writing through one batch would change another's."""
    path = _fixed(tmp_path / "a.bin", 100)
    async with ar.FixedLengthRecordReader(3073) as reader:
        batch = await reader.read_batch(await _queue_of(path), 50)
        for array in (batch.to_numpy(), batch.data, np.frombuffer(batch[0:3].data, np.uint8)):
            assert not array.flags.writeable
            with pytest.raises(ValueError, match="WRITEABLE"):
                array.flags.writeable = True


# -- the pool and the block reader on their own ------------------------------------------


def test_the_pool_lends_a_block_only_once_nothing_holds_it() -> None:
    pool = BlockPool(1024, 4 * 1024)
    a = pool.acquire()
    b = pool.acquire()
    assert a is not b
    address = a.ctypes.data
    view = a[10:20]  # derived: keeps a lent
    del a
    c = pool.acquire()
    assert c is not b
    assert c.ctypes.data != address
    del view
    d = pool.acquire()  # the first block is free again
    assert d is not b
    assert d is not c
    assert pool.pooled == 3
    # Past its budget the pool hands out plain blocks it does not keep.
    extra = [pool.acquire() for _ in range(3)]
    assert pool.pooled == 4
    del extra, b, c, d
    assert pool.trim() == 4
    assert pool.pooled == 0


def test_the_pool_never_lends_one_block_to_two_threads() -> None:
    pool = BlockPool(64, 64 * 8)
    errors: list[str] = []

    def work(tag: int) -> None:
        for _ in range(2000):
            block = pool.acquire()
            block[:] = tag
            if int(block.min()) != tag or int(block.max()) != tag:
                errors.append(f"block shared while thread {tag} held it")
            del block

    threads = [threading.Thread(target=work, args=(t,)) for t in range(1, 7)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors


def test_the_block_reader_reads_the_file_in_order(tmp_path: Path) -> None:
    data = os.urandom(3 * 1000 + 123)
    (tmp_path / "f").write_bytes(data)
    f = open_work_item(str(tmp_path / "f"))
    try:
        f.seek(7)
        reader = BlockReader(f, 1000, ahead=2)  # type: ignore[arg-type]
        got = []
        while view := reader.next():
            got.append(bytes(view))
            assert view.readonly
        reader.close()
        assert b"".join(got) == data[7:]
        assert [len(g) for g in got] == [1000, 1000, 1000, 116]
        # The file's position follows the blocks handed out: plain reads go on there.
        assert f.read(10) == b""
    finally:
        f.close()


def test_a_read_ahead_error_comes_with_its_block(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(bytes(5000))
    f = open_work_item(str(tmp_path / "f"))

    class Failing:
        position = 0
        size = 5000

        def pread_into(self, buf: memoryview, offset: int) -> int:
            if offset == 2000:
                raise ar.DataLossError("bad sector", work_item=b"f", offset=offset)
            return f.pread_into(buf, offset)  # type: ignore[attr-defined, no-any-return]

        def check_extent(self, end: int) -> None:
            pass

        def seek(self, offset: int) -> None:
            self.position = offset

    try:
        reader = BlockReader(Failing(), 1000, ahead=3)
        assert len(reader.next()) == 1000
        assert len(reader.next()) == 1000
        with pytest.raises(ar.DataLossError, match="bad sector") as info:
            reader.next()
        assert info.value.offset == 2000
        reader.close()
    finally:
        f.close()


def test_bytes_read_ahead_of_a_cut_are_data_loss(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(10_000))
    f = open_work_item(str(path))
    try:
        reader = BlockReader(f, 4000, ahead=2)  # type: ignore[arg-type]
        assert len(reader.next()) == 4000
        reader._ahead[0][2].result()  # the next block is read ahead
        os.truncate(path, 5000)
        with pytest.raises(ar.DataLossError, match="shrank") as info:
            reader.next()
        assert info.value.offset == 5000
        reader.close()
    finally:
        f.close()


# -- several blocks per hop; errors at their record ---------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_large_batch_takes_a_few_hops_not_one_per_block(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tfrecord(tmp_path / "a.tfrecord", 1200)  # 60 MB: 15 read blocks
    hops = 0
    fill = framed.FramedReader._fill_batch

    def counted(self: framed.FramedReader) -> object:
        nonlocal hops
        hops += 1
        return fill(self)

    monkeypatch.setattr(framed.FramedReader, "_fill_batch", counted)
    async with ar.TFRecordReader() as reader:
        with anyio.fail_after(30):
            batch = await reader.read_batch(await _queue_of(path), 10_000)
    assert _ids(batch) == list(range(1200))
    blocks_in_file = -(-path.stat().st_size // READ_BLOCK)
    assert hops <= -(-path.stat().st_size // framed.HOP_BYTES) + 1 < blocks_in_file


@pytest.mark.anyio
@pytest.mark.both_backends
@pytest.mark.parametrize("on_error", [None, "skip"])
async def test_a_bad_record_blocks_into_a_hop_comes_after_the_records_before_it(
    tmp_path: Path, on_error: Literal["skip"] | None
) -> None:
    path = _tfrecord(tmp_path / "a.tfrecord", 400)  # 20 MB
    bad = 250  # in the fourth read block
    stride = RECORD + 16
    data = bytearray(path.read_bytes())
    data[bad * stride + 12 + 100] ^= 0xFF
    path.write_bytes(data)
    got: list[int] = []
    async with ar.TFRecordReader(on_error=on_error) as reader:
        q = await _queue_of(path)
        with anyio.fail_after(30):
            first = await reader.read_batch(q, 10_000)
            got += _ids(first)
            if on_error is None:
                assert got == list(range(bad))
                with pytest.raises(ar.DataLossError) as info:
                    await reader.read_batch(q, 10_000)
                assert str(path) in str(info.value)
                assert info.value.record == bad * stride
            else:
                while True:
                    try:
                        got += _ids(await reader.read_batch(q, 10_000))
                    except ar.OutOfRangeError:
                        break
                assert got == [i for i in range(400) if i != bad]
                (letter,) = reader.dead_letters
                assert letter.record == f"{path}:{bad * stride}".encode()
                assert not letter.rest_of_work_item


@pytest.mark.anyio
@pytest.mark.both_backends
@pytest.mark.parametrize("persistent", [False, True])
async def test_a_read_error_blocks_into_a_hop_keeps_the_records_framed_before_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, persistent: bool
) -> None:
    """The records of the blocks framed before a failed read are delivered, not lost
    with the hop; the next hop reads the failed block again (a passing fault: nothing
    lost or repeated; a lasting one: the error after the records before it)."""
    path = _tfrecord(tmp_path / "a.tfrecord", 400)  # 20 MB: five read blocks
    calls = 0
    next_block = BlockReader.next

    def failing(self: BlockReader) -> memoryview:
        nonlocal calls
        calls += 1
        if calls == 3 or (persistent and calls > 3):
            raise ar.DataLossError("the disk went away", work_item=str(path).encode())
        return next_block(self)

    monkeypatch.setattr(BlockReader, "next", failing)
    got: list[int] = []
    async with ar.TFRecordReader() as reader:
        q = await _queue_of(path)
        with anyio.fail_after(30):
            got += _ids(await reader.read_batch(q, 10_000))
            if persistent:
                # The first two blocks' records, each once; then the error.
                assert got == list(range(len(got)))
                assert 0 < len(got) < 400
                with pytest.raises(ar.DataLossError, match="went away"):
                    await reader.read_batch(q, 10_000)
                return
            with pytest.raises(ar.OutOfRangeError):
                await reader.read_batch(q, 10_000)
    assert calls > 3
    assert got == list(range(400))


@pytest.mark.anyio
async def test_remote_files_fill_pooled_blocks_in_order(tmp_path: Path) -> None:
    """A URL's file has no positional reads: its blocks are read in order into the pool."""
    fsspec = pytest.importorskip("fsspec", reason="fsspec (asyncreader[remote]) is missing")
    mem = fsspec.filesystem("memory")
    mem.pipe("/ar-blocks/a.tfrecord", _tfrecord(tmp_path / "a.tfrecord", 300).read_bytes())
    try:
        got: list[int] = []
        async with ar.TFRecordReader() as reader:
            q = ar.FIFOQueue(None)
            await q.enqueue("memory://ar-blocks/a.tfrecord")
            await q.close()
            with anyio.fail_after(30):
                while True:
                    try:
                        batch = await reader.read_batch(q, 128)
                    except ar.OutOfRangeError:
                        break
                    got += _ids(batch)
                    assert batch.key(0).startswith(b"memory://ar-blocks/a.tfrecord:")
        assert got == list(range(300))
    finally:
        mem.rm("/ar-blocks", recursive=True)
