"""Write TensorFlow's own answers for the decoder tests (run once; outputs are committed).

Run with a Python that has TensorFlow::

    /work/tfvenv/bin/python tests/data/example/make_fixtures.py

It writes ``tf_fixtures.json`` next to this file: serialized tf.train.Examples of every
feature kind (deterministic serialization, and the default one for single-feature Examples),
TensorFlow's parse_single_example / parse_example results and error messages, and
decode_csv / decode_raw results and error messages. Bytes are hex strings; error messages
have TensorFlow's op prefix and suffix removed.
"""

from __future__ import annotations

import json
import math
import os
import re
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np
import tensorflow as tf

OUT = Path(__file__).with_name("tf_fixtures.json")


def clean(message: str) -> str:
    message = message.split("\n")[0]
    message = re.sub(r"^\{\{function_node [^}]*\}\} ", "", message)
    return re.sub(r" \[Op:\w+\]$", "", message)


def jsonable(value: Any) -> Any:
    if isinstance(value, bytes):
        return {"hex": value.hex()}
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return {"float": repr(value)}
    if isinstance(value, list):
        return [jsonable(item) for item in value]
    return value


def tf_feature(kind: str | None, values: Any) -> Any:
    if kind is None:
        return tf.train.Feature()
    if kind == "bytes_list":
        return tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
    if kind == "float_list":
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))


# name -> {feature name: (kind, values)}
EXAMPLES: dict[str, dict[str, Any]] = {
    "floats": {"f": ("float_list", [1.0, -2.5, 3.25, 0.0, -0.0, 1e-30, 3.4e38])},
    "ints": {"i": ("int64_list", [0, 1, -1, 127, 128, 300, 2**31, -(2**31), 2**63 - 1, -(2**63)])},
    "bytes": {"s": ("bytes_list", [b"", b"a", b"\x00\xff", b"x" * 200])},
    "empty_lists": {
        "ef": ("float_list", []),
        "ei": ("int64_list", []),
        "es": ("bytes_list", []),
        "none": (None, None),
    },
    "negative": {"n": ("int64_list", [-5, -1000000, -(2**40)])},
    "mixed": {
        "image": ("bytes_list", [bytes(range(256))]),
        "label": ("int64_list", [7]),
        "vec": ("float_list", [float(i) / 8 for i in range(128)]),
        "name": ("bytes_list", ["naïve".encode()]),
    },
    "key_order": {
        key: ("int64_list", [i]) for i, key in enumerate(["b", "a", "aa", "", "ab", "B", "z", "é"])
    },
    "empty": {},
    "long_lengths": {"big": ("bytes_list", [b"q" * 300]), "many": ("float_list", [0.5] * 40)},
}


def make_example(features: dict[str, Any]) -> Any:
    return tf.train.Example(
        features=tf.train.Features(
            feature={key: tf_feature(kind, values) for key, (kind, values) in features.items()}
        )
    )


def example_fixtures() -> dict[str, Any]:
    out = {}
    for name, features in EXAMPLES.items():
        example = make_example(features)
        out[name] = {
            "features": {
                key: {
                    "kind": kind,
                    "value": jsonable(
                        values if kind != "float_list" else [float(np.float32(v)) for v in values]
                    ),
                }
                for key, (kind, values) in features.items()
            },
            "deterministic": example.SerializeToString(deterministic=True).hex(),
            "default": example.SerializeToString().hex() if len(features) <= 1 else None,
        }
    out["unset"] = {
        "features": None,
        "deterministic": tf.train.Example().SerializeToString().hex(),
        "default": "",
    }
    return out


def spec_to_tf(spec: dict[str, Any]) -> Any:
    dtype = {"float32": tf.float32, "int64": tf.int64, "string": tf.string}[spec["dtype"]]
    if spec["type"] == "var":
        return tf.io.VarLenFeature(dtype)
    default = spec.get("default")
    if default is not None and spec["dtype"] == "string":
        default = (
            [bytes.fromhex(item) for item in default]
            if isinstance(default, list)
            else bytes.fromhex(default)
        )
    return tf.io.FixedLenFeature(spec["shape"], dtype, default_value=default)


def result_to_json(value: Any) -> dict[str, Any]:
    if isinstance(value, tf.sparse.SparseTensor):
        values = value.values.numpy()
        return {
            "sparse": True,
            "indices": value.indices.numpy().tolist(),
            "values": jsonable(values.tolist()),
            "dense_shape": value.dense_shape.numpy().tolist(),
        }
    array = np.asarray(value.numpy(), dtype=object if value.dtype == tf.string else None)
    return {
        "sparse": False,
        "shape": list(array.shape),
        "values": jsonable(array.reshape(-1).tolist()),
    }


