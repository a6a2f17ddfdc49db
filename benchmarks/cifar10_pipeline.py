"""CIFAR-10 distorted-inputs pipeline, one full epoch: asyncreader against a numpy loop.

Every method reads the five CIFAR-10 training files (50,000 records of 3,073 bytes), takes a
random 24x24 crop of each image, flips half of them left-right, standardises each image and
hands batches of 128 to a consumer, once over the epoch:

* ``numpy``: the reference. One thread, no queues: read 128 records from a file, decode
  them with ``np.frombuffer`` and crop/flip/standardise the batch vectorised. It does less
  work than the other methods: it does not shuffle, so it never copies an image into or
  out of a 20,000-image buffer (asyncreader copies 83 MB of uint8 crops into its shuffle
  queue and 83 MB out again per epoch, and faults in the queue's 35 MB of fresh memory
  the first time), and its batches follow the files' order.
* ``asyncreader``: ``string_input_producer`` -> ``FixedLengthRecordReader.read_batch`` ->
  ``decode_raw`` on the batch (a view of the block read) -> the same vectorised
  augmentation on worker threads (each 500-record chunk in two halves at once; crops and
  their standardisation's affine map, ``ImageChunker(compact=True)``) ->
  ``shuffle_batch_join(..., enqueue_many=True)`` -> ``async for`` consumer, which
  finishes each batch into float32 images (``standardize_planes``), as
  ``distorted_pipeline`` does.
* ``tf.data``: ``FixedLengthRecordDataset`` -> ``map`` (per example, parallel) ->
  ``shuffle`` -> ``batch`` -> ``prefetch``, the idiomatic form.
* ``tf1-queues``: TensorFlow's own ``cifar10_input.distorted_inputs`` in graph mode
  (``string_input_producer``, ``FixedLengthRecordReader.read``, per-example ops,
  ``shuffle_batch``) run by QueueRunner threads.
* ``torch``: a map-style ``Dataset`` over the memory-mapped files with per-example
  augmentation and ``DataLoader(shuffle=True, num_workers=2)``.

The TensorFlow and PyTorch rows appear only when those packages are importable (they are
never dependencies of asyncreader). Each measurement runs in a fresh subprocess so that its
peak resident set size (RSS) is its own; the rounds interleave the methods and each row
keeps its best time. The shuffling methods use the same shuffle buffer (TensorFlow's 40% of
an epoch by default); RSS is bounded by that buffer, not by the data set.

    python benchmarks/cifar10_pipeline.py [--repeat 3] [--readers 2] [--backend asyncio]
                                          [--data-dir DIR] [--shuffle-buffer 20000]
                                          [--methods numpy,asyncreader,...]

Without ``--data-dir`` the synthetic CIFAR-10 set of ``asyncreader demo`` is written to (or
reused from) its cache folder. Exits 1 when asyncreader is below 60% of the numpy rate.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

import numpy as np

from asyncreader import cifar10
from asyncreader._cli.demo import default_cache_dir
from asyncreader.cifar10 import input_pipeline

BATCH = 128
EPOCH = cifar10.NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN
SIZE = cifar10.IMAGE_SIZE
METHODS = ("numpy", "asyncreader", "tf.data", "tf1-queues", "torch")
#: asyncreader must reach this fraction of the numpy reference's images/s.
BAR = 0.6


def rss_bytes() -> int:
    """This process's resident set size now, from /proc (Linux)."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_rss_bytes() -> int:
    """This process's peak resident set size so far (``ru_maxrss`` is in KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def cpu_seconds() -> float:
    """CPU time (user + system) this process and its finished children have used."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def train_files(data_dir: str) -> list[str]:
    return [os.path.join(data_dir, name) for name in cifar10.TRAIN_FILES]


class Consumer:
    """What every method hands its batches to: checks them and counts images."""

    def __init__(self) -> None:
        self.images = 0
        self.label_sum = 0

    def __call__(self, images: Any, labels: Any) -> None:
        images = np.asarray(images)
        assert images.shape[1:] == (SIZE, SIZE, 3), images.shape
        assert images.dtype == np.float32
        self.images += len(labels)
        self.label_sum += int(np.asarray(labels).sum())


# -- the methods: each hands one epoch of batches to the consumer -----------------------------


