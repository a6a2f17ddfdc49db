"""Train a small CIFAR-10 classifier from async code, fed by TensorFlow-style input queues.

This is TensorFlow's ``models/tutorials/image/cifar10/cifar10_input.py`` pipeline written
with asyncreader, function for function:

* ``read_cifar10``      -- a FixedLengthRecordReader takes files from the file name queue
                           and returns records, here a *chunk* of them per ``read_batch``;
* ``distorted_inputs``  -- random crop, flip, brightness, contrast and standardisation,
                           batched in random order by ``shuffle_batch``;
* ``inputs``            -- central crop and standardisation, batched in order.

The graph-building functions become plain functions that start tasks in the current
Session, and ``sess.run([images, labels])`` becomes ``await batcher.dequeue()``. Examples
move through the pipeline in chunks: one ``read_batch`` of hundreds of records, one
``decode_raw`` over all of them (a view of the block the reader read), vectorised
augmentation on a worker thread, and ``shuffle_batch(..., enqueue_many=True)``.

Run it::

    python examples/cifar10_train.py                     # synthetic CIFAR-10, 100 steps
    python examples/cifar10_train.py --data-dir ~/cifar-10-batches-bin --steps 2000

Without ``--data-dir`` it writes a synthetic CIFAR-10 set (same file format, learnable
classes) to a temporary folder first.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import anyio
import numpy as np

import asyncreader as ar
from asyncreader import cifar10 as cifar10_images
from asyncreader.cifar10 import SoftmaxClassifier

# Process images of this size (TensorFlow crops 32x32 to 24x24).
IMAGE_SIZE = cifar10_images.IMAGE_SIZE

# Global constants describing the CIFAR-10 data set.
NUM_CLASSES = 10
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 50_000
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = 10_000

# Records per read_batch: the unit of work of one reader task.
RECORDS_PER_READ = 500


@dataclass
class CIFAR10Records:
    """A chunk of parsed records, as ``read_cifar10`` returns them.

    Attributes:
        keys: ``b"<file>:<record index>"`` for each record.
        labels: ``(n,)`` int32 labels in 0..9.
        uint8images: ``(n, 3, 32, 32)`` uint8 images, channel-major as stored.
    """

    keys: list[bytes]
    labels: np.ndarray[Any, Any]
    uint8images: np.ndarray[Any, Any]


async def read_cifar10(reader: Any, filename_queue: Any) -> CIFAR10Records:
    """Read and parse a chunk of examples from CIFAR-10 data files.

    Each record is 1 label byte followed by 3,072 image bytes (depth-major), so a
    FixedLengthRecordReader of 3,073 bytes splits the files, and ``decode_raw`` turns the
    chunk's records into one ``(n, 3073)`` uint8 array: a view of the block the reader
    read, with no ``bytes`` object per record.

    Raises:
        OutOfRangeError: the file name queue is closed and empty.
    """
    batch = await reader.read_batch(filename_queue, RECORDS_PER_READ)
    record_bytes = ar.decode_raw(batch, np.uint8)
    uint8images, labels = cifar10_images.parse_records(record_bytes)
    return CIFAR10Records(batch.keys(), labels, uint8images)


def distorted_inputs(data_dir: str, batch_size: int, num_readers: int = 2) -> Any:
    """Construct distorted input for CIFAR training, in the current Session.

    Returns:
        A Batcher; ``await batcher.dequeue()`` gives ``(images, labels)``: images are
        ``(batch_size, 24, 24, 3)`` float32, labels ``(batch_size,)`` int32.
    """
    filenames = [os.path.join(data_dir, f"data_batch_{i}.bin") for i in range(1, 6)]

    # A queue that produces the file names to read.
    filename_queue = ar.string_input_producer(filenames)

    def make_reader_task(seed: int) -> Any:
        reader = ar.FixedLengthRecordReader(record_bytes=cifar10_images.RECORD_BYTES)
        rng = np.random.default_rng(seed)

        async def read_and_distort() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
            read_input = await read_cifar10(reader, filename_queue)
            # Random crop, flip, brightness, contrast, then per-image standardisation,
            # for the whole chunk on a worker thread.
            float_images = await anyio.to_thread.run_sync(
                cifar10_images.distort_images, read_input.uint8images, rng
            )
            return float_images, read_input.labels

        return read_and_distort

    # Ensure that the random shuffling has good mixing properties.
    min_fraction_of_examples_in_queue = 0.4
    min_queue_examples = int(NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN * min_fraction_of_examples_in_queue)
    print(
        f"Filling queue with {min_queue_examples} CIFAR images before starting to train. "
        "This will take a moment."
    )
    # Generate a batch of images and labels by building up a queue of examples.
    return ar.shuffle_batch_join(
        [make_reader_task(seed) for seed in range(num_readers)],
        batch_size=batch_size,
        capacity=min_queue_examples + 3 * batch_size,
        min_after_dequeue=min_queue_examples,
        enqueue_many=True,
    )


def inputs(eval_data: bool, data_dir: str, batch_size: int) -> Any:
    """Construct input for CIFAR evaluation: one pass, central crops, in order.

    Returns:
        A Batcher of ``(images, labels)``; ``async for`` over it ends after one epoch.
    """
    if not eval_data:
        filenames = [os.path.join(data_dir, f"data_batch_{i}.bin") for i in range(1, 6)]
    else:
        filenames = [os.path.join(data_dir, "test_batch.bin")]
    filename_queue = ar.string_input_producer(filenames, num_epochs=1, shuffle=False)
    reader = ar.FixedLengthRecordReader(record_bytes=cifar10_images.RECORD_BYTES)

    async def read_and_crop() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        read_input = await read_cifar10(reader, filename_queue)
        float_images = await anyio.to_thread.run_sync(
            cifar10_images.eval_images, read_input.uint8images
        )
        return float_images, read_input.labels

    return ar.batch(
        read_and_crop,
        batch_size=batch_size,
        capacity=RECORDS_PER_READ + 3 * batch_size,
        enqueue_many=True,
        allow_smaller_final_batch=True,
    )


async def train(data_dir: str, steps: int, batch_size: int) -> float:
    """Train for ``steps`` steps, evaluate on the test set; return the test accuracy."""
    model = SoftmaxClassifier(NUM_CLASSES, (IMAGE_SIZE // 3) ** 2 * 3, seed=0)
    async with ar.Session():
        batcher = distorted_inputs(data_dir, batch_size)
        start = time.perf_counter()
        for step in range(1, steps + 1):
            images, labels = await batcher.dequeue()
            result = model.train_step(images, labels)
            if step % 50 == 0 or step == steps:
                rate = step * batch_size / (time.perf_counter() - start)
                print(
                    f"step {step}: loss = {result.loss:.3f} ({rate:,.0f} examples/sec, "
                    f"queue {batcher.fill_fraction():.0%} full)"
                )
        # Leaving the Session stops the reader tasks and closes the queues.

    correct = total = 0
    async with ar.Session():
        async for images, labels in inputs(True, data_dir, 500):
            correct += int(np.count_nonzero(model.predict(images) == labels))
            total += len(labels)
    accuracy = correct / total
    print(f"precision @ 1 = {accuracy:.3f} on {total} test images")
    return accuracy


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--data-dir", help="folder with the CIFAR-10 binary files")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    if args.data_dir is not None:
        return anyio.run(train, args.data_dir, args.steps, args.batch_size, backend=args.backend)
    with tempfile.TemporaryDirectory() as tmp:
        cifar10_images.write_synthetic_dataset(tmp)
        return anyio.run(train, tmp, args.steps, args.batch_size, backend=args.backend)


if __name__ == "__main__":
    main()
