"""A rank that dies at the epoch's end, before it joined the tail: the actor side alone.

The lease book and the tail pool of one work queue, without Ray (they run in the
queue's actor, on asyncio). Rank 1 has read its last item to the end; the records it
read wait, unacknowledged, in its batcher's queue, and its batcher has not joined the
tail yet (its trainer is in a long step). Rank 0 ends its reading meanwhile. If rank 1
dies then, its records must come back to rank 0's reader, not be lost.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import anyio
import pytest

import asyncreader as ar
from asyncreader._distributed.schedule import Schedule
from asyncreader._distributed.tail import TailPool
from asyncreader._distributed.work_queue import LeaseBook, Rank

pytestmark = pytest.mark.anyio

LAYOUT: dict[str, Any] = {"batcher": "batch", "structure": None, "describe": "x", "components": []}
CONFIG = (2, "drop", 2)


async def _job(
    lease_timeout: float = 60.0, *, deterministic: bool = False
) -> tuple[LeaseBook, TailPool, Any, Any]:
    """Two ranks with a batcher each; rank 0 leased part-0 (3 records), rank 1 part-1
    (6 records); rank 1 read part-1 to the end and acknowledged 2 of its records."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(["part-0", "part-1"])
    await queue.close()
    book = LeaseBook(queue, "files")
    if deterministic:
        book.schedule = Schedule(2)  # rank r reads items r, r + 2, ...
    pool = TailPool(book, queue, "files")
    for client in ("0-a", "1-b"):
        book._ranks[client] = Rank(lease_timeout, time.monotonic())  # registered (no anchor)
        pool.layout(client, LAYOUT)
    with anyio.fail_after(5):
        got0 = await book.lease("0-a", [])
        got1 = await book.lease("1-b", [])
    assert isinstance(got0, tuple)
    assert isinstance(got1, tuple)
    assert (got0[1], got1[1]) == ("part-0", "part-1")
    book.ack("1-b", [(got1[0], 6, None, 0, [b"part-1:0", b"part-1:1"])])
    # Rank 0 joined the tail (it took one local batch); rank 1's reader asks for
    # another item while rank 0 still reads.
    pool.join("0-a", 1, CONFIG, None, None, None, lease_timeout)
    reader1 = asyncio.ensure_future(book.lease("1-b", [(got1[0], 6)]))
    await anyio.sleep(0.05)
    assert not reader1.done()  # rank 0 may still die and give part-0 back
    assert pool.status()["tail"]
    book.ack("0-a", [(got0[0], 3, None, 0, [b"part-0:0", b"part-0:1", b"part-0:2"])])
    return book, pool, got0, reader1


async def _ended(reader: asyncio.Future[Any]) -> None:
    """``reader``'s take ends its reading (rank 0 takes part in the tail)."""
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
        await reader


@pytest.mark.parametrize("deterministic", [False, True])
async def test_a_rank_dying_before_it_joins_the_tail_gives_its_records_back(
    deterministic: bool,
) -> None:
    book, _, got0, reader1 = await _job(deterministic=deterministic)
    replies: list[Any] = []

    async def rank0_reads_on() -> None:
        with anyio.fail_after(5):
            replies.append(await book.lease("0-a", [(got0[0], 3)]))

    async with anyio.create_task_group() as tg:
        tg.start_soon(rank0_reads_on)
        await _ended(reader1)
        await anyio.sleep(0.1)
        # Rank 1 still holds part-1's unacknowledged records and may die: rank 0's
        # reader must not end (its reading would be over before part-1 came back).
        assert not replies
        book.rank_died("1-b", "its process ended")
    lid, item, _, skip, _, held = replies[0]
    assert item == "part-1"
    assert skip == [b"part-1:0", b"part-1:1"]  # re-read, skipping the acknowledged
    assert held == []  # no restored pipeline holds any of its records
    book.ack("0-a", [(lid, 6, None, 0, [f"part-1:{i}".encode() for i in range(2, 6)])])
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
        await book.lease("0-a", [(lid, 6)])
    assert book.status()["leases"] == []


