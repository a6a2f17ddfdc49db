"""Byte compatibility with TensorFlow, against fixtures TensorFlow wrote and read.

The files in ``tests/data`` and ``expected.json`` come from ``make_tf_fixtures.py`` (run with
TensorFlow, once). That script also checked that TensorFlow reads asyncreader's writer
output; the outcome is recorded in ``expected.json`` and asserted here.
"""

from __future__ import annotations

import base64
import gzip
import json
import zlib
from pathlib import Path
from typing import Any

import pytest

import asyncreader as ar
from asyncreader._records.fixed_length import FixedLengthFramer
from asyncreader._records.lines import LineFramer
from asyncreader._records.tfrecord import TFRecordFramer

DATA = Path(__file__).resolve().parent.parent / "data"
EXPECTED: dict[str, Any] = json.loads((DATA / "expected.json").read_text())
PAYLOADS = [base64.b64decode(p) for p in EXPECTED["tfrecord_payloads"]]
FILES: dict[str, Any] = EXPECTED["files"]


def by_kind(kind: str) -> list[str]:
    return sorted(name for name, entry in FILES.items() if entry["kind"] == kind)


def frame_in_chunks(framer: Any, data: bytes, size: int) -> tuple[list[int], list[bytes], Any]:
    keys: list[int] = []
    values: list[bytes] = []
    try:
        for i in range(0, len(data), size):
            k, v = framer.decode(data[i : i + size])
            keys += k
            values += v
            while framer.pending:
                k, v = framer.decode(b"")
                keys += k
                values += v
        k, v = framer.finish()
        keys += k
        values += v
    except ar.AsyncReaderError as exc:
        return keys, values, exc
    return keys, values, None


def test_fixtures_are_small() -> None:
    assert sum(p.stat().st_size for p in DATA.iterdir()) < 200_000


def test_tensorflow_read_asyncreader_files() -> None:
    assert EXPECTED["asyncreader_files"] == {
        "none": True,
        "zlib": True,
        "gzip": True,
        "none_byte_identical": True,
    }


@pytest.mark.parametrize("name", by_kind("tfrecord"))
@pytest.mark.parametrize("chunk", [7, 4096, 1 << 20])
def test_tfrecord_files_read_as_tensorflow_reads_them(name: str, chunk: int) -> None:
    entry = FILES[name]
    expected = entry["reader"]
    framer = TFRecordFramer(compression_type=entry["compression"], work_item=name)
    keys, values, error = frame_in_chunks(framer, (DATA / name).read_bytes(), chunk)
    assert [str(k) for k in keys] == expected["keys"]
    assert values == [PAYLOADS[i] for i in expected["values"]]
    if expected["error"] is None:
        assert error is None
    else:
        assert isinstance(error, ar.DataLossError)
        assert expected["error"]["code"] == ar.DataLossError.code
        # Newer TensorFlow appends "' failed with <detail>" to truncation messages.
        assert expected["error"]["message"].startswith(error.message)


@pytest.mark.parametrize("name", by_kind("tfrecord"))
def test_tf_record_iterator_matches_tensorflow(name: str) -> None:
    entry = FILES[name]
    got: list[bytes] = []
    error = None
    try:
        with ar.tf_record_iterator(DATA / name, entry["compression"]) as it:
            got.extend(it)
    except ar.DataLossError as exc:
        error = exc
    if "iterator" in entry:
        assert got == [PAYLOADS[i] for i in entry["iterator"]["values"]]
        assert (error is None) == (entry["iterator"]["error"] is None)
    else:
        assert got == PAYLOADS
        assert error is None


@pytest.mark.parametrize("name", by_kind("text"))
@pytest.mark.parametrize("skip", [0, 1])
@pytest.mark.parametrize("chunk", [1, 3, 1 << 20])
def test_text_files_read_as_tensorflow_reads_them(name: str, skip: int, chunk: int) -> None:
    expected = FILES[name][f"skip{skip}"]
    framer = LineFramer(skip_header_lines=skip)
    keys, values, error = frame_in_chunks(framer, (DATA / name).read_bytes(), chunk)
    assert error is None
    assert [str(k) for k in keys] == expected["keys"]
    assert values == [base64.b64decode(v) for v in expected["values"]]


@pytest.mark.parametrize("name", by_kind("fixed"))
@pytest.mark.parametrize("chunk", [1, 5, 1 << 20])
def test_fixed_length_files_read_as_tensorflow_reads_them(name: str, chunk: int) -> None:
    entry = FILES[name]
    data = (DATA / name).read_bytes()
    for case in entry["cases"]:
        framer = FixedLengthFramer(**case["args"], encoding=entry["encoding"])
        keys, values, error = frame_in_chunks(framer, data, chunk)
        assert error is None
        assert [str(k) for k in keys] == case["reader"]["keys"]
        assert values == [base64.b64decode(v) for v in case["reader"]["values"]]


def test_writer_output_is_byte_identical_to_tensorflow(tmp_path: Path) -> None:
    path = tmp_path / "ours.tfrecord"
    with ar.TFRecordWriter(path) as writer:
        writer.write_many(PAYLOADS)
    assert path.read_bytes() == (DATA / "tf_none.tfrecord").read_bytes()


@pytest.mark.parametrize(
    ("kind", "name", "inflate"),
    [
        ("ZLIB", "tf_zlib.tfrecord.zz", zlib.decompress),
        ("GZIP", "tf_gzip.tfrecord.gz", gzip.decompress),
    ],
)
def test_compressed_writer_output_decompresses_to_tensorflows_stream(
    tmp_path: Path, kind: str, name: str, inflate: Any
) -> None:
    path = tmp_path / "ours"
    with ar.TFRecordWriter(path, kind) as writer:
        for payload in PAYLOADS:
            writer.write(payload)
    assert inflate(path.read_bytes()) == inflate((DATA / name).read_bytes())
