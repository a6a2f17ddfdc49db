"""``parse_single_example`` / ``parse_example``: serialized Examples to numpy arrays.

:func:`parse_example` turns a batch of serialized Examples into numpy arrays the way
``tf.io.parse_example`` does, with TensorFlow's shapes, defaults, sparse layout and error
messages. The messages themselves (:class:`Example`, :class:`Features`, :class:`Feature`)
are in :mod:`.example_proto` and the specs (:class:`FixedLenFeature`,
:class:`VarLenFeature`, :class:`SparseTensorValue`) in :mod:`.features`; they are
re-exported here, with the parsers, as the public face of ``tf.train.Example`` support.

The parser is a hand-written wire-format parser (see :mod:`.wire`), chosen over the
``protobuf`` package by measurement (``benchmarks/decoders.py``): it only looks at the
features that were asked for, and it builds each output for the whole batch
(:mod:`.example_columns`) instead of converting repeated fields example by example. A
batch whose examples share one byte layout skips even the per-example parse
(:mod:`.example_layout`); so does a batch whose examples share their structure (features,
keys, kinds and order) but not their lengths, walked in lockstep with numpy
(:mod:`.example_lockstep`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, overload

import numpy as np

from .._errors import InvalidArgumentError
from .._records.batch import RecordBatch
from . import wire
from .example_columns import Column, ColumnBuilder, RequestedFeature
from .example_layout import SharedLayout
from .example_lockstep import parse_lockstep
from .example_proto import Example, Feature, Features
from .features import (
    DTYPE_KINDS,
    DenseResult,
    FixedLenFeature,
    ParseResult,
    ParseSpec,
    SparseResult,
    SparseTensorValue,
    VarLenFeature,
)
from .policy import check_keys, check_on_error, decode_guarded, work_item_of
from .strings import flatten_strings, to_bytes

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    from .._error_policy import OnError
    from .policy import DecodeErrors

__all__ = [
    "Example",
    "Feature",
    "Features",
    "FixedLenFeature",
    "SparseTensorValue",
    "VarLenFeature",
    "parse_example",
    "parse_single_example",
]

_PREVIEW_BYTES = 64


@overload
def parse_single_example(
    serialized: bytes | str | RecordBatch, features: Mapping[str, FixedLenFeature]
) -> DenseResult: ...
@overload
def parse_single_example(
    serialized: bytes | str | RecordBatch, features: Mapping[str, VarLenFeature]
) -> SparseResult: ...
@overload
def parse_single_example(
    serialized: bytes | str | RecordBatch, features: Mapping[str, ParseSpec]
) -> ParseResult: ...
def parse_single_example(
    serialized: bytes | str | RecordBatch, features: Mapping[str, ParseSpec]
) -> dict[str, Any]:  # the overloads above give the precise result
    """Parse one serialized Example into ``{name: array or SparseTensorValue}``.

    Mirrors ``tf.io.parse_single_example``: a :class:`FixedLenFeature` gives an array of its
    ``shape`` and dtype (its default when the Example lacks the feature or the Feature is
    empty); a :class:`VarLenFeature` gives a :class:`SparseTensorValue` with ``[position]``
    indices. Strings come back as object arrays of ``bytes``.

    Args:
        serialized: The serialized Example, or a :class:`~asyncreader.RecordBatch` of one
            record (its errors then name the record's work item and key).
        features: What to parse: ``{name: FixedLenFeature | VarLenFeature}``.

    Returns:
        One entry per name in ``features``.

    Raises:
        InvalidArgumentError: the bytes are not a valid Example (``Could not parse example
            input, value: '...'``); a required feature is missing (``Feature: <name> (data
            type: <type>) is required but could not be found.``); a feature has another
            type (``Key: <name>.  Data types don't match. ...``); a fixed-length feature has
            the wrong number of values (``Key: <name>.  Can't parse serialized Example: ...``);
            a ``features`` entry is not a FixedLenFeature / VarLenFeature or has an unknown
            dimension; a RecordBatch does not hold exactly one record.
    """
    if isinstance(serialized, RecordBatch):
        return _parse_single_record(serialized, _check_specs(features))
    return _parse(_check_specs(features), [to_bytes(serialized)], None, single=True)


def _parse_single_record(batch: RecordBatch, specs: list[RequestedFeature]) -> ParseResult:
    """``parse_single_example`` of a batch's only record, naming it in errors."""
    if len(batch) != 1:
        raise InvalidArgumentError(
            f"parse_single_example needs a RecordBatch of one record, got {len(batch)}"
        )
    try:
        return _parse(specs, batch, None, single=True)
    except InvalidArgumentError as exc:
        key = batch.key(0)
        named = InvalidArgumentError(exc.message, work_item=work_item_of(key) or None, record=key)
        named.__notes__ = list(getattr(exc, "__notes__", []))
        raise named from None


@overload
def parse_example(
    serialized: object,
    features: Mapping[str, FixedLenFeature],
    *,
    example_names: Sequence[str | bytes] | None = None,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> DenseResult: ...
@overload
def parse_example(
    serialized: object,
    features: Mapping[str, VarLenFeature],
    *,
    example_names: Sequence[str | bytes] | None = None,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> SparseResult: ...
@overload
def parse_example(
    serialized: object,
    features: Mapping[str, ParseSpec],
    *,
    example_names: Sequence[str | bytes] | None = None,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> ParseResult: ...
def parse_example(
    serialized: object,
    features: Mapping[str, ParseSpec],
    *,
    example_names: Sequence[str | bytes] | None = None,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> dict[str, Any]:  # the overloads above give the precise result
    """Parse a batch of serialized Examples into batched arrays, as ``tf.io.parse_example``.

    A :class:`FixedLenFeature` gives an array of shape ``[batch_size] + shape``; a
    :class:`VarLenFeature` a :class:`SparseTensorValue` whose ``indices`` rows are
    ``[example, position]`` and whose ``dense_shape`` is ``[batch_size, longest list]``.
    Every output is built for the whole batch at once. A single bytes value is parsed as by
    :func:`parse_single_example`.

    Examples are not parsed one by one when the batch allows: a batch whose examples all
    have the same length and byte layout is read as one matrix, and a batch of examples
    that share their structure (the same features, keys, kinds and order, as one writer
    produces them) but differ in length, from about 40 examples on, is walked in lockstep
    with numpy. An example that departs from its batch is parsed by itself, with the same
    results and errors.

    Args:
        serialized: A list / tuple / 1-D array of serialized Examples, or a
            :class:`~asyncreader.RecordBatch` (parsed from its buffers: examples that share
            one byte layout are read straight from the block they were read into, and errors
            and dead letters name the work item and record key without ``keys``).
        features: What to parse: ``{name: FixedLenFeature | VarLenFeature}``.
        example_names: Optional names of the examples, used in error messages (TensorFlow's
            ``example_names``); otherwise they read ``<unknown>``.
        on_error: ``None`` / ``"raise"`` (TensorFlow's behaviour) raises the first bad
            example's error; a :class:`~asyncreader.DecodeErrors` with a skipping policy drops
            bad examples instead and notes them as dead letters; ``errors.kept`` gives the
            positions of the examples in the result.
        keys: The batch's reader keys, one per example: errors and dead letters then name
            the file and record key (a RecordBatch's own keys are used when not given).

    Returns:
        One entry per name in ``features`` (with bad examples skipped: one row per kept
        example).

    Raises:
        InvalidArgumentError: ``serialized`` is not a vector of bytes; an example is not a
            valid Example (``Could not parse example input, value: '...'``); a required
            feature is missing (``Name: <name>, Feature: <key> (data type: <type>) is
            required but could not be found.``); a feature has another type (``Name: <name>,
            Key: <key>, Index: <i>.  Data types don't match. ...``); a fixed-length feature
            has the wrong number of values (``... Number of <type> values != expected.
            Values size: <n> but output shape: <shape>``); skipping was asked for without a
            DecodeErrors; the policy's limits were exceeded. Every error's ``record`` is the
            index of the example concerned (its key, and ``work_item`` its file, when
            ``keys`` are given or ``serialized`` is a RecordBatch).
    """
    errors = check_on_error(on_error)
    if isinstance(serialized, (bytes, bytearray, memoryview, str, np.bytes_)):
        return parse_single_example(to_bytes(serialized), features)
    items: Sequence[bytes]
    if isinstance(serialized, RecordBatch):
        items = serialized
    else:
        items, shape = flatten_strings(serialized)
        if len(shape) != 1:
            raise InvalidArgumentError(
                f"Expected serialized to be a vector, got shape {list(shape)}"
            )
    names = None
    if example_names is not None:
        names = [to_bytes(name).decode("utf-8", "backslashreplace") for name in example_names]
        if len(names) and len(names) != len(items):
            raise InvalidArgumentError(
                f"Expected len(example_names) == len(serialized), got {len(names)} != {len(items)}"
            )
    specs = _check_specs(features)
    key_seq: Sequence[bytes] | None = check_keys(keys, len(items))
    if key_seq is None and isinstance(items, RecordBatch):
        key_seq = items.key_view()  # builds only the keys of bad records

    def decode(span: range) -> ParseResult:
        # A RecordBatch slice shares the batch's buffers: no object per record.
        part = items if len(span) == len(items) else items[span.start : span.stop]
        return _parse(specs, part, names or None, single=False, base=span.start)

    return decode_guarded(len(items), decode, _concatenate, errors, key_seq)


def _concatenate(pieces: list[ParseResult]) -> ParseResult:
    """One result from the results of consecutive parts of a batch."""
    merged: ParseResult = {}
    for name, first in pieces[0].items():
        if isinstance(first, np.ndarray):
            merged[name] = np.concatenate([piece[name] for piece in pieces])
            continue
        parts = [piece[name] for piece in pieces]
        sparse = [part for part in parts if isinstance(part, SparseTensorValue)]
        rows = np.cumsum([0] + [int(part.dense_shape[0]) for part in sparse])[:-1]
        offsets = [np.array([row, 0], dtype=np.int64) for row in rows]
        indices = np.concatenate(
            [part.indices + offset for part, offset in zip(sparse, offsets, strict=True)]
        )
        total = sum(int(part.dense_shape[0]) for part in sparse)
        width = max(int(part.dense_shape[1]) for part in sparse)
        merged[name] = SparseTensorValue(
            indices,
            np.concatenate([part.values for part in sparse]),
            np.array([total, width], dtype=np.int64),
        )
    return merged


def _check_specs(features: Mapping[str, ParseSpec]) -> list[RequestedFeature]:
    specs: list[RequestedFeature] = []
    for name in sorted(features):
        spec = features[name]
        if isinstance(spec, FixedLenFeature):
            if any(dim is None for dim in spec.shape):
                if spec.shape and spec.shape[0] is None:
                    raise InvalidArgumentError(
                        f"First dimension of shape for feature {name} unknown. "
                        "Consider using FixedLenSequenceFeature."
                    )
                raise InvalidArgumentError(
                    f"All dimensions of shape for feature {name} need to be known but "
                    f"received {list(spec.shape)}."
                )
            dims = tuple(int(dim) for dim in spec.shape)  # type: ignore[arg-type]
            if any(dim < 0 for dim in dims):
                raise InvalidArgumentError(f"Feature {name} has a negative dimension: {list(dims)}")
            size = int(np.prod(dims, dtype=np.int64))
        elif isinstance(spec, VarLenFeature):
            dims, size = (), 0
        else:
            raise InvalidArgumentError(
                f"feature {name!r} must be a FixedLenFeature or VarLenFeature, got {spec!r:.80}"
            )
        specs.append(
            RequestedFeature(name, name.encode("utf-8"), spec, DTYPE_KINDS[spec.dtype], dims, size)
        )
    return specs


def _preview(data: bytes) -> str:
    shown = data[:_PREVIEW_BYTES].decode("latin-1").encode("unicode_escape").decode("ascii")
    return shown + ("..." if len(data) > _PREVIEW_BYTES else "")


def _parse(
    specs: list[RequestedFeature],
    items: Sequence[bytes],
    names: list[str] | None,
    *,
    single: bool,
    base: int = 0,
) -> ParseResult:
    """Parse ``items`` (a list of ``bytes`` or a RecordBatch); ``base`` is the position of
    ``items[0]`` in the caller's batch, for messages and error ``record``s (``names`` covers
    the whole batch)."""
    columns = [Column() for _ in specs]
    dense: dict[int, np.ndarray] = {}
    # By measurement: the shared layout where it takes every example, else the lockstep walk
    # (faster than the layout for the examples it matches, and one by one for the rest),
    # else the layout for the examples of the first's length.
    layout = SharedLayout.build(items, specs, whole=True)
    if layout is None or not layout.matched.all():

        def parse_rows(rows: list[int]) -> list[Column]:
            slow = [Column() for _ in specs]
            for index in rows:
                _parse_one(index + base, items[index], specs, slow, single)
            return slow

        found = parse_lockstep(items, specs, names, single, base, parse_rows)
        if found is not None:
            return _build(specs, dict(enumerate(found)), {})
        if layout is None:
            layout = SharedLayout.build(items, specs)
    if layout is None:
        records = items.tolist() if isinstance(items, RecordBatch) else items
        for index, data in enumerate(records):
            _parse_one(index + base, data, specs, columns, single)
    elif layout.matched.all():
        for spec_index, spec in enumerate(specs):
            array = layout.dense(spec_index, spec)
            if array is not None:
                dense[spec_index] = array
        layout.fill_all(columns, skip=tuple(dense))
    else:
        matched = layout.matched.tolist()
        for index in range(len(items)):
            if matched[index]:
                layout.fill_row(index, columns)
            else:
                # Only a record that breaks the layout becomes its own bytes object.
                _parse_one(index + base, items[index], specs, columns, single)
    builders = {
        spec_index: ColumnBuilder(spec, column, names, single, base)
        for spec_index, (spec, column) in enumerate(zip(specs, columns, strict=True))
        if spec_index not in dense
    }
    return _build(specs, builders, dense)


def _build(
    specs: list[RequestedFeature],
    builders: dict[int, ColumnBuilder],
    dense: dict[int, np.ndarray],
) -> ParseResult:
    """The results of ``builders`` (and of the features already in ``dense``), or the error
    of the first bad example."""
    failures = [
        failure for builder in builders.values() if (failure := builder.first_error()) is not None
    ]
    if failures:
        raise min(failures, key=lambda failure: failure[0])[1]
    return {
        spec.name: dense[spec_index] if spec_index in dense else builders[spec_index].build()
        for spec_index, spec in enumerate(specs)
    }


def _parse_one(
    index: int, data: bytes, specs: list[RequestedFeature], columns: list[Column], single: bool
) -> None:
    try:
        spans = wire.index_example(data)
        for spec, column in zip(specs, columns, strict=True):
            span = spans.get(spec.key)
            if span is None:
                column.kinds.append(wire.NONE)
                column.values.append(None)
                continue
            kind, body = wire.parse_feature(span)
            column.kinds.append(kind)
            if kind == wire.NONE or kind != spec.kind:
                column.values.append(None)
            elif kind == wire.FLOAT:
                column.values.append(wire.float_bytes(body))
            elif kind == wire.INT64:
                column.values.append(wire.int64_stream(body))
            else:
                column.values.append(wire.bytes_values(body))
    except wire.WireError as exc:
        raise InvalidArgumentError(
            f"Could not parse example input, value: '{_preview(data)}' ({exc})",
            record=None if single else index,
        ) from None
