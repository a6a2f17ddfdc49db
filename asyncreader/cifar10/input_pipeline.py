"""TensorFlow's ``cifar10_input.py`` input functions, vectorised over chunks of records.

The parts of TensorFlow's classic ``cifar10_input.py`` that are pure numpy, rewritten to
work on a whole *chunk* of records at once (a ``(n, 3073)`` uint8 array from
:func:`asyncreader.decode_raw` on the :class:`~asyncreader.RecordBatch` of one
``read_batch``: a view of the block the reader read, no copy per record):

* :func:`parse_records` splits labels from images (a view, no copy);
* :func:`distort_images` is ``distorted_inputs``' preprocessing — random 24x24 crop, random
  left-right flip, random brightness and contrast, per-image standardisation;
* :func:`eval_images` is ``inputs``' preprocessing — central 24x24 crop, standardisation;
* :func:`distorted_inputs` / :func:`inputs` wire them into the queue pipeline
  (``string_input_producer`` -> ``FixedLengthRecordReader.read_batch`` -> ``decode_raw`` ->
  augmentation on a worker thread -> ``shuffle_batch(..., enqueue_many=True)``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from .._decoders.raw import decode_raw
from .._pipeline.batching import batch, shuffle_batch_join
from .._pipeline.producers import string_input_producer
from .._readers.fixed_length import FixedLengthRecordReader
from .layout import (
    DEPTH,
    HEIGHT,
    LABEL_BYTES,
    RECORD_BYTES,
    RECORDS_PER_FILE,
    TEST_FILE,
    TRAIN_FILES,
    WIDTH,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._pipeline.batcher import Batcher

__all__ = [
    "IMAGE_SIZE",
    "NUM_EXAMPLES_PER_EPOCH_FOR_EVAL",
    "NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN",
    "ImageChunker",
    "InputPipeline",
    "central_crop",
    "distort_images",
    "distorted_inputs",
    "distorted_pipeline",
    "eval_images",
    "inputs",
    "parse_records",
    "per_image_standardization",
    "random_brightness",
    "random_contrast",
    "random_crop_and_flip",
    "standardize_planes",
    "to_float",
]

#: Side of the square crop fed to the model, as in ``cifar10_input.IMAGE_SIZE``.
IMAGE_SIZE = 24
NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN = 5 * RECORDS_PER_FILE
NUM_EXAMPLES_PER_EPOCH_FOR_EVAL = RECORDS_PER_FILE

#: Records one reader task takes per ``read_batch``: large enough that the per-chunk costs
#: (a thread hop, a few numpy calls) vanish per image, small enough to keep the shuffle
#: queue fed smoothly (a chunk is about 1.5 MB of records).
DEFAULT_CHUNK = 500

#: Images per pass of :func:`_standardize_affine`'s inner loop: their float32 planes (about
#: 220 KB) stay in a core's cache between the arithmetic and the interleaving copy. A
#: larger scratch block is slower where it matters most: freeing a block of the size of
#: the chunk's own arrays made glibc give the memory back and fault it in again per call
#: (measured at 128-image chunks: 0.6 s instead of 0.25 s per epoch).
_AFFINE_BLOCK = 32

#: Fewest images an ImageChunker hands a worker thread: smaller chunks are preprocessed on
#: one thread, larger ones in two halves at once.
_MIN_PIECE = 64

#: Image arrays an ImageChunker keeps for reuse: one in the queue's hands, one being
#: written, one spare.
_SPARES = 3


def _refcount(items: list[Any], i: int) -> int:
    return sys.getrefcount(items[i])


#: What :func:`_refcount` says of an object only the list holds (measured, not assumed:
#: interpreters differ in the temporary references they count).
_ONLY_IN_LIST = _refcount([object()], 0)

# TensorFlow's ``min_fraction_of_examples_in_queue``: the shuffle buffer is 40% of an epoch.
_MIN_FRACTION_IN_QUEUE = 0.4


# -- records -> images -----------------------------------------------------------------------


def parse_records(
    records: np.ndarray[Any, Any],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Split a chunk of CIFAR-10 records into images and labels.

    ``read_cifar10`` in TensorFlow's ``cifar10_input.py``, for a whole chunk: the label is the
    first byte (cast to int32), the image the remaining 3,072 bytes in depth-major order.

    Args:
        records: ``(n, 3073)`` uint8, e.g. ``decode_raw(batch, "uint8")`` of a
            ``read_batch``.

    Returns:
        ``(images, labels)``: ``images`` is a ``(n, 3, 32, 32)`` uint8 *view* of
        ``records`` (channel-major, as stored); ``labels`` is ``(n,)`` int32.

    Raises:
        ValueError: ``records`` is not a ``(n, 3073)`` uint8 array.
    """
    if records.dtype != np.uint8 or records.ndim != 2 or records.shape[1] != RECORD_BYTES:
        raise ValueError(
            f"CIFAR-10 records must be (n, {RECORD_BYTES}) uint8, "
            f"got {records.shape} {records.dtype}"
        )
    labels = records[:, 0].astype(np.int32)
    images = records[:, LABEL_BYTES:].reshape(-1, DEPTH, HEIGHT, WIDTH)
    return images, labels


