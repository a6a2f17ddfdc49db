"""A remote file whose server cuts its answers short, without an error.

Some HTTP stacks hand back the bytes they got when a connection ends early instead of
raising. :class:`~asyncreader._io.remote.RangeFile` then asks for the rest from the byte
reached: nothing is lost or repeated, and each such answer is logged like a retry.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import fsspec.asyn

from asyncreader._io.remote import RangeFile, RemoteReading

if TYPE_CHECKING:
    import asyncio

    import pytest

DATA = bytes(range(256)) * 40  # 10,240 bytes
#: Bytes the fake server sends of any answer.
CUT = 1000


class ShortAnswers:
    """A client whose every answer holds at most ``CUT`` bytes of what was asked for."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop = fsspec.asyn.get_loop()
        self.asked: list[tuple[int, int]] = []

    def setup(self) -> None:
        return None

    async def first(self, start: int, end: int) -> Any:
        return None

    async def size(self) -> int:
        return len(DATA)

    async def get(self, start: int, end: int) -> bytes:
        self.asked.append((start, end))
        return DATA[start : min(end, start + CUT)]


def test_answers_cut_short_are_completed_from_the_byte_reached_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="asyncreader.remote")
    client = ShortAnswers()
    f = RangeFile(client, "s3://bucket/cut.bin", RemoteReading(read_ahead=4096, concurrency=2))
    try:
        got = b"".join(iter(lambda: f.read(3000), b""))
    finally:
        f.close()
    assert got == DATA
    # Each answer cut short is logged, and the rest is asked for from the byte it reached.
    cut = sorted(start for start, end in client.asked if end - start > CUT)
    assert cut, client.asked
    asked_from = {start for start, _ in client.asked}
    assert all(start + CUT in asked_from for start in cut), client.asked
    messages = [r.getMessage() for r in caplog.records if r.name == "asyncreader.remote"]
    logged = sorted(int(m.split(" at byte ")[1].split()[0]) for m in messages)
    assert logged == cut, (messages, client.asked)
    for message in messages:
        at = int(message.split(" at byte ")[1].split()[0])
        assert message == (
            f"s3://bucket/cut.bin: reading at byte {at} failed (the answer ended after "
            f"{CUT} bytes); asking for the rest from byte {at + CUT}"
        )
