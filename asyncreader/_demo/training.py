"""The demo's training run: a classifier trained on CIFAR-10 through the queue pipeline.

The run mirrors TensorFlow's CIFAR-10 tutorial: ``distorted_inputs`` feeds randomly cropped,
flipped and standardised images through a shuffle queue to a training loop, then ``inputs``
feeds the held-out test set (central crops) to an evaluation pass. The training loop is
plain async code: ``images, labels = await batcher.dequeue()`` then a numpy SGD step.

The command line tool (``asyncreader demo``) chooses the data, the progress display and
what is printed; this module only trains, evaluates and reports through :class:`Progress`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, Self

import numpy as np

from .. import cifar10
from .._runtime.session import Session
from ..cifar10.model import SoftmaxClassifier

if TYPE_CHECKING:
    from pathlib import Path
    from types import TracebackType

__all__ = ["DemoOptions", "DemoState", "Progress", "run_demo", "summary"]

_EVAL_BATCH = 500


class Progress(Protocol):
    """What the training loop reports to; a context manager that ends the display."""

    def update(self, completed: int, status: str) -> None:
        """Show that ``completed`` of the total steps are done, with a status text."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


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
        progress: Progress display, chosen by the command line tool: ``"auto"``,
            ``"rich"``, ``"plain"`` or ``"none"``.
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


def _status(state: DemoState, pipeline: cifar10.InputPipeline) -> str:
    batcher = pipeline.batcher.statistics()
    return (
        f"{state.images_per_second():,.0f} images/s | loss {state.loss:.3f} | "
        f"queues: examples {batcher.fill_fraction:.0%} "
        f"(over min {batcher.fraction_over_min_after_dequeue:.0%}), "
        f"files {pipeline.filename_fill_fraction():.0%}"
    )


async def run_demo(
    options: DemoOptions, data_dir: Path, state: DemoState, progress: Progress
) -> DemoState:
    """Train on ``data_dir`` for ``options.steps`` steps, then evaluate on its test set.

    Updates ``state`` as it goes, so that an interrupted run can still be summarised.

    Args:
        options: The settings.
        data_dir: Folder with the CIFAR-10 binary files.
        state: Filled in with progress and results.
        progress: Shown the training steps as they complete.

    Returns:
        ``state``.
    """
    model = SoftmaxClassifier(
        cifar10.NUM_CLASSES, (cifar10.IMAGE_SIZE // 3) ** 2 * cifar10.DEPTH, seed=options.seed
    )
    async with Session():
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
    async with Session():
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