def run_parse(serialized: Any, specs: dict[str, Any], single: bool) -> dict[str, Any]:
    tf_specs = {key: spec_to_tf(spec) for key, spec in specs.items()}
    try:
        if single:
            result = tf.io.parse_single_example(serialized, tf_specs)
        else:
            result = tf.io.parse_example(tf.constant(serialized, dtype=tf.string), tf_specs)
    except (tf.errors.InvalidArgumentError, UnicodeDecodeError) as exc:
        text = (
            clean(str(exc))
            if isinstance(exc, tf.errors.InvalidArgumentError)
            else "Could not parse example input"
        )
        return {"error": text}
    return {"result": {key: result_to_json(value) for key, value in result.items()}}


def ser(name: str) -> bytes:
    data: bytes = make_example(EXAMPLES[name]).SerializeToString(deterministic=True)
    return data


def raw_entry(key: bytes, feature: bytes) -> bytes:
    entry = b"\x0a" + bytes([len(key)]) + key + b"\x12" + bytes([len(feature)]) + feature
    features = b"\x0a" + bytes([len(entry)]) + entry
    return b"\x0a" + bytes([len(features)]) + features


def F(shape: list[int], dtype: str, default: Any = None) -> dict[str, Any]:
    return {
        "type": "fixed",
        "shape": shape,
        "dtype": dtype,
        "default": default,
    }


def V(dtype: str) -> dict[str, Any]:
    return {"type": "var", "dtype": dtype}


PARSE_CASES = [
    (
        "all kinds",
        ["mixed", "mixed"],
        {
            "image": F([], "string"),
            "label": F([], "int64"),
            "vec": F([128], "float32"),
            "name": V("string"),
        },
    ),
    ("fixed 2d", ["floats"], {"f": F([7, 1], "float32")}),
    ("ints", ["ints"], {"i": F([10], "int64")}),
    (
        "var all",
        ["floats", "ints", "bytes", "empty_lists"],
        {
            "f": V("float32"),
            "i": V("int64"),
            "s": V("string"),
            "ef": V("float32"),
            "none": V("int64"),
        },
    ),
    (
        "defaults",
        ["floats", "empty"],
        {
            "q": F([2, 2], "float32", [1, 2, 3, 4]),
            "r": F([], "int64", 9),
            "t": F([2], "string", ["6869", "7468657265"]),
        },
    ),
    ("empty feature default", ["empty_lists"], {"none": F([], "float32", 3.0)}),
    ("empty feature missing", ["empty_lists"], {"none": F([], "float32")}),
    (
        "empty list shape 0",
        ["empty_lists"],
        {"ef": F([0], "float32"), "ei": F([0], "int64"), "es": F([0], "string")},
    ),
    ("empty list scalar", ["empty_lists"], {"ef": F([], "float32")}),
    ("missing required", ["floats", "floats"], {"zz": F([], "float32")}),
    ("missing in second", ["ints", "floats"], {"i": F([10], "int64")}),
    ("type mismatch fixed", ["floats"], {"f": F([7], "int64")}),
    ("type mismatch var", ["floats"], {"f": V("string")}),
    ("count too few", ["floats"], {"f": F([8], "float32")}),
    ("count too many", ["ints"], {"i": F([2], "int64")}),
    ("count bytes many", ["bytes"], {"s": F([1], "string")}),
    ("count bytes few", ["bytes"], {"s": F([5], "string")}),
    ("negative", ["negative"], {"n": F([3], "int64")}),
    ("big", ["long_lengths"], {"big": F([], "string"), "many": F([40], "float32")}),
    ("empty batch", [], {"f": F([3], "float32"), "i": V("int64")}),
]

