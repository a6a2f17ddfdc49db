"""Equal steps: every rank gets the same number of batches per epoch.

Ranks here are Sessions of this process reading skewed TFRecord files (one ten times the
others) from one shared work queue through a batcher that filters records
(``maybe_batch``, ``maybe_shuffle_batch``); one rank trains slower, so the others take
more files and run ahead. Every rank must end with the same batch count, the records
delivered (acknowledged) must be every kept record once except those the remainder
dropped, and padded rows must be counted. Killing a rank's anchor is its death.
"""

from __future__ import annotations

import collections
import contextlib
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

from .test_leases import anchor_of, in_session, write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BATCH = 8


def keep(example: Any) -> Any:
    """Keep records whose number in their file is not a multiple of 4."""
    _, values = example
    return np.array([int(bytes(v).split(b"-")[1]) % 4 != 0 for v in values])


async def kept(paths: list[str]) -> list[bytes]:
    """The keys of the records :func:`keep` keeps (from one local read)."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(paths)
    await queue.close()
    out: list[bytes] = []
    async with ar.TFRecordReader() as reader:
        while True:
            try:
                keys, values = await reader.read_up_to(queue, 1000)
            except ar.OutOfRangeError:
                return out
            out += [k for k, f in zip(keys, keep((keys, values)), strict=True) if f]


async def ask(queue: Any, method: str) -> Any:
    from asyncreader._distributed.awaiting import wait_ref

    return await wait_ref(getattr(queue._actor, method).remote())


class Rank:
    """What one rank saw."""

    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.padding: list[int] = []
        self.stats: Any = None
        self.error: BaseException | None = None


async def run_rank(
    sess: ar.Session,
    shuffle: bool,
    remainder: str,
    delay: float,
    out: Rank,
    *,
    stop_after: int | None = None,
) -> None:
    work: Any = in_session(sess, lambda: ar.FIFOQueue(None, shared_name="files"))
    reader = ar.TFRecordReader()

    async def source() -> Any:
        return await reader.read_up_to(work, 16)

    common: dict[str, Any] = {
        "enqueue_many": True,
        "coord": sess.coord,
        "record_refs": reader,
        "remainder": remainder,
    }
    if shuffle:
        batcher = in_session(
            sess,
            lambda: ar.maybe_shuffle_batch(source, BATCH, 200, 20, keep, seed=1, **common),
        )
    else:
        batcher = in_session(sess, lambda: ar.maybe_batch(source, keep, BATCH, **common))
    try:
        async for keys, _ in batcher:
            out.batches.append([bytes(k) for k in keys])
            out.padding.append(batcher.statistics().last_batch_padding)
            await anyio.sleep(delay)  # the training step
            await sess.ack(list(keys))  # padded rows have an empty key: skipped
            if stop_after is not None and len(out.batches) >= stop_after:
                await anyio.sleep_forever()  # hangs in a step until it is killed
    except ar.FailedPreconditionError as exc:
        out.error = exc  # declared dead
    out.stats = batcher.statistics()


async def run_job(
    root: Path,
    namespace: str,
    *,
    ranks: int,
    shuffle: bool,
    remainder: str,
    sizes: list[int],
    kill: Any = None,
) -> tuple[list[Rank], list[bytes], Any, dict[bytes, int], dict[bytes, int]]:
    paths, _ = await write_files(root, sizes)
    cluster = ar.RayCluster(namespace=namespace)
    outs = [Rank() for _ in range(ranks)]
    async with contextlib.AsyncExitStack() as stack:
        sessions = [
            await stack.enter_async_context(ar.Session(cluster=cluster, rank=r, world_size=ranks))
            for r in range(ranks)
        ]
        work: Any = in_session(sessions[0], lambda: ar.FIFOQueue(None, shared_name="files"))
        await ask(work, "keep_ledger")
        await work.enqueue_many(paths)
        await work.close()
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                for r, sess in enumerate(sessions):
                    delay = 0.03 if r == 0 else 0.0  # rank 0 is slow: the others run ahead
                    stop = None if kill is None or kill[0] != r else kill[1]
                    tg.start_soon(
                        lambda s=sess, d=delay, o=outs[r], st=stop: run_rank(
                            s, shuffle, remainder, d, o, stop_after=st
                        )
                    )
                if kill is not None:
                    victim, after = kill
                    while len(outs[victim].batches) < after:
                        await anyio.sleep(0.01)
                    import ray

                    await anyio.to_thread.run_sync(ray.kill, anchor_of(sessions[victim]))
                    # Its task hangs in a step (as a dead process would): stop it once
                    # the others are done.
                    while not all(o.stats is not None for i, o in enumerate(outs) if i != victim):
                        await anyio.sleep(0.05)
                    tg.cancel_scope.cancel()
        tail = await ask(work, "tail_status")
        ledger = await ask(work, "ledger")
        drops = await ask(work, "drops")
    return outs, await kept(paths), tail, ledger, drops


def check_job(
    outs: list[Rank],
    expected: list[bytes],
    tail: Any,
    ledger: dict[bytes, int],
    drops: dict[bytes, int],
    remainder: str,
    live: list[int],
) -> None:
    counts = [len(outs[r].batches) for r in live]
    assert len(set(counts)) == 1, (counts, tail)
    sizes = [len(b) for r in live for b in outs[r].batches]
    if remainder == "smaller":
        last = [len(outs[r].batches[-1]) for r in live]
        assert max(last) - min(last) <= 1, last
        assert all(s == BATCH for r in live for s in map(len, outs[r].batches[:-1]))
    else:
        assert set(sizes) == {BATCH}
    delivered = [k for r in live for b in outs[r].batches for k in b if k]
    # The padding counts: rows with an empty key, as each rank's statistics say.
    padded = sum(1 for r in live for b in outs[r].batches for k in b if not k)
    assert padded == sum(outs[r].stats.examples_padded for r in live)
    assert padded == sum(sum(outs[r].padding) for r in live)
    if remainder != "pad":
        assert padded == 0
    assert all(outs[r].stats.remainder_dropped == tail["dropped"] for r in live)
    if remainder == "pad":
        assert tail["dropped"] == 0
    # Each kept record delivered once or dropped once: the ledger of acks says so too.
    dropped = collections.Counter(drops)
    assert sum(dropped.values()) == tail["dropped"]
    assert sorted(delivered + list(dropped.elements())) == sorted(expected)
    assert collections.Counter(ledger) == collections.Counter(delivered)


@pytest.mark.parametrize("remainder", ["drop", "smaller", "pad"])
@pytest.mark.parametrize("shuffle", [False, True], ids=["maybe_batch", "maybe_shuffle_batch"])
async def test_every_rank_gets_the_same_number_of_batches(
    ray_env: RayEnv, namespace: str, tmp_path: Path, shuffle: bool, remainder: str
) -> None:
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path,
        namespace,
        ranks=3,
        shuffle=shuffle,
        remainder=remainder,
        sizes=[30, 300, 25, 31, 29, 27],  # one file ten times the others
    )
    assert all(o.error is None for o in outs)
    check_job(outs, expected, tail, ledger, drops, remainder, [0, 1, 2])
