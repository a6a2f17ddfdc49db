"""Deterministic jobs: with the same seeds and rank count, each rank's stream is fixed.

Ranks are Sessions of this process (``deterministic=True``) reading skewed TFRecord
files from one shared work queue through a filtering batcher. One rank trains slower
than the other, then the other way round: a dynamically balanced job gives the fast rank
more files, a deterministic one gives rank ``r`` the items ``r, r + N, ...`` and plans
the epoch's tail in rank order, so both runs must give every rank the same batches. A
job checkpoint restored with as many ranks continues each rank's stream exactly; a rank
that dies breaks the schedule but never exactly-once.
"""

from __future__ import annotations

import collections
import functools
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np
import pytest

import asyncreader as ar

from .test_equal_steps import ask, keep, kept
from .test_leases import anchor_of, write_files

if TYPE_CHECKING:
    from pathlib import Path

    from .conftest import RayEnv

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

BATCH = 8
SIZES = [30, 60, 25, 31, 9, 27, 40, 12, 18, 22]


class Job:
    """What each rank saw, and the work queue's ledger at the end."""

    def __init__(self, ranks: int) -> None:
        self.batches: list[list[list[bytes]]] = [[] for _ in range(ranks)]
        self.tokens: list[list[Any]] = [[] for _ in range(ranks)]  # dynamic_pad's
        self.acked: list[list[bytes]] = [[] for _ in range(ranks)]
        self.done = [anyio.Event() for _ in range(ranks)]
        self.checkpoint: bytes | None = None
        self.anchor: Any = None
        self.stopped = anyio.Event()  # the rank to kill stopped acknowledging
        self.finished = anyio.Event()
        self.looked = anyio.Event()
        self.ledger: dict[bytes, int] = {}
        self.drops: dict[bytes, int] = {}
        self.tail: Any = None


async def run_rank(
    job: Job,
    cluster: ar.RayCluster,
    rank: int,
    paths: list[str],
    *,
    remainder: str,
    delay: float,
    shuffle: bool | str,
    checkpoint_at: int | None,
    restore: bytes | None,
    kill_at: int | None,
    dynamic: bool = False,
    gate: bool = False,
) -> None:
    try:
        await steps(
            job,
            cluster,
            rank,
            paths,
            remainder,
            delay,
            shuffle,
            checkpoint_at,
            restore,
            kill_at,
            dynamic,
            gate,
        )
    except ar.AsyncReaderError:
        if kill_at is None:
            raise  # the killed rank's session ends with what killed it


async def steps(
    job: Job,
    cluster: ar.RayCluster,
    rank: int,
    paths: list[str],
    remainder: str,
    delay: float,
    shuffle: bool | str,
    checkpoint_at: int | None,
    restore: bytes | None,
    kill_at: int | None,
    dynamic: bool,
    gate: bool,
) -> None:
    ranks = len(job.batches)
    async with ar.Session(
        cluster=cluster, rank=rank, world_size=ranks, deterministic=True, restore=restore
    ) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        if rank == 0:
            await ask(work, "keep_ledger")
            await work.enqueue_many(paths)
            await work.close()
        reader = ar.TFRecordReader()

        async def source() -> Any:
            return await reader.read_up_to(work, 16)

        common: dict[str, Any] = {
            "enqueue_many": True,
            "record_refs": reader,
            "remainder": remainder,
        }

        async def ragged() -> Any:
            # Each read's records as tokens, as wide as its longest: widths vary.
            keys, values = await reader.read_up_to(work, 16)
            tokens = np.zeros((len(values), max(map(len, values))), dtype=np.uint8)
            for i, value in enumerate(values):
                tokens[i, : len(value)] = np.frombuffer(value, dtype=np.uint8)
            return keys, values, tokens

        if dynamic:
            batcher: Any = ar.maybe_batch(
                ragged,
                lambda example: keep(example[:2]),
                BATCH,
                capacity=2 * BATCH,
                dynamic_pad=True,
                **common,
            )
        elif shuffle == "plain":
            batcher = ar.shuffle_batch(source, BATCH, 64, 16, seed=3, **common)
        elif shuffle:
            batcher = ar.maybe_shuffle_batch(source, BATCH, 64, 16, keep, seed=3, **common)
        else:
            # A small queue: a slow rank's reader soon waits for its training, as in a
            # real job (balanced dynamically, the fast rank would take more files).
            batcher = ar.maybe_batch(source, keep, BATCH, capacity=2 * BATCH, **common)
        async for keys, *rest in batcher:
            batch = [bytes(k) for k in keys]
            job.batches[rank].append(batch)
            if dynamic:
                job.tokens[rank].append(rest[1])
            await anyio.sleep(delay)  # the training step
            if kill_at is not None and len(job.batches[rank]) == kill_at:
                job.anchor = anchor_of(sess)  # dies in its step, unacknowledged
                job.stopped.set()
                await job.looked.wait()
                return
            await sess.ack([k for k in batch if k])  # padded rows have an empty key
            job.acked[rank] += [k for k in batch if k]
            if checkpoint_at is not None and len(job.batches[rank]) == checkpoint_at:
                if gate and rank == ranks - 1:
                    await in_the_pool(work)
                job.checkpoint = await sess.checkpoint(timeout=60)
                job.done[rank].set()
                return  # the job stops here: a restore goes on
        job.done[rank].set()
        if rank == 0:
            await job.finished.wait()
            job.ledger = await ask(work, "ledger")
            job.drops = await ask(work, "drops")
            job.tail = await ask(work, "tail_status")
            job.looked.set()
        await job.looked.wait()  # the job's actors go with the last rank out


