"""Session.checkpoint() and Session(restore=...): exact resume of a whole pipeline.

Deterministic mode: the batches after a resume are exactly those of an uninterrupted run
(ids, order, batch boundaries and augmentation draws). Otherwise: every record exactly
once per epoch across the two runs. Checkpoints are taken after every few batches, on
both backends, mid-file and in compressed files; one resume happens in a new process.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import pytest
from pipeline_harness import Dataset, write_dataset
from resumable_pipeline import Config, Outcome, run

import asyncreader as ar

HERE = Path(__file__).resolve().parent


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("resume"), files=4, records=40, seed=11)


@pytest.fixture(scope="module")
def gzip_dataset(tmp_path_factory: pytest.TempPathFactory, dataset: Dataset) -> Dataset:
    directory = tmp_path_factory.mktemp("resume_gz")
    paths = []
    for path in dataset.paths:
        out = directory / (Path(path).name + ".gz")
        with ar.TFRecordWriter(str(out), "GZIP") as writer:
            for record in ar.tf_record_iterator(path):
                writer.write(record)
        paths.append(str(out))
    return Dataset(directory, paths, dataset.ids)


def _flat(batches: list[list[int]]) -> Counter[int]:
    return Counter(i for batch in batches for i in batch)


async def _check_deterministic(cfg: Config, takes: list[int]) -> None:
    reference = await run(cfg)
    assert sum(map(len, reference.ids)) == cfg.epochs * 160
    for take in takes:
        first = await run(cfg, take=take)
        assert first.checkpoint is not None
        assert first.ids == reference.ids[:take]
        rest = await run(cfg, restore=first.checkpoint)
        assert first.ids + rest.ids == reference.ids, f"take={take}"
        assert first.noise + rest.noise == reference.noise, f"take={take}"


@pytest.mark.both_backends
@pytest.mark.anyio
@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
@pytest.mark.parametrize("shuffle", [True, False])
async def test_deterministic_resume_is_the_uninterrupted_stream(
    dataset: Dataset, shuffle: bool, records: bool
) -> None:
    cfg = Config(dataset.paths, shuffle=shuffle, records=records)
    await _check_deterministic(cfg, [1, 4, 9, 15, 19])


@pytest.mark.anyio
@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
async def test_deterministic_resume_in_gzip_files(gzip_dataset: Dataset, records: bool) -> None:
    cfg = Config(gzip_dataset.paths, compression="GZIP", records=records)
    await _check_deterministic(cfg, [3, 8, 13])


@pytest.mark.both_backends
@pytest.mark.anyio
@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
@pytest.mark.parametrize("shuffle", [True, False])
async def test_resume_with_many_tasks_delivers_each_record_once(
    dataset: Dataset, shuffle: bool, records: bool
) -> None:
    cfg = Config(dataset.paths, deterministic=False, threads=3, shuffle=shuffle, records=records)
    expected = Counter(dataset.ids * cfg.epochs)
    for take in (1, 6, 12, 18):
        first = await run(cfg, take=take, backend_yield=True)
        assert first.checkpoint is not None
        rest = await run(cfg, restore=first.checkpoint)
        assert _flat(first.ids + rest.ids) == expected, f"take={take}"


@pytest.mark.stress
@pytest.mark.both_backends
@pytest.mark.anyio
async def test_stress_resume_after_every_batch(dataset: Dataset) -> None:
    await _check_deterministic(Config(dataset.paths), list(range(1, 20)))
    cfg = Config(dataset.paths, deterministic=False, threads=3)
    expected = Counter(dataset.ids * cfg.epochs)
    for take in range(1, 20):
        first = await run(cfg, take=take, backend_yield=True)
        rest = await run(cfg, restore=first.checkpoint)
        assert _flat(first.ids + rest.ids) == expected, f"take={take}"


@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
def test_resume_in_a_new_process(dataset: Dataset, tmp_path: Path, records: bool) -> None:
    cfg = Config(dataset.paths, records=records)
    reference = anyio.run(lambda: run(cfg))
    first = anyio.run(lambda: run(cfg, take=7))
    assert first.checkpoint is not None
    state = tmp_path / "pipeline.ckpt"
    state.write_bytes(first.checkpoint)
    args = json.dumps({"paths": dataset.paths, "records": records})
    done = subprocess.run(
        [sys.executable, str(HERE / "resumable_pipeline.py"), args, str(state)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    rest = json.loads(done.stdout)
    assert first.ids + rest["ids"] == reference.ids
    assert first.noise + rest["noise"] == reference.noise


@pytest.mark.anyio
async def test_checkpoint_does_not_disturb_the_running_stream(dataset: Dataset) -> None:
    cfg = Config(dataset.paths)
    with anyio.fail_after(10):
        reference = await run(cfg)
        ids: list[list[int]] = []
        async with ar.Session(deterministic=True) as sess:
            files = ar.string_input_producer(dataset.paths, num_epochs=2, seed=7, capacity=3)
            reader = ar.TFRecordReader()
            rng = sess.track_rng("augment", np.random.default_rng(5))

            async def example() -> tuple[Any, Any]:
                _, values = await reader.read_up_to(files, cfg.chunk)
                got = np.frombuffer(b"".join(v[:8] for v in values), dtype="<i8")
                return got, rng.random(len(got))

            batches = ar.shuffle_batch(
                example, 16, 48, 20, seed=3, enqueue_many=True, allow_smaller_final_batch=True
            )
            async for batch, _ in batches:
                ids.append(batch.tolist())
                await sess.checkpoint()  # after every batch
    assert ids == reference.ids


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_user_queues_and_runners_resume(dataset: Dataset) -> None:
    """A hand-built pipeline: reader -> QueueRunner -> FIFOQueue of strings -> consumer."""

    async def pipeline(restore: bytes | None, take: int | None) -> tuple[list[bytes], bytes]:
        got: list[bytes] = []
        state = b""
        async with ar.Session(restore=restore) as sess:
            files = ar.string_input_producer(dataset.paths, num_epochs=1, shuffle=False)
            reader = ar.TFRecordReader()
            records = ar.FIFOQueue(10, dtypes=[object], shapes=[[]])
            lengths = ar.FIFOQueue(None)  # untyped: plain Python values

            async def read_op() -> None:
                _, values = await reader.read_up_to(files, 3)
                await records.enqueue_many((np.array(values, dtype=object),))

            ar.QueueRunner(records, [read_op, read_op]).start()
            while True:
                try:
                    value = await records.dequeue()
                except ar.OutOfRangeError:
                    break
                got.append(bytes(value))
                await lengths.enqueue((len(got), bytes(value[:8])))
                if take is not None and len(got) == take:
                    state = await sess.checkpoint()
                    break
        return got, state

    with anyio.fail_after(10):
        everything, _ = await pipeline(None, None)
        assert len(everything) == 160
        for take in (1, 37, 100, 159):
            first, state = await pipeline(None, take)
            rest, _ = await pipeline(state, None)
            assert Counter(first + rest) == Counter(everything), f"take={take}"


@pytest.mark.anyio
async def test_untyped_queue_contents_round_trip() -> None:
    elements = [b"a", "b", 3, 2.5, None, (1, b"x"), [np.arange(3)], {"k": np.float32(1.5)}]
    async with ar.Session() as sess:
        queue = ar.FIFOQueue(None)
        await queue.enqueue_many(elements)
        state = await sess.checkpoint()
    async with ar.Session(restore=state):
        queue = ar.FIFOQueue(None)
        got = await queue.dequeue_many(len(elements))
    assert got[:6] == elements[:6]
    np.testing.assert_array_equal(got[6][0], np.arange(3))
    assert got[7] == {"k": np.float32(1.5)}


@pytest.mark.anyio
async def test_pending_enqueue_and_close_are_restored_in_order() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(2, dtypes=["int64"], shapes=[[]])
            await queue.enqueue_many(np.arange(2))

            async def fill() -> None:
                await queue.enqueue_many(np.arange(2, 6))

            sess.start_soon(fill)
            await anyio.wait_all_tasks_blocked()
            sess.start_soon(queue.close)  # a plain close waits behind the enqueue
            await anyio.wait_all_tasks_blocked()
            state = await sess.checkpoint()
        async with ar.Session(restore=state):
            queue = ar.FIFOQueue(2, dtypes=["int64"], shapes=[[]])
            assert queue.size() == 2
            got = [int(await queue.dequeue()) for _ in range(6)]
            assert got == [0, 1, 2, 3, 4, 5]
            assert queue.is_closed()
            with pytest.raises(ar.OutOfRangeError):
                await queue.dequeue()


@pytest.mark.anyio
async def test_random_shuffle_queue_resumes_its_draws() -> None:
    def build() -> Any:
        return ar.RandomShuffleQueue(100, 0, dtypes=["int64"], shapes=[[]], seed=4)

    async with ar.Session():
        queue = build()
        await queue.enqueue_many(np.arange(50))
        await queue.dequeue_many(10)
        reference = (await queue.dequeue_many(40)).tolist()
    async with ar.Session() as sess:
        queue = build()
        await queue.enqueue_many(np.arange(50))
        await queue.dequeue_many(10)
        state = await sess.checkpoint()
    async with ar.Session(restore=state):
        queue = build()
        assert (await queue.dequeue_many(40)).tolist() == reference


@pytest.mark.anyio
async def test_track_state_saves_and_restores_user_values() -> None:
    box = {"step": 41}
    async with ar.Session() as sess:
        sess.track_state("trainer", lambda: dict(box), lambda v: None)
        box["step"] = 42
        state = await sess.checkpoint()
    restored: list[Any] = []
    async with ar.Session(restore=state) as sess:
        sess.track_state("trainer", dict, restored.append)
        with pytest.raises(ar.InvalidArgumentError, match="already used"):
            sess.track_state("trainer", dict, restored.append)
    assert restored == [{"step": 42}]


@pytest.mark.anyio
async def test_bad_checkpoints_are_rejected_clearly() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="bad magic"):
        ar.Session(restore=b"not a checkpoint")
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(4, dtypes=["int64"], shapes=[[]])
            await queue.enqueue(1)
            state = await sess.checkpoint()
        damaged = bytearray(state)
        damaged[-1] ^= 0xFF
        with pytest.raises(ar.InvalidArgumentError, match="checksum"):
            ar.Session(restore=bytes(damaged))
        async with ar.Session(restore=state):
            with pytest.raises(ar.InvalidArgumentError, match="does not fit") as info:
                ar.FIFOQueue(4, dtypes=["float32"], shapes=[[]])
            assert "queue/0" in "".join(getattr(info.value, "__notes__", []))


@pytest.mark.anyio
async def test_unsavable_elements_name_the_problem() -> None:
    async with ar.Session() as sess:
        queue = ar.FIFOQueue(None)
        await queue.enqueue(object())
        with pytest.raises(ar.InvalidArgumentError, match="type object"):
            await sess.checkpoint()


@pytest.mark.anyio
async def test_a_busy_stage_times_out_with_its_name() -> None:
    with anyio.fail_after(10):
        async with ar.Session() as sess:
            queue = ar.FIFOQueue(4)

            async def slow_op() -> None:
                await anyio.sleep(30)  # busy outside any queue operation
                await queue.enqueue(1)

            ar.QueueRunner(queue, [slow_op]).start()
            await anyio.wait_all_tasks_blocked()
            with pytest.raises(TimeoutError, match="QueueRunner"):
                await sess.checkpoint(timeout=0.05)
            sess.coord.request_stop()


@pytest.mark.anyio
async def test_deterministic_mode_refuses_timing_dependent_pipelines(dataset: Dataset) -> None:
    with anyio.fail_after(10):
        async with ar.Session(deterministic=True):
            with pytest.raises(ar.InvalidArgumentError, match="seed"):
                ar.string_input_producer(dataset.paths, shuffle=True)

            async def example() -> Any:
                return np.zeros(2)

            with pytest.raises(ar.InvalidArgumentError, match="num_threads=1"):
                ar.batch(example, 4, num_threads=2)
            with pytest.raises(ar.InvalidArgumentError, match="seed"):
                ar.shuffle_batch(example, 4, 40, 10)
            with pytest.raises(ar.InvalidArgumentError, match="capacity >= min_after_dequeue"):
                ar.shuffle_batch(example, 8, 12, 10, seed=1)


async def _cancel_then_resume(cfg: Config, seed: int, expected: Counter[int]) -> None:
    """Checkpoint every few batches, cancel at a seeded moment, resume from the last:
    the batches before that checkpoint plus the resumed run hold each record once."""
    rng = np.random.default_rng(seed)
    every = int(rng.integers(1, 4))
    delay = float(rng.uniform(0.0, 0.03))
    saved: list[tuple[int, bytes]] = []
    progress = Outcome()
    with anyio.move_on_after(delay):
        await run(cfg, backend_yield=True, checkpoint_every=every, saved=saved, out=progress)
    count, state = saved[-1] if saved else (0, None)
    rest = await run(cfg, restore=state)
    assert _flat(progress.ids[:count] + rest.ids) == expected, f"seed={seed}"
    if cfg.deterministic:
        reference = await run(cfg)
        assert progress.ids[:count] + rest.ids == reference.ids, f"seed={seed}"


@pytest.mark.both_backends
@pytest.mark.anyio
@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
@pytest.mark.parametrize("threads", [1, 3])
async def test_cancelled_pipelines_resume_from_the_last_checkpoint_exactly_once(
    dataset: Dataset, threads: int, records: bool
) -> None:
    cfg = Config(dataset.paths, deterministic=threads == 1, threads=threads, records=records)
    expected = Counter(dataset.ids * cfg.epochs)
    for seed in range(6):
        await _cancel_then_resume(cfg, seed, expected)


@pytest.mark.stress
@pytest.mark.both_backends
@pytest.mark.anyio
@pytest.mark.parametrize("records", [False, True], ids=["examples", "record-refs"])
@pytest.mark.parametrize("threads", [1, 3])
async def test_stress_cancelled_pipelines_resume_exactly_once(
    dataset: Dataset, threads: int, records: bool
) -> None:
    cfg = Config(dataset.paths, deterministic=threads == 1, threads=threads, records=records)
    expected = Counter(dataset.ids * cfg.epochs)
    for seed in range(100, 400):
        await _cancel_then_resume(cfg, seed, expected)
