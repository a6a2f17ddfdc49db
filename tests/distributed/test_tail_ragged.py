"""The tail pool with ``dynamic_pad`` batchers: the actor side alone (without Ray).

Ranks push examples of varying length, each chunk padded to its own longest example
(what a PaddingFIFOQueue's ``dequeue_up_to`` gives) along with every example's own
shape. A batch from the pool must be padded to the longest of ITS examples, as the
rank's own ``dequeue_many`` would pad it, whatever chunk its examples came in; every
example comes out once (or is dropped and counted), and remainder="pad" rows repeat
examples with an empty key.
"""

from __future__ import annotations

import collections
import random
import time
from typing import Any

import anyio
import numpy as np
import pytest

import asyncreader as ar
from asyncreader._distributed.schedule import Schedule
from asyncreader._distributed.tail import TailPool
from asyncreader._distributed.work_queue import LeaseBook, Rank

from .test_tail_death import CONFIG, _ended, _job

pytestmark = pytest.mark.anyio

BATCH = 4
CLIENTS = ("0-a", "1-b")


def layout(shape: list[Any], dtype: str = "|u1") -> dict[str, Any]:
    """A batcher's layout as its rank sends it: (key, tokens) examples."""
    return {
        "batcher": "batch",
        "structure": None,
        "describe": "(key, tokens)",
        "components": [("'0'", "|O", []), ("'1'", dtype, shape)],
    }


def examples(rank: int, count: int, seed: int) -> list[tuple[bytes, np.ndarray[Any, Any]]]:
    """``count`` examples: a key and 1 to 12 tokens, none of them 0 (the padding)."""
    rng = random.Random(seed * 10 + rank)
    out = []
    for i in range(count):
        n = rng.choice([1, 2, 3, 12]) if i % 3 else rng.randint(1, 12)
        out.append((f"part-{rank}:{i}".encode(), np.full(n, i % 250 + 1, dtype=np.uint8)))
    return out


def chunk(rows: list[tuple[bytes, np.ndarray[Any, Any]]]) -> tuple[list[Any], list[Any]]:
    """``rows`` as a rank pushes them: components padded to the chunk's longest, and each
    example's own shape per component."""
    keys = np.empty(len(rows), dtype=object)
    keys[:] = [k for k, _ in rows]
    width = max(len(t) for _, t in rows)
    tokens = np.zeros((len(rows), width), dtype=np.uint8)
    for i, (_, t) in enumerate(rows):
        tokens[i, : len(t)] = t
    shapes = [np.zeros((len(rows), 0), np.int64), np.array([[len(t)] for _, t in rows])]
    return [keys, tokens], shapes


async def pool_of(remainder: str, *, deterministic: bool = False) -> TailPool:
    """Two ranks in the tail: rank ``r`` leased ``part-r`` (its records' keys are
    ``part-r:i``) and joined with no batch so far."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(["part-0", "part-1"])
    await queue.close()
    book = LeaseBook(queue, "files")
    if deterministic:
        book.schedule = Schedule(2)
    pool = TailPool(book, queue, "files")
    for client in CLIENTS:
        book._ranks[client] = Rank(60.0, time.monotonic())
        pool.layout(client, layout([None]))
    with anyio.fail_after(5):
        for client in CLIENTS:
            assert isinstance(await book.lease(client, []), tuple)
    for client in CLIENTS:
        pool.join(client, 0, (BATCH, remainder, 2), 0, None, None, 60.0)
    return pool


async def take_all(pool: TailPool) -> dict[str, list[list[np.ndarray[Any, Any]]]]:
    """Every rank's batches, taking in turns until each has its end."""
    got: dict[str, list[Any]] = {c: [] for c in CLIENTS}
    rid = dict.fromkeys(CLIENTS, 0)
    ended: set[str] = set()
    with anyio.fail_after(10):
        while len(ended) < len(CLIENTS):
            for client in CLIENTS:
                if client in ended:
                    continue
                rid[client] += 1
                reply = await pool.take(client, rid[client], rid[client] - 1)
                if reply[0] == "batch":
                    got[client].append(reply[1])
                elif reply[0] == "end":
                    ended.add(client)
    return got


def check_batch(batch: list[np.ndarray[Any, Any]], every: dict[bytes, Any], size: int) -> None:
    keys, tokens = batch
    assert len(keys) == len(tokens) == size
    lengths = [int(np.count_nonzero(row)) for row in tokens]
    # Padded to the longest of its own examples (pad rows repeat examples: they count).
    assert tokens.shape == (size, max(lengths)), (tokens.shape, lengths)
    for key, row, n in zip(keys, tokens, lengths, strict=True):
        if key:
            assert np.array_equal(row[:n], every[bytes(key)])
        assert not row[n:].any()


