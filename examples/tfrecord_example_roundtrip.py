"""Write tf.train.Example protos to TFRecord files, then read and parse them back in batches.

The TensorFlow 1.x version of this round trip::

    with tf.io.TFRecordWriter(path) as writer:
        for image, label, tags in data:
            example = tf.train.Example(features=tf.train.Features(feature={...}))
            writer.write(example.SerializeToString())

    filename_queue = tf.compat.v1.train.string_input_producer([path], num_epochs=1)
    _, serialized = tf.compat.v1.TFRecordReader().read_up_to(filename_queue, 32)
    parsed = tf.io.parse_example(serialized, features={
        "image": tf.io.FixedLenFeature([4, 4], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
        "tags": tf.io.VarLenFeature(tf.string),
    })
    # ... sess.run(parsed) until OutOfRangeError

With asyncreader the graph-building calls are the same and ``sess.run`` becomes ``await``.
The files are byte-for-byte what TensorFlow writes, so either side can read the other's.

Run it::

    python examples/tfrecord_example_roundtrip.py [--examples 100] [--compression GZIP]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio
import numpy as np

import asyncreader as ar

FEATURES: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
    "image": ar.FixedLenFeature([4, 4], "float32"),
    "label": ar.FixedLenFeature([], "int64"),
    "tags": ar.VarLenFeature("string"),
}
TAGS = [b"cat", b"dog", b"bird", b"fish"]


def make_data(count: int, seed: int = 0) -> list[tuple[np.ndarray[Any, Any], int, list[bytes]]]:
    """``count`` (image, label, tags) triples; each example has 0 to 3 tags."""
    rng = np.random.default_rng(seed)
    return [
        (
            rng.standard_normal((4, 4)).astype(np.float32),
            int(rng.integers(0, 10)),
            [TAGS[t] for t in rng.choice(len(TAGS), int(rng.integers(0, 4)), replace=False)],
        )
        for _ in range(count)
    ]


async def write_examples(
    path: str, data: list[tuple[np.ndarray[Any, Any], int, list[bytes]]], compression: str | None
) -> None:
    """Serialize one tf.train.Example per triple into a TFRecord file."""
    async with ar.TFRecordWriter(path, compression_type=compression) as writer:
        for image, label, tags in data:
            example = ar.Example(
                features=ar.Features(
                    {
                        "image": ar.Feature(float_list=image.ravel()),
                        "label": ar.Feature(int64_list=[label]),
                        "tags": ar.Feature(bytes_list=tags),
                    }
                )
            )
            await writer.awrite(example.SerializeToString())


async def read_examples(
    paths: list[str], compression: str | None, batch_size: int = 32
) -> dict[str, Any]:
    """Read the files once, parsing ``batch_size`` records at a time; return all of them."""
    images: list[np.ndarray[Any, Any]] = []
    labels: list[np.ndarray[Any, Any]] = []
    tags: list[list[bytes]] = []
    async with ar.Session():
        filename_queue = ar.string_input_producer(paths, num_epochs=1, shuffle=False)
        reader = ar.TFRecordReader(compression_type=compression)
        while True:
            try:
                _, serialized = await reader.read_up_to(filename_queue, batch_size)
            except ar.OutOfRangeError:  # every file has been read
                break
            parsed = ar.parse_example(serialized, FEATURES)
            images.append(np.asarray(parsed["image"]))  # FixedLenFeature: a dense array
            labels.append(np.asarray(parsed["label"]))
            # A VarLenFeature parses into a SparseTensorValue (indices, values, dense_shape);
            # its values are in row order, so split them by the number of values per row.
            sparse = parsed["tags"]
            assert isinstance(sparse, ar.SparseTensorValue)
            per_row = np.bincount(sparse.indices[:, 0], minlength=len(serialized))
            tags.extend(row.tolist() for row in np.split(sparse.values, np.cumsum(per_row)[:-1]))
    return {"image": np.concatenate(images), "label": np.concatenate(labels), "tags": tags}


async def roundtrip(folder: str, count: int, compression: str | None) -> dict[str, Any]:
    """Write ``count`` examples to ``folder``, read them back and check they are unchanged."""
    data = make_data(count)
    path = str(Path(folder, "examples.tfrecord"))
    await write_examples(path, data, compression)
    parsed = await read_examples([path], compression)
    assert np.array_equal(parsed["image"], np.stack([image for image, _, _ in data]))
    assert parsed["label"].tolist() == [label for _, label, _ in data]
    assert parsed["tags"] == [tags for _, _, tags in data]
    size = (await anyio.Path(path).stat()).st_size
    print(
        f"wrote and read back {count} examples ({size:,} bytes, "
        f"compression {compression or 'none'}): images {parsed['image'].shape} "
        f"{parsed['image'].dtype}, labels {parsed['label'][:8].tolist()}..., "
        f"first tags {parsed['tags'][:3]}"
    )
    return parsed


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--compression", choices=("ZLIB", "GZIP"), default=None)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        return anyio.run(roundtrip, tmp, args.examples, args.compression, backend=args.backend)


if __name__ == "__main__":
    main()
