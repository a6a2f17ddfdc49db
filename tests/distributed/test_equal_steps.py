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
import functools
import random
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

from .test_leases import anchor_of, write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BATCH = 8
#: Records per file: one file ten times the others.
SKEWED = [30, 300, 25, 31, 29, 27]


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


def tokens_of(key: bytes, value: bytes) -> np.ndarray[Any, Any]:
    """Record ``f-r`` as 1 to 13 tokens (its bytes, repeated; never 0, the padding)."""
    f, r = map(int, bytes(value).split(b"-"))
    n = 1 + (f * 7 + r * 5) % 13
    return np.frombuffer((bytes(value) * n)[:n], dtype=np.uint8).copy()


async def records(paths: list[str]) -> dict[bytes, bytes]:
    """Every record's value by its key (from one local read)."""
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many(paths)
    await queue.close()
    out: dict[bytes, bytes] = {}
    async with ar.TFRecordReader() as reader:
        while True:
            try:
                keys, values = await reader.read_up_to(queue, 1000)
            except ar.OutOfRangeError:
                return out
            out.update(zip(map(bytes, keys), map(bytes, values), strict=True))


def check_tokens(outs: list[Rank], live: list[int], values: dict[bytes, bytes]) -> None:
    """Each dynamic_pad batch is padded to its own longest example (its pad rows repeat
    examples: they count), and each row holds its record's tokens, then zeros."""
    for r in live:
        assert len(outs[r].tokens) == len(outs[r].batches)
        for keys, tokens in zip(outs[r].batches, outs[r].tokens, strict=True):
            lengths = [int(np.count_nonzero(row)) for row in tokens]
            assert tokens.shape == (len(keys), max(lengths)), (tokens.shape, lengths)
            for key, row, n in zip(keys, tokens, lengths, strict=True):
                assert not row[n:].any()
                if key:
                    assert np.array_equal(row[:n], tokens_of(key, values[key]))


async def ask(queue: Any, method: str) -> Any:
    from asyncreader._distributed.awaiting import wait_ref

    return await wait_ref(getattr(queue._actor, method).remote())


class Rank:
    """What one rank saw."""

    def __init__(self) -> None:
        self.batches: list[list[bytes]] = []
        self.padding: list[int] = []
        self.tokens: list[np.ndarray[Any, Any]] = []  # dynamic_pad batches' token arrays
        self.stats: Any = None
        self.error: BaseException | None = None
        self.done = anyio.Event()
        self.stopped = anyio.Event()
        self.settled = anyio.Event()  # stopped, or done without stopping


class Job:
    """The job's ranks, what they saw, and the work queue's state at the end."""

    def __init__(
        self,
        paths: list[str],
        ranks: int,
        read_out: bool,
        stall: bool = False,
        dynamic: bool = False,
    ) -> None:
        self.paths = paths
        self.dynamic = dynamic  # every record, as tokens of its own length, dynamic_pad
        self.read_out = read_out  # kill the rank only once it pushed its last example
        # Kill the rank in its first step, before it joins the tail, once every reader
        # is at its end (its own read its files into its batcher's queue).
        self.stall = stall
        self.held: list[tuple[Any, ...]] = []  # the leases it held then
        self.outs = [Rank() for _ in range(ranks)]
        self.anchors: list[Any] = [None] * ranks
        self.finished = anyio.Event()  # every live rank is done: rank 0 looks at the queue
        self.looked = anyio.Event()
        self.tail: Any = None
        self.ledger: dict[bytes, int] = {}
        self.drops: dict[bytes, int] = {}


async def run_rank(
    job: Job,
    cluster: ar.RayCluster,
    rank: int,
    shuffle: bool,
    remainder: str,
    delay: float,
    *,
    stop_in_tail: bool = False,
) -> None:
    out = job.outs[rank]
    try:
        async with ar.Session(cluster=cluster, rank=rank, world_size=len(job.outs)) as sess:
            await steps(job, sess, rank, shuffle, remainder, delay, stop_in_tail)
            if rank == 0:
                await job.finished.wait()
                work: Any = ar.FIFOQueue(None, shared_name="files")
                job.tail = await ask(work, "tail_status")
                job.ledger = await ask(work, "ledger")
                job.drops = await ask(work, "drops")
                job.looked.set()
            await job.looked.wait()  # the job's actors go with the last rank out
    except ar.AsyncReaderError as exc:
        if not stop_in_tail:
            raise
        out.error = exc  # the killed rank: its session ends with what killed it