async def in_the_pool(work: Any) -> None:
    """Wait until rank 0 waits in the epoch's tail for a batch of the plan."""
    with anyio.fail_after(30):
        while True:
            status = await ask(work, "tail_status")
            if any(client.startswith("0-") for client in status["counts"]):
                return
            await anyio.sleep(0.05)


async def run_job(
    paths: list[str],
    namespace: str,
    delays: list[float],
    *,
    remainder: str = "pad",
    shuffle: bool | str = False,
    checkpoint_at: int | None = None,
    restore: bytes | None = None,
    kill: tuple[int, int] | None = None,
    dynamic: bool = False,
    lease_timeout: float = 60.0,
    gate: bool = False,
) -> Job:
    """Run a deterministic job of ``len(delays)`` ranks (rank ``r`` sleeps ``delays[r]``
    per step); ``kill``: (rank, step) whose anchor is killed in that step."""
    job = Job(len(delays))
    cluster = ar.RayCluster(namespace=namespace, lease_timeout=lease_timeout)
    with anyio.fail_after(90):
        async with anyio.create_task_group() as tg:
            for r, delay in enumerate(delays):
                tg.start_soon(
                    functools.partial(
                        run_rank, job, cluster, r, paths, remainder=remainder, delay=delay,
                        shuffle=shuffle, checkpoint_at=checkpoint_at, restore=restore,
                        kill_at=kill[1] if kill is not None and kill[0] == r else None,
                        dynamic=dynamic, gate=gate,
                    )
                )  # fmt: skip
            if kill is not None:
                import ray

                await job.stopped.wait()
                await anyio.to_thread.run_sync(ray.kill, job.anchor)
            for r, done in enumerate(job.done):
                if kill is None or r != kill[0]:
                    await done.wait()
            if checkpoint_at is None:
                job.finished.set()
            else:
                job.looked.set()
    return job


def check_exactly_once(job: Job, expected: list[bytes]) -> None:
    """Every kept record acknowledged once, or dropped once by the remainder."""
    delivered = [k for acked in job.acked for k in acked]
    dropped = collections.Counter(job.drops)
    assert sorted(delivered + list(dropped.elements())) == sorted(expected)
    assert collections.Counter(job.ledger) == collections.Counter(delivered)


@pytest.mark.parametrize(
    ("remainder", "shuffle"),
    [
        ("pad", False),
        pytest.param("smaller", False, marks=pytest.mark.stress),
        pytest.param("drop", True, marks=pytest.mark.stress),
    ],
)
async def test_per_rank_streams_do_not_depend_on_timing(
    ray_env: RayEnv, tmp_path: Path, remainder: str, shuffle: bool
) -> None:
    paths, _ = await write_files(tmp_path, SIZES)
    expected = await kept(paths)
    slow0 = await run_job(
        paths, ray_env.namespace(), [0.03, 0.0], remainder=remainder, shuffle=shuffle
    )
    slow1 = await run_job(
        paths, ray_env.namespace(), [0.0, 0.03], remainder=remainder, shuffle=shuffle
    )
    for job in (slow0, slow1):
        assert len(job.batches[0]) == len(job.batches[1])  # equal steps
        check_exactly_once(job, expected)
    # Each rank's batches, keys in order, are the same in both runs, tail included.
    assert slow0.batches == slow1.batches
    assert slow0.tail["padded"] == slow1.tail["padded"]
    assert slow0.tail["dropped"] == slow1.tail["dropped"]
    if remainder == "pad":
        assert slow0.tail["padded"] > 0  # the tail did level and pad: it is covered
    # Rank r read the files r, r + 2, ... (the schedule): its first batch is of them.
    for r in range(2):
        files = {k.partition(b":")[0] for k in slow0.batches[r][0]}
        assert files <= {p.encode() for p in paths[r::2]}, (r, files)


