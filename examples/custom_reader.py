"""A new format via ReaderBase's hooks (plain functions: they run on the I/O executor)."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path
from typing import BinaryIO

import anyio

import asyncreader as ar


class LengthPrefixedReader(ar.ReaderBase):
    """Records stored as ``<u32 little-endian length><payload>``; keys ``<work>:<offset>``."""

    _file: BinaryIO | None = None
    _prefix = b""

    def on_work_started(self, work: bytes) -> None:
        self._file, self._prefix = open(work, "rb"), work  # noqa: SIM115 - closed below

    def read_one(self) -> tuple[bytes, bytes] | None:
        assert self._file is not None
        offset, head = self._file.tell(), self._file.read(4)
        if not head:  # end of this work item
            return None
        payload = self._file.read(length := struct.unpack("<I", head.ljust(4))[0])
        if len(head) < 4 or len(payload) < length:
            raise ar.DataLossError("truncated record", work_item=self._prefix, offset=offset)
        return b"%s:%d" % (self._prefix, offset), payload

    def reset_state(self) -> None:  # also run below when a work item is finished
        if self._file is not None:
            self._file.close()
            self._file = None

    on_work_finished = reset_state


async def read_all(path: str) -> list[tuple[bytes, bytes]]:
    """Read every record of the file at ``path``, printing each one."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue(path)
    await queue.close()
    records = []
    async with LengthPrefixedReader() as reader:
        while True:
            try:
                key, value = await reader.read(queue)
            except ar.OutOfRangeError:  # the queue is closed and empty: all read
                break
            print(key.decode().rsplit("/", 1)[-1], value)
            records.append((key, value))
    return records


def main() -> list[tuple[bytes, bytes]]:
    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp, "records.lp")
        file.write_bytes(b"".join(struct.pack("<I", len(r)) + r for r in (b"a", b"", b"xyz")))
        return anyio.run(read_all, str(file))


if __name__ == "__main__":
    main()
