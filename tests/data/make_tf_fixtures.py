"""Generate the TensorFlow reference fixtures in this directory.

Run once, with a Python that has TensorFlow (it is never a dependency)::

    /work/tfvenv/bin/python tests/data/make_tf_fixtures.py

It writes TFRecord files with TensorFlow's own writer (uncompressed, ZLIB, GZIP), text and
fixed-length files, reads every file back with TensorFlow's ``tf.compat.v1`` readers and
stores what they produced (keys, values, error messages) in ``expected.json``. Finally it
writes the same records with asyncreader's writer (in a subprocess running the project's
venv) and checks that TensorFlow reads those files and that the uncompressed file is
byte-identical; the outcome is recorded in ``expected.json`` under ``"asyncreader_files"``.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf

if TYPE_CHECKING:
    from collections.abc import Callable

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PROJECT_PYTHON = os.environ.get("ASYNCREADER_PYTHON", "/work/venv/bin/python")


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def tfrecord_payloads() -> list[bytes]:
    rng = random.Random(20240601)
    records = [b"", b"a", b"hello world", b"\x00" * 7]
    records += [rng.randbytes(100) for _ in range(40)]
    records += [rng.randbytes(rng.randint(0, 300)) for _ in range(20)]
    records.append(rng.randbytes(9000))  # a large record, crossing small chunks
    records += [b"tail-%d" % i for i in range(3)]
    return records


def op_message(message: str) -> str:
    """Strip graph-mode decoration (node names, the generating script's paths)."""
    if "Node: " in message:
        message = message.split("Node: ", 1)[1].split("\n", 1)[1]
    return message.split("\n\t [[", 1)[0]


def read_with(reader_factory: Callable[[], Any], path: Path, limit: int = 100000) -> dict[str, Any]:
    """Read ``path`` with a tf.compat.v1 reader; return keys, values and a final error."""
    graph = tf.Graph()
    with graph.as_default():
        queue = tf.compat.v1.FIFOQueue(10, [tf.string])
        enqueue = queue.enqueue([str(path)])
        close = queue.close()
        reader = reader_factory()
        key, value = reader.read(queue)
        keys: list[str] = []
        values: list[str] = []
        error = None
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(enqueue)
            sess.run(close)
            for _ in range(limit):
                try:
                    k, v = sess.run([key, value])
                except tf.errors.OutOfRangeError:
                    break
                except tf.errors.OpError as exc:
                    error = {"code": exc.error_code, "message": op_message(exc.message)}
                    break
                keys.append(k.decode().rsplit(":", 1)[1])
                values.append(b64(v))
    return {"keys": keys, "values": values, "error": error}


def iterate_with_tf(path: Path, compression: str) -> dict[str, Any]:
    values = []
    error = None
    try:
        for record in tf.compat.v1.io.tf_record_iterator(
            str(path), tf.io.TFRecordOptions(compression_type=compression)
        ):
            values.append(b64(record))
    except tf.errors.OpError as exc:
        error = {"code": exc.error_code, "message": exc.message}
    return {"values": values, "error": error}


def as_indices(result: dict[str, Any], payloads: list[bytes]) -> dict[str, Any]:
    """Store a TFRecord reader's values as indices into the payload list (smaller)."""
    index = {b64(p): i for i, p in enumerate(payloads)}
    result["values"] = [index[v] for v in result["values"]]
    return result


def main() -> None:
    expected: dict[str, Any] = {"tensorflow": tf.__version__, "files": {}}
    files = expected["files"]
    payloads = tfrecord_payloads()
    expected["tfrecord_payloads"] = [b64(p) for p in payloads]

    # TFRecord files written by TensorFlow.
    for name, compression in (
        ("tf_none.tfrecord", ""),
        ("tf_zlib.tfrecord.zz", "ZLIB"),
        ("tf_gzip.tfrecord.gz", "GZIP"),
    ):
        path = HERE / name
        with tf.io.TFRecordWriter(str(path), options=compression or None) as writer:
            for payload in payloads:
                writer.write(payload)
        files[name] = {
            "kind": "tfrecord",
            "compression": compression,
            "reader": as_indices(
                read_with(
                    functools.partial(
                        tf.compat.v1.TFRecordReader,
                        options=tf.io.TFRecordOptions(compression_type=compression),
                    ),
                    path,
                ),
                payloads,
            ),
        }

    # Damaged TFRecord files (uncompressed), to capture TensorFlow's outcome.
    good = (HERE / "tf_none.tfrecord").read_bytes()
    small = good[: 16 + 0 + 16 + 1 + 16 + 11]  # the first three records
    damaged = {
        "tf_truncated.tfrecord": small[:-3],
        "tf_partial_header.tfrecord": small + b"\x05\x00\x00\x00\x00\x00\x00",
        "tf_bad_header_crc.tfrecord": small[:16] + small[16:24] + b"\x00\x00\x00\x00" + small[28:],
        "tf_bad_payload_crc.tfrecord": small[:-1] + bytes([small[-1] ^ 0xFF]),
    }
    for name, data in damaged.items():
        path = HERE / name
        path.write_bytes(data)
        files[name] = {
            "kind": "tfrecord",
            "compression": "",
            "reader": as_indices(read_with(tf.compat.v1.TFRecordReader, path), payloads),
            "iterator": as_indices(iterate_with_tf(path, ""), payloads),
        }

    # Text files.
    texts = {
        "text_crlf.txt": b"first\r\nsecond\r\n\r\nfourth has \r inside\r\nlast no newline",
        "text_lf_final_newline.txt": b"alpha\nbeta\n\ngamma\n",
        "text_final_cr.txt": b"one\r\ntwo\r",
        "text_final_lone_cr.txt": b"one\ntwo\n\r",
    }
    for name, data in texts.items():
        path = HERE / name
        path.write_bytes(data)
        for skip in (0, 1):
            files.setdefault(name, {"kind": "text"})[f"skip{skip}"] = read_with(
                functools.partial(tf.compat.v1.TextLineReader, skip_header_lines=skip), path
            )

    # Fixed-length files: header 5, records 4, footer 3, and hop variants; plus ZLIB.
    rng = random.Random(7)
    raw = rng.randbytes(5 + 4 * 10 + 3 + 2)  # two trailing bytes that form nothing
    (HERE / "fixed.bin").write_bytes(raw)
    (HERE / "fixed.bin.zz").write_bytes(__import__("zlib").compress(raw))
    for name, encoding in (("fixed.bin", ""), ("fixed.bin.zz", "ZLIB")):
        entry = files.setdefault(name, {"kind": "fixed", "encoding": encoding, "cases": []})
        for hop in (0, 2, 6):
            args = {"record_bytes": 4, "header_bytes": 5, "footer_bytes": 3, "hop_bytes": hop}
            result = read_with(
                functools.partial(tf.compat.v1.FixedLengthRecordReader, encoding=encoding, **args),
                HERE / name,
            )
            entry["cases"].append({"args": args, "reader": result})

    # asyncreader's writer: TensorFlow must read its files, uncompressed ones byte for byte.
    with tempfile.TemporaryDirectory() as tmp:
        script = (
            "import json, sys, base64\n"
            "import asyncreader as ar\n"
            "payloads = [base64.b64decode(p) for p in json.load(open(sys.argv[1]))]\n"
            "for name, comp in (('none', None), ('zlib', 'ZLIB'), ('gzip', 'GZIP')):\n"
            "    with ar.TFRecordWriter(sys.argv[2] + '/' + name, comp) as w:\n"
            "        w.write_many(payloads)\n"
        )
        payload_file = Path(tmp) / "payloads.json"
        payload_file.write_text(json.dumps(expected["tfrecord_payloads"]))
        subprocess.run(
            [PROJECT_PYTHON, "-c", script, str(payload_file), tmp],
            check=True,
            cwd=ROOT,
        )
        outcome: dict[str, bool] = {}
        for name, compression in (("none", ""), ("zlib", "ZLIB"), ("gzip", "GZIP")):
            got = iterate_with_tf(Path(tmp) / name, compression)
            outcome[name] = got["error"] is None and got["values"] == expected["tfrecord_payloads"]
        outcome["none_byte_identical"] = (Path(tmp) / "none").read_bytes() == good
        expected["asyncreader_files"] = outcome
        if not all(outcome.values()):
            sys.exit(f"TensorFlow disagrees with asyncreader's writer: {outcome}")

    (HERE / "expected.json").write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in HERE.iterdir() if p.is_file())
    outcome = expected["asyncreader_files"]
    print(f"wrote fixtures ({total} bytes in total); asyncreader files: {outcome}")


if __name__ == "__main__":
    main()