def run_numpy(args: argparse.Namespace, consume: Consumer) -> None:
    rng = np.random.default_rng(args.seed)
    chunk = BATCH * cifar10.RECORD_BYTES
    for path in train_files(args.data_dir):
        with open(path, "rb") as f:
            while data := f.read(chunk):
                records = np.frombuffer(data, np.uint8).reshape(-1, cifar10.RECORD_BYTES)
                images, labels = cifar10.parse_records(records)
                consume(cifar10.distort_images(images, rng, distort_colours=False), labels)


async def _asyncreader_epoch(args: argparse.Namespace, consume: Consumer) -> None:
    import asyncreader as ar

    async with ar.Session():
        filename_queue = ar.string_input_producer(
            train_files(args.data_dir), num_epochs=1, seed=args.seed
        )
        seeds = np.random.SeedSequence(args.seed).spawn(args.readers)
        chunkers = [
            cifar10.ImageChunker(
                ar.FixedLengthRecordReader(cifar10.RECORD_BYTES),
                filename_queue,
                chunk_size=args.chunk,
                seed=s.generate_state(2).tolist(),
                distort_colours=False,
                compact=True,
            )
            for s in seeds
        ]
        batcher = ar.shuffle_batch_join(
            chunkers,
            BATCH,
            capacity=args.shuffle_buffer + 3 * BATCH,
            min_after_dequeue=args.shuffle_buffer,
            seed=args.seed,
            enqueue_many=True,
            allow_smaller_final_batch=True,
        )
        async for planes, gain, offset, labels in batcher:
            consume(cifar10.standardize_planes(planes, gain, offset), labels)


def run_asyncreader(args: argparse.Namespace, consume: Consumer) -> None:
    import anyio

    anyio.run(_asyncreader_epoch, args, consume, backend=args.backend)


def _tf_distort(tf: Any, record: Any) -> tuple[Any, Any]:
    """``cifar10_input``'s per-example graph: decode, crop, flip, standardise."""
    raw = tf.io.decode_raw(record, tf.uint8)
    label = tf.cast(raw[0], tf.int32)
    image = tf.transpose(tf.reshape(raw[1:], [3, 32, 32]), [1, 2, 0])
    image = tf.image.random_crop(tf.cast(image, tf.float32), [SIZE, SIZE, 3])
    image = tf.image.random_flip_left_right(image)
    return tf.image.per_image_standardization(image), label


def run_tf_data(args: argparse.Namespace, consume: Consumer) -> None:
    import tensorflow as tf

    tf.random.set_seed(args.seed)
    files = tf.data.Dataset.from_tensor_slices(train_files(args.data_dir)).shuffle(5)
    dataset = (
        tf.data.FixedLengthRecordDataset(files, cifar10.RECORD_BYTES)
        .map(lambda r: _tf_distort(tf, r), num_parallel_calls=tf.data.AUTOTUNE)
        .shuffle(args.shuffle_buffer)
        .batch(BATCH)
        .prefetch(tf.data.AUTOTUNE)
    )
    for images, labels in dataset:
        consume(images.numpy(), labels.numpy())


def run_tf1_queues(args: argparse.Namespace, consume: Consumer) -> None:
    import tensorflow as tf

    v1 = tf.compat.v1
    v1.disable_eager_execution()
    v1.set_random_seed(args.seed)
    filename_queue = v1.train.string_input_producer(train_files(args.data_dir), num_epochs=1)
    reader = v1.FixedLengthRecordReader(record_bytes=cifar10.RECORD_BYTES)
    _, value = reader.read(filename_queue)
    image, label = _tf_distort(tf, value)
    images, labels = v1.train.shuffle_batch(
        [image, label],
        batch_size=BATCH,
        num_threads=args.readers * 2,
        capacity=args.shuffle_buffer + 3 * BATCH,
        min_after_dequeue=args.shuffle_buffer,
        allow_smaller_final_batch=True,
    )
    with v1.Session() as sess:
        sess.run(v1.local_variables_initializer())
        coord = v1.train.Coordinator()
        threads = v1.train.start_queue_runners(sess=sess, coord=coord)
        try:
            while True:
                consume(*sess.run([images, labels]))
        except tf.errors.OutOfRangeError:
            pass
        finally:
            coord.request_stop()
            coord.join(threads)


