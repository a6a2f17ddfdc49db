"""Decoder throughput: decode_raw, decode_csv and parse_example against references.

Run with ``python benchmarks/decoders.py``. Every table gives the best of several runs and a
ratio against the first row's reference, measured in the same run:

* decode_raw on 1024 CIFAR-10-sized records (3073 bytes) against a per-record
  ``np.frombuffer`` loop, plus the ways of checking that all records have the same length;
* decode_csv on 20,000 lines against the ``csv`` module plus numpy, and against its own
  exact (per-field) path, also with a quoted string column (fields holding the delimiter
  and ``""``), with and without pyarrow;
* parse_example on 1024 Examples (a 3072-byte image, an int64 label, 128 floats) against the
  per-example path, the ``protobuf`` package (upb) and TensorFlow when they are installed;
* parse_example on 1024 Examples (a 3072-float image, an int64 label) given as a list of
  ``bytes`` and as a ``RecordBatch`` laid out like a TFRecord block (12-byte header and
  4-byte footer around every payload), as ``read_batch`` returns them;
* parse_example on Examples whose lengths differ (int64 ids of 1 to 6 varint bytes with
  short bytes or a float, and a 3-30 KiB image with an int64 label), as a list and as a
  ``RecordBatch``, against the per-example path.
"""

from __future__ import annotations

import csv
import functools
import io
import sys
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np

import asyncreader as ar
from asyncreader._decoders import csv as csv_module
from asyncreader._decoders import example_layout, example_lockstep
from asyncreader._readers.row_example import RowEncoder
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def best_of(fn: Callable[[], Any], repeat: int = 7) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def table(title: str, unit: str, count: int, rows: list[tuple[str, Callable[[], Any]]]) -> None:
    print(f"\n{title}")
    print(f"  {'variant':<38} {'ms':>9} {unit + '/s':>16} {'vs first':>9}")
    reference = None
    for name, fn in rows:
        seconds = best_of(fn)
        reference = reference or seconds
        rate = count / seconds
        print(f"  {name:<38} {seconds * 1e3:9.3f} {rate:16,.0f} {reference / seconds:8.2f}x")


def bench_decode_raw() -> None:
    rng = np.random.default_rng(0)
    records = [rng.integers(0, 256, 3073, dtype=np.uint8).tobytes() for _ in range(1024)]
    even = [record[:3072] for record in records]
    ragged = [record[: 3000 + index % 73] for index, record in enumerate(records)]

    def loop() -> np.ndarray:
        return np.stack([np.frombuffer(record, dtype=np.uint8) for record in records])

    table(
        "decode_raw: 1024 records of 3073 bytes to uint8",
        "records",
        len(records),
        [
            ("per-record np.frombuffer + np.stack", loop),
            ("ar.decode_raw", lambda: ar.decode_raw(records, "uint8")),
            (
                "ar.decode_raw, big-endian int16 (+swap)",
                lambda: ar.decode_raw(even, "int16", little_endian=False),
            ),
            (
                "ar.decode_raw, fixed_length=3072",
                lambda: ar.decode_raw(records, "uint8", fixed_length=3072),
            ),
            (
                "ar.decode_raw, fixed_length, ragged input",
                lambda: ar.decode_raw(ragged, "uint8", fixed_length=3072),
            ),
        ],
    )
    table(
        "same-length check over 1024 records",
        "records",
        len(records),
        [
            ("np.array([len(r) for r in ...])", lambda: np.array([len(r) for r in records])),
            (
                "np.fromiter(map(len, ...))  [used]",
                lambda: np.fromiter(map(len, records), dtype=np.intp, count=len(records)),
            ),
            (
                "np.char.str_len(np.array(..., 'S'))",
                lambda: np.char.str_len(np.array(records, dtype="S")),
            ),
        ],
    )


