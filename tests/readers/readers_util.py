"""Helpers shared by the reader tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterable

    import pytest

DATA = Path(__file__).resolve().parent.parent / "data"


async def work_queue(items: Iterable[object], *, close: bool = True) -> ar.FIFOQueue:
    """Return an untyped FIFOQueue holding ``items``, closed unless ``close`` is false."""
    q = ar.FIFOQueue(None)
    for item in items:
        await q.enqueue(item)
    if close:
        await q.close()
    return q


async def drain(reader: ar.ReaderBase, q: ar.FIFOQueue) -> list[tuple[bytes, bytes]]:
    """Return every ``(key, value)`` the reader reads from ``q`` until it is exhausted."""
    out: list[tuple[bytes, bytes]] = []
    while True:
        try:
            keys, values = await reader.read_up_to(q, 1000)
        except ar.OutOfRangeError:
            return out
        out += zip(keys, values, strict=True)


def open_fds() -> int:
    """Return how many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def tfrecord_bytes(payloads: Iterable[bytes]) -> bytes:
    """Return ``payloads`` framed as an uncompressed TFRecord file."""
    from asyncreader._records.tfrecord import frame_record

    return b"".join(b"".join(frame_record(p)) for p in payloads)


def frame_in_small_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make file readers read 997-byte blocks and frame them a few records per hop."""
    framed = "asyncreader._readers._framed"
    monkeypatch.setattr(f"{framed}.READ_BLOCK", 997)
    monkeypatch.setattr(f"{framed}._FIRST_PIECE", 50)
    monkeypatch.setattr(f"{framed}._MIN_PIECE", 16)
    monkeypatch.setattr(f"{framed}.HOP_RECORDS", 5)
