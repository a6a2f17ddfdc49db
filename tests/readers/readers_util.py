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
