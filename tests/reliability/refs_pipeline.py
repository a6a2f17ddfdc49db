"""The pipeline the record-reference tests checkpoint: producer -> reader -> (shuffle_)batch.

``tests/reliability/test_record_refs.py`` (``read`` / ``read_up_to``) and
``test_record_refs_batches.py`` (``read_batch``) run it with their own reader and read
verb, stop after ``take`` batches with a checkpoint, and compare the restored stream with
the uninterrupted one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

#: What the tests collect: each batch's keys and values.
Seen = list[tuple[list[bytes], list[bytes]]]


async def refs_batches(
    paths: list[str],
    make_reader: Callable[[], ar.ReaderBase],
    read: Callable[[ar.ReaderBase, ar.FIFOQueue], Awaitable[Any]],
    *,
    many: bool = True,
    refs: bool = True,
    shuffle: bool = True,
    restore: bytes | None = None,
    take: int | None = None,
) -> tuple[Seen, bytes | None]:
    """Run the pipeline (restored from ``restore``); return the batches seen and, with
    ``take``, the checkpoint taken after that many (``take=0``: while the batcher fetches
    its first example, its runner tasks waiting with that example in hand)."""
    seen: Seen = []
    state = None
    with anyio.fail_after(30):
        async with ar.Session(restore=restore, deterministic=True) as sess:
            files = ar.string_input_producer(paths, num_epochs=2, seed=1, capacity=2)
            reader = make_reader()

            async def records() -> Any:
                return await read(reader, files)

            common: dict[str, Any] = {
                "enqueue_many": many,
                "allow_smaller_final_batch": True,
                "record_refs": reader if refs else None,
            }
            if shuffle:
                batcher = ar.shuffle_batch(
                    records, 10, capacity=60, min_after_dequeue=30, seed=2, **common
                )
            else:
                batcher = ar.batch(records, 10, capacity=30, **common)
            if take == 0:
                await anyio.lowlevel.checkpoint()
                return seen, await sess.checkpoint()
            async for keys, values in batcher:
                seen.append((keys.tolist(), values.tolist()))
                if len(seen) == take:
                    state = await sess.checkpoint()
                    break
    return seen, state