async def steps(
    job: Job,
    sess: ar.Session,
    rank: int,
    shuffle: bool,
    remainder: str,
    delay: float,
    stop_in_tail: bool,
) -> None:
    out = job.outs[rank]
    work: Any = ar.FIFOQueue(None, shared_name="files")
    if rank == 0:
        await ask(work, "keep_ledger")
        await work.enqueue_many(job.paths)
        await work.close()
    reader = ar.TFRecordReader()

    async def source() -> Any:
        return await reader.read_up_to(work, 16)

    common: dict[str, Any] = {"enqueue_many": True, "record_refs": reader, "remainder": remainder}
    if job.stall:
        common["capacity"] = 10_000  # its reader never waits for the stalled rank's steps
    if job.dynamic:

        async def example() -> Any:
            key, value = await reader.read(work)
            return key, value, tokens_of(key, value)  # the record, for record_refs

        del common["enqueue_many"]
        batcher = ar.batch(example, BATCH, dynamic_pad=True, **common)
    elif shuffle:
        batcher = ar.maybe_shuffle_batch(source, BATCH, 200, 20, keep, seed=1, **common)
    else:
        batcher = ar.maybe_batch(source, keep, BATCH, **common)
    tail: Any = None
    async for batch in batcher:
        keys = batch[0]
        out.batches.append([bytes(k) for k in keys])
        if job.dynamic:
            out.tokens.append(batch[2])
        out.padding.append(batcher.statistics().last_batch_padding)
        await anyio.sleep(delay)  # the training step
        tail = batcher._steps
        if stop_in_tail and job.stall:
            await stall(job, sess, rank, work)
            return
        if stop_in_tail and tail._joined and (not job.read_out or tail.pushed_all):
            # Its first batch from the pool: it hangs in the step, unacknowledged,
            # and is killed.
            job.anchors[rank] = anchor_of(sess)
            out.stopped.set()
            out.settled.set()
            await job.looked.wait()  # (a dead process would end here)
            return
        await sess.ack(list(keys))  # padded rows have an empty key: skipped
    out.stats = batcher.statistics()
    out.done.set()
    out.settled.set()


async def stall(job: Job, sess: ar.Session, rank: int, work: Any) -> None:
    """Hold the first batch, unacknowledged, in a step that lasts until every reader
    waits at its end or has ended and the other ranks have joined the tail; then the
    rank counts as stopped (it is killed) with its records in its batcher's queue."""
    out = job.outs[rank]
    mine = f"{rank}-"
    with anyio.fail_after(30):
        while True:
            await anyio.sleep(0.05)
            leases = (await ask(work, "lease_status"))["leases"]
            tail = await ask(work, "tail_status")
            joined = [c for c in tail["counts"] if not c.startswith(mine)]
            if (
                tail["tail"]
                and len(joined) == len(job.outs) - 1
                and not any(reading for *_, reading in leases)
            ):
                break
    await anyio.sleep(0.5)  # the others' readers end now, unless they wait for it
    job.held = [
        lease for lease in (await ask(work, "lease_status"))["leases"] if lease[0].startswith(mine)
    ]
    job.anchors[rank] = anchor_of(sess)
    out.stopped.set()
    out.settled.set()
    await job.looked.wait()  # (a dead process would end here)


async def run_job(
    root: Path,
    namespace: str,
    *,
    ranks: int,
    shuffle: bool,
    remainder: str,
    sizes: list[int],
    kill: int | None = None,
    read_out: bool = False,
    stall: bool = False,
    job: Job | None = None,
) -> tuple[list[Rank], list[bytes], Any, dict[bytes, int], dict[bytes, int]]:
    paths, every = await write_files(root, sizes)
    cluster = ar.RayCluster(namespace=namespace)
    if job is None:
        job = Job(paths, ranks, read_out, stall)
    job.paths = paths
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for r in range(ranks):
                delay = 0.03 if r == 0 else 0.0  # rank 0 is slow: the others run ahead
                tg.start_soon(
                    functools.partial(
                        run_rank, job, cluster, r, shuffle, remainder, delay, stop_in_tail=kill == r
                    )
                )
            if kill is not None:
                await job.outs[kill].settled.wait()
            if kill is not None and job.outs[kill].stopped.is_set():
                import ray

                await anyio.to_thread.run_sync(ray.kill, job.anchors[kill])
            for r, out in enumerate(job.outs):
                if r != kill:
                    await out.done.wait()
            job.finished.set()
    expected = every if job.dynamic else await kept(paths)
    return job.outs, expected, job.tail, job.ledger, job.drops