RAW_PARSE_CASES = [
    (
        "unpacked floats",
        [
            raw_entry(
                b"u",
                b"\x12\x0a\x0d" + np.float32(1.5).tobytes() + b"\x0d" + np.float32(2.5).tobytes(),
            )
        ],
        {"u": F([2], "float32")},
    ),
    ("unpacked ints", [raw_entry(b"u", b"\x1a\x04\x08\x01\x08\x7f")], {"u": V("int64")}),
    (
        "unknown fields",
        [ser("floats") + b"\x10\x05", b"\x12\x02ab" + ser("floats")],
        {"f": V("float32")},
    ),
    ("unknown in feature", [raw_entry(b"u", b"\x1a\x02\x08\x01\x20\x01")], {"u": V("int64")}),
    (
        "duplicate key",
        [raw_entry(b"u", b"\x1a\x02\x08\x01") + raw_entry(b"u", b"\x1a\x02\x08\x02")],
        {"u": F([1], "int64")},
    ),
    (
        "varint 2^64-1",
        [raw_entry(b"u", b"\x1a\x0c\x0a\x0a" + b"\xff" * 9 + b"\x01")],
        {"u": V("int64")},
    ),
    ("garbage", [ser("floats"), b"\x0a\x05abc"], {"f": V("float32")}),
    ("truncated", [ser("floats")[:-3]], {"f": V("float32")}),
]


def parse_fixtures() -> list[dict[str, Any]]:
    out = []
    for name, examples, specs in PARSE_CASES:
        serialized = [ser(example) for example in examples]
        out.append(
            {
                "name": name,
                "serialized": [s.hex() for s in serialized],
                "features": specs,
                "batch": run_parse(serialized, specs, single=False),
                "single": run_parse(serialized[0], specs, single=True)
                if len(serialized) == 1
                else None,
            }
        )
    for name, serialized, specs in RAW_PARSE_CASES:
        out.append(
            {
                "name": name,
                "serialized": [s.hex() for s in serialized],
                "features": specs,
                "batch": run_parse(serialized, specs, single=False),
                "single": None,
            }
        )
    return out


CSV_CASES: list[tuple[list[str], list[tuple[str, Any]], dict[str, Any]]] = [
    (
        ["1,2.5,abc", "-3,4e2,def", "7,-0.125,"],
        [("int32", 0), ("float32", 0.0), ("string", "z")],
        {},
    ),
    ([",1,", "0.2,3,bcd", "3.0,,"], [("float32", 1.0), ("int32", 0), ("string", "a")], {}),
    (['"a""b",c', '"x,y","\n"', '"",d'], [("string", "q"), ("string", "r")], {}),
    (["1;2", "3;4"], [("int64", None), ("float64", None)], {"field_delim": ";"}),
    (["NA,x", "2,NA"], [("int32", 1), ("string", "d")], {"na_value": "NA"}),
    (['"3",4'], [("string", ""), ("int32", 0)], {"use_quote_delim": False}),
    (["1,2,3,4", "5,6,7,8"], [("int32", 0), ("int32", 0)], {"select_cols": [1, 3]}),
    (['1,2,"x'], [("int32", 0), ("int32", 0)], {"select_cols": [0, 1]}),
    (["1,"], [("int32", 0)], {"select_cols": [1]}),
    (["1,\n2", "\r3,4"], [("int32", 0), ("int32", 0)], {}),
    (
        [
            " 0x1.8p1 ",
            "inf",
            "-Infinity",
            "nan",
            "+.5",
            "1.00000005960464477550",
            "3.4028236e38",
            "7e-46",
        ],
        [("float32", 0.0)],
        {"field_delim": ";"},
    ),
    (
        [" 0x1.8p1 ", "inf", "-Infinity", "nan", "+.5", "1.00000005960464477550", "1e400", "7e-46"],
        [("float64", 0.0)],
        {"field_delim": ";"},
    ),
    ([" +1 ", "-0", "2147483647", "-2147483648", "0001"], [("int32", 0)], {}),
    (["9223372036854775807", "-9223372036854775808"], [("int64", 0)], {}),
    # errors
    ([""], [("int32", 0)], {}),
    (["1,2"], [("int32", 0)], {}),
    (["1", "2,3"], [("int32", 0)], {}),
    (["1,"], [("int32", 0), ("int64", None)], {}),
    (["x"], [("int32", 0)], {}),
    (["2147483648"], [("int32", 0)], {}),
    (["9223372036854775808"], [("int64", 0)], {}),
    (["1e"], [("float32", 0.0)], {}),
    (["1_0"], [("float64", 0.0)], {}),
    ([" "], [("float32", 0.0)], {}),
    (["- 1"], [("int64", 0)], {}),
    (['a"b,c'], [("string", ""), ("string", "")], {}),
    (['"a"b",c'], [("string", ""), ("string", "")], {}),
    (['"a'], [("string", "")], {}),
    (["1\n,2"], [("int32", 0), ("int32", 0)], {}),
    (["1,2"], [("int32", 0), ("int32", 0)], {"select_cols": [0, 2]}),
    (["1", "x", "y"], [("int32", 0)], {}),
]