async def test_dynamic_pad_streams_do_not_depend_on_timing(ray_env: RayEnv, tmp_path: Path) -> None:
    # dynamic_pad batches of the tail's plan hold the same examples, padded the same
    # way, whichever rank is slow.
    paths, _ = await write_files(tmp_path, SIZES)
    expected = await kept(paths)
    runs = [
        await run_job(paths, ray_env.namespace(), delays, remainder="pad", dynamic=True)
        for delays in ([0.03, 0.0], [0.0, 0.03])
    ]
    for job in runs:
        assert len(job.batches[0]) == len(job.batches[1])  # equal steps
        check_exactly_once(job, expected)
    assert runs[0].batches == runs[1].batches
    assert runs[0].tail["padded"] > 0  # the tail did level and pad: it is covered
    for r in range(2):
        for a, b in zip(runs[0].tokens[r], runs[1].tokens[r], strict=True):
            assert a.shape == b.shape
            assert np.array_equal(a, b)


@pytest.mark.stress
@pytest.mark.both_backends
async def test_three_ranks_on_both_backends(namespace: str, tmp_path: Path) -> None:
    paths, _ = await write_files(tmp_path, [12, 60, 9, 33, 20])
    expected = await kept(paths)
    job = await run_job(paths, namespace, [0.0, 0.02, 0.0], remainder="smaller")
    check_exactly_once(job, expected)
    assert len({len(b) for b in job.batches}) == 1
    # Rank 1 read files 1 and 4 before the tail: its first batches hold their records.
    assert {k.partition(b":")[0] for k in job.batches[1][0]} == {paths[1].encode()}


@pytest.mark.parametrize(
    "shuffle",
    [False, "plain", pytest.param(True, marks=pytest.mark.stress)],
    ids=["batch", "shuffle", "maybe"],
)
async def test_a_restore_with_as_many_ranks_continues_each_rank_exactly(
    ray_env: RayEnv, tmp_path: Path, shuffle: bool | str
) -> None:
    # Restored with as many ranks, each rank goes on with the uninterrupted run's
    # batches. A shuffle buffer is in the rank's part of the job checkpoint: it goes on
    # drawing the same batches, and the records it holds are not read again.
    paths, keys = await write_files(tmp_path, SIZES)
    expected = keys if shuffle == "plain" else await kept(paths)
    ns = ray_env.namespace
    whole = await run_job(paths, ns(), [0.02, 0.0], shuffle=shuffle)
    before = await run_job(paths, ns(), [0.0, 0.02], shuffle=shuffle, checkpoint_at=3)
    assert before.checkpoint is not None
    after = await run_job(paths, ns(), [0.02, 0.0], shuffle=shuffle, restore=before.checkpoint)
    for r in range(2):
        assert before.batches[r] == whole.batches[r][:3]
        assert after.batches[r] == whole.batches[r][3:], r
    delivered = [k for job in (before, after) for acked in job.acked for k in acked]
    dropped = list(collections.Counter(after.drops).elements())
    assert sorted(delivered + dropped) == sorted(expected)
    # The restored job acknowledged each record once (the buffers' records included).
    assert collections.Counter(after.ledger) == collections.Counter(
        k for acked in after.acked for k in acked
    )


async def near_the_end(
    ray_env: RayEnv, tmp_path: Path, back: int, shuffle: bool | str = False, **options: Any
) -> tuple[list[bytes], Job, Job, Job, int]:
    """The records kept, an uninterrupted run, a run checkpointed ``back`` steps before
    the end of its epoch (``options``: its ``run_job`` options), a restore of that
    checkpoint, and the checkpoint's step."""
    paths, keys = await write_files(tmp_path, SIZES)
    ns = ray_env.namespace
    whole = await run_job(paths, ns(), [0.02, 0.0], shuffle=shuffle)
    at = len(whole.batches[0]) - back
    before = await run_job(paths, ns(), [0.0, 0.02], shuffle=shuffle, checkpoint_at=at, **options)
    assert before.checkpoint is not None
    after = await run_job(paths, ns(), [0.02, 0.0], shuffle=shuffle, restore=before.checkpoint)
    return keys if shuffle == "plain" else await kept(paths), whole, before, after, at


def once_across(before: Job, cut: list[int], after: Job) -> list[bytes]:
    """The records delivered before each rank's step of the checkpoint and after the
    restore, with those the restored job's remainder dropped, sorted."""
    delivered = [k for r, n in enumerate(cut) for batch in before.batches[r][:n] for k in batch]
    delivered += [k for acked in after.acked for k in acked]
    return sorted([k for k in delivered if k] + list(collections.Counter(after.drops).elements()))