def check_job(
    outs: list[Rank],
    expected: list[bytes],
    tail: Any,
    ledger: dict[bytes, int],
    drops: dict[bytes, int],
    remainder: str,
    live: list[int],
    acked_by_dead: tuple[bytes, ...] = (),
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
        # Besides "pad", padding only levels a rank that ran too far ahead (documented; a
        # slow rank on a loaded machine can do it): it uses every example left, so none
        # is dropped then.
        assert padded == 0 or tail["dropped"] == 0, (padded, tail)
    assert all(outs[r].stats.remainder_dropped == tail["dropped"] for r in live)
    if remainder == "pad":
        assert tail["dropped"] == 0
    # Each kept record delivered once or dropped once: the ledger of acks says so too.
    dropped = collections.Counter(drops)
    assert sum(dropped.values()) == tail["dropped"]
    delivered += acked_by_dead
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
        sizes=SKEWED,
    )
    assert all(o.error is None for o in outs)
    check_job(outs, expected, tail, ledger, drops, remainder, [0, 1, 2])


@pytest.mark.both_backends
@pytest.mark.parametrize("remainder", ["drop", "smaller", "pad"])
async def test_dynamic_pad_batches_are_levelled_and_padded_to_their_own_longest(
    namespace: str, tmp_path: Path, remainder: str
) -> None:
    # Records of 1 to 13 tokens, batched with dynamic_pad=True: the pool pads each of
    # its batches to the longest of its own examples, as a rank's own batches are.
    job = Job([], 3, read_out=False, dynamic=True)
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path,
        namespace,
        ranks=3,
        shuffle=False,
        remainder=remainder,
        sizes=SKEWED,
        job=job,
    )
    assert all(o.error is None for o in outs)
    check_job(outs, expected, tail, ledger, drops, remainder, [0, 1, 2])
    check_tokens(outs, [0, 1, 2], await records(job.paths))


@pytest.mark.parametrize(
    ("remainder", "read_out", "dynamic"),
    [
        ("drop", False, False),
        ("pad", False, False),
        ("drop", True, False),
        ("smaller", False, True),
        ("pad", False, True),
    ],
)
async def test_a_rank_killed_in_the_tail_leaves_the_others_equal(
    ray_env: RayEnv,
    namespace: str,
    tmp_path: Path,
    remainder: str,
    read_out: bool,
    dynamic: bool,
) -> None:
    # Rank 2 dies holding a batch from the pool, unacknowledged: the batch goes back to
    # the pool, and the rounds go on with two ranks. Killed at its first pool batch, it
    # may still be reading a file (read again by another rank); killed once it pushed
    # its last example, its files are not read again. With dynamic_pad the batch is
    # padded again, to the longest examples of the batch it ends up in.
    job = Job([], 3, read_out=read_out, dynamic=dynamic)
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path,
        namespace,
        ranks=3,
        shuffle=False,
        remainder=remainder,
        sizes=SKEWED,
        kill=2,
        job=job,
    )
    assert outs[2].stopped.is_set()
    assert (outs[0].error, outs[1].error) == (None, None)
    assert len(tail["gone"]) == 1, tail
    acked = tuple(k for b in outs[2].batches[:-1] for k in b if k)
    check_job(outs, expected, tail, ledger, drops, remainder, [0, 1], acked)
    if dynamic:
        check_tokens(outs, [0, 1], await records(job.paths))


@pytest.mark.both_backends
async def test_a_rank_killed_before_it_joins_the_tail_loses_nothing(
    namespace: str, tmp_path: Path
) -> None:
    # Rank 2 holds its first batch, unacknowledged, in a long step; meanwhile its reader
    # reads its files to the end into its batcher's queue, and the others join the tail.
    # It is killed before its batcher joins the tail: its leases come back, and the
    # others' readers (which waited for it instead of ending) read its records again.
    job = Job([], 3, read_out=False, stall=True)
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path,
        namespace,
        ranks=3,
        shuffle=False,
        remainder="drop",
        sizes=[30, 25, 31, 29, 27, 12, 20, 33],
        kill=2,
        job=job,
    )
    assert outs[2].stopped.is_set()
    assert job.held  # it held leases when it died
    assert all(not reading for *_, reading in job.held)  # read to the end
    assert (outs[0].error, outs[1].error) == (None, None)
    assert len(tail["gone"]) == 1, tail
    check_job(outs, expected, tail, ledger, drops, "drop", [0, 1])