def csv_default(dtype: str, value: Any) -> Any:
    tf_dtype = {
        "int32": tf.int32,
        "int64": tf.int64,
        "float32": tf.float32,
        "float64": tf.float64,
        "string": tf.string,
    }[dtype]
    if value is None:
        return tf.constant([], dtype=tf_dtype)
    return tf.constant([value], dtype=tf_dtype)


def csv_fixtures() -> list[dict[str, Any]]:
    out = []
    for records, defaults, kwargs in CSV_CASES:
        entry = {"records": records, "defaults": defaults, "kwargs": kwargs}
        try:
            result = tf.io.decode_csv(records, [csv_default(d, v) for d, v in defaults], **kwargs)
            entry["result"] = [
                {
                    "dtype": d,
                    "values": jsonable(
                        [float(x) if d.startswith("float") else x for x in r.numpy().tolist()]
                    ),
                }
                for (d, _), r in zip(defaults, result, strict=True)
            ]
        except tf.errors.InvalidArgumentError as exc:
            entry["error"] = clean(str(exc))
        out.append(entry)
    return out


RAW_CASES = [
    ([b"\x01\x02\x03\x04", b"\x05\x06\x07\x08"], "int16", True, None),
    ([b"\x01\x02\x03\x04", b"\x05\x06\x07\x08"], "int16", False, None),
    ([b"\x00\x00\x80\x3f\x00\x00\x00\xc0"], "float32", True, None),
    ([b"\x3f\x80\x00\x00"], "float32", False, None),
    ([np.array([1 + 2j, -3.5 - 0.25j], "<c8").tobytes()], "complex64", True, None),
    ([np.array([1 + 2j, -3.5 - 0.25j], ">c16").tobytes()], "complex128", False, None),
    ([b"\x00\x3c\x00\xc0"], "float16", True, None),
    ([b"\x00\x01\x02\xff"], "bool", True, None),
    ([b"\xff\x80\x7f\x00"], "int8", True, None),
    ([np.arange(3, dtype=">i8").tobytes()], "int64", False, None),
    ([b"abc", b"ab"], "uint8", True, None),
    ([b"abc"], "int16", True, None),
    ([b"abc"], "float32", True, None),
    ([b"abc", b"a", b"abcdef"], "uint16", True, 4),
    ([b"\x01\x02\x03", b"\x04"], "uint16", False, 4),
    ([b"abc"], "int16", True, 3),
    ([b"abc"], "int16", True, 0),
    ([b"", b""], "int32", True, None),
]


def raw_fixtures() -> list[dict[str, Any]]:
    out = []
    dtypes = {
        "float16": tf.float16,
        "float32": tf.float32,
        "float64": tf.float64,
        "int8": tf.int8,
        "int16": tf.int16,
        "int32": tf.int32,
        "int64": tf.int64,
        "uint8": tf.uint8,
        "uint16": tf.uint16,
        "bool": tf.bool,
        "complex64": tf.complex64,
        "complex128": tf.complex128,
    }
    for data, out_type, little, fixed in RAW_CASES:
        entry = {
            "data": [d.hex() for d in data],
            "out_type": out_type,
            "little_endian": little,
            "fixed_length": fixed,
        }
        try:
            result = tf.io.decode_raw(
                data, dtypes[out_type], little_endian=little, fixed_length=fixed
            ).numpy()
            entry["shape"] = list(result.shape)
            if result.dtype.kind == "c":
                entry["values"] = [[float(v.real), float(v.imag)] for v in result.reshape(-1)]
            else:
                entry["values"] = [
                    float(v)
                    if result.dtype.kind == "f"
                    else (bool(v) if result.dtype.kind == "b" else int(v))
                    for v in result.reshape(-1)
                ]
        except tf.errors.InvalidArgumentError as exc:
            entry["error"] = clean(str(exc))
        out.append(entry)
    return out


def main() -> None:
    fixtures = {
        "tensorflow_version": tf.__version__,
        "examples": example_fixtures(),
        "parse": parse_fixtures(),
        "csv": csv_fixtures(),
        "raw": raw_fixtures(),
    }
    OUT.write_text(json.dumps(fixtures, indent=1, sort_keys=True) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()
