"""A reader whose hooks are coroutines on aiofiles: your own format, read with async file I/O.

Records are ``<u32 little-endian length><payload>``, keys ``<work item>:<offset>``. The
hooks await aiofiles, which runs each file call on asyncio's thread pool, so this reader
runs on asyncio (aiofiles does not support trio). ``read_many`` reads ``chunk`` bytes per
await and frames every record in them: one thread hop for many records.

    pip install "asyncreader[aiofiles]"
    python examples/aiofiles_reader.py
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path
from typing import Any

import aiofiles
import anyio

import asyncreader as ar

_HEAD = struct.Struct("<I")


class AsyncLengthPrefixedReader(ar.ReaderBase):
    """Length-prefixed records read with aiofiles, ``chunk`` bytes per await."""

    def __init__(self, name: str | None = None, *, chunk: int = 1 << 20) -> None:
        super().__init__(name)
        self._chunk = chunk
        self._handle: Any = None  # an aiofiles handle
        self._item = b""
        self._data = b""  # bytes read; those not yet framed start at self._at
        self._at = 0
        self._origin = 0  # file offset of self._data[0]
        self._ended = False

    async def on_work_started(self, work: bytes) -> None:
        self._handle = await aiofiles.open(work, "rb")
        self._item, self._data, self._at, self._origin, self._ended = work, b"", 0, 0, False

    async def read_many(self, n: int) -> tuple[list[bytes], list[bytes], bool]:
        keys: list[bytes] = []
        values: list[bytes] = []
        buf, pos = self._data, self._at
        while len(keys) < n:
            if pos + 4 <= len(buf):
                (length,) = _HEAD.unpack_from(buf, pos)
                end = pos + 4 + length
                if end <= len(buf):
                    keys.append(b"%s:%d" % (self._item, self._origin + pos))
                    values.append(buf[pos + 4 : end])
                    pos = end
                    continue
            if self._ended:
                if pos < len(buf) and not keys:
                    # Records before it were delivered; this call (and the next) fails here.
                    raise ar.DataLossError(
                        "truncated record", work_item=self._item, offset=self._origin + pos
                    )
                break
            more = await self._handle.read(self._chunk)  # one thread hop
            self._ended = len(more) < self._chunk
            self._origin += pos
            buf, pos = buf[pos:] + more, 0
        self._data, self._at = buf, pos
        return keys, values, self._ended and pos == len(buf)

    async def read_one(self) -> tuple[bytes, bytes] | None:
        keys, values, _ = await self.read_many(1)
        return (keys[0], values[0]) if keys else None

    def serialize_extra(self) -> bytes:  # always a plain function
        return b"%d" % (self._origin + self._at)

    async def restore_extra(self, extra: bytes) -> None:
        offset = int(extra)
        await self._handle.seek(offset)
        self._data, self._at, self._origin, self._ended = b"", 0, offset, False

    async def reset_state(self) -> None:  # also run when a work item is finished
        if self._handle is not None:
            await self._handle.close()
            self._handle = None

    on_work_finished = reset_state


async def read_in_two_runs(path: str) -> tuple[list[bytes], list[bytes]]:
    """Read ``path`` three records at a time, stop after the first call, and go on in a
    new reader from the saved state: the two runs together read every record once."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue(path)
    await queue.close()
    async with AsyncLengthPrefixedReader(chunk=16) as reader:
        keys, first = await reader.read_up_to(queue, 3)
        state = reader.serialize_state()
    print("first run:", first, "then stopped at", keys[-1].rsplit(b"/", 1)[-1])
    rest: list[bytes] = []
    async with AsyncLengthPrefixedReader(chunk=16) as reader:
        reader.restore_state(state)
        while True:
            try:
                _, values = await reader.read_up_to(queue, 3)
            except ar.OutOfRangeError:
                break
            rest += values
    print("second run:", rest)
    return first, rest


def main() -> tuple[list[bytes], list[bytes]]:
    records = [b"alpha", b"", b"beta", b"gamma" * 5, b"delta", b"epsilon"]
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp, "records.lp")
        file.write_bytes(b"".join(_HEAD.pack(len(r)) + r for r in records))
        return anyio.run(read_in_two_runs, str(file), backend="asyncio")


if __name__ == "__main__":
    main()
