"""The CIFAR-10 binary format: the record layout and the file names.

Each example is one fixed-length record of :data:`RECORD_BYTES` = 3,073 bytes: a label byte
(0-9) followed by a 32x32 colour image in channel-major order (1,024 red, then 1,024 green,
then 1,024 blue bytes, rows top to bottom). The training set is ``data_batch_1.bin`` ...
``data_batch_5.bin`` (10,000 records each) and the test set ``test_batch.bin``.

The synthetic data set (:mod:`.synthetic`) and the input functions (:mod:`.input_pipeline`) are
written against it; :mod:`asyncreader.cifar10` re-exports these names.
"""

from __future__ import annotations

__all__ = [
    "DEPTH",
    "HEIGHT",
    "IMAGE_BYTES",
    "LABEL_BYTES",
    "NUM_CLASSES",
    "RECORDS_PER_FILE",
    "RECORD_BYTES",
    "TEST_FILE",
    "TRAIN_FILES",
    "WIDTH",
]

LABEL_BYTES = 1
HEIGHT = 32
WIDTH = 32
DEPTH = 3
IMAGE_BYTES = HEIGHT * WIDTH * DEPTH
RECORD_BYTES = LABEL_BYTES + IMAGE_BYTES
NUM_CLASSES = 10
RECORDS_PER_FILE = 10_000
TRAIN_FILES = tuple(f"data_batch_{i}.bin" for i in range(1, 6))
TEST_FILE = "test_batch.bin"
