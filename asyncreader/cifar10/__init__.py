"""CIFAR-10 with asyncreader: the format, a synthetic data set, TensorFlow's input functions.

The CIFAR-10 binary version stores each example as one fixed-length record of
:data:`RECORD_BYTES` = 3,073 bytes: a label byte (0-9) followed by a 32x32 colour image in
channel-major order. The modules of this package:

* :mod:`~asyncreader.cifar10.layout` — the record layout and file names;
* :mod:`~asyncreader.cifar10.input_pipeline` — TensorFlow's ``cifar10_input.py`` functions
  (:func:`distorted_inputs`, :func:`inputs` and their numpy preprocessing), vectorised over
  chunks of records;
* :mod:`~asyncreader.cifar10.synthetic` — :func:`write_synthetic_dataset`: a CIFAR-10-format
  data set with learnable class structure, so the pipeline runs without a download;
* :mod:`~asyncreader.cifar10.model` — :class:`SoftmaxClassifier`, the small numpy model
  ``asyncreader demo`` trains.

Every public name is importable from here: ``from asyncreader.cifar10 import inputs``.
"""

from .input_pipeline import (
    IMAGE_SIZE,
    NUM_EXAMPLES_PER_EPOCH_FOR_EVAL,
    NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN,
    ImageChunker,
    InputPipeline,
    central_crop,
    distort_images,
    distorted_inputs,
    distorted_pipeline,
    eval_images,
    inputs,
    parse_records,
    per_image_standardization,
    random_brightness,
    random_contrast,
    random_crop_and_flip,
    standardize_planes,
    to_float,
)
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
from .model import SoftmaxClassifier
from .synthetic import DatasetInfo, check_dataset, synthetic_dataset, write_synthetic_dataset

__all__ = [
    "DEPTH",
    "HEIGHT",
    "IMAGE_BYTES",
    "IMAGE_SIZE",
    "LABEL_BYTES",
    "NUM_CLASSES",
    "NUM_EXAMPLES_PER_EPOCH_FOR_EVAL",
    "NUM_EXAMPLES_PER_EPOCH_FOR_TRAIN",
    "RECORD_BYTES",
    "RECORDS_PER_FILE",
    "TEST_FILE",
    "TRAIN_FILES",
    "WIDTH",
    "DatasetInfo",
    "ImageChunker",
    "InputPipeline",
    "SoftmaxClassifier",
    "central_crop",
    "check_dataset",
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
    "synthetic_dataset",
    "to_float",
    "write_synthetic_dataset",
]