async def test_a_rank_that_joins_and_pushes_its_last_example_lets_the_others_end() -> None:
    book, pool, got0, reader1 = await _job()
    pool.join("1-b", 1, CONFIG, None, None, None, 60.0)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:

            async def rank0_ends() -> None:
                with pytest.raises(ar.OutOfRangeError):
                    await book.lease("0-a", [(got0[0], 3)])

            tg.start_soon(rank0_ends)
            await anyio.sleep(0.05)
            # Rank 1 moves what its batcher holds to the pool: nothing to read again.
            pool.push("1-b", None, None, True)
    await _ended(reader1)


async def test_a_live_rank_that_never_joins_is_waited_for_at_most_its_lease_timeout() -> None:
    book, _, got0, reader1 = await _job(lease_timeout=0.5)
    start = time.monotonic()
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
        await book.lease("0-a", [(got0[0], 3)])
    assert time.monotonic() - start >= 0.3  # it waited (the tail began in _job)
    await _ended(reader1)


async def test_a_rank_without_a_batcher_is_not_waited_for() -> None:
    # It never joins the tail: waiting for it would last until it acknowledged every
    # record (a rank that dies after that is a DataLossError on the next ack).
    book, pool, got0, reader1 = await _job()
    pool._batching.discard("1-b")
    with anyio.fail_after(1), pytest.raises(ar.OutOfRangeError):
        await book.lease("0-a", [(got0[0], 3)])
    pool.push("0-a", None, None, True)  # rank 0 moved its last example to the pool
    await _ended(reader1)
    book.rank_died("1-b", "its process ended")
    with pytest.raises(ar.DataLossError, match="part-1"):
        book.ack("0-a", [])


async def test_the_records_of_a_settled_item_count_as_acknowledged() -> None:
    # A rank leaving the tail has its last local batch checked for records it had not
    # acknowledged; the items of that batch may be settled (every record acknowledged)
    # by then. The check failed on them, and the batch the rank held was lost with it.
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(["part-0"])
    await queue.close()
    book = LeaseBook(queue, "files")
    book._ranks["0-a"] = Rank(60.0, time.monotonic())
    with anyio.fail_after(5):
        got = await book.lease("0-a", [])
    assert isinstance(got, tuple)
    keys = [b"part-0:0", b"part-0:1", b"part-0:2"]
    book.ack("0-a", [(got[0], 3, None, 0, keys)])
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
        await book.lease("0-a", [(got[0], 3)])
    assert book.status()["leases"] == []  # settled
    assert book.unacked(keys) == []
    with pytest.raises(ar.InvalidArgumentError, match="not a record of a work item"):
        book.pooled([b"part-9:0"])  # a key of no item at all is still refused elsewhere


async def test_a_restored_ranks_pushes_and_drops_of_settled_items_count_once() -> None:
    # A rank restored in the epoch's tail pushes again what it had pushed before the
    # checkpoint; other ranks had acknowledged some of it, and its item is settled. The
    # push marks nothing there, and the restored tail's remainder dropping records that
    # were dropped or acknowledged before counts none of them again.
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(["part-0"])
    await queue.close()
    book = LeaseBook(queue, "files")
    book.keep_ledger()
    book._ranks["0-a"] = Rank(60.0, time.monotonic())
    with anyio.fail_after(5):
        got = await book.lease("0-a", [])
    assert isinstance(got, tuple)
    keys = [b"part-0:0", b"part-0:1", b"part-0:2"]
    book.ack("0-a", [(got[0], 3, None, 0, keys[:2])])
    book.dropped(keys[2:])  # the remainder: the lease is settled
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError):
        await book.lease("0-a", [(got[0], 3)])
    assert book.status()["leases"] == []
    with pytest.raises(ar.InvalidArgumentError, match="not a record of a work item"):
        book.pooled(keys)  # a first push of them would be a mistake
    book.pooled(keys, again=True)
    book.dropped(keys)
    assert book.drops() == {b"part-0:2": 1}
    assert book.ledger() == {b"part-0:0": 1, b"part-0:1": 1}