def random_crop_and_flip(
    images: np.ndarray[Any, Any], size: int, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """Crop a random ``size`` x ``size`` window of each image, and flip half of them.

    ``tf.random_crop`` followed by ``tf.image.random_flip_left_right``, vectorised: every
    window of every image is a strided view (``sliding_window_view``), so one fancy index
    copies each chosen window as a block, and the flips reverse the chosen images' columns
    in place. Offsets are uniform over all valid positions and each image is flipped with
    probability 1/2, independently.

    The result is indexed height, width, channel like TensorFlow's images, but its memory
    keeps the input's channel planes (it is a transposed view of a ``(n, channels, size,
    size)`` block): later per-channel work then reads contiguous memory, and no pass is
    spent interleaving the channels.

    Args:
        images: ``(n, channels, height, width)`` images of any dtype, as stored in CIFAR-10.
        size: Side of the crop, at most ``min(height, width)``.
        rng: The source of the offsets and flips.

    Returns:
        A new ``(n, size, size, channels)`` array of the input's dtype.

    Raises:
        ValueError: ``size`` is not in ``1 .. min(height, width)``.
    """
    top, left, flip = _crop_draws(images.shape, size, rng)
    return _crop_and_flip(images, size, top, left, flip)


def _crop_draws(
    shape: tuple[int, ...], size: int, rng: np.random.Generator
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Draw :func:`random_crop_and_flip`'s offsets and flips for ``shape`` images:
    ``(top, left, flip)``, ``flip`` a boolean mask."""
    n, _, height, width = shape
    if not 0 < size <= min(height, width):
        raise ValueError(f"crop size {size} does not fit images of {height}x{width}")
    top = rng.integers(0, height - size + 1, n)
    left = rng.integers(0, width - size + 1, n)
    return top, left, rng.random(n) < 0.5


def _crop_and_flip(
    images: np.ndarray[Any, Any],
    size: int,
    top: np.ndarray[Any, Any],
    left: np.ndarray[Any, Any],
    flip: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """Cut the drawn windows and flip the chosen crops (see :func:`random_crop_and_flip`)."""
    n = images.shape[0]
    # (n, channels, rows, cols, size, size) -> (n, rows, cols, size, size, channels).
    windows = sliding_window_view(images, (size, size), axis=(2, 3)).transpose(0, 2, 3, 4, 5, 1)
    crops: np.ndarray[Any, Any] = windows[np.arange(n), top, left]
    flipped = np.flatnonzero(flip)
    crops[flipped] = crops[flipped, :, ::-1]
    return crops


def central_crop(images: np.ndarray[Any, Any], size: int) -> np.ndarray[Any, Any]:
    """Cut the central ``size`` x ``size`` window of each image (a view).

    ``tf.image.resize_image_with_crop_or_pad`` to a smaller size: the offset is
    ``(side - size) // 2`` on each axis.

    Args:
        images: ``(n, channels, height, width)`` images, as stored in CIFAR-10.
        size: Side of the crop, at most ``min(height, width)``.

    Returns:
        A ``(n, size, size, channels)`` view of ``images``.

    Raises:
        ValueError: ``size`` is not in ``1 .. min(height, width)``.
    """
    height, width = images.shape[2], images.shape[3]
    if not 0 < size <= min(height, width):
        raise ValueError(f"crop size {size} does not fit images of {height}x{width}")
    top = (height - size) // 2
    left = (width - size) // 2
    return images[:, :, top : top + size, left : left + size].transpose(0, 2, 3, 1)


def to_float(images: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Return ``images`` as a new float32 array (``tf.cast(image, tf.float32)``).

    The copy keeps the input's memory order, so it is one contiguous pass for crops from
    :func:`random_crop_and_flip`.
    """
    return images.astype(np.float32)


def random_brightness(
    images: np.ndarray[Any, Any], max_delta: float, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """Add one random offset in ``[-max_delta, max_delta)`` to every pixel of each image.

    ``tf.image.random_brightness`` on float images (no clipping), in place.

    Args:
        images: ``(n, ...)`` float images; modified in place.
        max_delta: Largest offset, non-negative.
        rng: The source of the offsets.

    Returns:
        ``images``.

    Raises:
        ValueError: ``max_delta`` is negative.
    """
    if max_delta < 0:
        raise ValueError(f"max_delta must be non-negative, got {max_delta}")
    shape = (images.shape[0],) + (1,) * (images.ndim - 1)
    images += rng.uniform(-max_delta, max_delta, shape).astype(images.dtype)
    return images


def random_contrast(
    images: np.ndarray[Any, Any], lower: float, upper: float, rng: np.random.Generator
) -> np.ndarray[Any, Any]:
    """Scale each image's deviation from its per-channel mean by a factor in ``[lower, upper)``.

    ``tf.image.random_contrast``: ``(x - mean) * factor + mean`` with the mean taken over
    each channel of each image, one factor per image. In place.

    Args:
        images: ``(n, height, width, channels)`` float images; modified in place.
        lower: Smallest factor.
        upper: Largest factor, bigger than ``lower``.
        rng: The source of the factors.

    Returns:
        ``images``.

    Raises:
        ValueError: ``upper <= lower`` or ``lower < 0``.
    """
    if upper <= lower:
        raise ValueError(f"upper ({upper}) must be bigger than lower ({lower})")
    if lower < 0:
        raise ValueError(f"lower must be non-negative, got {lower}")
    mean = images.mean(axis=(1, 2), keepdims=True, dtype=np.float64).astype(images.dtype)
    factor = rng.uniform(lower, upper, (images.shape[0], 1, 1, 1)).astype(images.dtype)
    images -= mean
    images *= factor
    images += mean
    return images


def per_image_standardization(images: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Scale each image to zero mean and unit variance, in place.

    ``tf.image.per_image_standardization``: ``(x - mean) / max(stddev, 1 / sqrt(N))`` with
    ``N`` the number of values in one image, so a flat image does not divide by zero.

    Args:
        images: ``(n, ...)`` float32 images; modified in place.

    Returns:
        ``images``.

    Raises:
        ValueError: ``images`` is not float32.
    """
    if images.dtype != np.float32:
        raise ValueError(f"per_image_standardization needs float32 images, got {images.dtype}")
    axes = tuple(range(1, images.ndim))
    count = int(np.prod(images.shape[1:]))
    images -= images.mean(axis=axes, keepdims=True, dtype=np.float64).astype(np.float32)
    stddev = np.sqrt(np.square(images).mean(axis=axes, keepdims=True, dtype=np.float64))
    images *= (1.0 / np.maximum(stddev, 1.0 / np.sqrt(count))).astype(np.float32)
    return images


def distort_images(
    images: np.ndarray[Any, Any],
    rng: np.random.Generator,
    *,
    size: int = IMAGE_SIZE,
    distort_colours: bool = True,
) -> np.ndarray[Any, Any]:
    """Preprocess training images as ``cifar10_input.distorted_inputs`` does, for a chunk.

    Random ``size`` x ``size`` crop, random left-right flip, then (``distort_colours``)
    random brightness (``max_delta=63``) and contrast (``0.2 .. 1.8``), then per-image
    standardisation. The same ``rng`` state gives the same output.

    The colour distortions and the standardisation are fused into one affine map per image
    and channel, ``x * a + b``, computed from exact integer sums of the uint8 crops: this
    equals :func:`random_brightness`, :func:`random_contrast` and
    :func:`per_image_standardization` applied in turn with the same random draws (up to
    float32 rounding) at a third of the memory traffic. The brightness offset cancels in
    the standardisation, as it does in TensorFlow; it is still drawn so that both paths
    consume the generator alike.

    Args:
        images: ``(n, 3, 32, 32)`` uint8 images as :func:`parse_records` returns them.
        rng: The source of all random choices.
        size: Side of the crop.
        distort_colours: Apply the brightness and contrast distortions.

    Returns:
        A new C-contiguous ``(n, size, size, 3)`` float32 array, each image with zero
        mean and unit variance.

    Raises:
        ValueError: ``size`` does not fit the images.
    """
    return _distort(images, rng, size, distort_colours, None)


def _distort(
    images: np.ndarray[Any, Any],
    rng: np.random.Generator,
    size: int,
    distort_colours: bool,
    out: np.ndarray[Any, Any] | None,
) -> np.ndarray[Any, Any]:
    return _apply_distortions(
        images, _draw_distortions(images.shape, rng, size, distort_colours), size, out
    )


#: One chunk's random choices: crop offsets ``top`` and ``left``, the ``flip`` mask and
#: the contrast ``factor``, one entry per image.
_Draws = tuple[
    np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]
]


def _draw_distortions(
    shape: tuple[int, ...], rng: np.random.Generator, size: int, distort_colours: bool
) -> _Draws:
    """Draw every random choice :func:`distort_images` makes for ``shape`` images, in its
    order, so that any slice of the images can then be distorted apart from the rest."""
    top, left, flip = _crop_draws(shape, size, rng)
    n = shape[0]
    if distort_colours:
        rng.uniform(-63.0, 63.0, n)  # brightness: cancelled by the standardisation
        factor = rng.uniform(0.2, 1.8, n)
    else:
        factor = np.ones(n)
    return top, left, flip, factor


def _apply_distortions(
    images: np.ndarray[Any, Any], draws: _Draws, size: int, out: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    top, left, flip, factor = draws
    return _standardize_affine(_crop_and_flip(images, size, top, left, flip), factor, out)


def _standardize_affine(
    crops: np.ndarray[Any, Any],
    factor: np.ndarray[Any, Any],
    out: np.ndarray[Any, Any] | None = None,
) -> np.ndarray[Any, Any]:
    """Contrast ``factor`` then per-image standardisation of uint8 NHWC crops, fused.

    With per-channel means ``m_c``, their mean ``M``, the within-channel variance ``S_w``
    and the variance of the channel means ``S_b``, contrast gives
    ``f * (x - m_c) + m_c`` whose variance is ``f**2 * S_w + S_b`` (the cross term sums to
    zero), so the standardised result is ``x * f / s + ((1 - f) * m_c - M) / s``.

    The result is a C-contiguous array (channels interleaved, as TensorFlow lays out
    images), so a queue stores and hands it on with plain row copies: ``out`` when given
    (float32, of the crops' shape), else a new one.
    """
    n, height, width, channels = crops.shape
    # Channel planes (contiguous for random_crop_and_flip's output).
    planes = crops.transpose(0, 3, 1, 2).reshape(n, channels, height * width)
    gain, offset = _affine_params(planes, factor)
    if out is None:
        out = np.empty((n, height, width, channels), dtype=np.float32)
    return _apply_affine(planes, gain, offset, out)


def _affine_params(
    planes: np.ndarray[Any, Any], factor: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """The affine map of :func:`_standardize_affine` for ``(n, channels, pixels)`` uint8
    channel planes: ``(gain, offset)``, float32 of shapes ``(n,)`` and ``(n, channels)``."""
    _, channels, pixels = planes.shape
    # Integer sums are exact (at most 576 * 255**2 per channel) where float32 sums of
    # squares would lose the variance of flat images to cancellation; summing the uint8
    # values with a wider accumulator needs no widened copy of the chunk.
    mean_c = planes.sum(axis=2, dtype=np.uint32) / pixels
    square_c = np.einsum("ncp,ncp->nc", planes, planes, dtype=np.int32) / pixels
    mean = mean_c.mean(axis=1)
    within = (square_c - mean_c * mean_c).mean(axis=1)
    between = ((mean_c - mean[:, None]) ** 2).mean(axis=1)
    stddev = np.sqrt(np.maximum(factor * factor * within + between, 0.0))
    scale = 1.0 / np.maximum(stddev, 1.0 / np.sqrt(channels * pixels))
    gain = (factor * scale).astype(np.float32)
    offset = (((1.0 - factor)[:, None] * mean_c - mean[:, None]) * scale[:, None]).astype(
        np.float32
    )
    return gain, offset


def _apply_affine(
    planes: np.ndarray[Any, Any],
    gain: np.ndarray[Any, Any],
    offset: np.ndarray[Any, Any],
    out: np.ndarray[Any, Any],
) -> np.ndarray[Any, Any]:
    """Write ``planes * gain + offset`` (per image, and per image and channel) into the
    C-contiguous float32 NHWC array ``out``, interleaving the channels; return ``out``."""
    n, channels, pixels = planes.shape
    flat = out.reshape(n, pixels, channels)
    gain = gain[:, None, None]
    offset = offset[:, :, None]
    # A few images at a time: the float planes stay in cache and are reused, so the only
    # large allocation is the result (see _AFFINE_BLOCK). numpy interleaves planes several
    # times faster one channel at a time (a long strided inner loop) than all at once (an
    # inner loop of `channels` elements).
    block = max(1, min(n, _AFFINE_BLOCK))
    scratch = np.empty((block, channels, pixels), dtype=np.float32)
    for start in range(0, n, block):
        stop = min(start + block, n)
        tmp = scratch[: stop - start]
        np.multiply(planes[start:stop], gain[start:stop], out=tmp)
        tmp += offset[start:stop]
        for c in range(channels):
            flat[start:stop, :, c] = tmp[:, c]
    return out


def standardize_planes(
    planes: np.ndarray[Any, Any], gain: np.ndarray[Any, Any], offset: np.ndarray[Any, Any]
) -> np.ndarray[Any, Any]:
    """Finish the compact images of an :class:`ImageChunker` made with ``compact=True``.

    ``planes * gain + offset`` per image (and per image and channel), interleaved into
    TensorFlow's layout: exactly the float32 images the chunker hands out without
    ``compact``, from the uint8 crops it hands out with it (a quarter of the bytes to
    shuffle and copy).

    Args:
        planes: ``(n, channels, size, size)`` uint8 crops, one plane per channel.
        gain: ``(n,)`` float32, one per image.
        offset: ``(n, channels)`` float32, one per image and channel.

    Returns:
        A new C-contiguous ``(n, size, size, channels)`` float32 array.

    Raises:
        ValueError: the shapes do not fit together.
    """
    if planes.ndim != 4 or planes.dtype != np.uint8:
        raise ValueError(
            f"planes must be (n, channels, size, size) uint8, got {planes.shape} {planes.dtype}"
        )
    n, channels, height, width = planes.shape
    if gain.shape != (n,) or offset.shape != (n, channels):
        raise ValueError(
            f"gain {gain.shape} and offset {offset.shape} do not fit {n} images of "
            f"{channels} channels"
        )
    out = np.empty((n, height, width, channels), dtype=np.float32)
    flat = np.ascontiguousarray(planes).reshape(n, channels, height * width)
    return _apply_affine(flat, gain, offset, out)


def eval_images(images: np.ndarray[Any, Any], *, size: int = IMAGE_SIZE) -> np.ndarray[Any, Any]:
    """Preprocess evaluation images as ``cifar10_input.inputs`` does, for a chunk.

    Central ``size`` x ``size`` crop, then per-image standardisation; nothing random.

    Args:
        images: ``(n, 3, 32, 32)`` uint8 images as :func:`parse_records` returns them.
        size: Side of the crop.

    Returns:
        A new C-contiguous ``(n, size, size, 3)`` float32 array, each image with zero
        mean and unit variance.

    Raises:
        ValueError: ``size`` does not fit the images.
    """
    return _standardize_affine(central_crop(images, size), np.ones(images.shape[0]))


# -- the pipeline ----------------------------------------------------------------------------


class ImageChunker:
    """An example source for ``shuffle_batch(..., enqueue_many=True)``: chunks of images.

    Each call reads up to ``chunk_size`` records from the current file with one
    ``read_batch``, decodes them with one ``decode_raw`` (a view of the block the reader
    read: no ``bytes`` object per record and no join) and preprocesses them on worker
    threads (numpy releases the GIL in its copies and arithmetic, so chunkers preprocess
    in parallel while the event loop keeps serving the queues). A chunk of 128 images or
    more is preprocessed in two halves on two threads at once, so that one reader still
    uses two cores when the others have run out of files; its random choices are all
    drawn first, in :func:`distort_images`' order, so the images are the same. It returns
    ``(images, labels)`` with a leading chunk dimension; it raises
    :class:`~asyncreader.OutOfRangeError` when the file name queue is exhausted.

    With ``compact=True`` it returns ``(planes, gain, offset, labels)`` instead: the
    crops as ``(n, 3, 24, 24)`` uint8 channel planes and the affine map that finishes
    them, ``(n,)`` and ``(n, 3)`` float32; :func:`standardize_planes` turns a batch of
    them into the very images the default hands out. A shuffle queue of them holds a
    quarter of the bytes (20,000 images: 35 MB instead of 138 MB), so filling it,
    copying in and copying out cost a quarter as much; :func:`distorted_pipeline` works
    this way.

    The images array of an earlier call is written again once nothing references it
    any more (a queue copies what it stores, so after ``enqueue_many`` returns, only the
    chunker does): fresh memory for every chunk would be faulted in again each time. It
    keeps up to three such arrays of full chunks; one that is still referenced, or has a
    live view, is never reused.

    Args:
        reader: A ``FixedLengthRecordReader(RECORD_BYTES)``.
        filename_queue: The queue of file names the reader takes work from.
        chunk_size: Records per read.
        distort: ``True`` for training preprocessing (:func:`distort_images`), ``False``
            for evaluation (:func:`eval_images`).
        seed: Seed of this chunker's random choices.
        distort_colours: See :func:`distort_images`.
        compact: Hand out uint8 crops and their affine maps instead of float32 images.
    """

    __slots__ = (
        "_chunk",
        "_colours",
        "_compact",
        "_distort",
        "_queue",
        "_reader",
        "_rng",
        "_spares",
        "records",
    )

    def __init__(
        self,
        reader: Any,
        filename_queue: Any,
        *,
        chunk_size: int = DEFAULT_CHUNK,
        distort: bool = True,
        seed: int | Sequence[int] | None = None,
        distort_colours: bool = True,
        compact: bool = False,
    ) -> None:
        self._reader = reader
        self._queue = filename_queue
        self._chunk = int(chunk_size)
        self._distort = distort
        self._colours = distort_colours
        self._compact = compact
        self._rng = np.random.default_rng(seed)
        # Image arrays handed out before, reused once only this list references them.
        self._spares: list[np.ndarray[Any, Any]] = []
        #: Records read so far.
        self.records = 0

    def _output(self, n: int) -> np.ndarray[Any, Any]:
        """Return an array for ``n`` preprocessed images: a spare nobody else holds, or new."""
        spares = self._spares
        for i in range(len(spares)):
            # Held by the list alone: no caller, queue row or view (a view holds its base)
            # can see what is written into it.
            if len(spares[i]) == n and _refcount(spares, i) == _ONLY_IN_LIST:
                return spares[i]
        if self._compact:
            out = np.empty((n, DEPTH, IMAGE_SIZE, IMAGE_SIZE), dtype=np.uint8)
        else:
            out = np.empty((n, IMAGE_SIZE, IMAGE_SIZE, DEPTH), dtype=np.float32)
        if n == self._chunk:
            # Full chunks only (a short one ends a file); the oldest spare makes room.
            if len(spares) >= _SPARES:
                del spares[0]
            spares.append(out)
        return out

    def _fill(
        self,
        images: np.ndarray[Any, Any],
        draws: _Draws | None,
        out: np.ndarray[Any, Any] | tuple[np.ndarray[Any, Any], ...],
        start: int,
        stop: int,
    ) -> None:
        """Preprocess images ``start`` to ``stop`` into the same rows of ``out``."""
        part = slice(start, stop)
        if isinstance(out, tuple):  # compact: uint8 planes, gain, offset
            planes, gain, offset = out
            if draws is None:
                crops = central_crop(images[part], IMAGE_SIZE)
                factor = np.ones(stop - start)
            else:
                top, left, flip, factor = draws
                crops = _crop_and_flip(images[part], IMAGE_SIZE, top[part], left[part], flip[part])
                factor = factor[part]
            # The crops' memory is channel planes already: one plain copy.
            planes[part] = crops.transpose(0, 3, 1, 2)
            flat = planes[part].reshape(stop - start, DEPTH, IMAGE_SIZE * IMAGE_SIZE)
            gain[part], offset[part] = _affine_params(flat, factor)
            return
        if draws is None:
            crops = central_crop(images[part], IMAGE_SIZE)
            _standardize_affine(crops, np.ones(stop - start), out[part])
        else:
            top, left, flip, factor = draws
            piece = (top[part], left[part], flip[part], factor[part])
            _apply_distortions(images[part], piece, IMAGE_SIZE, out[part])

    async def __call__(self) -> tuple[np.ndarray[Any, Any], ...]:
        records = await self._reader.read_batch(self._queue, self._chunk)
        self.records += len(records)
        # The decoded records view the reader's block; the crops copy out of it, so nothing
        # queued downstream keeps the block alive.
        images, labels = parse_records(decode_raw(records, np.uint8))
        n = len(images)
        # Every random choice is drawn here, in distort_images' order, so the pieces below
        # give the images one call would, and the generator is never touched by a thread.
        if self._distort:
            draws = _draw_distortions(images.shape, self._rng, IMAGE_SIZE, self._colours)
        else:
            draws = None
            central_crop(images, IMAGE_SIZE)  # raises here if the size does not fit
        out: np.ndarray[Any, Any] | tuple[np.ndarray[Any, Any], ...] = self._output(n)
        if self._compact:
            gain = np.empty(n, dtype=np.float32)
            out = (out, gain, np.empty((n, DEPTH), dtype=np.float32))  # type: ignore[assignment]
        if n < 2 * _MIN_PIECE:
            await anyio.to_thread.run_sync(self._fill, images, draws, out, 0, n)
        else:
            # Two halves on two worker threads (numpy releases the GIL in its copies and
            # arithmetic): a reader still uses two cores when the other readers have run
            # out of files (five files over two readers) or are waiting for room.
            half = n // 2
            try:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(anyio.to_thread.run_sync, self._fill, images, draws, out, half, n)
                    await anyio.to_thread.run_sync(self._fill, images, draws, out, 0, half)
            except ExceptionGroup as group:
                # A piece failed: raise its error as a single thread would have.
                raise group.exceptions[0] from None
        if isinstance(out, tuple):
            return (*out, labels)
        return out, labels

    def __repr__(self) -> str:
        kind = "distorted" if self._distort else "eval"
        compact = " compact" if self._compact else ""
        return f"<ImageChunker {kind}{compact} chunk_size={self._chunk} records={self.records}>"


def _reader() -> FixedLengthRecordReader:
    return FixedLengthRecordReader(RECORD_BYTES)


@dataclass(frozen=True, slots=True)
class InputPipeline:
    """The stages of a running CIFAR-10 input pipeline, for observing it.

    Attributes:
        filename_queue: The ``string_input_producer`` queue of file names.
        chunkers: The reader tasks' example sources.
        batcher: The batcher; ``await batcher.dequeue()`` gives ``(images, labels)``.
    """

    filename_queue: Any
    chunkers: tuple[ImageChunker, ...]
    batcher: Batcher[tuple[np.ndarray, np.ndarray]]

    def records_read(self) -> int:
        """Return the records the readers have read so far."""
        return sum(c.records for c in self.chunkers)

    def filename_fill_fraction(self) -> float:
        """Return how full the file name queue is, from 0.0 to 1.0."""
        capacity = self.filename_queue.capacity
        return float(self.filename_queue.size()) / capacity if capacity else 0.0


def distorted_inputs(
    data_dir: str | os.PathLike[str],
    batch_size: int,
    *,
    num_readers: int = 1,
    seed: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    min_after_dequeue: int | None = None,
    distort_colours: bool = True,
    coord: Any = None,
) -> Batcher[tuple[np.ndarray, np.ndarray]]:
    """Start the CIFAR-10 training input pipeline; return its batcher.

    ``await batcher.dequeue()`` returns ``(images, labels)``: ``(batch_size, 24, 24, 3)``
    float32 and ``(batch_size,)`` int32. See :func:`distorted_pipeline`, which this calls
    with the same arguments, for the details.

    Returns:
        The :class:`~asyncreader.Batcher`.

    Raises:
        FailedPreconditionError: no Coordinator is current and none was given.
    """
    return distorted_pipeline(
        data_dir,
        batch_size,
        num_readers=num_readers,
        seed=seed,
        chunk_size=chunk_size,
        min_after_dequeue=min_after_dequeue,
        distort_colours=distort_colours,
        coord=coord,
    ).batcher


def distorted_pipeline(
    data_dir: str | os.PathLike[str],
    batch_size: int,
    *,
    num_readers: int = 1,
    seed: int | None = None,
    chunk_size: int = DEFAULT_CHUNK,
    min_after_dequeue: int | None = None,
    distort_colours: bool = True,
    coord: Any = None,
) -> InputPipeline:
    """Start the CIFAR-10 training input pipeline; return its stages.

    TensorFlow's ``cifar10_input.distorted_inputs``: the five training files cycle through a
    shuffling ``string_input_producer``; ``num_readers`` readers each take files from it
    and turn chunks of records into distorted images (:class:`ImageChunker`), which
    ``shuffle_batch_join`` mixes in a queue holding at least ``min_after_dequeue`` images
    (TensorFlow's 40% of an epoch, 20,000, by default), with room for three more batches.
    The queue holds each image's uint8 crop and the affine map of its standardisation
    (``compact=True``: a quarter of the bytes of float32 images); the batcher finishes each
    batch into float32 images as it hands it out (:func:`standardize_planes`): bit for bit
    the images of standardising each one before the queue.

    Must be called inside a Coordinator or Session (or pass ``coord``); the pipeline runs
    until a stop is requested.

    Args:
        data_dir: Folder holding ``data_batch_1.bin`` ... ``data_batch_5.bin``.
        batch_size: Images per batch.
        num_readers: Reader tasks, each with its own reader and preprocessing thread.
        seed: Seed of the file order, the distortions and the shuffle.
        chunk_size: Records per ``read_batch``.
        min_after_dequeue: Images the shuffle queue keeps to draw from; ``None`` for 40% of
            an epoch.
        distort_colours: Apply the random brightness and contrast.
        coord: The Coordinator to run in; default the current one.

    Returns:
        An :class:`InputPipeline`.

    Raises:
        FailedPreconditionError: no Coordinator is current and none was given.

    A missing file surfaces from the reader as :class:`~asyncreader.NotFoundError` (it
    stops the Coordinator, whose block re-raises it).
    """
    filenames = [os.path.join(data_dir, name) for name in TRAIN_FILES]
    filename_queue = string_input_producer(filenames, seed=seed, coord=coord)
    seeds = np.random.SeedSequence(seed).spawn(num_readers)
    chunkers = [
        ImageChunker(
            _reader(),
            filename_queue,
            chunk_size=chunk_size,
            seed=s.generate_state(2).tolist(),
            distort_colours=distort_colours,
            compact=True,
        )
        for s in seeds
    ]
    if min_after_dequeue is None:
        min_after_dequeue = int(NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN * _MIN_FRACTION_IN_QUEUE)
    # shuffle_batch_join of the compact crops, each batch finished as it is handed out.
    batcher: Batcher[tuple[np.ndarray, np.ndarray]] = shuffle_batch_join(
        chunkers,
        batch_size=batch_size,
        capacity=min_after_dequeue + 3 * batch_size,
        min_after_dequeue=min_after_dequeue,
        seed=seed,
        enqueue_many=True,
        coord=coord,
    )
    batcher._finish_with(_finish_batch)
    return InputPipeline(filename_queue, tuple(chunkers), batcher)


def _finish_batch(
    batch: tuple[np.ndarray[Any, Any], ...],
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A batch of compact examples as images: ``(planes, gain, offset, labels)`` ->
    ``(images, labels)``."""
    planes, gain, offset, labels = batch
    return standardize_planes(planes, gain, offset), labels


def inputs(
    eval_data: bool,
    data_dir: str | os.PathLike[str],
    batch_size: int,
    *,
    num_epochs: int | None = 1,
    chunk_size: int = DEFAULT_CHUNK,
    coord: Any = None,
) -> Batcher[tuple[np.ndarray, np.ndarray]]:
    """Start the CIFAR-10 evaluation input pipeline; return its batcher.

    TensorFlow's ``cifar10_input.inputs``: files in order, central crops, standardisation,
    ``batch`` (no shuffling). Unlike TensorFlow's default the input ends after ``num_epochs``
    passes (``None``: never) and the last batch may be smaller, so ``async for`` over the
    batcher visits every image exactly once per epoch.

    Args:
        eval_data: Read ``test_batch.bin`` (``True``) or the training files (``False``).
        data_dir: Folder holding the files.
        batch_size: Images per batch.
        num_epochs: Passes over the files.
        chunk_size: Records per ``read_batch``.
        coord: The Coordinator to run in; default the current one.

    Returns:
        The :class:`~asyncreader.Batcher`, yielding ``(images, labels)``.

    Raises:
        FailedPreconditionError: no Coordinator is current and none was given.
    """
    names = [TEST_FILE] if eval_data else list(TRAIN_FILES)
    filenames = [os.path.join(data_dir, name) for name in names]
    filename_queue = string_input_producer(
        filenames, num_epochs=num_epochs, shuffle=False, coord=coord
    )
    chunker = ImageChunker(_reader(), filename_queue, chunk_size=chunk_size, distort=False)
    return batch(
        chunker,
        batch_size=batch_size,
        capacity=chunk_size + 3 * batch_size,
        enqueue_many=True,
        allow_smaller_final_batch=True,
        coord=coord,
    )