@pytest.mark.both_backends
async def test_equal_steps_on_both_backends(namespace: str, tmp_path: Path) -> None:
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path, namespace, ranks=2, shuffle=False, remainder="smaller", sizes=[12, 120, 9]
    )
    check_job(outs, expected, tail, ledger, drops, "smaller", [0, 1])


@pytest.mark.stress
@pytest.mark.parametrize("seed", range(6))
async def test_equal_steps_stress(
    ray_env: RayEnv, namespace: str, tmp_path: Path, seed: int
) -> None:
    rng = random.Random(seed)
    sizes = [rng.choice([5, 20, 40, 400]) for _ in range(rng.randint(3, 9))]
    remainder = ("drop", "smaller", "pad")[seed % 3]
    kill = 2 if seed % 2 else None
    outs, expected, tail, ledger, drops = await run_job(
        tmp_path,
        namespace,
        ranks=4,
        shuffle=seed % 4 < 2,
        remainder=remainder,
        sizes=sizes,
        kill=kill,
        read_out=seed % 4 == 3,
    )
    if kill is not None and not outs[kill].stopped.is_set():
        kill = None  # it had its last batch before any from the pool: nothing to kill
    live = [r for r in range(4) if r != kill]
    acked = () if kill is None else tuple(k for b in outs[kill].batches[:-1] for k in b if k)
    check_job(outs, expected, tail, ledger, drops, remainder, live, acked)


async def run_record_batches(
    root: Path,
    namespace: str,
    records: list[int],
    *,
    sizes: list[int],
    delay: float = 0.0,
    dynamic_pad: bool = False,
) -> tuple[list[list[list[bytes]]], list[BaseException | None], list[bytes], dict[bytes, int]]:
    """Two ranks batching examples that hold a RecordBatch: rank ``r`` reads
    ``records[r]`` records per example (the component's length); return each rank's
    batches' keys, its error, every record's key, and the ledger of acks."""
    paths, every = await write_files(root, sizes)
    cluster = ar.RayCluster(namespace=namespace)
    batches: list[list[list[bytes]]] = [[], []]
    errors: list[BaseException | None] = [None, None]
    ledger: dict[bytes, int] = {}
    finished = anyio.Event()
    looked = anyio.Event()

    async def rank(r: int) -> None:
        try:
            async with ar.Session(cluster=cluster, rank=r, world_size=2) as sess:
                work: Any = ar.FIFOQueue(None, shared_name="files")
                if r == 0:
                    await ask(work, "keep_ledger")
                    await work.enqueue_many(paths)
                    await work.close()
                reader = ar.TFRecordReader()

                async def source() -> Any:
                    got = await reader.read_batch(work, records[r])
                    return (got.keys(), got)  # each example: its records' keys and values

                batcher = ar.batch(source, 2, dynamic_pad=dynamic_pad, remainder="pad")
                async for keys, _ in batcher:
                    # Without record_refs padded rows keep their keys: the statistics
                    # say how many rows (the last ones) are padding.
                    real = len(keys) - batcher.statistics().last_batch_padding
                    batches[r].append([bytes(k) for row in keys[:real] for k in row])
                    await anyio.sleep(delay if r == 0 else 0.0)
                    await sess.ack([k for k in batches[r][-1] if k])  # b"": dynamic_pad
                if r == 0:
                    await finished.wait()
                    ledger.update(await ask(work, "ledger"))
                    looked.set()
                else:
                    finished.set()
                await looked.wait()
        except ar.AsyncReaderError as exc:
            errors[r] = exc
            finished.set()
            looked.set()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rank, 0)
            tg.start_soon(rank, 1)
    return batches, errors, every, ledger


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("lengths", "dynamic_pad"), [([4, 4], False), ([4, 2], True)], ids=["fixed", "dynamic_pad"]
)
async def test_examples_holding_a_record_batch_are_levelled(
    namespace: str, tmp_path: Path, lengths: list[int], dynamic_pad: bool
) -> None:
    # Each example holds a RecordBatch component (its records as strings); the pool joins
    # such examples like any other, and each record arrives once. With dynamic_pad=True
    # the component's length is None on both ranks: the pool joins rank 0's examples of
    # four records with rank 1's of two (padded with empty strings, which acknowledging
    # skips).
    batches, errors, every, ledger = await run_record_batches(
        tmp_path, namespace, lengths, sizes=[8, 96, 16, 8], delay=0.02, dynamic_pad=dynamic_pad
    )
    assert errors == [None, None]
    assert len(batches[0]) == len(batches[1]) > 0
    delivered = [k for rank in batches for b in rank for k in b if k]
    assert sorted(delivered) == sorted(every)
    assert collections.Counter(ledger) == collections.Counter(delivered)


