"""The protocol through which queues see readers without importing them.

``RecordRefs`` takes any :class:`~asyncreader._queues.record_refs.RereadableReader`: the
built-in readers satisfy it, a reader that cannot read again says so, and a class of one's
own that implements the protocol has its records saved as references too.
"""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING

import anyio
import numpy as np
import pytest
from readers_util import read_verb  # noqa: F401 (runs each test with both verbs)

import asyncreader as ar
from asyncreader._queues.record_refs import RecordSource, RereadableReader
from asyncreader._readers.reread import ReaderRecords

if TYPE_CHECKING:
    from collections.abc import Sequence

pytestmark = pytest.mark.anyio

KEY = b"record source test key"

BUILT_IN = [
    ar.TFRecordReader,
    ar.TextLineReader,
    lambda: ar.FixedLengthRecordReader(4),
    ar.WholeFileReader,
    ar.IdentityReader,
]


@pytest.mark.parametrize("make", BUILT_IN, ids=["tfrecord", "text", "fixed", "whole", "id"])
def test_built_in_readers_are_rereadable_readers(make: type[ar.ReaderBase]) -> None:
    reader = make()
    assert isinstance(reader, RereadableReader)
    # Statically too: mypy checks these assignments against the protocols.
    rereadable: RereadableReader = reader
    source: RecordSource | None = rereadable._record_source()
    assert isinstance(source, ReaderRecords)
    assert source.kind == type(reader).__name__
    assert "name" not in source.config()


def test_the_record_source_splits_keys_as_the_reader_makes_them() -> None:
    source = ar.TextLineReader(skip_header_lines=1)._record_source()
    assert source is not None
    assert source.config() == {"skip_header_lines": 1}
    assert source.split_key(b"dir/a:b.txt:12") == (b"dir/a:b.txt", 12)
    assert source.split_keys([b"a:1", b"b:2", b"a:3"]) == ([b"a", b"b"], [0, 1, 0], [1, 2, 3])
    with pytest.raises(ar.InvalidArgumentError, match="is not a record key of a TextLineReader"):
        source.split_key(b"a:x")
    assert source.checksums([b"abc"]).tolist() == [0x364B3FB7]  # CRC32C


def test_a_reader_that_cannot_read_again_has_no_source() -> None:
    class Custom(ar.ReaderBase):
        def read_one(self) -> None:
            return None

    reader = Custom()
    assert isinstance(reader, RereadableReader)
    assert reader._record_source() is None
    with pytest.raises(ar.InvalidArgumentError, match="Custom cannot read a record again"):
        ar.RecordRefs(reader)
    with pytest.raises(ar.InvalidArgumentError, match="needs a reader, not list"):
        ar.RecordRefs([])  # type: ignore[arg-type]


class _TableSource:
    """Records ``b"<table>:<row>"`` of in-memory tables, read again from the tables."""

    def __init__(self, tables: dict[bytes, list[bytes]]) -> None:
        self.tables = tables
        self.rereads = 0

    @property
    def kind(self) -> str:
        return "Table"

    def config(self) -> dict[str, object]:
        return {"tables": sorted(self.tables)}

    def split_key(self, key: bytes) -> tuple[bytes, int]:
        table, sep, row = key.rpartition(b":")
        if not sep or not row.isdigit():
            raise ar.InvalidArgumentError(f"{key!r} is not a table key")
        return table, int(row)

    def split_keys(self, keys: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        works: dict[bytes, int] = {}
        index, rows = [], []
        for key in keys:
            table, row = self.split_key(key)
            index.append(works.setdefault(table, len(works)))
            rows.append(row)
        return list(works), index, rows

    def checksums(self, values: Sequence[bytes]) -> np.ndarray[tuple[int], np.dtype[np.uint32]]:
        return np.array([zlib.crc32(v) for v in values], dtype=np.uint32)

    async def reread(
        self,
        works: Sequence[bytes],
        work_index: np.ndarray[tuple[int], np.dtype[np.uint32]],
        records: np.ndarray[tuple[int], np.dtype[np.int64]],
        crcs: np.ndarray[tuple[int], np.dtype[np.uint32]],
    ) -> tuple[list[bytes], list[bytes]]:
        self.rereads += 1
        keys, values = [], []
        for w, r, crc in zip(work_index.tolist(), records.tolist(), crcs.tolist(), strict=True):
            value = self.tables[works[w]][r]
            if zlib.crc32(value) != crc:
                raise ar.DataLossError("row changed", work_item=works[w], record=r)
            keys.append(works[w] + b":%d" % r)
            values.append(value)
        return keys, values


class _TableReader:
    """Not a ReaderBase: only the RereadableReader protocol."""

    def __init__(self, source: _TableSource) -> None:
        self.source = source

    def _record_source(self) -> _TableSource:
        return self.source


@pytest.mark.both_backends
async def test_record_refs_takes_a_class_that_implements_the_protocol() -> None:
    tables = {b"t1": [b"alpha", b"beta", b"gamma"], b"t2": [b"delta"]}
    records = [(b"t1:2", b"gamma"), (b"t2:0", b"delta"), (b"t1:0", b"alpha")]
    rereadable: RereadableReader = _TableReader(_TableSource(tables))
    with anyio.fail_after(10):
        async with ar.Session(checkpoint_key=KEY) as sess:
            queue = ar.FIFOQueue(None, record_refs=rereadable)
            await queue.enqueue_many(records)
            state = await sess.checkpoint()
        for _, value in records:
            assert value not in state  # saved as references, not payloads
        source = _TableSource(tables)
        async with ar.Session(restore=state, checkpoint_key=KEY):
            queue = ar.FIFOQueue(None, record_refs=ar.RecordRefs(_TableReader(source)))
            assert await queue.dequeue_many(3) == records
        assert source.rereads == 1
        # A value that changed since the checkpoint fails the restore.
        tables[b"t1"][2] = b"GAMMA"
        with pytest.raises(ar.DataLossError, match="row changed") as info:
            await _restore_and_dequeue(state, _TableSource(tables))
        assert (info.value.work_item, info.value.record) == (b"t1", 2)


async def _restore_and_dequeue(state: bytes, source: _TableSource) -> None:
    async with ar.Session(restore=state, checkpoint_key=KEY):
        await ar.FIFOQueue(None, record_refs=_TableReader(source)).dequeue()