def bench_decode_csv() -> None:
    rng = np.random.default_rng(1)
    lines = [
        f"{i},{x:.6f},{y:.3e},name{i % 97}"
        for i, x, y in zip(
            range(20_000), rng.standard_normal(20_000), rng.random(20_000), strict=True
        )
    ]
    defaults: list[object] = [[0], [0.0], [np.float64(0)], [""]]

    def with_csv_module() -> list[np.ndarray]:
        rows = list(csv.reader(io.StringIO("\n".join(lines))))
        columns = list(zip(*rows, strict=True))
        return [
            np.array(columns[0], dtype=np.int32),
            np.array(columns[1], dtype=np.float32),
            np.array(columns[2], dtype=np.float64),
            np.array([value.encode() for value in columns[3]], dtype=object),
        ]

    def exact() -> list[np.ndarray]:
        with mock.patch.object(csv_module, "_fast_path", return_value=None):
            return ar.decode_csv(lines, defaults)

    encoded = [line.encode() for line in lines]
    table(
        "decode_csv: 20,000 lines, int32 / float32 / float64 / string",
        "lines",
        len(lines),
        [
            ("csv module + numpy", with_csv_module),
            ("ar.decode_csv (str records)", lambda: ar.decode_csv(lines, defaults)),
            ("ar.decode_csv (bytes records)", lambda: ar.decode_csv(encoded, defaults)),
            ("ar.decode_csv exact path only", exact),
        ],
    )


@contextmanager
def without_pyarrow() -> Iterator[None]:
    """decode_csv as it runs when pyarrow is not installed."""
    csv_module._arrow_modules.cache_clear()
    csv_module._arrow_plan.cache_clear()
    try:
        with mock.patch.dict(sys.modules, dict.fromkeys(("pyarrow", "pyarrow.csv"))):
            yield
    finally:
        csv_module._arrow_modules.cache_clear()
        csv_module._arrow_plan.cache_clear()


def bench_decode_csv_quoted() -> None:
    rng = np.random.default_rng(3)
    lines = [
        f'{i},"text {i % 97}, with comma",{x:.6f},{y:.3e}'
        for i, x, y in zip(
            range(20_000), rng.standard_normal(20_000), rng.random(20_000), strict=True
        )
    ]
    for i in range(0, len(lines), 7):
        lines[i] = lines[i].replace("text", 'a ""quoted"" text')  # every 7th has a "" escape
    defaults: list[object] = [[0], [""], [0.0], [np.float64(0)]]

    def with_csv_module() -> list[np.ndarray]:
        rows = list(csv.reader(io.StringIO("\n".join(lines))))
        columns = list(zip(*rows, strict=True))
        return [
            np.array(columns[0], dtype=np.int32),
            np.array([value.encode() for value in columns[1]], dtype=object),
            np.array(columns[2], dtype=np.float32),
            np.array(columns[3], dtype=np.float64),
        ]

    def exact() -> list[np.ndarray]:
        with mock.patch.object(csv_module, "_fast_path", return_value=None):
            return ar.decode_csv(lines, defaults)

    def no_arrow() -> list[np.ndarray]:
        with without_pyarrow():
            return ar.decode_csv(encoded, defaults)

    encoded = [line.encode() for line in lines]
    keys = [f"q.csv:{i}".encode() for i in range(len(encoded))]
    batch = RecordBatch.from_records(keys, encoded, work=b"q.csv")
    table(
        'decode_csv: 20,000 lines, int32 / "quoted, string" / float32 / float64',
        "lines",
        len(lines),
        [
            ("csv module + numpy", with_csv_module),
            ("ar.decode_csv (str records)", lambda: ar.decode_csv(lines, defaults)),
            ("ar.decode_csv (bytes records)", lambda: ar.decode_csv(encoded, defaults)),
            ("ar.decode_csv (RecordBatch)", lambda: ar.decode_csv(batch, defaults)),
            ("ar.decode_csv (bytes), without pyarrow", no_arrow),
            ("ar.decode_csv exact path only", exact),
        ],
    )


def cifar_like_examples(count: int) -> list[bytes]:
    rng = np.random.default_rng(2)
    return [
        ar.Example(
            {
                "image": rng.integers(0, 256, 3072, dtype=np.uint8).tobytes(),
                "label": int(rng.integers(0, 10)),
                "vec": rng.standard_normal(128).astype(np.float32),
            }
        ).SerializeToString()
        for _ in range(count)
    ]


