"""The CIFAR-10 input pipeline reads record batches and gives the images numpy gives."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import numpy as np
import pytest
from queue_util import work_queue

import asyncreader as ar
from asyncreader import cifar10

if TYPE_CHECKING:
    from pathlib import Path

    from asyncreader._readers.work import WorkQueue

RECORDS = 200


@pytest.fixture
def small_cifar10(tmp_path: Path) -> Path:
    """A CIFAR-10 binary folder with 200 records per file."""
    cifar10.write_synthetic_dataset(tmp_path, records_per_file=RECORDS)
    return tmp_path


def _records(path: Path) -> np.ndarray:
    return np.fromfile(path, np.uint8).reshape(-1, cifar10.RECORD_BYTES)


class CountingReader(ar.FixedLengthRecordReader):
    """A CIFAR-10 reader that counts which read verb the pipeline calls."""

    def __init__(self) -> None:
        super().__init__(cifar10.RECORD_BYTES)
        self.batches = 0
        self.lists = 0

    async def read_batch(self, queue: WorkQueue, max_records: int) -> ar.RecordBatch:
        self.batches += 1
        return await super().read_batch(queue, max_records)

    async def read_up_to(
        self, queue: WorkQueue, num_records: int
    ) -> tuple[list[bytes], list[bytes]]:
        self.lists += 1
        return await super().read_up_to(queue, num_records)


async def _file_queue(*paths: Path) -> ar.FIFOQueue:
    return await work_queue(str(p) for p in paths)


async def _drain(chunker: cifar10.ImageChunker) -> list[tuple[np.ndarray, ...]]:
    chunks = []
    while True:
        try:
            chunks.append(await chunker())
        except ar.OutOfRangeError:
            return chunks


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_chunker_reads_record_batches_not_lists(small_cifar10: Path) -> None:
    queue = await _file_queue(small_cifar10 / cifar10.TEST_FILE)
    async with CountingReader() as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=64, distort=False)
        with anyio.fail_after(20):
            chunks = await _drain(chunker)
    assert [len(labels) for _, labels in chunks] == [64, 64, 64, 8]
    assert reader.batches == 5  # four chunks, then the end of input
    assert reader.lists == 0
    assert chunker.records == RECORDS


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_distorted_chunks_equal_the_numpy_reference(small_cifar10: Path) -> None:
    """Same seed, same crops, flips, colours and labels as preprocessing the file's
    records with numpy in the same chunks (the last one short)."""
    path = small_cifar10 / cifar10.TRAIN_FILES[0]
    seed = [7, 11]
    queue = await _file_queue(path)
    async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=48, seed=seed)
        with anyio.fail_after(20):
            chunks = await _drain(chunker)
    rng = np.random.default_rng(seed)
    records = _records(path)
    assert len(chunks) == 5
    for i, (images, labels) in enumerate(chunks):
        want_images, want_labels = cifar10.parse_records(records[i * 48 : (i + 1) * 48])
        np.testing.assert_array_equal(images, cifar10.distort_images(want_images, rng))
        np.testing.assert_array_equal(labels, want_labels)
        assert images.dtype == np.float32
        assert labels.dtype == np.int32


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_chunks_do_not_keep_the_readers_blocks(small_cifar10: Path) -> None:
    """The decoded records view the reader's block; the images handed on are copies."""
    queue = await _file_queue(small_cifar10 / cifar10.TEST_FILE)
    async with CountingReader() as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=50, distort=False)
        with anyio.fail_after(20):
            images, labels = await chunker()
    assert labels.shape == (50,)
    assert images.flags.owndata
    assert images.flags.writeable
    assert labels.flags.owndata


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_inputs_visit_every_test_image_in_file_order(small_cifar10: Path) -> None:
    records = _records(small_cifar10 / cifar10.TEST_FILE)
    want_images, want_labels = cifar10.parse_records(records)
    got_images, got_labels = [], []
    with anyio.fail_after(30):
        async with ar.Session():
            batcher = cifar10.inputs(True, small_cifar10, 32, chunk_size=45)
            async for images, labels in batcher:
                got_images.append(images)
                got_labels.append(labels)
    np.testing.assert_array_equal(np.concatenate(got_labels), want_labels)
    np.testing.assert_array_equal(np.concatenate(got_images), cifar10.eval_images(want_images))


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_a_missing_training_file_stops_the_pipeline_naming_it(
    small_cifar10: Path,
) -> None:
    (small_cifar10 / cifar10.TRAIN_FILES[2]).unlink()

    async def train() -> None:
        async with ar.Session():
            batcher = cifar10.distorted_inputs(small_cifar10, 50, seed=1, min_after_dequeue=100)
            for _ in range(100):
                await batcher.dequeue()

    with anyio.fail_after(30), pytest.raises(ar.NotFoundError, match=r"data_batch_3\.bin"):
        await train()


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_a_file_cut_mid_record_reads_its_whole_records(small_cifar10: Path) -> None:
    """A trailing partial record is dropped, as TensorFlow's FixedLengthRecordReader does,
    the same way by read_batch as by read_up_to."""
    path = small_cifar10 / cifar10.TEST_FILE
    data = path.read_bytes()
    path.write_bytes(data[: 10 * cifar10.RECORD_BYTES + 100])
    queue = await _file_queue(path)
    async with CountingReader() as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=64, distort=False)
        with anyio.fail_after(20):
            chunks = await _drain(chunker)
    assert [len(labels) for _, labels in chunks] == [10]
    whole = np.frombuffer(data, np.uint8)[: 10 * cifar10.RECORD_BYTES]
    want_images, want_labels = cifar10.parse_records(whole.reshape(10, -1))
    np.testing.assert_array_equal(chunks[0][1], want_labels)
    np.testing.assert_array_equal(chunks[0][0], cifar10.eval_images(want_images))


