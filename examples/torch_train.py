"""Train a small torch model from TFRecord files, the input pipeline running alongside.

The files hold ``tf.train.Example`` protos (an 8-float feature vector and a 0/1 label). The
pipeline is TensorFlow 1.x's: a producer of the files a glob pattern matches, a reader
handing over record batches, ``parse_example`` on each batch, ``shuffle_batch``; its runner
tasks fill the queues while the training loop awaits the next batch. ``ar.torch_batches``
turns each batch into tensors that share the batch's memory (and, given ``device="cuda"``,
copies them to the GPU on a side stream, overlapped with the step on the previous batch).

Needs PyTorch (``pip install "asyncreader[torch]"``, or a CPU build from PyTorch's CPU
wheel index). Run it::

    python examples/torch_train.py [--epochs 5] [--device cuda]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import anyio
import numpy as np
import torch

import asyncreader as ar

FEATURES: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
    "x": ar.FixedLenFeature([8], "float32"),
    "label": ar.FixedLenFeature([], "int64"),
}
# The rule the model has to learn: label = 1 when x . WEIGHTS > 0.
WEIGHTS = np.array([1.0, -2.0, 0.5, 0.0, 1.5, -1.0, 0.25, 2.0], dtype=np.float32)


def write_shards(folder: Path, shards: int = 4, per_shard: int = 500, seed: int = 0) -> None:
    """Write ``shards`` TFRecord files of labelled examples into ``folder``."""
    rng = np.random.default_rng(seed)
    for shard in range(shards):
        with ar.TFRecordWriter(str(folder / f"train-{shard:05d}.tfrecord")) as writer:
            for x in rng.standard_normal((per_shard, 8)).astype(np.float32):
                label = int(x @ WEIGHTS > 0)
                writer.write(ar.Example({"x": x, "label": [label]}).SerializeToString())


async def train(folder: Path, epochs: int, device: str | None, seed: int = 0) -> float:
    """Train a logistic regression on the shards in ``folder``; return its accuracy."""
    torch.manual_seed(seed)
    model = torch.nn.Linear(8, 2).to(device or "cpu")
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    async with ar.Session():
        files = ar.string_input_producer(
            [str(folder / "train-*.tfrecord")], glob=True, num_epochs=epochs, seed=seed
        )
        reader = ar.TFRecordReader()

        async def parsed() -> tuple[Any, Any]:
            # One vectorised parse per record batch, no Python object per record.
            examples = ar.parse_example(await reader.read_batch(files, 256), FEATURES)
            return examples["x"], examples["label"]

        batches = ar.shuffle_batch(
            parsed,
            batch_size=64,
            capacity=2048,
            min_after_dequeue=512,
            seed=seed,
            enqueue_many=True,
            allow_smaller_final_batch=True,
        )
        steps = 0
        async for x, label in ar.torch_batches(batches, device=device):
            loss = torch.nn.functional.cross_entropy(model(x), label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            steps += 1
            if steps % 50 == 0:
                print(f"step {steps}: loss {loss.item():.3f}")
            # Let the pipeline's runner tasks refill the queues between steps (a real
            # step on a GPU awaits its results anyway).
            await anyio.lowlevel.checkpoint()
    # Accuracy on fresh examples of the same rule.
    rng = np.random.default_rng(seed + 1)
    test_x = rng.standard_normal((1000, 8)).astype(np.float32)
    test_y = torch.from_numpy((test_x @ WEIGHTS > 0).astype(np.int64))
    with torch.no_grad():
        predicted = model(torch.from_numpy(test_x).to(device or "cpu")).argmax(dim=1).cpu()
    accuracy = float((predicted == test_y).float().mean().item())
    print(f"{steps} steps, accuracy on 1000 new examples: {accuracy:.3f}")
    return accuracy


def main(argv: list[str] | None = None) -> float:
    """Write the shards to a temporary folder and train on them."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--device", default=None, help="e.g. cuda (default: the CPU)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        write_shards(Path(folder))
        return anyio.run(train, Path(folder), args.epochs, args.device)


if __name__ == "__main__":
    main()
