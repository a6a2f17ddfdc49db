"""``asyncreader demo``: train a small classifier on CIFAR-10 through the queue pipeline.

The training run itself is :func:`asyncreader._demo.training.run_demo`; this module is the
command around it: it finds or writes the data, picks the progress display, prints the
results and turns Ctrl-C into a summary of what was done.

Without ``--data-dir`` the data is the built-in synthetic CIFAR-10 set (see
:func:`~asyncreader.cifar10.write_synthetic_dataset`), written once to a cache folder.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import TextIO

import anyio

from .. import cifar10
from .._demo.training import DemoOptions, DemoState, run_demo, summary
from .progress import make_progress

__all__ = ["default_cache_dir", "main", "prepare_data"]


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
        progress = make_progress(options.progress, options.steps, "train")
        anyio.run(run_demo, options, data_dir, state, progress, backend=options.backend)
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