@pytest.mark.parametrize("deterministic", [False, True], ids=["timing", "deterministic"])
@pytest.mark.parametrize("remainder", ["drop", "smaller", "pad"])
@pytest.mark.parametrize("seed", range(3))
async def test_pool_batches_of_ragged_examples_are_padded_to_their_own_longest(
    remainder: str, deterministic: bool, seed: int
) -> None:
    pool = await pool_of(remainder, deterministic=deterministic)
    every: dict[bytes, Any] = {}
    for r, client in enumerate(CLIENTS):
        rows = examples(r, 13 + 5 * r + seed, seed)
        every.update(rows)
        # Chunks of a few examples each: a long one pads its short neighbours.
        for start in range(0, len(rows), 3):
            comps, shapes = chunk(rows[start : start + 3])
            pool.push(client, comps, [bytes(k) for k in comps[0]], False, shapes)
        pool.push(client, None, None, True)
    got = await take_all(pool)
    assert len(got["0-a"]) == len(got["1-b"]) > 0
    batches = [b for c in CLIENTS for b in got[c]]
    sizes = [len(b[0]) for b in batches]
    if remainder == "smaller":
        last = [len(got[c][-1][0]) for c in CLIENTS]
        assert max(last) - min(last) <= 1
        assert all(s == BATCH for c in CLIENTS for s in (len(b[0]) for b in got[c][:-1]))
    else:
        assert set(sizes) == {BATCH}
    for batch in batches:
        check_batch(batch, every, len(batch[0]))
    delivered = collections.Counter(bytes(k) for b in batches for k in b[0] if k)
    assert all(n == 1 for n in delivered.values())
    assert len(delivered) + pool.dropped == len(every)
    padded = sum(1 for b in batches for k in b[0] if not k)
    assert padded == pool.padded
    if remainder == "pad":
        assert pool.dropped == 0
        assert padded > 0  # 31 + 2 * seed examples: never a whole number of rounds


async def test_a_rank_behind_is_levelled_with_batches_padded_to_their_own_longest() -> None:
    # Rank 0 had two batches before the tail, rank 1 none; rank 1 pushes one chunk,
    # padded to its one long example. Its first batch holds that example; its second
    # (the two examples left, repeated) is as narrow as they are.
    pool = await pool_of("drop")
    pool._members["0-a"].count = 2
    lengths = [12, 1, 3, 1, 2, 1]
    rows = [(f"part-1:{i}".encode(), np.full(n, i + 1, np.uint8)) for i, n in enumerate(lengths)]
    every = dict(rows)
    comps, shapes = chunk(rows)
    pool.push("1-b", comps, [bytes(k) for k in comps[0]], True, shapes)
    pool.push("0-a", None, None, True)
    with anyio.fail_after(5):
        first = await pool.take("1-b", 1, 0)
        second = await pool.take("1-b", 2, 1)
        assert (await pool.take("0-a", 1, 0))[0] == "end"
        assert (await pool.take("1-b", 3, 2))[0] == "end"
    assert (first[0], first[2], second[0], second[2]) == ("batch", 0, "batch", 2)
    check_batch(first[1], every, BATCH)
    check_batch(second[1], every, BATCH)
    assert first[1][1].shape == (BATCH, 12)
    assert second[1][1].shape == (BATCH, 2)
    assert [bytes(k) for k in second[1][0]] == [b"part-1:4", b"part-1:5", b"", b""]
    assert (pool.padded, pool.dropped) == (2, 0)


@pytest.mark.parametrize(
    ("other", "says"),
    [
        (layout([None, None]), "has 2 dimensions (shape [None, None]), in those of rank 0"),
        (layout([None], "<i4"), "has dtype <i4, in those of rank 0 (batch) |u1"),
        (layout([8]), "has shape [8], in those of rank 0 (batch) [None]"),
    ],
)
async def test_ragged_layouts_differing_in_rank_or_dtype_are_refused(
    other: dict[str, Any], says: str
) -> None:
    queue = ar.FIFOQueue(None)
    book = LeaseBook(queue, "files")
    pool = TailPool(book, queue, "files")
    pool.layout("0-a", layout([None]))
    pool.layout("2-c", layout([None]))  # the same: its examples' lengths may differ
    with pytest.raises(ar.InvalidArgumentError) as caught:
        pool.layout("1-b", other)
    message = str(caught.value)
    assert "queue 'files': component '1' of the examples of rank 1 (batch)" in message
    assert says in message
    assert "one layout" in message
    with anyio.fail_after(5), pytest.raises(ar.InvalidArgumentError):
        await pool.wait_tail(1.0)  # every rank learns it from its next call


async def test_a_dead_ranks_unacknowledged_window_is_padded_to_its_own_longest() -> None:
    # Rank 1's last local batch (its window: four examples, padded to the first one's
    # 9 tokens) had two examples acknowledged when it died, after it had pushed its
    # last example. The other two go to the pool with their own shapes: rank 0's batch
    # of them is 2 tokens wide, not 9.
    book, pool, got0, reader1 = await _job()
    lengths = [9, 1, 2, 1]
    rows = [(f"part-1:{i}".encode(), np.full(n, i + 1, np.uint8)) for i, n in enumerate(lengths)]
    comps, shapes = chunk(rows)
    pool.join("1-b", 1, CONFIG, 0, comps, None, 60.0, shapes)
    pool.push("1-b", None, None, True)
    pool.push("0-a", None, None, True)

    async def rank0_ends() -> None:
        with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
            await book.lease("0-a", [(got0[0], 3)])

    async with anyio.create_task_group() as tg:
        tg.start_soon(rank0_ends)
        await _ended(reader1)  # both readers are done: rank 1's files are not read again
    book.rank_died("1-b", "its process ended")
    with anyio.fail_after(5):
        got = await pool.take("0-a", 1, 0)
        assert (await pool.take("0-a", 2, 1))[0] == "end"
    assert got[0] == "batch"
    keys, tokens = got[1]
    assert [bytes(k) for k in keys] == [b"part-1:2", b"part-1:3"]
    assert tokens.tolist() == [[3, 3], [4, 0]]