async def test_a_checkpoint_as_a_ranks_share_runs_out_restores_each_rank_exactly(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Three steps before the end of the epoch rank 0 has read its share: its reader waits
    # at the end of the queue for rank 1's items (rank 1 could still die and give them
    # back), and its enqueue step, its last example enqueued, waits for that read. The
    # checkpoint does not wait for it (it holds nothing; rank 1 waits in the checkpoint
    # for rank 0, so waiting would time out), and restores each rank's stream exactly.
    expected, whole, before, after, at = await near_the_end(ray_env, tmp_path, 3)
    for r in range(2):
        assert before.batches[r] == whole.batches[r][:at]
        assert after.batches[r] == whole.batches[r][at:], r
    assert once_across(before, [at, at], after) == sorted(expected)


async def test_a_rank_whose_reader_took_part_restores_from_its_own_step(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Two steps before the end rank 1 calls checkpoint() at its 12th step while rank 0,
    # at its 11th, waits for its 12th batch: that comes from the epoch's tail, after
    # rank 1's share. Rank 0's reader, waiting at the end of the queue, takes part for
    # it (its later checkpoint() call gets the same bytes): rank 0's part is after 11
    # steps. Rank 1's reader had read its share to the end. Restored, rank 1's reader
    # takes its leases again (skipping what its buffers hold) rather than leaving them
    # to wait for ever, and each rank goes on from its own step of the checkpoint.
    expected, whole, before, after, at = await near_the_end(ray_env, tmp_path, 2)
    cut = [at - 1, at]
    for r in range(2):
        assert before.batches[r][: cut[r]] == whole.batches[r][: cut[r]]
        assert after.batches[r] == whole.batches[r][cut[r] :], r
    assert once_across(before, cut, after) == sorted(expected)


@pytest.mark.parametrize("shuffle", [False, True], ids=["batch", "maybe-shuffle"])
async def test_a_rank_waiting_in_the_tail_takes_part_in_a_checkpoint(
    ray_env: RayEnv, tmp_path: Path, shuffle: bool
) -> None:
    # Rank 0's share is read long before rank 1's: its readers stop waiting for rank 1
    # (lease_timeout after the queue ran empty) and its trainer waits in the tail's pool
    # for a batch of the plan, which waits for rank 1's share. Rank 1 then calls
    # checkpoint(): rank 0 takes part from the pool, its part holding what it pushed to
    # the pool (as record references, in the order its shuffle gave them) and the count
    # it joined with. Restored with as many ranks, it pushes the same examples again,
    # the tail's plan is the same, and each rank goes on exactly.
    from asyncreader._runtime import state_codec

    expected, whole, before, after, at = await near_the_end(
        ray_env, tmp_path, 2, shuffle, lease_timeout=2.0, gate=True
    )
    assert before.checkpoint is not None
    parts = state_codec.decode(before.checkpoint)["ranks"]
    counts = [part["batch_counts"] for part in parts]
    assert [list(c.values()) for c in counts] == [[at - 1], [at]]
    tail = tail_part(before.checkpoint, 0)
    assert tail["joined"] == at - 1
    assert tail["pushed"]
    assert tail["window"] is not None
    # Rank 0's part is after its 11th batch, rank 1's after its 12th.
    cut = [at - 1, at]
    for r in range(2):
        assert before.batches[r][: cut[r]] == whole.batches[r][: cut[r]]
        assert after.batches[r] == whole.batches[r][cut[r] :], r
    assert once_across(before, cut, after) == sorted(expected)


def slowed_in_the_tail(monkeypatch: pytest.MonkeyPatch, method: str, seconds: float) -> list[bool]:
    """Make rank 0's tail calls of ``method`` (``"tail_push"``, or ``"reread"`` for the
    examples a restored rank pushes again) take ``seconds`` longer while the flag the
    result holds is set."""
    from asyncreader._distributed.tail import EqualSteps

    on = [False]
    call, reread = EqualSteps._call, EqualSteps._reread

    async def slow_call(self: EqualSteps, name: str, *args: Any) -> Any:
        if on[0] and name == method and self._backend.rank == 0:
            await anyio.sleep(seconds)
        return await call(self, name, *args)

    async def slow_reread(self: EqualSteps, saved: Any) -> Any:
        if on[0] and method == "reread" and self._backend.rank == 0 and self._joined:
            await anyio.sleep(seconds)
        return await reread(self, saved)

    monkeypatch.setattr(EqualSteps, "_call", slow_call)
    monkeypatch.setattr(EqualSteps, "_reread", slow_reread)
    return on


def tail_part(checkpoint: bytes, rank: int) -> dict[str, Any]:
    """Rank ``rank``'s part of the epoch's tail in a job checkpoint."""
    from asyncreader._runtime import state_codec

    parts = state_codec.decode(checkpoint)["ranks"]
    [tail] = [b["tail"] for b in parts[rank]["pipeline"].values() if "tail" in b]
    return tail  # type: ignore[no-any-return]


async def test_a_rank_still_pushing_to_the_tail_saves_its_pipeline(
    ray_env: RayEnv, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As above, but rank 0's pushes to the pool are slow: rank 1's checkpoint comes while
    # rank 0 still moves its last examples there. Each one is in its local queue or among
    # the pushed ones at every moment, so its part holds its pipeline all the same and
    # each rank goes on exactly. Restored, rank 0 pushes its saved examples again, slowly,
    # and a second checkpoint comes meanwhile: the examples it had yet to push again are
    # saved as they were, and a restore of that one goes on exactly too.
    slow = slowed_in_the_tail(monkeypatch, "tail_push", 1.0)
    paths, _ = await write_files(tmp_path, SIZES)
    expected = await kept(paths)
    ns = ray_env.namespace
    whole = await run_job(paths, ns(), [0.02, 0.0])
    at = len(whole.batches[0]) - 2
    slow[0] = True
    before = await run_job(paths, ns(), [0.0, 0.02], checkpoint_at=at, lease_timeout=2.0, gate=True)
    slow[0] = False
    assert before.checkpoint is not None
    first = tail_part(before.checkpoint, 0)
    assert first["joined"] == at - 1
    assert first["pushed"]
    cut = [at - 1, at]
    after = await run_job(paths, ns(), [0.02, 0.0], restore=before.checkpoint)
    for r in range(2):
        assert after.batches[r] == whole.batches[r][cut[r] :], r
    assert once_across(before, cut, after) == sorted(expected)

    monkeypatch.undo()
    slow = slowed_in_the_tail(monkeypatch, "reread", 3.0)
    slow[0] = True
    # Rank 1 checkpoints after its first batch since the restore, while rank 0 (in the
    # pool from the start) reads the examples it pushed before again.
    again = await run_job(
        paths, ns(), [0.0, 0.02], restore=before.checkpoint, checkpoint_at=1,
        lease_timeout=2.0, gate=True,
    )  # fmt: skip
    slow[0] = False
    assert again.checkpoint is not None
    second = tail_part(again.checkpoint, 0)
    assert (second["joined"], second["pushed"]) == (first["joined"], first["pushed"])
    last = await run_job(paths, ns(), [0.02, 0.0], restore=again.checkpoint)
    # Rank 0's part of the second checkpoint is at its first step since the restore (it
    # took part from the pool), rank 1's after its first batch.
    cut_again = [0, 1]
    for r in range(2):
        stream = before.batches[r][: cut[r]] + again.batches[r][: cut_again[r]]
        assert stream + last.batches[r] == whole.batches[r], r


async def test_a_shuffle_checkpoint_restored_with_other_ranks_delivers_each_record_once(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Three ranks restore a two-rank checkpoint: the ranks' buffers are not restored, the
    # records they held come back through the leases, each once.
    paths, keys = await write_files(tmp_path, SIZES)
    ns = ray_env.namespace
    before = await run_job(paths, ns(), [0.0, 0.02], shuffle="plain", checkpoint_at=3)
    assert before.checkpoint is not None
    after = await run_job(paths, ns(), [0.0, 0.01, 0.0], shuffle="plain", restore=before.checkpoint)
    delivered = [k for job in (before, after) for acked in job.acked for k in acked]
    dropped = list(collections.Counter(after.drops).elements())
    assert sorted(delivered + dropped) == sorted(keys)


def ref_sections(node: Any) -> list[dict[str, Any]]:
    """The sections of record references in a saved pipeline."""
    if isinstance(node, dict):
        if {"works", "work", "record", "crc32c", "rest"} == set(node):
            return [node]
        return [s for v in node.values() for s in ref_sections(v)]
    if isinstance(node, (list, tuple)):
        return [s for v in node for s in ref_sections(v)]
    return []


async def one_rank(
    cluster: ar.RayCluster,
    paths: list[str],
    restore: bytes | None = None,
    key: bytes | None = None,
) -> tuple[list[bytes], bytes | None]:
    """A deterministic job of one rank shuffling its records; without ``restore`` it
    checkpoints after its third step. Return the keys it acknowledged, and the bytes."""
    acked: list[bytes] = []
    state = None
    async with ar.Session(
        cluster=cluster, world_size=1, deterministic=True, restore=restore, checkpoint_key=key
    ) as sess:
        work: Any = ar.FIFOQueue(None, shared_name="files")
        await work.enqueue_many(paths)
        await work.close()
        reader = ar.TFRecordReader()

        async def source() -> Any:
            return await reader.read_up_to(work, 16)

        batches = ar.shuffle_batch(
            source, BATCH, 64, 16, seed=3, enqueue_many=True, record_refs=reader,
            remainder="smaller",
        )  # fmt: skip
        async for keys, _ in batches:
            await sess.ack(list(keys))
            acked += [bytes(k) for k in keys]
            if restore is None and len(acked) == 3 * BATCH:
                state = await sess.checkpoint(timeout=30)
                break
    return acked, state


@pytest.mark.both_backends
async def test_a_ranks_pipeline_naming_a_file_the_job_does_not_enqueue_is_refused(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # An unsigned job checkpoint's pipeline part may only make a rank read again records
    # of the work items the restored job enqueues, as a local checkpoint's.
    from asyncreader._runtime import state_codec

    paths, keys = await write_files(tmp_path, [30, 40, 20])
    other = tmp_path / "other.tfrecord"
    other.write_bytes((tmp_path / "part-000.tfrecord").read_bytes())
    with anyio.fail_after(60):
        first, state = await one_rank(ar.RayCluster(namespace=ray_env.namespace()), paths)
        assert state is not None
        tree = state_codec.decode(state)
        sections = ref_sections(tree["ranks"][0]["pipeline"])
        assert sections  # the shuffle buffer's records, as references
        # Untouched, the restore delivers the rest, each record once.
        rest, _ = await one_rank(ar.RayCluster(namespace=ray_env.namespace()), paths, state)
        assert sorted(first + rest) == sorted(keys)
        for section in sections:
            section["works"] = [str(other).encode() for _ in section["works"]]
        bad = state_codec.encode(tree)
        with pytest.raises(ar.InvalidArgumentError, match=r"read b'.*other\.tfrec"):
            await one_rank(ar.RayCluster(namespace=ray_env.namespace()), paths, bad)


async def test_a_signed_job_checkpoint_restores_a_ranks_shuffle(
    ray_env: RayEnv, tmp_path: Path
) -> None:
    # Signed, the pipeline's references are trusted: read again once the work queue's
    # items are back, the rest of the stream is every record left, once.
    paths, keys = await write_files(tmp_path, [30, 40, 20])
    key = b"k" * 32
    with anyio.fail_after(60):
        cluster = ar.RayCluster(namespace=ray_env.namespace())
        first, state = await one_rank(cluster, paths, key=key)
        assert state is not None
        cluster = ar.RayCluster(namespace=ray_env.namespace())
        rest, _ = await one_rank(cluster, paths, state, key=key)
    assert len(first) == 3 * BATCH
    assert sorted(first + rest) == sorted(keys)


@pytest.mark.parametrize(
    ("pipeline", "match"),
    [
        ([1, 2], "rank 0's pipeline"),
        ({"batcher/0": {"works": [b"a"], "work": np.array([1], np.uint32),
                         "record": np.array([0], np.int64), "crc32c": np.array([0], np.uint32),
                         "rest": {}}}, "out of range"),
        ({"batcher/0": {"works": [b"a"], "work": np.array([0, 0], np.uint32),
                         "record": np.array([0], np.int64), "crc32c": np.array([0], np.uint32),
                         "rest": {}}}, "differ in length"),
        ({"batcher/0": {"works": ["a"], "work": np.array([0], np.uint32),
                         "record": np.array([0], np.int64), "crc32c": np.array([0], np.uint32),
                         "rest": {}}}, "work items"),
        ({"batcher/0": {"works": [b"a"], "work": np.array([0], np.uint32),
                         "record": np.array([-1], np.int64), "crc32c": np.array([0], np.uint32),
                         "rest": {}}}, "out of range"),
    ],
)  # fmt: skip
async def test_a_malformed_pipeline_in_a_job_checkpoint_is_refused(
    ray_env: RayEnv, pipeline: Any, match: str
) -> None:
    from asyncreader._distributed.job_checkpoint import JOB_FORMAT
    from asyncreader._runtime import state_codec

    queue = {"total": 3, "digest": b"x" * 32, "queued": [1, 3], "leases": [[0, [], 4, b"", 0]]}
    tree = {
        "format": JOB_FORMAT,
        "world_size": 1,
        "queues": {"asyncreader:localhost/queue/files": queue},
        "ranks": [{"pipeline": pipeline}],
    }
    cluster = ar.RayCluster(namespace=ray_env.namespace())
    with pytest.raises(ar.InvalidArgumentError, match=match):
        ar.Session(
            cluster=cluster, world_size=1, deterministic=True, restore=state_codec.encode(tree)
        )


@pytest.mark.parametrize("counts", [[1], {"maybe_batch#0": -1}, {"maybe_batch#0": "4"}])
async def test_malformed_batch_counts_in_a_job_checkpoint_are_refused(
    ray_env: RayEnv, counts: Any
) -> None:
    from asyncreader._distributed.job_checkpoint import JOB_FORMAT
    from asyncreader._runtime import state_codec

    tree = {
        "format": JOB_FORMAT,
        "world_size": 1,
        "queues": {},
        "ranks": [{"batch_counts": counts}],
    }
    cluster = ar.RayCluster(namespace=ray_env.namespace())
    with pytest.raises(ar.InvalidArgumentError, match="rank 0's batch counts"):
        ar.Session(
            cluster=cluster, world_size=1, deterministic=True, restore=state_codec.encode(tree)
        )


async def test_ranks_of_a_job_must_agree_on_deterministic_mode(
    ray_env: RayEnv, namespace: str
) -> None:
    cluster = ar.RayCluster(namespace=namespace)
    with anyio.fail_after(30):
        async with ar.Session(cluster=cluster, rank=0, world_size=2, deterministic=True):
            other = ar.Session(cluster=cluster, rank=1, world_size=2)
            with pytest.raises(ar.InvalidArgumentError) as caught:
                async with other:
                    pass
        # Rank 1 never joined: rank 0 leaving alone deletes nothing yet; clean up.
        await cluster.delete_job()
    message = str(caught.value)
    assert "rank 1 has deterministic=False" in message
    assert "rank 0 of the job deterministic=True" in message


@pytest.mark.both_backends
async def test_a_rank_killed_in_a_deterministic_job_loses_and_repeats_nothing(
    namespace: str, tmp_path: Path
) -> None:
    # Rank 1 dies in its third step, holding leases and items the schedule kept for it:
    # they go to rank 0, which finishes the epoch alone; every record once.
    paths, _ = await write_files(tmp_path, SIZES)
    expected = await kept(paths)
    job = await run_job(paths, namespace, [0.0, 0.02], remainder="pad", kill=(1, 3))
    check_exactly_once(job, expected)
    assert len(job.acked[1]) == 2 * BATCH  # its third batch was read again by rank 0


@pytest.mark.parametrize(
    "schedule",
    [
        {"world_size": 0, "position": 2, "positions": [0]},
        {"world_size": 2, "position": 2, "positions": [0, 1]},  # one per lease
        {"world_size": 2, "position": 2, "positions": [2]},  # numbered after the last
        {"world_size": 2, "position": 2, "positions": ["0"]},
    ],
)
async def test_a_malformed_schedule_in_a_job_checkpoint_is_refused(
    schedule: dict[str, Any],
) -> None:
    from asyncreader._distributed.job_checkpoint import JOB_FORMAT, check_job_tree

    queue = {
        "total": 3,
        "digest": b"x" * 32,
        "queued": [2, 3],
        "leases": [[0, [], 0, b"", 0]],
        "schedule": {"world_size": 2, "position": 2, "positions": [1]},
    }
    tree = {"format": JOB_FORMAT, "world_size": 1, "queues": {"files": queue}, "ranks": [{}]}
    assert check_job_tree(tree) is tree  # well formed
    queue["schedule"] = schedule
    with pytest.raises(ar.InvalidArgumentError, match=r"malformed job checkpoint.*schedule"):
        check_job_tree(tree)


async def test_a_rank_that_never_takes_its_share_does_not_hang_the_others(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    # Rank 1 joins the job but never reads the shared queue: the items the schedule keeps
    # for it go to rank 0 a lease_timeout after the queue's end, instead of rank 0's last
    # read waiting for them forever.
    paths, keys = await write_files(tmp_path, [5, 6, 7, 8])
    cluster = ar.RayCluster(namespace=namespace, lease_timeout=1.0)
    read: list[bytes] = []
    done = anyio.Event()

    async def rank0() -> None:
        async with ar.Session(cluster=cluster, rank=0, world_size=2, deterministic=True):
            work: Any = ar.FIFOQueue(None, shared_name="files")
            await work.enqueue_many(paths)
            await work.close()
            reader = ar.TFRecordReader()
            while True:
                try:
                    got, _ = await reader.read_up_to(work, 4)
                except ar.OutOfRangeError:
                    break
                read.extend(bytes(k) for k in got)
            done.set()

    async def rank1() -> None:
        async with ar.Session(cluster=cluster, rank=1, world_size=2, deterministic=True):
            await done.wait()

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(rank0)
            tg.start_soon(rank1)
    assert sorted(read) == sorted(keys)


@pytest.mark.parametrize(("world", "kept_position"), [(2, 3), (3, -1)])
async def test_a_checkpoint_right_after_a_restore_keeps_the_restored_numbers(
    world: int, kept_position: int
) -> None:
    # Items a restore gave back that no rank took yet: a new checkpoint saves their
    # numbers (and the next number) when they are this job's schedule's, else none.
    from asyncreader._distributed.schedule import Schedule
    from asyncreader._distributed.work_queue import LeaseBook

    book = LeaseBook(None, "files")
    book.schedule = Schedule(world)
    book.job_restore(
        [("/data/a", set(), 0, None)], {"world_size": 2, "position": 5, "positions": [3]}
    )
    leases = book.job_leases()
    saved = book.job_schedule(leases)
    assert saved == {"world_size": world, "position": 5, "positions": [kept_position]}


class GatedQueue:
    """A closed work queue whose next dequeue waits for ``gate`` once it is set (and
    sets ``reached`` then)."""

    def __init__(self, items: list[str]) -> None:
        self.items = collections.deque(items)
        self.gate: Any = None
        self.reached = anyio.Event()

    async def dequeue(self) -> str:
        if self.gate is not None:
            self.reached.set()
            await self.gate
        if not self.items:
            raise ar.OutOfRangeError("closed and empty")
        return self.items.popleft()

    def is_closed(self) -> bool:
        return True

    def size(self) -> int:
        return len(self.items)


async def test_a_rank_dying_while_an_item_is_pulled_leaves_its_share_to_the_others() -> None:
    # The queue's actor side alone. Rank 0 pulls the next item from the queue (for the
    # schedule) when rank 1 is declared dead: the pull returns an item although the
    # schedule was given up meanwhile. Rank 1's lease and the item the schedule kept for
    # it are pending for rank 0; they must not be put back in the given-up schedule (no
    # rank takes from it any more: lost).
    import asyncio
    import time

    from asyncreader._distributed.schedule import Schedule
    from asyncreader._distributed.work_queue import LeaseBook, Rank

    items = [f"part-{i}" for i in range(6)]
    queue = GatedQueue(items)
    book = LeaseBook(queue, "files")
    book.schedule = Schedule(2)
    for client in ("0-a", "1-b"):
        book._ranks[client] = Rank(60.0, time.monotonic())  # registered (no anchor)

    async def take(client: str, finished: list[tuple[int, int]]) -> tuple[Any, ...]:
        with anyio.fail_after(5):
            reply = await book.lease(client, finished)
        assert isinstance(reply, tuple)
        return reply

    got1 = await take("1-b", [])  # numbers item 0 (rank 0's) and takes item 1
    assert got1[1] == "part-1"
    read0: list[str] = []
    last: list[tuple[int, int]] = []
    for _ in range(3):  # items 0, 2 and 4; item 3 waits for rank 1
        reply = await take("0-a", last)
        read0.append(reply[1])
        last = [(reply[0], 0)]
    assert read0 == ["part-0", "part-2", "part-4"]
    assert [lease.item for lease in book.schedule.waiting[1]] == ["part-3"]

    # Rank 0's next take pulls item 5; rank 1 dies while that item is on its way.
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    queue.gate = gate
    async with anyio.create_task_group() as tg:
        replies: list[tuple[Any, ...]] = []

        async def rank0() -> None:
            replies.append(await take("0-a", last))

        tg.start_soon(rank0)
        with anyio.fail_after(5):
            await queue.reached.wait()
        assert book._pulling
        gate.set_result(None)
        book.rank_died("1-b", "its process ended")
    assert not book.schedule.active
    queue.gate = None
    read0.append(replies[0][1])
    while True:  # rank 0 reads everything left, then its input ends
        try:
            reply = await take("0-a", [(replies[-1][0], 0)])
        except ar.OutOfRangeError:
            break
        replies.append(reply)
        read0.append(reply[1])
    # Every item once: rank 1's lease (item 1) and its scheduled item 3 included.
    assert sorted(read0) == sorted(items)
    assert book.pending() == 0


async def test_records_a_restored_pipeline_holds_are_skipped_while_its_rank_lives() -> None:
    # The queue's actor side alone. Rank 1's restored buffers hold records 1 and 2 of
    # part-0, whose lease the checkpoint restored: any reader of part-0 skips them while
    # rank 1 lives (it delivers them, and may acknowledge them before its reader takes
    # part-0 again); once it dies they are read again.
    import asyncio
    import time

    from asyncreader._distributed.work_queue import LeaseBook, Rank

    class Anchor:
        class block:  # an actor method's shape
            @staticmethod
            def remote() -> Any:
                return asyncio.get_running_loop().create_future()  # never ends

    queue = ar.FIFOQueue(None)
    await queue.close()
    book = LeaseBook(queue, "files")
    book.job_restore([("part-0", {b"part-0:0"}, 4, None)])
    book._ranks["0-a"] = Rank(60.0, time.monotonic())  # registered (no anchor)
    book.register("1-b", Anchor(), 60.0, None, {b"part-0": [1, 2]})
    try:
        assert book.ack("1-b", [], [b"part-0:1"]) == []  # before part-0 is leased again
        with anyio.fail_after(5):
            grant = await book.lease("0-a", [])
        assert isinstance(grant, tuple)
        assert (grant[1], grant[3], grant[5]) == ("part-0", [b"part-0:0", b"part-0:1"], [1, 2])
        book.withdraw(grant)
        book.rank_died("1-b", "its process ended")
        with anyio.fail_after(5):
            again = await book.lease("0-a", [])
        assert isinstance(again, tuple)
        assert (again[1], again[3], again[5]) == ("part-0", [b"part-0:0", b"part-0:1"], [])
    finally:
        book.close()
