"""Compare the decoders with answers TensorFlow gave (tests/data/example/tf_fixtures.json)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import asyncreader as ar

FIXTURES = json.loads(
    (Path(__file__).parent.parent / "data" / "example" / "tf_fixtures.json").read_text()
)
DTYPES = {"float32": np.float32, "int64": np.int64, "string": object}


def plain(value: Any) -> Any:
    """Undo the fixture encoding of bytes and non-finite floats."""
    if isinstance(value, dict) and "hex" in value:
        return bytes.fromhex(value["hex"])
    if isinstance(value, dict) and "float" in value:
        return float(value["float"])
    if isinstance(value, list):
        return [plain(item) for item in value]
    return value


def same_values(ours: list[Any], theirs: list[Any]) -> bool:
    if len(ours) != len(theirs):
        return False
    for a, b in zip(ours, theirs, strict=True):
        if isinstance(a, float) and math.isnan(a):
            if not (isinstance(b, float) and math.isnan(b)):
                return False
        elif a != b or (isinstance(a, float) and math.copysign(1, a) != math.copysign(1, b)):
            return False
    return True


def make_feature(entry: dict[str, Any]) -> ar.Feature:
    kind = entry["kind"]
    if kind is None:
        return ar.Feature()
    return ar.Feature(**{kind: plain(entry["value"])})


@pytest.mark.parametrize("name", sorted(FIXTURES["examples"]))
def test_example_bytes_equal_tensorflow(name: str) -> None:
    case = FIXTURES["examples"][name]
    if case["features"] is None:
        example = ar.Example()
    else:
        example = ar.Example({key: make_feature(entry) for key, entry in case["features"].items()})
    assert example.SerializeToString().hex() == case["deterministic"]
    if case["default"] is not None:
        assert example.serialize().hex() == case["default"]


@pytest.mark.parametrize("name", sorted(FIXTURES["examples"]))
def test_example_decodes_tensorflow_bytes(name: str) -> None:
    case = FIXTURES["examples"][name]
    decoded = ar.Example.FromString(bytes.fromhex(case["deterministic"]))
    assert decoded.SerializeToString().hex() == case["deterministic"]
    for key, entry in (case["features"] or {}).items():
        feature = decoded.features.feature[key]
        assert feature.kind == entry["kind"]
        if entry["kind"] is not None:
            value = feature.value
            assert value is not None
            values = value.tolist() if isinstance(value, np.ndarray) else value
            assert same_values(values, plain(entry["value"]))


def make_specs(features: dict[str, Any]) -> dict[str, ar.FixedLenFeature | ar.VarLenFeature]:
    specs: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {}
    for key, spec in features.items():
        if spec["type"] == "var":
            specs[key] = ar.VarLenFeature(spec["dtype"])
        else:
            default = spec.get("default")
            if default is not None and spec["dtype"] == "string":
                default = (
                    [bytes.fromhex(item) for item in default]
                    if isinstance(default, list)
                    else bytes.fromhex(default)
                )
            specs[key] = ar.FixedLenFeature(spec["shape"], spec["dtype"], default)
    return specs


def check_result(ours: dict[str, Any], expected: dict[str, Any], specs: dict[str, Any]) -> None:
    assert sorted(ours) == sorted(expected)
    for key, want in expected.items():
        got = ours[key]
        dtype = np.dtype(DTYPES[specs[key]["dtype"]])
        if want["sparse"]:
            assert isinstance(got, ar.SparseTensorValue)
            assert got.indices.dtype == np.int64
            assert got.dense_shape.dtype == np.int64
            assert got.indices.tolist() == want["indices"] or (
                got.indices.size == 0 and not want["indices"]
            )
            assert got.dense_shape.tolist() == want["dense_shape"]
            assert got.values.dtype == dtype
            assert same_values(got.values.tolist(), plain(want["values"]))
        else:
            assert isinstance(got, np.ndarray)
            assert got.dtype == dtype
            assert list(got.shape) == want["shape"]
            assert same_values(got.reshape(-1).tolist(), plain(want["values"]))


@pytest.mark.parametrize("case", FIXTURES["parse"], ids=lambda case: case["name"])
def test_parse_example_matches_tensorflow(case: dict[str, Any]) -> None:
    serialized = [bytes.fromhex(item) for item in case["serialized"]]
    specs = make_specs(case["features"])
    outcome = case["batch"]
    if "error" in outcome:
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.parse_example(serialized, specs)
        assert info.value.message.startswith(outcome["error"])
    else:
        check_result(ar.parse_example(serialized, specs), outcome["result"], case["features"])
    # The same batch four times exercises the shared-layout path for batches.
    if len(serialized) == 1 and "result" in outcome:
        repeated = ar.parse_example(serialized * 4, specs)
        for key, value in repeated.items():
            first = ar.parse_example(serialized, specs)[key]
            if isinstance(value, np.ndarray):
                assert isinstance(first, np.ndarray)
                assert value.shape[0] == 4
                assert same_values(value[3:4].reshape(-1).tolist(), first[0:1].reshape(-1).tolist())


@pytest.mark.parametrize(
    "case", [case for case in FIXTURES["parse"] if case["single"]], ids=lambda case: case["name"]
)
def test_parse_single_example_matches_tensorflow(case: dict[str, Any]) -> None:
    serialized = bytes.fromhex(case["serialized"][0])
    specs = make_specs(case["features"])
    outcome = case["single"]
    if "error" in outcome:
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.parse_single_example(serialized, specs)
        assert info.value.message == outcome["error"]
    else:
        check_result(
            ar.parse_single_example(serialized, specs), outcome["result"], case["features"]
        )


CSV_DTYPES = {"int32": np.int32, "int64": np.int64, "float32": np.float32, "float64": np.float64}


def csv_defaults(defaults: list[list[Any]]) -> list[object]:
    out: list[object] = []
    for dtype, value in defaults:
        if dtype == "string":
            out.append(np.array([] if value is None else [value.encode()], dtype=object))
        else:
            out.append(np.array([] if value is None else [value], dtype=CSV_DTYPES[dtype]))
    return out


@pytest.mark.parametrize("case", FIXTURES["csv"], ids=lambda case: repr(case["records"])[:40])
def test_decode_csv_matches_tensorflow(case: dict[str, Any]) -> None:
    defaults = csv_defaults(case["defaults"])
    kwargs = case["kwargs"]
    if "error" in case:
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.decode_csv(case["records"], defaults, **kwargs)
        assert info.value.message == case["error"]
        return
    outputs = ar.decode_csv(case["records"], defaults, **kwargs)
    for output, want in zip(outputs, case["result"], strict=True):
        values = plain(want["values"])
        if want["dtype"] == "string":
            assert output.dtype == object
            assert output.tolist() == values
        else:
            assert output.dtype == CSV_DTYPES[want["dtype"]]
            assert same_values([float(v) for v in output.tolist()], [float(v) for v in values])


@pytest.mark.parametrize("case", FIXTURES["raw"], ids=lambda case: f"{case['out_type']}")
def test_decode_raw_matches_tensorflow(case: dict[str, Any]) -> None:
    data = [bytes.fromhex(item) for item in case["data"]]
    args = (data, case["out_type"], case["little_endian"], case["fixed_length"])
    if "error" in case:
        with pytest.raises(ar.InvalidArgumentError) as info:
            ar.decode_raw(*args)
        assert info.value.message == case["error"]
        return
    result = ar.decode_raw(*args)
    assert list(result.shape) == case["shape"]
    if result.dtype.kind == "c":
        assert [[v.real, v.imag] for v in result.reshape(-1).tolist()] == case["values"]
    else:
        assert result.reshape(-1).tolist() == case["values"]
