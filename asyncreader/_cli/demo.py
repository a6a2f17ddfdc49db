"""``asyncreader demo``: train a small classifier on CIFAR-10 through the queue pipeline.

The run mirrors TensorFlow's CIFAR-10 tutorial: ``distorted_inputs`` feeds randomly cropped,
flipped and standardised images through a shuffle queue to a training loop, then ``inputs``
feeds the held-out test set (central crops) to an evaluation pass. The training loop is
plain async code: ``images, labels = await batcher.dequeue()`` then a numpy SGD step.

Without ``--data-dir`` the data is the built-in synthetic CIFAR-10 set (see
:func:`~asyncreader.cifar10.write_synthetic_dataset`), written once to a cache folder.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import anyio
import numpy as np

from .. import cifar10
from .model import SoftmaxClassifier
from .progress import make_progress

__all__ = ["DemoOptions", "DemoState", "default_cache_dir", "prepare_data", "run_demo"]

_EVAL_BATCH = 500


def default_cache_dir() -> Path:
    """Return the folder for the synthetic data set: the platform's user cache folder.

    ``$XDG_CACHE_HOME`` (default ``~/.cache``) on Linux and other Unix systems,
    ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows; then
    ``asyncreader/cifar10-synthetic``.
    """
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "asyncreader" / "cifar10-synthetic"


@dataclass(frozen=True, slots=True)
class DemoOptions:
    """The demo's settings (one per command line option).

    Attributes:
        data_dir: Real CIFAR-10 binaries to use instead of the synthetic set.
        cache_dir: Where the synthetic set lives.
        steps: Training steps.
        batch_size: Images per training batch.
        backend: ``"asyncio"`` or ``"trio"``.
        readers: Reader tasks.
        seed: Seed of the pipeline's and the model's random choices.
        shuffle_buffer: ``min_after_dequeue`` of the shuffle queue; ``None`` for 40% of an
            epoch as in TensorFlow.
        progress: Progress display (see :func:`~asyncreader._cli.progress.make_progress`).
    """

    data_dir: Path | None = None
    cache_dir: Path | None = None
    steps: int = 600
    batch_size: int = 128
    backend: str = "asyncio"
    readers: int = 2
    seed: int = 0
    shuffle_buffer: int | None = None
    progress: str = "auto"


@dataclass(slots=True)
class DemoState:
    """What the demo has done so far; read after an interruption for the summary.

    Attributes:
        steps: Training steps completed.
        images: Images trained on.
        train_seconds: Seconds from starting the pipeline to the last step.
        records_read: Records the readers read (includes images still queued).
        loss: Loss of the last step.
        accuracy: Held-out accuracy, once evaluated.
        eval_images: Images evaluated.
        phase: What the demo is doing now.
    """

    steps: int = 0
    images: int = 0
    train_seconds: float = 0.0
    records_read: int = 0
    loss: float = float("nan")
    accuracy: float | None = None
    eval_images: int = 0
    phase: str = "starting"
    _started: float = field(default=0.0, repr=False)

    def images_per_second(self) -> float:
        """Return the training throughput so far."""
        seconds = self.train_seconds
        if self.phase == "training":
            seconds = time.perf_counter() - self._started
        return self.images / seconds if seconds > 0 else 0.0


def prepare_data(options: DemoOptions, out: TextIO) -> Path:
    """Return the data folder: ``--data-dir`` checked, or the synthetic set written/reused.

    Raises:
        FileNotFoundError: ``--data-dir`` does not hold the six CIFAR-10 binary files.
    """
    if options.data_dir is not None:
        if not cifar10.check_dataset(options.data_dir):
            names = ", ".join((*cifar10.TRAIN_FILES, cifar10.TEST_FILE))
            raise FileNotFoundError(
                f"{options.data_dir} does not hold the CIFAR-10 binary files ({names}) "
                f"of whole {cifar10.RECORD_BYTES}-byte records"
            )
        return options.data_dir
    folder = options.cache_dir if options.cache_dir is not None else default_cache_dir()
    start = time.perf_counter()
    info = cifar10.write_synthetic_dataset(folder)
    if info.created:
        seconds = time.perf_counter() - start
        out.write(f"wrote synthetic CIFAR-10 to {folder} in {seconds:.1f} s\n")
    else:
        out.write(f"using synthetic CIFAR-10 in {folder}\n")
    out.flush()
    return folder


def _status(state: DemoState, pipeline: cifar10.InputPipeline) -> str:
    batcher = pipeline.batcher.statistics()
    return (
        f"{state.images_per_second():,.0f} images/s | loss {state.loss:.3f} | "
        f"queues: examples {batcher.fill_fraction:.0%} "
        f"(over min {batcher.fraction_over_min_after_dequeue:.0%}), "
        f"files {pipeline.filename_fill_fraction():.0%}"
    )


async def run_demo(options: DemoOptions, data_dir: Path, state: DemoState) -> DemoState:
    """Train on ``data_dir`` for ``options.steps`` steps, then evaluate on its test set.

    Updates ``state`` as it goes, so that an interrupted run can still be summarised.

    Args:
        options: The settings.
        data_dir: Folder with the CIFAR-10 binary files.
        state: Filled in with progress and results.

    Returns:
        ``state``.
    """
    import asyncreader as ar

    model = SoftmaxClassifier(
        cifar10.NUM_CLASSES, (cifar10.IMAGE_SIZE // 3) ** 2 * cifar10.DEPTH, seed=options.seed
    )
    progress = make_progress(options.progress, options.steps, "train")
    async with ar.Session():
        pipeline = cifar10.distorted_pipeline(
            data_dir,
            options.batch_size,
            num_readers=options.readers,
            seed=options.seed,
            min_after_dequeue=options.shuffle_buffer,
        )
        state.phase = "training"
        state._started = time.perf_counter()
        with progress:
            for _ in range(options.steps):
                images, labels = await pipeline.batcher.dequeue()
                result = model.train_step(images, labels)
                state.steps += 1
                state.images += len(labels)
                state.loss = result.loss
                state.records_read = pipeline.records_read()
                progress.update(state.steps, _status(state, pipeline))
        state.train_seconds = time.perf_counter() - state._started
        state.phase = "evaluating"
        # Leaving the session stops the runners and closes the queues and readers.

    correct = 0
    async with ar.Session():
        test = cifar10.inputs(True, data_dir, _EVAL_BATCH)
        async for images, labels in test:
            correct += int(np.count_nonzero(model.predict(images) == labels))
            state.eval_images += len(labels)
    state.accuracy = correct / state.eval_images if state.eval_images else 0.0
    state.phase = "done"
    return state


def summary(state: DemoState) -> str:
    """Return the one-line summary of a finished or interrupted run."""
    line = (
        f"{state.steps} steps, {state.images:,} images in {state.train_seconds:.2f} s: "
        f"{state.images_per_second():,.0f} images/s"
    )
    if state.accuracy is not None:
        line += f"; held-out accuracy {state.accuracy:.1%} on {state.eval_images:,} images"
    return line


def main(options: DemoOptions, out: TextIO | None = None) -> int:
    """Run the demo; return the exit status (0, or 130 when interrupted).

    Args:
        options: The settings.
        out: Where results go; default standard output.

    Returns:
        The process exit status.

    Raises:
        FileNotFoundError: ``options.data_dir`` is not a CIFAR-10 binary folder.
    """
    stream = sys.stdout if out is None else out
    state = DemoState()
    try:
        data_dir = prepare_data(options, stream)
        readers = f"{options.readers} reader{'s' if options.readers != 1 else ''}"
        stream.write(
            f"training {options.steps} steps of {options.batch_size} images "
            f"({readers}, {options.backend})\n"
        )
        stream.flush()
        anyio.run(run_demo, options, data_dir, state, backend=options.backend)
    except KeyboardInterrupt:
        if state.phase == "training":
            state.train_seconds = time.perf_counter() - state._started
        stream.write(f"\ninterrupted while {state.phase}: {summary(state)}\n")
        stream.flush()
        return 130
    stream.write(
        f"throughput: {state.images_per_second():,.0f} images/s "
        f"({state.images:,} images in {state.train_seconds:.2f} s, "
        f"{state.records_read:,} records read)\n"
    )
    assert state.accuracy is not None
    stream.write(
        f"held-out accuracy: {state.accuracy:.1%} on {state.eval_images:,} test images "
        f"(chance: {1 / cifar10.NUM_CLASSES:.0%})\n"
    )
    stream.flush()
    return 0