def run_torch(args: argparse.Namespace, consume: Consumer) -> None:
    import torch
    from torch.utils.data import DataLoader, Dataset

    class CIFAR10Files(Dataset[tuple[np.ndarray[Any, Any], int]]):  # type: ignore[misc]
        def __init__(self, paths: list[str]) -> None:
            self.records = np.concatenate(
                [np.memmap(p, np.uint8, "r").reshape(-1, cifar10.RECORD_BYTES) for p in paths]
            )

        def __len__(self) -> int:
            return len(self.records)

        def __getitem__(self, i: int) -> tuple[np.ndarray[Any, Any], int]:
            record = self.records[i]
            image = record[1:].reshape(3, 32, 32)
            top, left = np.random.randint(0, 32 - SIZE + 1, 2)
            crop = image[:, top : top + SIZE, left : left + SIZE].transpose(1, 2, 0)
            if np.random.rand() < 0.5:
                crop = crop[:, ::-1]
            x = crop.astype(np.float32)
            x -= x.mean()
            x /= max(float(x.std()), 1.0 / np.sqrt(x.size))
            return x, int(record[0])

    torch.manual_seed(args.seed)
    loader = DataLoader(
        CIFAR10Files(train_files(args.data_dir)),
        batch_size=BATCH,
        shuffle=True,
        num_workers=args.readers,
        worker_init_fn=lambda i: np.random.seed(args.seed + i),
    )
    for images, labels in loader:
        consume(images.numpy(), labels.numpy())


RUNNERS = {
    "numpy": run_numpy,
    "asyncreader": run_asyncreader,
    "tf.data": run_tf_data,
    "tf1-queues": run_tf1_queues,
    "torch": run_torch,
}
IMPORTS = {"tf.data": "tensorflow", "tf1-queues": "tensorflow", "torch": "torch"}


def child(args: argparse.Namespace) -> None:
    """Run one method once in this process; print its result as one JSON line."""
    method = args.child
    # Imports (and anyio's backend, loaded on first use) are start-up costs, not throughput.
    if method in IMPORTS:
        __import__(IMPORTS[method])
    if method == "asyncreader":
        import anyio

        anyio.run(anyio.sleep, 0, backend=args.backend)
    # numpy's OpenBLAS starts worker threads that spin on the other cores for about 0.1 s
    # of CPU after the import (measured: `import numpy` costs 0.15 s of CPU, 0.05 s with
    # OPENBLAS_NUM_THREADS=1). Nothing here calls BLAS; let the spin end before timing so
    # it does not take a core from whichever method uses more than one.
    time.sleep(0.5)
    consume = Consumer()
    baseline = rss_bytes()
    cpu = cpu_seconds()
    start = time.perf_counter()
    RUNNERS[method](args, consume)
    seconds = time.perf_counter() - start
    cpu = cpu_seconds() - cpu
    result = {
        "method": method,
        "images": consume.images,
        "seconds": seconds,
        "cpu": cpu,
        "baseline_rss": baseline,
        "peak_rss": peak_rss_bytes(),
    }
    print(json.dumps(result))


# -- the driver ------------------------------------------------------------------------------


def available(method: str) -> bool:
    module = IMPORTS.get(method)
    if module is None:
        return True
    from importlib.util import find_spec

    return find_spec(module) is not None