@pytest.mark.both_backends
async def test_ranks_batching_examples_of_another_layout_are_refused_up_front(
    namespace: str, tmp_path: Path
) -> None:
    # Rank 1's examples hold two records, rank 0's four: the pool could not join them.
    # Every rank learns it at its first batches, long before the epoch's tail.
    batches, errors, _, _ = await run_record_batches(
        tmp_path, namespace, [4, 2], sizes=[64] * 8, delay=0.05
    )
    for error in errors:
        assert isinstance(error, ar.InvalidArgumentError), errors
        message = str(error)
        assert "queue 'files': component '0' of the examples of rank" in message
        assert "[2]" in message
        assert "[4]" in message
        assert "one layout" in message
    assert all(len(b) < 10 for b in batches), [len(b) for b in batches]  # 64 each in all


@pytest.mark.both_backends
async def test_ranks_stepping_together_go_on_when_the_tail_begins_between_their_takes(
    namespace: str, tmp_path: Path
) -> None:
    # Ranks that step together (an all-reduce in each training step, as in DDP). At
    # step 2 rank 0 takes its batch before the tail begins, then waits in its step for
    # rank 1; rank 1 takes its batch after the tail began, so it joins the tail, whose
    # rounds start once every rank joined. Rank 0 must join without taking another
    # batch, or both wait until rank 0's lease_timeout (60 s) has passed.
    paths, every = await write_files(tmp_path, [30, 30, 9])
    cluster = ar.RayCluster(namespace=namespace)
    outs = [Rank(), Rank()]
    arrived: dict[int, list[int]] = collections.defaultdict(list)
    reduced: dict[int, anyio.Event] = collections.defaultdict(anyio.Event)
    # Each rank's reader stops after 16 records until the tail is due: so each holds
    # one of the first two files (two local batches each), and the last is not leased.
    released = anyio.Event()
    tail_began = anyio.Event()
    ledger: dict[bytes, int] = {}

    async def all_reduce(rank: int, step: int) -> None:
        arrived[step].append(rank)
        if len(arrived[step]) == len(outs):
            reduced[step].set()
        await reduced[step].wait()

    async def rank_job(rank: int) -> None:
        out = outs[rank]
        async with ar.Session(cluster=cluster, rank=rank, world_size=2) as sess:
            work: Any = ar.FIFOQueue(None, shared_name="files")
            if rank == 0:
                await ask(work, "keep_ledger")
                await work.enqueue_many(paths[:2])
            reader = ar.TFRecordReader()
            read = 0

            async def source() -> Any:
                nonlocal read
                if read >= 2 * BATCH:
                    await released.wait()
                keys, values = await reader.read_up_to(work, 4)
                read += len(keys)
                return keys, values

            batcher = ar.batch(
                source, BATCH, enqueue_many=True, record_refs=reader, remainder="smaller"
            )
            step = 0
            while True:
                step += 1
                if rank == 1 and step == 2:
                    await tail_began.wait()
                    steps: Any = batcher._steps
                    await steps._tail.wait()  # this rank has seen it too
                try:
                    keys, _ = await batcher.dequeue()
                except ar.OutOfRangeError:
                    break
                keys = [bytes(k) for k in keys]
                out.batches.append(keys)
                if rank == 0 and step == 2:
                    await work.enqueue_many(paths[2:])
                    await work.close()
                    released.set()
                    while not (await ask(work, "tail_status"))["tail"]:  # noqa: ASYNC110
                        await anyio.sleep(0.01)  # (the actor's state: polled)
                    tail_began.set()
                await sess.ack([k for k in keys if k])
                await all_reduce(rank, step)
            await all_reduce(rank, 0)  # both are done: rank 0 looks at the ledger
            if rank == 0:
                ledger.update(await ask(work, "ledger"))
            await all_reduce(rank, -1)

    with anyio.fail_after(40):
        async with anyio.create_task_group() as tg:
            for r in range(2):
                tg.start_soon(rank_job, r)
    assert len(outs[0].batches) == len(outs[1].batches), [len(o.batches) for o in outs]
    delivered = [k for o in outs for b in o.batches for k in b if k]
    assert sorted(delivered) == sorted(every)
    assert ledger == dict.fromkeys(every, 1)
