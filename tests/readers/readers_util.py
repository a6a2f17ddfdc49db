"""Helpers shared by the reader tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterable

DATA = Path(__file__).resolve().parent.parent / "data"


async def work_queue(items: Iterable[object], *, close: bool = True) -> ar.FIFOQueue:
    """Return an untyped FIFOQueue holding ``items``, closed unless ``close`` is false."""
    q = ar.FIFOQueue(None)
    for item in items:
        await q.enqueue(item)
    if close:
        await q.close()
    return q


def open_fds() -> int:
    """Return how many file descriptors this process has open."""
    return len(os.listdir("/proc/self/fd"))


def tfrecord_bytes(payloads: Iterable[bytes]) -> bytes:
    """Return ``payloads`` framed as an uncompressed TFRecord file."""
    from asyncreader._records.tfrecord import frame_record

    return b"".join(b"".join(frame_record(p)) for p in payloads)
