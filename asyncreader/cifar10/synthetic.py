"""The built-in synthetic CIFAR-10 data set, so the pipeline runs without a download.

:func:`synthetic_dataset` makes records with learnable class structure (a colour and
smooth patterns per class, under shifts, colour casts and strong noise);
:func:`write_synthetic_dataset` writes the six files of the binary format from a fixed seed
(or reuses a complete set written before), and :func:`check_dataset` tells whether a folder
holds a complete data set. All are public as ``asyncreader.cifar10.*``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from .layout import (
    DEPTH,
    HEIGHT,
    IMAGE_BYTES,
    LABEL_BYTES,
    NUM_CLASSES,
    RECORD_BYTES,
    RECORDS_PER_FILE,
    TEST_FILE,
    TRAIN_FILES,
    WIDTH,
)

__all__ = ["DatasetInfo", "check_dataset", "synthetic_dataset", "write_synthetic_dataset"]

# The generator's identity: a cache written by a different version or seed is rebuilt.
_FORMAT_VERSION = 2
_DATA_SEED = 20_151_106
_META_FILE = "asyncreader-synthetic.json"


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """What :func:`write_synthetic_dataset` found or wrote.

    Attributes:
        path: The folder.
        created: Whether the files were written now (``False``: a valid cache was reused).
        records_per_file: Records in each file.
    """

    path: Path
    created: bool
    records_per_file: int


def _smooth_field(rng: np.random.Generator, count: int) -> np.ndarray[Any, Any]:
    """``count`` smooth, left-right symmetric 32x32 patterns in ``[-1, 1]``."""
    y = np.linspace(0.0, 2.0 * np.pi, HEIGHT, endpoint=False)[:, None]
    x = np.linspace(-np.pi, np.pi, WIDTH, endpoint=False)[None, :] + np.pi / WIDTH
    fields = np.zeros((count, HEIGHT, WIDTH))
    for _ in range(3):
        fy = rng.integers(0, 3, (count, 1, 1))
        fx = rng.integers(0, 3, (count, 1, 1))
        phase = rng.uniform(0, 2 * np.pi, (count, 1, 1))
        # cos(fx * x) is even in x, so every pattern survives a left-right flip.
        fields += np.cos(fy * y + phase) * np.cos(fx * x)
    fields -= fields.mean(axis=(1, 2), keepdims=True)
    fields /= np.abs(fields).max(axis=(1, 2), keepdims=True) + 1e-9
    return fields


def _prototypes(rng: np.random.Generator) -> np.ndarray[Any, Any]:
    """Per-class images: a colour and a colour-specific pattern per channel, float CHW."""
    colours = rng.uniform(85.0, 170.0, (NUM_CLASSES, DEPTH))
    patterns = _smooth_field(rng, NUM_CLASSES * DEPTH).reshape(NUM_CLASSES, DEPTH, HEIGHT, WIDTH)
    return colours[:, :, None, None] + _PATTERN_AMPLITUDE * patterns


_MAX_SHIFT = 4
_PATTERN_AMPLITUDE = 40.0
_NOISE_SIGMA = 70.0
_NOISE_BANK = 2048


def _noise_table() -> np.ndarray[Any, Any]:
    """Map a uniform byte to Gaussian noise: the 256 quantiles of N(0, sigma^2), int16."""
    from statistics import NormalDist

    quantiles = NormalDist(0.0, _NOISE_SIGMA).inv_cdf
    return np.rint([quantiles((i + 0.5) / 256) for i in range(256)]).astype(np.int16)


def synthetic_dataset(
    count: int, rng: np.random.Generator, prototypes: np.ndarray[Any, Any] | None = None
) -> np.ndarray[Any, Any]:
    """Make ``count`` CIFAR-10 records with learnable class structure.

    Each image is its class's prototype (a colour plus smooth, flip-symmetric patterns),
    shifted by up to 4 pixels each way (wrapping around), with a random brightness offset,
    a random colour cast and strong per-pixel Gaussian noise. Classes are uniformly
    distributed. Everything is vectorised: the shifted prototypes are tabulated once and
    images are rows gathered from the table, and noise images are rows gathered from a bank
    made from random bytes through a 256-entry quantile table.

    Args:
        count: Records to make.
        rng: The source of labels, shifts and noise.
        prototypes: ``(10, 3, 32, 32)`` float class prototypes; default the fixed ones of
            the built-in data set.

    Returns:
        ``(count, 3073)`` uint8 records (label byte, then the CHW image).
    """
    if prototypes is None:
        prototypes = _prototypes(np.random.default_rng(_DATA_SEED))
    shifts = range(-_MAX_SHIFT, _MAX_SHIFT + 1)
    per_class = len(shifts) ** 2
    table = np.stack(
        [np.roll(prototypes, (dy, dx), axis=(2, 3)) for dy in shifts for dx in shifts], axis=1
    )
    table = np.rint(table).astype(np.int16).reshape(NUM_CLASSES * per_class, IMAGE_BYTES)
    labels = rng.integers(0, NUM_CLASSES, count)
    pixels = table[labels * per_class + rng.integers(0, per_class, count)]
    cast = rng.integers(-25, 26, (count, DEPTH, 1), dtype=np.int16)
    cast += rng.integers(-30, 31, (count, 1, 1), dtype=np.int16)
    pixels.reshape(count, DEPTH, -1)[...] += cast
    # Noise images come from a bank, gathered like the prototypes: drawing fresh noise for
    # every pixel would cost most of the generation time. The noise is independent of the
    # class, so sharing it between images teaches the model nothing false.
    bank_size = min(count, _NOISE_BANK)
    uniform = np.frombuffer(rng.bytes(bank_size * IMAGE_BYTES), np.uint8)
    bank = _noise_table()[uniform.reshape(bank_size, IMAGE_BYTES)]
    pixels += bank[rng.integers(0, bank_size, count)]
    records = np.empty((count, RECORD_BYTES), np.uint8)
    records[:, 0] = labels
    np.clip(pixels, 0, 255, out=pixels)
    records[:, LABEL_BYTES:] = pixels
    return records


def _meta(records_per_file: int) -> dict[str, int]:
    return {
        "format_version": _FORMAT_VERSION,
        "seed": _DATA_SEED,
        "records_per_file": records_per_file,
        "record_bytes": RECORD_BYTES,
    }


def check_dataset(path: str | os.PathLike[str], *, records_per_file: int | None = None) -> bool:
    """Return whether ``path`` holds a complete CIFAR-10 binary data set.

    All six files must exist and hold a whole number of records (exactly
    ``records_per_file`` each when given).

    Args:
        path: The folder.
        records_per_file: Expected records per file, or ``None`` for any positive number.

    Returns:
        ``True`` when the data set is complete.
    """
    for name in (*TRAIN_FILES, TEST_FILE):
        try:
            size = os.path.getsize(os.path.join(path, name))
        except OSError:
            return False
        if size == 0 or size % RECORD_BYTES:
            return False
        if records_per_file is not None and size != records_per_file * RECORD_BYTES:
            return False
    return True


def write_synthetic_dataset(
    path: str | os.PathLike[str], *, records_per_file: int = RECORDS_PER_FILE
) -> DatasetInfo:
    """Write the built-in synthetic CIFAR-10 data set to ``path``, or reuse it if present.

    Writes ``data_batch_1.bin`` ... ``data_batch_5.bin`` and ``test_batch.bin`` of
    ``records_per_file`` records each (see :func:`synthetic_dataset`), from a fixed seed, so
    the same files come out everywhere. A folder already holding a complete set written by
    this version with the same size is reused. Files are written under a temporary name
    and renamed, so an interrupted run never leaves a partial file that looks complete.

    Args:
        path: The folder; created if missing.
        records_per_file: Records per file (10,000 as in CIFAR-10).

    Returns:
        A :class:`DatasetInfo`.

    Raises:
        OSError: the folder cannot be created or written.
        ValueError: ``records_per_file`` is not positive.
    """
    if records_per_file <= 0:
        raise ValueError(f"records_per_file must be positive, got {records_per_file}")
    folder = Path(path)
    meta = _meta(records_per_file)
    meta_path = folder / _META_FILE
    try:
        if json.loads(meta_path.read_text()) == meta and check_dataset(
            folder, records_per_file=records_per_file
        ):
            return DatasetInfo(folder, False, records_per_file)
    except (OSError, ValueError):
        pass
    folder.mkdir(parents=True, exist_ok=True)
    meta_path.unlink(missing_ok=True)
    rng = np.random.default_rng(_DATA_SEED + 1)
    prototypes = _prototypes(np.random.default_rng(_DATA_SEED))
    for name in (*TRAIN_FILES, TEST_FILE):
        records = synthetic_dataset(records_per_file, rng, prototypes)
        tmp = folder / f".{name}.{os.getpid()}.tmp"
        records.tofile(tmp)
        os.replace(tmp, folder / name)
    meta_path.write_text(json.dumps(meta))
    return DatasetInfo(folder, True, records_per_file)
