"""The readers reproduce what TensorFlow's readers produced for the committed fixtures.

``tests/data/expected.json`` was written by ``tests/data/make_tf_fixtures.py`` with
TensorFlow's own ``tf.compat.v1`` readers.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from queue_util import work_queue
from readers_util import (
    DATA,
    read_verb,  # noqa: F401 (runs each test with both verbs)
)

import asyncreader as ar

pytestmark = pytest.mark.anyio

EXPECTED: dict[str, Any] = json.loads((DATA / "expected.json").read_text())
FILES: dict[str, Any] = EXPECTED["files"]
PAYLOADS = [base64.b64decode(p) for p in EXPECTED["tfrecord_payloads"]]


async def _drain(
    reader: ar.ReaderBase, path: str, n: int | None
) -> tuple[list[bytes], list[bytes], Any]:
    q = await work_queue([path])
    keys: list[bytes] = []
    values: list[bytes] = []
    error = None
    while True:
        try:
            if n is None:
                k, v = await reader.read(q)
                keys.append(k)
                values.append(v)
            else:
                ks, vs = await reader.read_up_to(q, n)
                keys += ks
                values += vs
        except ar.OutOfRangeError:
            break
        except ar.DataLossError as exc:
            error = exc
            break
    return keys, values, error


@pytest.mark.parametrize("n", [None, 1, 3, 1000])
@pytest.mark.parametrize("name", sorted(k for k, v in FILES.items() if v["kind"] == "tfrecord"))
async def test_tfrecord_reader_matches_tensorflow(name: str, n: int | None) -> None:
    case = FILES[name]
    path = str(DATA / name)
    expected = case["reader"]
    async with ar.TFRecordReader(compression_type=case["compression"]) as reader:
        keys, values, error = await _drain(reader, path, n)
    if n is None or expected["error"] is None:
        assert keys == [f"{path}:{k}".encode() for k in expected["keys"]]
        assert values == [PAYLOADS[i] for i in expected["values"]]
    if expected["error"] is None:
        assert error is None
    else:
        assert isinstance(error, ar.DataLossError)
        want = expected["error"]["message"].split("'")[0]
        assert want in str(error)
        assert path in str(error)


@pytest.mark.parametrize("skip", [0, 1])
@pytest.mark.parametrize("name", sorted(k for k, v in FILES.items() if v["kind"] == "text"))
async def test_text_line_reader_matches_tensorflow(name: str, skip: int) -> None:
    path = str(DATA / name)
    expected = FILES[name][f"skip{skip}"]
    async with ar.TextLineReader(skip_header_lines=skip) as reader:
        keys, values, error = await _drain(reader, path, None)
    assert error is None
    assert keys == [f"{path}:{k}".encode() for k in expected["keys"]]
    assert values == [base64.b64decode(v) for v in expected["values"]]


@pytest.mark.parametrize("n", [None, 2, 100])
@pytest.mark.parametrize("name", ["fixed.bin", "fixed.bin.zz"])
async def test_fixed_length_reader_matches_tensorflow(name: str, n: int | None) -> None:
    path = str(DATA / name)
    for case in FILES[name]["cases"]:
        reader = ar.FixedLengthRecordReader(**case["args"], encoding=FILES[name]["encoding"])
        async with reader:
            keys, values, error = await _drain(reader, path, n)
        assert error is None
        assert keys == [f"{path}:{k}".encode() for k in case["reader"]["keys"]]
        assert values == [base64.b64decode(v) for v in case["reader"]["values"]]
