"""Helpers shared by the reader tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterable

    from asyncreader._readers.work import WorkQueue

DATA = Path(__file__).resolve().parent.parent / "data"


async def drain(
    reader: ar.ReaderBase, q: ar.FIFOQueue, *, n: int = 1000
) -> list[tuple[bytes, bytes]]:
    """Return every ``(key, value)`` the reader reads from ``q`` until it is exhausted,
    asking ``read_up_to`` for ``n`` records at a time."""
    out: list[tuple[bytes, bytes]] = []
    while True:
        try:
            keys, values = await reader.read_up_to(q, n)
        except ar.OutOfRangeError:
            return out
        out += zip(keys, values, strict=True)


async def drain_values(reader: ar.ReaderBase, q: ar.FIFOQueue, *, n: int = 1000) -> list[bytes]:
    """Return the values :func:`drain` reads."""
    return [value for _, value in await drain(reader, q, n=n)]


def open_fds() -> int:
    """Return how many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def tfrecord_bytes(payloads: Iterable[bytes]) -> bytes:
    """Return ``payloads`` framed as an uncompressed TFRecord file."""
    from asyncreader._records.tfrecord import frame_record

    return b"".join(b"".join(frame_record(p)) for p in payloads)


def frame_in_small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make file readers read 997-byte blocks and frame them a few records per hop."""
    framed = "asyncreader._readers.framed"
    monkeypatch.setattr(f"{framed}.READ_BLOCK", 997)
    monkeypatch.setattr(f"{framed}._FIRST_PIECE", 50)
    monkeypatch.setattr(f"{framed}._MIN_PIECE", 16)
    monkeypatch.setattr(f"{framed}.HOP_RECORDS", 5)


@pytest.fixture(autouse=True, params=["read_up_to", "read_batch"])
def read_verb(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run each reader test twice: with ``read_up_to`` as it is, and with ``read_up_to``
    served by ``read_batch`` (its keys and records turned back into lists).

    Every test of the reader matrix that reads through ``read_up_to`` (headers, footers,
    hops, CRLF, empty files, compressed streams, corrupt data, restores mid-file, error
    policies with dead letters, cancellation) so also checks that ``read_batch`` gives the
    same records, keys, counters, state and errors. A test module takes it in with
    ``from readers_util import read_verb``; a test asks for it to know which run it is.
    """
    if request.param == "read_batch":
        original = ar.ReaderBase.read_up_to

        async def read_up_to(
            self: ar.ReaderBase, queue: WorkQueue, num_records: int
        ) -> tuple[list[bytes], list[bytes]]:
            if num_records < 0:
                return await original(self, queue, num_records)  # its own message
            batch = await self.read_batch(queue, num_records)
            assert isinstance(batch, ar.RecordBatch)
            return batch.keys(), batch.tolist()

        monkeypatch.setattr(ar.ReaderBase, "read_up_to", read_up_to)
    return str(request.param)
