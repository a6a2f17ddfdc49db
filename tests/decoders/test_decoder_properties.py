"""Property tests: codec round trips, batch paths equal per-record paths, no stray exceptions.

Each property runs a few hundred cases by default and 10,000 under ``--stress``.
"""

from __future__ import annotations

from contextlib import nullcontext, suppress
from typing import TYPE_CHECKING, Any
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._decoders import csv as csv_module

if TYPE_CHECKING:
    from collections.abc import Callable

QUICK = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
STRESS = settings(max_examples=10_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int64s = st.integers(min_value=-(2**63), max_value=2**63 - 1)
float32s = st.floats(width=32, allow_nan=True, allow_infinity=True)
feature_values = st.one_of(
    st.none(),
    st.lists(st.binary(max_size=40), max_size=5).map(lambda v: ("bytes_list", v)),
    st.lists(float32s, max_size=8).map(lambda v: ("float_list", v)),
    st.lists(int64s, max_size=8).map(lambda v: ("int64_list", v)),
)
features_dicts = st.dictionaries(st.text(max_size=6), feature_values, max_size=5)


def to_example(features: dict[str, Any]) -> ar.Example:
    return ar.Example(
        {
            key: ar.Feature() if value is None else ar.Feature(**{value[0]: value[1]})
            for key, value in features.items()
        }
    )


def both(test: Callable[..., None], strategies: dict[str, Any]) -> tuple[Any, Any]:
    quick = QUICK(given(**strategies)(test))
    stress = pytest.mark.stress(STRESS(given(**strategies)(test)))
    return quick, stress


# --- Example codec ---------------------------------------------------------------------


def example_round_trip(features: dict[str, Any]) -> None:
    example = to_example(features)
    data = example.SerializeToString()
    decoded = ar.Example.FromString(data)
    assert decoded == example
    assert decoded.SerializeToString() == data
    specs = {
        key: ar.VarLenFeature(
            {"bytes_list": "string", "float_list": "float"}.get(value[0], "int64")
        )
        for key, value in features.items()
        if value is not None
    }
    parsed = ar.parse_single_example(data, specs)
    for key, spec_value in features.items():
        if spec_value is None:
            continue
        sparse = parsed[key]
        assert isinstance(sparse, ar.SparseTensorValue)
        expected = example.features.feature[key].value
        got = sparse.values
        if isinstance(expected, np.ndarray):
            assert got.tobytes() == expected.tobytes()
        else:
            assert got.tolist() == expected
        assert sparse.dense_shape.tolist() == [len(spec_value[1])]


test_example_round_trip, test_example_round_trip_stress = both(
    example_round_trip, {"features": features_dicts}
)


def malformed_never_escapes(data: bytes, cut: int, flip: int) -> None:
    candidates = [
        data,
        data[:cut],
        bytes(b ^ (flip if i == cut else 0) for i, b in enumerate(data)),
    ]
    specs = {
        "a": ar.VarLenFeature("int64"),
        "b": ar.VarLenFeature("float"),
        "": ar.VarLenFeature("string"),
    }
    for candidate in candidates:
        with suppress(ar.InvalidArgumentError):
            ar.Example.FromString(candidate)
        with suppress(ar.InvalidArgumentError):
            ar.parse_example([candidate] * 5, specs)
        with suppress(ar.InvalidArgumentError):
            ar.parse_single_example(candidate, {"a": ar.FixedLenFeature([1], "int64", [0])})


test_malformed_never_escapes, test_malformed_never_escapes_stress = both(
    malformed_never_escapes,
    {
        "data": st.one_of(
            st.binary(max_size=64),
            features_dicts.map(lambda f: to_example(f).SerializeToString()),
        ),
        "cut": st.integers(min_value=0, max_value=64),
        "flip": st.integers(min_value=1, max_value=255),
    },
)


def batch_equals_single(batch: list[dict[str, Any]]) -> None:
    serialized = [to_example(features).SerializeToString() for features in batch]
    specs: dict[str, ar.FixedLenFeature | ar.VarLenFeature] = {
        "a": ar.VarLenFeature("int64"),
        "b": ar.VarLenFeature("float"),
        "c": ar.FixedLenFeature([2], "int64", default_value=[-1, -2]),
    }
    failed: int | None = None
    try:
        together = ar.parse_example(serialized, specs)
    except ar.InvalidArgumentError as exc:
        failed = exc.record if isinstance(exc.record, int) else -1
    if failed is not None:
        # The batch error names an example that also fails on its own.
        assert failed >= 0
        with pytest.raises(ar.InvalidArgumentError):
            ar.parse_single_example(serialized[failed], specs)
        return
    for index, data in enumerate(serialized):
        alone = ar.parse_single_example(data, specs)
        for key in ("a", "b"):
            sparse, one = together[key], alone[key]
            assert isinstance(sparse, ar.SparseTensorValue)
            assert isinstance(one, ar.SparseTensorValue)
            rows = sparse.indices[:, 0] == index
            assert sparse.values[rows].tobytes() == one.values.tobytes()
            assert sparse.indices[rows, 1].tolist() == one.indices[:, 0].tolist()
        dense, one_dense = together["c"], alone["c"]
        assert isinstance(dense, np.ndarray)
        assert isinstance(one_dense, np.ndarray)
        assert dense[index].tolist() == one_dense.tolist()


layout_like = st.fixed_dictionaries(
    {
        "a": st.lists(st.integers(-5, 200), max_size=2).map(lambda v: ("int64_list", v)),
        "b": st.lists(float32s, min_size=1, max_size=2).map(lambda v: ("float_list", v)),
        "c": st.one_of(
            st.none(),
            st.lists(st.integers(-3, 3), min_size=2, max_size=2).map(lambda v: ("int64_list", v)),
        ),
    }
)
test_batch_equals_single, test_batch_equals_single_stress = both(
    batch_equals_single,
    {"batch": st.lists(st.one_of(layout_like, features_dicts), max_size=10)},
)


# --- decode_raw ------------------------------------------------------------------------


def raw_batch_equals_records(records: list[bytes], out_type: str, little: bool) -> None:
    size = np.dtype(
        {"int16": np.int16, "float": np.float32, "complex64": np.complex64, "uint8": np.uint8}[
            out_type
        ]
    ).itemsize
    records = [record[: len(record) // size * size] for record in records]
    width = len(records[0]) if records else 0
    records = [record[:width].ljust(width, b"\x00") for record in records]
    batch = ar.decode_raw(records, out_type, little_endian=little)
    for index, record in enumerate(records):
        one = ar.decode_raw(record, out_type, little_endian=little)
        assert batch[index].tobytes() == one.tobytes()
    padded = (
        ar.decode_raw(records, out_type, little_endian=little, fixed_length=size * 3)
        if out_type != "complex64"
        else None
    )
    if padded is not None:
        for index, record in enumerate(records):
            manual = record[: size * 3].ljust(size * 3, b"\x00")
            assert (
                padded[index].tobytes()
                == ar.decode_raw(manual, out_type, little_endian=little).tobytes()
            )


test_raw_batch, test_raw_batch_stress = both(
    raw_batch_equals_records,
    {
        "records": st.lists(st.binary(max_size=24), max_size=6),
        "out_type": st.sampled_from(["int16", "float", "complex64", "uint8"]),
        "little": st.booleans(),
    },
)


# --- decode_csv ------------------------------------------------------------------------

FIELD_ALPHABET = '0123456789.eE+- x"ainfNA\t'
number_texts = st.one_of(
    st.integers(-(2**40), 2**40).map(str),
    st.floats(allow_nan=False).map(repr),
    st.floats(width=32).map(lambda f: f"{f:.9g}"),
    st.text(FIELD_ALPHABET, max_size=8),
)


def csv_paths_agree(rows: list[list[str]], kinds: list[str], quote: bool, na: str) -> None:
    defaults: list[Any] = []
    for kind in kinds:
        defaults.append(
            {
                "int32": [0],
                "int64": np.array([], np.int64),
                "float": [0.0],
                "double": np.array([1.5]),
                "string": ["d"],
            }[kind]
        )
    records = [",".join(row) for row in rows]
    outcomes: list[Any] = []
    for fast in (True, False):
        patch = (
            mock.patch.object(csv_module, "_fast_path", return_value=None)
            if not fast
            else nullcontext()
        )
        with patch:
            try:
                outcomes.append(
                    ar.decode_csv(records, defaults, use_quote_delim=quote, na_value=na)
                )
            except ar.InvalidArgumentError as exc:
                outcomes.append(str(exc))
    first, second = outcomes
    if isinstance(first, str) or isinstance(second, str):
        assert first == second
        return
    for a, b in zip(first, second, strict=True):
        assert a.dtype == b.dtype
        assert a.tobytes() == b.tobytes() if a.dtype != object else a.tolist() == b.tolist()


test_csv_paths_agree, test_csv_paths_agree_stress = both(
    csv_paths_agree,
    {
        "rows": st.lists(st.lists(number_texts, min_size=1, max_size=4), min_size=1, max_size=6),
        "kinds": st.lists(
            st.sampled_from(["int32", "int64", "float", "double", "string"]), min_size=1, max_size=4
        ),
        "quote": st.booleans(),
        "na": st.sampled_from(["", "NA", "x"]),
    },
)


def csv_valid_columns(columns: list[tuple[str, list[Any]]]) -> None:
    count = min(len(values) for _, values in columns)
    records = [",".join(_text(kind, values[i]) for kind, values in columns) for i in range(count)]
    if not records:
        return
    defaults = [
        {"int": [np.int64(0)], "float": [np.float64(0)], "str": [""]}[kind] for kind, _ in columns
    ]
    outputs = ar.decode_csv(records, defaults)
    for (kind, values), output in zip(columns, outputs, strict=True):
        expected = values[:count]
        if kind == "str":
            assert output.tolist() == [v.encode() if v else b"" for v in expected]
        else:
            assert output.tolist() == expected


def _text(kind: str, value: Any) -> str:
    if kind == "str":
        # Quote only when needed, so that plain batches exercise the fast path.
        if any(char in value for char in ',"\r\n'):
            return '"' + str(value).replace('"', '""') + '"'
        return str(value)
    return repr(value) if kind == "float" else str(value)


test_csv_valid_columns, test_csv_valid_columns_stress = both(
    csv_valid_columns,
    {
        "columns": st.lists(
            st.one_of(
                st.tuples(st.just("int"), st.lists(int64s, min_size=1, max_size=6)),
                st.tuples(
                    st.just("float"), st.lists(st.floats(allow_nan=False), min_size=1, max_size=6)
                ),
                st.tuples(
                    st.just("str"),
                    st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=6),
                ),
            ),
            min_size=1,
            max_size=4,
        )
    },
)


QUOTED_ALPHABET = '0123456789.e- ,;"\r\nNAx'
csv_fields = st.tuples(
    st.one_of(st.integers(-99, 99).map(str), st.text(QUOTED_ALPHABET, max_size=6)),
    st.booleans(),
)


@st.composite
def csv_quoted_batches(draw: st.DrawFn) -> tuple[list[str], list[list[tuple[str, bool]]], bool]:
    """Column kinds, rows of as many fields (twice as many with select_cols), select_cols."""
    kinds = draw(
        st.lists(st.sampled_from(["int32", "int64", "double", "string"]), min_size=1, max_size=3)
    )
    select = draw(st.booleans())
    width = 2 * len(kinds) if select else len(kinds)
    rows = draw(
        st.lists(st.lists(csv_fields, min_size=width, max_size=width), min_size=1, max_size=6)
    )
    return kinds, rows, select


def csv_quoted_paths_agree(
    batch_spec: tuple[list[str], list[list[tuple[str, bool]]], bool],
    delim: str,
    na: str,
    batch: bool,
) -> None:
    """Fields quoted or not (quoted: ``"`` doubled), with quotes, delimiters, CR and LF in
    the text: the normal dispatch and the exact path give the same columns or error."""
    kinds, rows, select = batch_spec
    defaults: list[Any] = [
        {"int32": [0], "int64": np.array([], np.int64), "double": [np.float64(1.5)]}.get(
            kind, [b"d"]
        )
        for kind in kinds
    ]
    records = [
        delim.join('"' + text.replace('"', '""') + '"' if quoted else text for text, quoted in row)
        for row in rows
    ]
    options: dict[str, Any] = {"field_delim": delim, "na_value": na}
    if select:
        options["select_cols"] = list(range(0, 2 * len(kinds), 2))
    outcomes: list[Any] = []
    for fast in (True, False):
        patch = (
            nullcontext()
            if fast
            else mock.patch.object(csv_module, "_fast_path", return_value=None)
        )
        source: object = records
        if batch:
            encoded = [record.encode() for record in records]
            keys = [f"p.csv:{i}".encode() for i in range(len(encoded))]
            source = ar.RecordBatch.from_records(keys, encoded, work=b"p.csv")
        with patch:
            try:
                columns = ar.decode_csv(source, defaults, **options)
            except ar.InvalidArgumentError as exc:
                outcomes.append((str(exc), exc.record))
                continue
        outcomes.append(
            [(c.dtype, c.tolist() if c.dtype == object else c.tobytes()) for c in columns]
        )
    assert outcomes[0] == outcomes[1]


test_csv_quoted_paths_agree, test_csv_quoted_paths_agree_stress = both(
    csv_quoted_paths_agree,
    {
        "batch_spec": csv_quoted_batches(),
        "delim": st.sampled_from([",", ";"]),
        "na": st.sampled_from(["", "NA"]),
        "batch": st.booleans(),
    },
)