#: Chunks read and dropped before the one whose view is held.
LOOSE = 4


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_chunker_reuses_an_images_array_only_once_nothing_references_it(
    small_cifar10: Path,
) -> None:
    """A released array is written again (no fresh memory per chunk); one still held, or
    viewed, keeps its values."""
    import weakref

    path = small_cifar10 / cifar10.TRAIN_FILES[0]
    seed = [3, 4]
    queue = await _file_queue(path, path)
    async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=40, seed=seed)
        with anyio.fail_after(20):
            # A released array is written again: among a few chunks, each dropped at once,
            # one comes back in an array handed out before. (Not necessarily the next one:
            # a worker thread may still hold the last result for a moment, as trio's does.)
            released: list[weakref.ref[np.ndarray]] = []
            reused = False
            for _ in range(LOOSE):
                images, _ = await chunker()
                reused = reused or any(images is r() for r in released)
                released.append(weakref.ref(images))
                del images
            assert reused
            second, _ = await chunker()
            view = second[5:7]
            kept = view.copy()
            del second
            held, _ = await chunker()  # a view holds the array: a new one
            assert not np.shares_memory(held, view)
            chunks = [held, *(images for images, _ in await _drain(chunker))]
    np.testing.assert_array_equal(view, kept)
    # Every chunk has the values numpy computes, whatever array it was written into.
    rng = np.random.default_rng(seed)
    records = np.concatenate([_records(path)] * 2)
    for i in range(len(chunks) + LOOSE + 1):
        images, _ = cifar10.parse_records(records[i * 40 : (i + 1) * 40])
        want = cifar10.distort_images(images, rng)
        if i == LOOSE:
            np.testing.assert_array_equal(kept, want[5:7])
        if i > LOOSE:
            np.testing.assert_array_equal(chunks[i - LOOSE - 1], want)


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_large_chunks_are_preprocessed_in_two_halves_at_once(
    small_cifar10: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk of at least two pieces is standardised on two worker threads at the same
    time (each half waits for the other at a barrier), and the images equal one
    distort_images call on the whole chunk; a short chunk takes one thread."""
    import threading

    from asyncreader.cifar10 import input_pipeline

    standardize = input_pipeline._standardize_affine
    barrier = threading.Barrier(2, timeout=10)
    sizes: list[int] = []

    def meeting(crops: np.ndarray, factor: np.ndarray, out: np.ndarray) -> np.ndarray:
        sizes.append(len(crops))
        if len(crops) == 75:
            barrier.wait()  # BrokenBarrierError unless the other half runs meanwhile
        return standardize(crops, factor, out)

    monkeypatch.setattr(input_pipeline, "_standardize_affine", meeting)
    path = small_cifar10 / cifar10.TRAIN_FILES[0]
    seed = [5, 6]
    queue = await _file_queue(path)
    async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=150, seed=seed)
        with anyio.fail_after(30):
            chunks = await _drain(chunker)
    assert sorted(sizes) == [50, 75, 75]
    rng = np.random.default_rng(seed)
    records = _records(path)
    for i, (images, labels) in enumerate(chunks):
        want_images, want_labels = cifar10.parse_records(records[i * 150 : (i + 1) * 150])
        np.testing.assert_array_equal(images, cifar10.distort_images(want_images, rng))
        np.testing.assert_array_equal(labels, want_labels)


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_an_error_in_one_half_is_raised_as_itself(
    small_cifar10: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from asyncreader.cifar10 import input_pipeline

    def fail(crops: np.ndarray, factor: np.ndarray, out: np.ndarray) -> np.ndarray:
        raise MemoryError("no room for the crops")

    monkeypatch.setattr(input_pipeline, "_standardize_affine", fail)
    queue = await _file_queue(small_cifar10 / cifar10.TEST_FILE)
    async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=200, distort=False)
        with anyio.fail_after(20), pytest.raises(MemoryError, match="no room"):
            await chunker()


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_cancelling_a_chunker_waits_for_both_halves_then_ends(
    small_cifar10: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cancelled call does not leave a half running on a worker thread behind it: it
    ends only once both halves are done, and the next call reads on from the next chunk."""
    import threading

    from asyncreader.cifar10 import input_pipeline

    standardize = input_pipeline._standardize_affine
    release = threading.Event()
    both_started = threading.Event()
    started: list[int] = []
    finished: list[int] = []

    def slow(crops: np.ndarray, factor: np.ndarray, out: np.ndarray) -> np.ndarray:
        started.append(len(crops))
        if len(started) == 2:
            both_started.set()
        release.wait(10)
        result = standardize(crops, factor, out)
        finished.append(len(crops))
        return result

    monkeypatch.setattr(input_pipeline, "_standardize_affine", slow)
    queue = await _file_queue(small_cifar10 / cifar10.TEST_FILE)
    async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
        chunker = cifar10.ImageChunker(reader, queue, chunk_size=150, distort=False)
        with anyio.fail_after(20):
            scope = anyio.CancelScope()

            async def call() -> None:
                with scope:
                    await chunker()

            async with anyio.create_task_group() as tg:
                tg.start_soon(call)
                assert await anyio.to_thread.run_sync(both_started.wait, 10)
                scope.cancel()
                await anyio.sleep(0.05)
                assert finished == []  # the call still waits for its halves
                release.set()
            # Cancelled with its halves done (asyncio raises the cancellation as the thread
            # call returns; trio lets that call finish, as trio.to_thread does).
            assert sorted(finished) == [75, 75]
            images, labels = await chunker()
    assert len(labels) == 50
    monkeypatch.undo()
    want, _ = cifar10.parse_records(_records(small_cifar10 / cifar10.TEST_FILE)[150:])
    np.testing.assert_array_equal(images, cifar10.eval_images(want))


@pytest.mark.both_backends
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("distort", "colours", "chunk"),
    [(True, True, 48), (True, False, 150), (False, False, 150), (True, True, 200)],
)
async def test_compact_chunks_finish_into_the_very_same_images(
    small_cifar10: Path, distort: bool, colours: bool, chunk: int
) -> None:
    """uint8 crops and their affine maps (in one piece or two halves), finished by
    standardize_planes, are bit for bit the float32 images of the default chunker."""
    path = small_cifar10 / cifar10.TRAIN_FILES[1]
    seed = [3, 9]
    got: list[list[tuple[np.ndarray, ...]]] = []
    for compact in (False, True):
        queue = await _file_queue(path)
        async with ar.FixedLengthRecordReader(cifar10.RECORD_BYTES) as reader:
            chunker = cifar10.ImageChunker(
                reader, queue, chunk_size=chunk, seed=seed, distort=distort,
                distort_colours=colours, compact=compact,
            )  # fmt: skip
            with anyio.fail_after(20):
                got.append(await _drain(chunker))
    plain, compact_chunks = got
    assert len(plain) == len(compact_chunks) == -(-RECORDS // chunk)
    for (images, labels), (planes, gain, offset, compact_labels) in zip(
        plain, compact_chunks, strict=True
    ):
        n = len(labels)
        assert planes.shape == (n, 3, 24, 24)
        assert planes.dtype == np.uint8
        assert (gain.shape, gain.dtype) == ((n,), np.dtype(np.float32))
        assert (offset.shape, offset.dtype) == ((n, 3), np.dtype(np.float32))
        np.testing.assert_array_equal(compact_labels, labels)
        finished = cifar10.standardize_planes(planes, gain, offset)
        assert finished.dtype == np.float32
        assert finished.flags.c_contiguous
        np.testing.assert_array_equal(finished, images)


def test_standardize_planes_refuses_what_does_not_fit() -> None:
    planes = np.zeros((4, 3, 24, 24), np.uint8)
    gain, offset = np.ones(4, np.float32), np.zeros((4, 3), np.float32)
    with pytest.raises(ValueError, match="uint8"):
        cifar10.standardize_planes(planes.astype(np.float32), gain, offset)
    with pytest.raises(ValueError, match="do not fit 4 images of 3 channels"):
        cifar10.standardize_planes(planes, gain[:3], offset)
    with pytest.raises(ValueError, match="do not fit"):
        cifar10.standardize_planes(planes, gain, offset[:, :2])
    # A view of planes (not contiguous) is finished as its copy would be.
    wide = np.arange(4 * 3 * 24 * 48, dtype=np.uint32).astype(np.uint8).reshape(4, 3, 24, 48)
    np.testing.assert_array_equal(
        cifar10.standardize_planes(wide[..., ::2], gain, offset),
        cifar10.standardize_planes(np.ascontiguousarray(wide[..., ::2]), gain, offset),
    )


@pytest.mark.both_backends
@pytest.mark.anyio
async def test_the_distorted_pipeline_shuffles_compact_crops_into_the_same_batches(
    small_cifar10: Path,
) -> None:
    """distorted_pipeline's queue holds uint8 crops (a quarter of the bytes of float32
    images), and its batches are those of shuffle_batch_join over the default chunkers
    with the same seeds, image for image."""
    seed, batch, steps = 5, 32, 40
    with anyio.fail_after(60):
        async with ar.Session():
            pipeline = cifar10.distorted_pipeline(
                small_cifar10, batch, num_readers=1, seed=seed, chunk_size=64,
                min_after_dequeue=100,
            )  # fmt: skip
            got = [await pipeline.batcher.dequeue() for _ in range(steps)]
            queue = pipeline.batcher.queue
            assert [np.dtype(d) for d in queue.dtypes] == [
                np.uint8, np.float32, np.float32, np.int32
            ]  # fmt: skip
            assert [tuple(s) for s in queue.shapes] == [(3, 24, 24), (), (3,), ()]
        async with ar.Session():
            files = ar.string_input_producer(
                [str(small_cifar10 / name) for name in cifar10.TRAIN_FILES], seed=seed
            )
            [chunker_seed] = np.random.SeedSequence(seed).spawn(1)
            chunker = cifar10.ImageChunker(
                ar.FixedLengthRecordReader(cifar10.RECORD_BYTES), files, chunk_size=64,
                seed=chunker_seed.generate_state(2).tolist(),
            )  # fmt: skip
            plain = ar.shuffle_batch_join(
                [chunker], batch, capacity=100 + 3 * batch, min_after_dequeue=100, seed=seed,
                enqueue_many=True,
            )  # fmt: skip
            want = [await plain.dequeue() for _ in range(steps)]
    for (images, labels), (want_images, want_labels) in zip(got, want, strict=True):
        assert images.shape == (batch, 24, 24, 3)
        np.testing.assert_array_equal(labels, want_labels)
        np.testing.assert_array_equal(images, want_images)