def measure(method: str, args: argparse.Namespace) -> dict[str, Any]:
    command = [
        sys.executable,
        __file__,
        "--child",
        method,
        "--data-dir",
        args.data_dir,
        "--readers",
        str(args.readers),
        "--backend",
        args.backend,
        "--shuffle-buffer",
        str(args.shuffle_buffer),
        "--chunk",
        str(args.chunk),
        "--seed",
        str(args.seed),
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{method} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    if result["images"] != EPOCH:
        raise SystemExit(f"{method} consumed {result['images']} images, not {EPOCH}")
    return result


def queue_bound_bytes(args: argparse.Namespace) -> int:
    """Bytes asyncreader's buffers can hold: the shuffle queue plus a batch being dequeued,
    and per reader one chunk of records, its decoded copy and two chunks of augmented
    images (one waiting to be enqueued, one fetched ahead meanwhile; the decoded records
    are now a view, so this over-counts by a chunk of records per reader)."""
    example = SIZE * SIZE * 3 + 4 * 4 + 4  # uint8 crop, its affine map, int32 label
    per_reader: int = args.chunk * (2 * cifar10.RECORD_BYTES + 2 * example)
    queued: int = (args.shuffle_buffer + 4 * BATCH) * example
    return queued + int(args.readers) * per_reader


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="CIFAR-10 binaries (default: the demo's synthetic set)")
    parser.add_argument("--repeat", type=int, default=3, help="rounds; each row keeps its best")
    parser.add_argument("--readers", type=int, default=2, help="reader tasks / worker threads")
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    parser.add_argument("--shuffle-buffer", type=int, default=int(0.4 * EPOCH))
    parser.add_argument(
        "--chunk", type=int, default=input_pipeline.DEFAULT_CHUNK, help="read_batch size"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--methods", default=",".join(METHODS), help="comma-separated subset")
    parser.add_argument("--child", choices=METHODS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args)
        return

    if args.data_dir is None:
        args.data_dir = str(cifar10.write_synthetic_dataset(default_cache_dir()).path)
    elif not cifar10.check_dataset(args.data_dir):
        parser.error(f"{args.data_dir} does not hold the CIFAR-10 binary files")
    methods = [m for m in args.methods.split(",") if m]
    unknown = sorted(set(methods) - set(METHODS))
    if unknown:
        parser.error(f"unknown methods {unknown}; choose from {list(METHODS)}")
    missing = [m for m in methods if not available(m)]
    methods = [m for m in methods if m not in missing]

    best: dict[str, dict[str, Any]] = {}
    ratios: list[float] = []
    for round_ in range(args.repeat):
        rates = {}
        for method in methods:
            result = measure(method, args)
            rates[method] = result["images"] / result["seconds"]
            if method not in best or result["seconds"] < best[method]["seconds"]:
                best[method] = result
            print(f"  round {round_ + 1}: {method:<12}{rates[method]:>10,.0f} images/s", flush=True)
        if "numpy" in rates and "asyncreader" in rates:
            ratios.append(rates["asyncreader"] / rates["numpy"])
    report(args, methods, best, ratios, missing)


def report(
    args: argparse.Namespace,
    methods: list[str],
    best: dict[str, dict[str, Any]],
    ratios: list[float],
    missing: list[str],
) -> None:
    """Print the table; exit 1 when asyncreader misses the bar in the median round."""
    print(
        f"\n{EPOCH:,} images, batch {BATCH}, {args.readers} readers/workers, shuffle buffer "
        f"{args.shuffle_buffer:,}, asyncreader on {args.backend}, best of {args.repeat}; "
        f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, numpy {np.__version__}\n"
    )
    reference = EPOCH / best["numpy"]["seconds"] if "numpy" in best else None
    print("| method      | images/s | vs numpy | CPU s | peak RSS (MB) | RSS growth (MB) |")
    print("|-------------|---------:|---------:|------:|--------------:|----------------:|")
    for method in methods:
        r = best[method]
        rate = EPOCH / r["seconds"]
        vs = f"{rate / reference:.2f}x" if reference else "-"
        growth = max(0, r["peak_rss"] - r["baseline_rss"]) / 2**20
        print(
            f"| {method:<11} | {rate:>8,.0f} | {vs:>8} | {r['cpu']:>5.2f} "
            f"| {r['peak_rss'] / 2**20:>13.0f} | {growth:>15.0f} |"
        )
    if missing:
        print(f"\nnot importable, skipped: {', '.join(missing)}")
    print(
        f"\nasyncreader's queue capacities bound its buffers to "
        f"{queue_bound_bytes(args) / 2**20:.0f} MB; the epoch is "
        f"{EPOCH * cifar10.RECORD_BYTES / 2**20:.0f} MB on disk and "
        f"{EPOCH * SIZE * SIZE * 3 * 4 / 2**20:.0f} MB as float32 crops "
        f"({EPOCH * SIZE * SIZE * 3 / 2**20:.0f} MB as uint8 crops)."
    )
    if ratios:
        median = statistics.median(ratios)
        verdict = "meets" if median >= BAR else "misses"
        spread = ", ".join(f"{r:.2f}" for r in ratios)
        print(
            f"asyncreader / numpy per round: {spread}; median {median:.2f} {verdict} "
            f"the {BAR:.0%} bar."
        )
        if median < BAR:
            sys.exit(1)


if __name__ == "__main__":
    main()