def protobuf_parser() -> Callable[[list[bytes]], Any] | None:
    try:
        from google.protobuf import (  # type: ignore[import-untyped,unused-ignore]
            descriptor_pb2,
            descriptor_pool,
            message_factory,
        )
    except ImportError:
        return None
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="bench.proto", package="bench", syntax="proto3")
    for name, kind in (
        ("BytesList", field.TYPE_BYTES),
        ("FloatList", field.TYPE_FLOAT),
        ("Int64List", field.TYPE_INT64),
    ):
        proto.message_type.add(name=name).field.add(
            name="value", number=1, type=kind, label=field.LABEL_REPEATED
        )
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    for number, name in enumerate(("bytes_list", "float_list", "int64_list"), start=1):
        type_name = (
            ".bench."
            + {"bytes_list": "BytesList", "float_list": "FloatList", "int64_list": "Int64List"}[
                name
            ]
        )
        feature.field.add(
            name=name,
            number=number,
            type=field.TYPE_MESSAGE,
            label=field.LABEL_OPTIONAL,
            type_name=type_name,
            oneof_index=0,
        )
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    entry.field.add(name="key", number=1, type=field.TYPE_STRING, label=field.LABEL_OPTIONAL)
    entry.field.add(
        name="value",
        number=2,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_OPTIONAL,
        type_name=".bench.Feature",
    )
    features.field.add(
        name="feature",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_REPEATED,
        type_name=".bench.Features.FeatureEntry",
    )
    proto.message_type.add(name="Example").field.add(
        name="features",
        number=1,
        type=field.TYPE_MESSAGE,
        label=field.LABEL_OPTIONAL,
        type_name=".bench.Features",
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    message = message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Example"))

    def parse(batch: list[bytes]) -> Any:
        images = np.empty(len(batch), dtype=object)
        labels = np.empty(len(batch), dtype=np.int64)
        vectors = np.empty((len(batch), 128), dtype=np.float32)
        for index, data in enumerate(batch):
            values = message.FromString(data).features.feature
            images[index] = values["image"].bytes_list.value[0]
            labels[index] = values["label"].int64_list.value[0]
            vectors[index] = values["vec"].float_list.value
        return images, labels, vectors

    return parse


def bench_parse_example() -> None:
    batch = cifar_like_examples(1024)
    spec = {
        "image": ar.FixedLenFeature([], "string"),
        "label": ar.FixedLenFeature([], "int64"),
        "vec": ar.FixedLenFeature([128], "float"),
    }

    def per_example() -> Any:
        with (
            mock.patch.object(example_layout, "LAYOUT_MIN_BATCH", 10**9),
            mock.patch.object(example_lockstep, "LOCKSTEP_MIN_BATCH", 10**9),
        ):
            return ar.parse_example(batch, spec)

    rows: list[tuple[str, Callable[[], Any]]] = [
        ("per-example wire parser (reference)", per_example),
        ("ar.parse_example", lambda: ar.parse_example(batch, spec)),
    ]
    parse = protobuf_parser()
    if parse is not None:
        rows.append(("protobuf (upb) + numpy", lambda: parse(batch)))
    else:
        print("\n(protobuf not installed: its row is skipped)")
    try:
        import tensorflow as tf
    except ImportError:
        print("(tensorflow not installed: its row is skipped)")
    else:
        tf_spec = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
            "vec": tf.io.FixedLenFeature([128], tf.float32),
        }
        tensor = tf.constant(batch)
        rows.append(("tf.io.parse_example (eager)", lambda: tf.io.parse_example(tensor, tf_spec)))
    table(
        "parse_example: 1024 Examples (3072-byte image, int64 label, 128 floats)",
        "examples",
        len(batch),
        rows,
    )
    varied = batch[:]
    for index in range(0, len(varied), 2):
        # Every other example with a longer image breaks the shared layout for half the batch.
        varied[index] = ar.Example(
            {"image": b"\x01" * 3100, "label": 3, "vec": np.zeros(128, np.float32)}
        ).SerializeToString()
    table(
        "parse_example: same, half the batch laid out differently",
        "examples",
        len(varied),
        [
            ("ar.parse_example, uniform batch", lambda: ar.parse_example(batch, spec)),
            ("ar.parse_example, mixed batch", lambda: ar.parse_example(varied, spec)),
        ],
    )


