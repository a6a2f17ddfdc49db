"""CIFAR-10 preprocessing: the fused numpy path equals TensorFlow's steps one by one."""

from __future__ import annotations

import numpy as np
import pytest

from asyncreader import cifar10
from asyncreader.cifar10 import input_pipeline


def _images(n: int, seed: int = 1) -> np.ndarray:
    records = np.random.default_rng(seed).integers(0, 256, (n, cifar10.RECORD_BYTES), np.uint8)
    # Flat images (all one value) exercise the 1 / sqrt(N) floor of the standardisation.
    for i, value in enumerate([0, 7, 255][:n]):
        records[i, 1:] = value
    images, _ = cifar10.parse_records(records)
    return images


def _unfused(images: np.ndarray, rng: np.random.Generator, colours: bool) -> np.ndarray:
    """``distorted_inputs``' steps in TensorFlow's order, one function each."""
    crops = input_pipeline.random_crop_and_flip(images, cifar10.IMAGE_SIZE, rng)
    floats = input_pipeline.to_float(crops)
    if colours:
        floats = input_pipeline.random_brightness(floats, 63.0, rng)
        floats = input_pipeline.random_contrast(floats, 0.2, 1.8, rng)
    return input_pipeline.per_image_standardization(floats)


def _fused_reference(images: np.ndarray, rng: np.random.Generator, colours: bool) -> np.ndarray:
    """The fused affine map written plainly, on widened copies (the values to keep)."""
    crops = input_pipeline.random_crop_and_flip(images, cifar10.IMAGE_SIZE, rng)
    n = len(crops)
    if colours:
        rng.uniform(-63.0, 63.0, n)
        factor = rng.uniform(0.2, 1.8, n)
    else:
        factor = np.ones(n)
    planes = crops.transpose(0, 3, 1, 2).reshape(n, 3, cifar10.IMAGE_SIZE**2).astype(np.int64)
    pixels = planes.shape[2]
    mean_c = planes.sum(axis=2) / pixels
    square_c = (planes * planes).sum(axis=2) / pixels
    mean = mean_c.mean(axis=1)
    within = (square_c - mean_c * mean_c).mean(axis=1)
    between = ((mean_c - mean[:, None]) ** 2).mean(axis=1)
    stddev = np.sqrt(np.maximum(factor * factor * within + between, 0.0))
    scale = 1.0 / np.maximum(stddev, 1.0 / np.sqrt(3 * pixels))
    gain = (factor * scale).astype(np.float32)
    offset = (((1.0 - factor)[:, None] * mean_c - mean[:, None]) * scale[:, None]).astype(
        np.float32
    )
    out = crops.astype(np.float32)
    out *= gain[:, None, None, None]
    out += offset[:, None, None, :]
    return out


@pytest.mark.parametrize("n", [0, 1, 5, 32, 33, 129, 300])
@pytest.mark.parametrize("colours", [True, False])
def test_distort_images_keeps_its_values_and_comes_out_contiguous(n: int, colours: bool) -> None:
    """Chunk sizes below, at and across the inner block of 128 images give the same
    float32 values as the plain formula, bit for bit, laid out C-contiguous (channels
    interleaved), so a queue stores each image with one row copy."""
    images = _images(n)
    got = cifar10.distort_images(images, np.random.default_rng(5), distort_colours=colours)
    want = _fused_reference(images, np.random.default_rng(5), colours)
    assert got.shape == (n, cifar10.IMAGE_SIZE, cifar10.IMAGE_SIZE, 3)
    assert got.dtype == np.float32
    assert got.flags.c_contiguous
    assert got.flags.owndata
    np.testing.assert_array_equal(got, want)
    unfused = _unfused(images, np.random.default_rng(5), colours)
    # Equal up to float32 rounding; a flat image's pixels round at the scale of x * gain
    # (about 255 * sqrt(1728)), so its zeros are only near zero.
    np.testing.assert_allclose(got[3:], unfused[3:], rtol=0, atol=2e-5)
    np.testing.assert_allclose(got[:3], unfused[:3], rtol=0, atol=2e-3)


def test_eval_images_are_standardised_central_crops_laid_out_contiguous() -> None:
    images = _images(200)
    got = cifar10.eval_images(images)
    assert got.flags.c_contiguous
    crops = input_pipeline.to_float(input_pipeline.central_crop(images, cifar10.IMAGE_SIZE))
    want = input_pipeline.per_image_standardization(crops)
    np.testing.assert_allclose(got[3:], want[3:], rtol=0, atol=2e-5)
    # Flat images standardise to (near) zeros, not NaN.
    np.testing.assert_allclose(got[:3], 0.0, rtol=0, atol=2e-3)
