"""Pieces shared by the distributed tests and their rank driver scripts.

The driver scripts, run by path, put ``tests/`` on ``sys.path`` and import it as
``distributed.shuffled_steps``, the name the test modules' ``.shuffled_steps`` has.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import asyncreader as ar

if TYPE_CHECKING:
    import random

__all__ = ["ShuffledSteps", "local_keys"]


async def local_keys(paths: list[str]) -> list[bytes]:
    """Every record key of ``paths``, from one local read (what a job must deliver)."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(paths)
    await queue.close()
    keys: list[bytes] = []
    async with ar.TFRecordReader() as reader:
        while True:
            try:
                got, _ = await reader.read_up_to(queue, 1000)
            except ar.OutOfRangeError:
                return keys
            keys += got


class ShuffledSteps:
    """A rank's training steps: keys drawn at random from a local shuffle buffer that
    ``reader`` keeps filled (``chunk`` records a read, up to ``buffer``) from the shared
    ``work`` queue; ``step`` keys a step. Ends when the work is done and the buffer empty.
    """

    def __init__(
        self, reader: Any, work: Any, rng: random.Random, *, chunk: int, step: int, buffer: int
    ) -> None:
        self._reader = reader
        self._work = work
        self._rng = rng
        self._chunk = chunk
        self._step = step
        self._size = buffer
        self._buffer: list[bytes] = []
        self._ended = False
        #: Records read so far.
        self.records = 0

    def __aiter__(self) -> ShuffledSteps:
        return self

    async def __anext__(self) -> list[bytes]:
        while not self._ended and len(self._buffer) < self._size:
            try:
                keys, _ = await self._reader.read_up_to(self._work, self._chunk)
            except ar.OutOfRangeError:
                self._ended = True
            else:
                self._buffer += keys
                self.records += len(keys)
        if not self._buffer:
            raise StopAsyncIteration
        self._rng.shuffle(self._buffer)
        step, self._buffer = self._buffer[: self._step], self._buffer[self._step :]
        return step