def tfrecord_like_batch(records: list[bytes], work: bytes) -> RecordBatch:
    """``records`` in one block the way a TFRecord file holds them: each payload between a
    12-byte header and a 4-byte footer, as ``read_batch`` returns them."""
    block = bytearray()
    starts = []
    for record in records:
        block += b"\0" * 12
        starts.append(len(block))
        block += record + b"\0" * 4
    segment = Segment(
        np.frombuffer(bytes(block), np.uint8),
        np.array(starts, np.int64),
        np.array([len(record) for record in records], np.int64),
    )
    return assemble([segment], [KeyRun(work, len(records), range(len(records)))])


def bench_parse_record_batch() -> None:
    rng = np.random.default_rng(3)
    records = [
        ar.Example(
            {
                "image": rng.standard_normal(3072).astype(np.float32),
                "label": int(rng.integers(0, 10)),
            }
        ).SerializeToString()
        for _ in range(1024)
    ]
    batch = tfrecord_like_batch(records, b"train-0.tfrecord")
    spec = {
        "image": ar.FixedLenFeature([32, 32, 3], "float"),
        "label": ar.FixedLenFeature([], "int64"),
    }
    table(
        "parse_example: 1024 Examples (3072-float image, int64 label), list vs RecordBatch",
        "examples",
        len(records),
        [
            ("list of bytes (reference)", lambda: ar.parse_example(records, spec)),
            ("RecordBatch.tolist(), then list", lambda: ar.parse_example(batch.tolist(), spec)),
            ("RecordBatch", lambda: ar.parse_example(batch, spec)),
        ],
    )


def varying_examples(case: str, count: int) -> list[bytes]:
    """Examples of one structure whose lengths differ, as real data has them."""
    rng = np.random.default_rng(4)
    # ids of every magnitude up to 2**40: varints of 1 to 6 bytes.
    ids = [int(rng.integers(0, 2 ** int(bits))) for bits in rng.integers(1, 41, count)]
    if case == "image":
        return [
            ar.Example(
                {
                    "image": rng.integers(
                        0, 256, int(rng.integers(3072, 30721)), np.uint8
                    ).tobytes(),
                    "label": int(rng.integers(0, 1000)),
                }
            ).SerializeToString()
            for _ in range(count)
        ]
    if case == "bytes":
        texts = [
            rng.integers(97, 123, int(size), dtype=np.uint8).tobytes()
            for size in rng.integers(0, 30, count)
        ]
        return RowEncoder(["id", "s"]).encode(list(zip(ids, texts, strict=True)))[0]
    floats = rng.standard_normal(count).tolist()
    return RowEncoder(["id", "x"]).encode(list(zip(ids, floats, strict=True)))[0]


def bench_parse_varying() -> None:
    cases: list[tuple[str, str, int, dict[str, ar.FixedLenFeature | ar.VarLenFeature]]] = [
        (
            "int64 id + short bytes",
            "bytes",
            2048,
            {"id": ar.FixedLenFeature([], "int64"), "s": ar.FixedLenFeature([], "string")},
        ),
        (
            "int64 id + float",
            "float",
            2048,
            {"id": ar.FixedLenFeature([], "int64"), "x": ar.VarLenFeature("float")},
        ),
        (
            "3-30 KiB image + int64 label",
            "image",
            512,
            {"image": ar.FixedLenFeature([], "string"), "label": ar.FixedLenFeature([], "int64")},
        ),
    ]
    for title, case, count, spec in cases:
        records = varying_examples(case, count)
        batch = tfrecord_like_batch(records, b"train-0.tfrecord")

        def per_example(records: list[bytes] = records, spec: Any = spec) -> Any:
            with (
                mock.patch.object(example_layout, "LAYOUT_MIN_BATCH", 10**9),
                mock.patch.object(example_lockstep, "LOCKSTEP_MIN_BATCH", 10**9),
            ):
                return ar.parse_example(records, spec)

        table(
            f"parse_example: {count} Examples of varying length ({title})",
            "examples",
            count,
            [
                ("per-example wire parser (reference)", per_example),
                ("ar.parse_example, list", functools.partial(ar.parse_example, records, spec)),
                ("ar.parse_example, RecordBatch", functools.partial(ar.parse_example, batch, spec)),
            ],
        )


def main() -> None:
    bench_decode_raw()
    bench_decode_csv()
    bench_decode_csv_quoted()
    bench_parse_example()
    bench_parse_record_batch()
    bench_parse_varying()


if __name__ == "__main__":
    main()
