"""The ``tf.train.Example`` codec and ``parse_single_example`` / ``parse_example``.

:class:`Example`, :class:`Features` and :class:`Feature` mirror TensorFlow's protobuf
messages and serialize to the same bytes; :func:`parse_example` turns a batch of serialized
Examples into numpy arrays the way ``tf.io.parse_example`` does, with TensorFlow's shapes,
defaults, sparse layout and error messages.

The codec is a hand-written wire-format parser (see :mod:`.wire`), chosen over the
``protobuf`` package by measurement (``benchmarks/decoders.py``): it only looks at the
features that were asked for, and it builds each output for the whole batch with a few
numpy calls (one ``np.frombuffer`` over all float lists, one vectorised varint decode over
all int64 lists) instead of converting repeated fields example by example.

Where protobuf's rules and TensorFlow's fast parser disagree on unusual payloads, decoding
follows protobuf: packed and unpacked numbers may be mixed in one list, unknown fields inside
lists are skipped, a Feature with two oneof members keeps the last, the same list field twice
is concatenated, and a packed float list whose length is not a multiple of 4 is an error.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any, Final, TypeAlias, overload

import numpy as np

from .._errors import InvalidArgumentError
from . import wire
from .dtypes import STRING, resolve_dtype, tf_name
from .policy import check_keys, check_on_error, decode_guarded
from .strings import flatten_strings, to_bytes

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence

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

_KIND_NAMES: Final = {
    wire.BYTES: "bytes_list",
    wire.FLOAT: "float_list",
    wire.INT64: "int64_list",
}
_KIND_BY_NAME: Final = {name: kind for kind, name in _KIND_NAMES.items()}
_KIND_DTYPES: Final = {
    wire.BYTES: STRING,
    wire.FLOAT: np.dtype(np.float32),
    wire.INT64: np.dtype(np.int64),
}
_DTYPE_KINDS: Final = {dtype: kind for kind, dtype in _KIND_DTYPES.items()}
_COUNT_NAMES: Final = {wire.BYTES: "bytes", wire.FLOAT: "float", wire.INT64: "int64"}
_PREVIEW_BYTES = 64

# --- messages --------------------------------------------------------------------------


class Feature:
    """One feature of an Example: a list of bytes, float32 or int64 values, or nothing.

    Build it like TensorFlow's message, ``Feature(float_list=[1.0, 2.0])`` (at most one of
    the three keywords), or let :meth:`from_value` pick the kind from Python / numpy values.

    Attributes:
        kind: ``"bytes_list"``, ``"float_list"``, ``"int64_list"``, or None when unset.
        value: A list of ``bytes``, a float32 array, an int64 array, or None.
    """

    __slots__ = ("_kind", "_value")

    def __init__(
        self,
        *,
        bytes_list: Sequence[bytes | str] | None = None,
        float_list: object = None,
        int64_list: object = None,
    ) -> None:
        """Create a Feature holding one kind of list.

        Raises:
            InvalidArgumentError: more than one list is given, or values do not convert
                (bytes_list elements must be bytes or str; int64 values must fit in int64).
        """
        given = [
            (kind, values)
            for kind, values in (
                (wire.BYTES, bytes_list),
                (wire.FLOAT, float_list),
                (wire.INT64, int64_list),
            )
            if values is not None
        ]
        if len(given) > 1:
            raise InvalidArgumentError(
                "a Feature holds only one of bytes_list, float_list, int64_list"
            )
        self._kind = wire.NONE
        self._value: list[bytes] | np.ndarray | None = None
        if given:
            self._kind, values = given[0]
            self._value = _convert_values(self._kind, values)

    @classmethod
    def _from_parts(cls, kind: int, value: list[bytes] | np.ndarray | None) -> Feature:
        feature = cls.__new__(cls)
        feature._kind = kind
        feature._value = value
        return feature

    @classmethod
    def from_value(cls, value: object) -> Feature:
        """Wrap ``value`` in a Feature of the kind its type implies.

        ``bytes`` / ``str`` (or lists and string arrays of them) give a bytes_list; floats and
        floating arrays a float_list; ints, bools and integer arrays an int64_list. A Feature
        is returned unchanged.

        Raises:
            InvalidArgumentError: the kind cannot be inferred (an empty list, mixed types,
                complex numbers) or the values do not convert.
        """
        if isinstance(value, Feature):
            return value
        if isinstance(value, (bytes, str, bytearray, np.bytes_)):
            return cls(bytes_list=[value])  # type: ignore[list-item]
        if isinstance(value, (bool, int, np.integer, np.bool_)):
            return cls(int64_list=[value])
        if isinstance(value, (float, np.floating)):
            return cls(float_list=[value])
        if isinstance(value, np.ndarray):
            kind = value.dtype.kind
            if kind in "SUO":
                return cls(bytes_list=value.ravel().tolist())
            if kind in "iub":
                return cls(int64_list=value)
            if kind == "f":
                return cls(float_list=value)
            raise InvalidArgumentError(f"cannot store a {value.dtype} array in a Feature")
        if isinstance(value, (list, tuple)):
            if not value:
                raise InvalidArgumentError(
                    "cannot infer the kind of an empty list; pass Feature(float_list=[]) "
                    "(or bytes_list / int64_list)"
                )
            if all(isinstance(item, (bytes, str, bytearray, np.bytes_)) for item in value):
                return cls(bytes_list=list(value))
            if all(isinstance(item, (bool, int, np.integer, np.bool_)) for item in value):
                return cls(int64_list=value)
            if all(isinstance(item, (bool, int, float, np.integer, np.floating)) for item in value):
                return cls(float_list=value)
            raise InvalidArgumentError(f"cannot infer one Feature kind for {value!r:.80}")
        raise InvalidArgumentError(f"cannot store {type(value).__name__} in a Feature")

    @property
    def kind(self) -> str | None:
        """Which list is set: ``"bytes_list"``, ``"float_list"``, ``"int64_list"`` or None."""
        return _KIND_NAMES.get(self._kind)

    @property
    def value(self) -> list[bytes] | np.ndarray | None:
        """The values: a list of bytes, a float32 array, an int64 array, or None."""
        return self._value

    def SerializeToString(self) -> bytes:
        """The Feature in protobuf wire format."""
        return wire.encode_feature(self._kind, self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Feature):
            return NotImplemented
        if self._kind != other._kind:
            return False
        if isinstance(self._value, np.ndarray) and isinstance(other._value, np.ndarray):
            # Compare bit patterns so that NaN payloads and -0.0 count as stored.
            return self._value.tobytes() == other._value.tobytes()
        return self._value == other._value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._kind == wire.NONE:
            return "Feature()"
        value = self._value
        shown = value.tolist() if isinstance(value, np.ndarray) else value
        return f"Feature({self.kind}={shown!r:.200})"


def _convert_values(kind: int, values: object) -> list[bytes] | np.ndarray:
    if kind == wire.BYTES:
        if isinstance(values, (bytes, str)):
            raise InvalidArgumentError("bytes_list takes a list of values, not one bytes value")
        if isinstance(values, np.ndarray):
            values = values.ravel().tolist()
        return [to_bytes(item) for item in values]  # type: ignore[attr-defined]
    dtype = np.float32 if kind == wire.FLOAT else np.int64
    try:
        array = np.asarray(values)
        if kind == wire.INT64 and array.dtype.kind == "f" and array.size:
            raise InvalidArgumentError("int64_list values must be integers")
        if kind == wire.INT64 and array.dtype.kind == "O":
            array = np.array([int(item) for item in array.ravel().tolist()], dtype=np.int64)
        return array.astype(dtype).ravel()
    except (OverflowError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(f"cannot store {values!r:.80} in a Feature: {exc}") from None


class Features:
    """A map from feature name to :class:`Feature` (``tf.train.Features``).

    Attributes:
        feature: The mapping itself (a dict; values are :class:`Feature`).
    """

    __slots__ = ("feature",)

    def __init__(self, feature: Mapping[str, object] | None = None) -> None:
        """Build from ``{name: Feature or value}``; values go through :meth:`Feature.from_value`.

        Raises:
            InvalidArgumentError: a name is not a str, or a value cannot be stored.
        """
        self.feature: dict[str, Feature] = {}
        for name, value in (feature or {}).items():
            if not isinstance(name, str):
                raise InvalidArgumentError(f"feature names must be str, got {name!r}")
            self.feature[name] = Feature.from_value(value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Features):
            return NotImplemented
        return self.feature == other.feature

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Features({self.feature!r})"


class Example:
    """A ``tf.train.Example``: named features, serialized exactly as TensorFlow does.

    ``Example(features={"image": raw_bytes, "label": 3, "x": np.array([...], np.float32)})``
    infers each feature's kind (see :meth:`Feature.from_value`); pass :class:`Feature`
    objects to choose it, or a :class:`Features`. Serialized keys are ordered as protobuf's
    deterministic serialization orders them in TensorFlow's Python, so the bytes equal
    ``tf.train.Example.SerializeToString(deterministic=True)``; any order parses the same.

    Attributes:
        features: The :class:`Features` (empty when the Example has none).
    """

    __slots__ = ("_has_features", "features")

    def __init__(self, features: Features | Mapping[str, object] | None = None) -> None:
        """Create an Example; ``features=None`` leaves the field unset (serializes to b"").

        Raises:
            InvalidArgumentError: a feature name is not a str or a value cannot be stored.
        """
        self._has_features = features is not None
        if isinstance(features, Features):
            self.features = features
        else:
            self.features = Features(features)

    def SerializeToString(self) -> bytes:
        """The Example in protobuf wire format."""
        if not self._has_features and not self.features.feature:
            return wire.encode_example(None)
        return wire.encode_example(
            {
                name.encode("utf-8"): feature.SerializeToString()
                for name, feature in self.features.feature.items()
            }
        )

    serialize = SerializeToString

    @classmethod
    def FromString(cls, serialized: bytes) -> Example:
        """Decode a serialized Example.

        Raises:
            InvalidArgumentError: the bytes are not a valid Example (or a key is not UTF-8).
        """
        data = to_bytes(serialized)
        try:
            spans = wire.index_example(data)
            decoded = {key: _decode_feature(span) for key, span in spans.items()}
            names = {key.decode("utf-8"): feature for key, feature in decoded.items()}
        except (wire.WireError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"Error parsing Example: {exc}") from None
        example = cls(Features())
        example.features.feature = names
        example._has_features = bool(names) or wire.has_features(data)
        return example

    parse = FromString

    def to_dict(self) -> dict[str, list[bytes] | np.ndarray | None]:
        """``{name: values}`` for every feature (see :attr:`Feature.value`)."""
        return {name: feature.value for name, feature in self.features.feature.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Example):
            return NotImplemented
        return self.features == other.features

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Example(features={self.features.feature!r})"


def _decode_feature(span: wire.Span) -> Feature:
    kind, body = wire.parse_feature(span)
    if kind == wire.NONE:
        return Feature._from_parts(kind, None)
    if kind == wire.BYTES:
        return Feature._from_parts(kind, wire.bytes_values(body))
    if kind == wire.FLOAT:
        floats = np.frombuffer(bytearray(wire.float_bytes(body)), dtype="<f4")
        return Feature._from_parts(kind, floats.astype(np.float32, copy=False))
    return Feature._from_parts(kind, wire.decode_varints(wire.int64_stream(body)))


# --- parsing configuration -------------------------------------------------------------


def _feature_dtype(dtype: object, attr: str) -> np.dtype[np.generic]:
    resolved = resolve_dtype(dtype)
    if resolved not in _DTYPE_KINDS:
        raise InvalidArgumentError(
            f"Value for attr '{attr}' of {tf_name(resolved)} is not in the list of allowed "
            "values: float, int64, string"
        )
    return resolved


@dataclasses.dataclass(frozen=True, eq=False)
class FixedLenFeature:
    """A feature with a fixed number of values, parsed into a dense array.

    Attributes:
        shape: The shape of one example's value (``[]`` for a scalar); every dimension must
            be known.
        dtype: ``float32`` (``"float"``), ``int64`` or ``string`` (object arrays of bytes),
            as a TensorFlow name, numpy dtype or type; stored as a numpy dtype.
        default_value: Used when an example lacks the feature; reshaped to ``shape`` (it
            must have exactly that many values). None makes the feature required.

    Raises:
        InvalidArgumentError: ``dtype`` is not one of the three; ``default_value`` has the
            wrong number of values or does not convert.
    """

    shape: tuple[int | None, ...]
    dtype: np.dtype[np.generic]
    default_value: np.ndarray | None = None

    def __init__(
        self, shape: Sequence[int | None] | int, dtype: object, default_value: object = None
    ) -> None:
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        dims = tuple(None if dim is None else int(dim) for dim in dims)
        resolved = _feature_dtype(dtype, "Tdense")
        default = None
        if default_value is not None:
            default = _default_array(default_value, resolved)
            if all(dim is not None for dim in dims):
                size = math.prod(dim for dim in dims if dim is not None)
                if default.size != size:
                    raise InvalidArgumentError(
                        f"Input to reshape is a tensor with {default.size} values, but the "
                        f"requested shape has {size}"
                    )
                default = default.reshape(dims)  # type: ignore[arg-type]
        object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", resolved)
        object.__setattr__(self, "default_value", default)


def _default_array(value: object, dtype: np.dtype[np.generic]) -> np.ndarray:
    try:
        if dtype == STRING:
            items, shape = flatten_strings(value)
            array = np.empty(len(items), dtype=object)
            array[:] = list(items)
            return array.reshape(shape)
        return np.array(value, dtype=dtype)
    except (OverflowError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(
            f"default_value {value!r:.80} is not a valid {tf_name(dtype)}"
        ) from None


@dataclasses.dataclass(frozen=True)
class VarLenFeature:
    """A feature with any number of values, parsed into a :class:`SparseTensorValue`.

    Attributes:
        dtype: ``float32``, ``int64`` or ``string``, as for :class:`FixedLenFeature`.

    Raises:
        InvalidArgumentError: ``dtype`` is not one of the three.
    """

    dtype: np.dtype[np.generic]

    def __init__(self, dtype: object) -> None:
        object.__setattr__(self, "dtype", _feature_dtype(dtype, "sparse_types"))


@dataclasses.dataclass(frozen=True, eq=False)
class SparseTensorValue:
    """A sparse result, laid out like TensorFlow's ``SparseTensorValue``.

    For a batch, ``indices`` has one ``[example, position]`` row per value (int64, shape
    ``[nnz, 2]``) and ``dense_shape`` is ``[batch_size, longest list]``; for one example the
    rows are ``[position]`` and ``dense_shape`` is ``[length]``. Unpacks like the tuple it
    mirrors: ``indices, values, dense_shape = sparse``.

    Attributes:
        indices: int64 array of coordinates, row-major order.
        values: The values, float32, int64 or object (bytes).
        dense_shape: int64 array, the shape of the dense equivalent.
    """

    indices: np.ndarray
    values: np.ndarray
    dense_shape: np.ndarray

    def __iter__(self) -> Iterator[np.ndarray]:
        return iter((self.indices, self.values, self.dense_shape))

    def to_dense(self, default_value: object = None) -> np.ndarray:
        """The dense array, with ``default_value`` (0 or b"") where there is no value."""
        shape = tuple(int(dim) for dim in self.dense_shape)
        if default_value is None:
            default_value = b"" if self.values.dtype == STRING else 0
        dense = np.full(shape, default_value, dtype=self.values.dtype)
        dense[tuple(self.indices.T)] = self.values
        return dense

    def __repr__(self) -> str:
        return (
            f"SparseTensorValue(indices={self.indices.tolist()!r:.120}, "
            f"values={self.values.tolist()!r:.120}, dense_shape={self.dense_shape.tolist()!r})"
        )


ParseSpec: TypeAlias = "FixedLenFeature | VarLenFeature"
ParseResult: TypeAlias = "dict[str, np.ndarray | SparseTensorValue]"
# What the parsers return when every feature is of one kind, so the values need no cast.
DenseResult: TypeAlias = "dict[str, np.ndarray]"
SparseResult: TypeAlias = "dict[str, SparseTensorValue]"


# --- parsing ---------------------------------------------------------------------------


@overload
def parse_single_example(
    serialized: bytes | str, features: Mapping[str, FixedLenFeature]
) -> DenseResult: ...
@overload
def parse_single_example(
    serialized: bytes | str, features: Mapping[str, VarLenFeature]
) -> SparseResult: ...
@overload
def parse_single_example(
    serialized: bytes | str, features: Mapping[str, ParseSpec]
) -> ParseResult: ...
def parse_single_example(
    serialized: bytes | str, features: Mapping[str, ParseSpec]
) -> dict[str, Any]:  # the overloads above give the precise result
    """Parse one serialized Example into ``{name: array or SparseTensorValue}``.

    Mirrors ``tf.io.parse_single_example``: a :class:`FixedLenFeature` gives an array of its
    ``shape`` and dtype (its default when the Example lacks the feature or the Feature is
    empty); a :class:`VarLenFeature` gives a :class:`SparseTensorValue` with ``[position]``
    indices. Strings come back as object arrays of ``bytes``.

    Args:
        serialized: The serialized Example.
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
            dimension.
    """
    return _parse(_check_specs(features), [to_bytes(serialized)], None, single=True)


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

    Args:
        serialized: A list / tuple / 1-D array of serialized Examples.
        features: What to parse: ``{name: FixedLenFeature | VarLenFeature}``.
        example_names: Optional names of the examples, used in error messages (TensorFlow's
            ``example_names``); otherwise they read ``<unknown>``.
        on_error: ``None`` / ``"raise"`` (TensorFlow's behaviour) raises the first bad
            example's error; a :class:`~asyncreader.DecodeErrors` with a skipping policy drops
            bad examples instead and notes them as dead letters; ``errors.kept`` gives the
            positions of the examples in the result.
        keys: The batch's reader keys, one per example: errors and dead letters then name
            the file and record key.

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
            index of the example concerned (its key when ``keys`` are given).
    """
    errors = check_on_error(on_error)
    if isinstance(serialized, (bytes, bytearray, memoryview, str, np.bytes_)):
        return parse_single_example(to_bytes(serialized), features)
    items, shape = flatten_strings(serialized)
    if len(shape) != 1:
        raise InvalidArgumentError(f"Expected serialized to be a vector, got shape {list(shape)}")
    names = None
    if example_names is not None:
        names = [to_bytes(name).decode("utf-8", "backslashreplace") for name in example_names]
        if len(names) and len(names) != len(items):
            raise InvalidArgumentError(
                f"Expected len(example_names) == len(serialized), got {len(names)} != {len(items)}"
            )
    specs = _check_specs(features)
    key_list = check_keys(keys, len(items))

    def decode(span: range) -> ParseResult:
        part = items if len(span) == len(items) else items[span.start : span.stop]
        return _parse(specs, part, names or None, single=False, base=span.start)

    return decode_guarded(len(items), decode, _concatenate, errors, key_list)


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


@dataclasses.dataclass(slots=True)
class _Spec:
    name: str
    key: bytes
    spec: FixedLenFeature | VarLenFeature
    kind: int
    dims: tuple[int, ...]
    size: int


def _check_specs(features: Mapping[str, ParseSpec]) -> list[_Spec]:
    specs: list[_Spec] = []
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
        specs.append(_Spec(name, name.encode("utf-8"), spec, _DTYPE_KINDS[spec.dtype], dims, size))
    return specs


def _preview(data: bytes) -> str:
    shown = data[:_PREVIEW_BYTES].decode("latin-1").encode("unicode_escape").decode("ascii")
    return shown + ("..." if len(data) > _PREVIEW_BYTES else "")


def _shape_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(dim) for dim in dims) + "]"


class _Columns:
    """The per-example raw lists of one requested feature, gathered across the batch."""

    __slots__ = ("kinds", "values")

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.values: list[bytes | list[bytes] | None] = []


def _parse(
    specs: list[_Spec],
    items: Sequence[bytes],
    names: list[str] | None,
    *,
    single: bool,
    base: int = 0,
) -> ParseResult:
    """Parse ``items``; ``base`` is the position of ``items[0]`` in the caller's batch, for
    messages and error ``record``s (``names`` covers the whole batch)."""
    columns = [_Columns() for _ in specs]
    layout = _Layout.build(items, specs) if len(items) >= _LAYOUT_MIN_BATCH else None
    if layout is not None and layout.matched.all():
        layout.fill_all(columns)
    else:
        for index, data in enumerate(items):
            if layout is not None and layout.matched[index]:
                layout.fill_row(index, columns)
            else:
                _parse_one(index + base, data, specs, columns, single)
    builders = [
        _Builder(spec, column, names, single, base)
        for spec, column in zip(specs, columns, strict=True)
    ]
    failures = [failure for builder in builders if (failure := builder.first_error()) is not None]
    if failures:
        raise min(failures, key=lambda failure: failure[0])[1]
    return {builder.spec.name: builder.build() for builder in builders}


def _parse_one(
    index: int, data: bytes, specs: list[_Spec], columns: list[_Columns], single: bool
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


# Below this many examples the layout check costs more than it saves.
_LAYOUT_MIN_BATCH = 4


class _Layout:
    """The byte layout of the first example, reused for every example laid out the same way.

    Examples written by one program usually differ only in their values: every tag, length
    and key sits at the same offset. The first example is parsed normally, and its bytes are
    split into *payload* (float and int64 data, bytes values, unrequested features) and
    *structure* (everything the parser reads to find them). Every example of the same length
    whose structure bytes are identical parses identically, so its values are sliced at the
    same offsets, and the whole check is one numpy comparison over the batch. Examples that
    differ are parsed one by one.
    """

    __slots__ = ("joined", "kinds", "length", "matched", "position", "ranges", "spec_kinds")

    def __init__(
        self,
        joined: bytes,
        length: int,
        matched: np.ndarray,
        kinds: list[int],
        ranges: list[list[tuple[int, int]]],
        specs: list[_Spec],
        position: np.ndarray | None,
    ) -> None:
        self.joined = joined
        self.length = length
        self.matched = matched
        self.kinds = kinds
        self.ranges = ranges
        self.spec_kinds = [spec.kind for spec in specs]
        # Row of each example in ``joined`` when only some examples have the layout's length.
        self.position = position

    @classmethod
    def build(cls, items: Sequence[bytes], specs: list[_Spec]) -> _Layout | None:
        first = items[0]
        length = len(first)
        try:
            found = cls._payload(first, specs)
        except wire.WireError:
            return None
        if found is None or length == 0:
            return None
        kinds, ranges, payload = found
        lengths = np.fromiter(map(len, items), dtype=np.intp, count=len(items))
        same = lengths == length
        position: np.ndarray | None = None
        if same.all():
            joined = b"".join(items)
        else:
            rows = np.flatnonzero(same)
            if rows.size < _LAYOUT_MIN_BATCH:
                return None
            joined = b"".join([items[row] for row in rows.tolist()])
            position = np.full(len(items), -1, dtype=np.intp)
            position[rows] = np.arange(rows.size)
        matrix = np.frombuffer(joined, dtype=np.uint8).reshape(-1, length)
        picked = matrix[:, np.flatnonzero(~payload)]
        ok = (picked == picked[0]).all(axis=1)
        for spec, kind, spans in zip(specs, kinds, ranges, strict=True):
            if kind == wire.INT64 and spec.kind == wire.INT64:
                for _start, stop in spans:
                    # A packed varint stream must end on a final byte.
                    ok &= matrix[:, stop - 1] < 0x80
        if position is None:
            matched = ok
        else:
            matched = np.zeros(len(items), dtype=bool)
            matched[position >= 0] = ok
        return cls(joined, length, matched, kinds, ranges, specs, position)

    @staticmethod
    def _payload(
        buf: bytes, specs: list[_Spec]
    ) -> tuple[list[int], list[list[tuple[int, int]]], np.ndarray] | None:
        spans = wire.index_example(buf)
        payload = np.zeros(len(buf), dtype=bool)
        wanted = {spec.key for spec in specs}
        for key, (source, start, stop) in spans.items():
            if source is not buf:
                return None  # a merged Feature has no single place in the buffer
            if key not in wanted:
                payload[start:stop] = True
        kinds: list[int] = []
        ranges: list[list[tuple[int, int]]] = []
        for spec in specs:
            span = spans.get(spec.key)
            if span is None:
                kinds.append(wire.NONE)
                ranges.append([])
                continue
            kind, (source, start, stop) = wire.parse_feature(span)
            kinds.append(kind)
            found: list[tuple[int, int]] = []
            if kind == spec.kind and stop > start:
                if source is not buf:
                    return None
                if kind == wire.BYTES:
                    pos = start
                    while pos < stop:
                        if buf[pos] != 0x0A:
                            return None
                        value_start, pos = wire._length(buf, pos + 1, stop)
                        found.append((value_start, pos))
                else:
                    if buf[start] != 0x0A:
                        return None
                    value_start, value_stop = wire._length(buf, start + 1, stop)
                    if value_stop != stop:
                        return None
                    if kind == wire.FLOAT and (value_stop - value_start) % 4:
                        return None
                    found.append((value_start, value_stop))
            for value_start, value_stop in found:
                payload[value_start:value_stop] = True
            ranges.append(found)
        return kinds, ranges, payload

    def fill_row(self, index: int, columns: list[_Columns]) -> None:
        row = index if self.position is None else int(self.position[index])
        offset = row * self.length
        joined = self.joined
        for kind, wanted, spans, column in zip(
            self.kinds, self.spec_kinds, self.ranges, columns, strict=True
        ):
            column.kinds.append(kind)
            if kind == wire.NONE or kind != wanted:
                column.values.append(None)
            elif kind == wire.BYTES:
                column.values.append([joined[offset + a : offset + b] for a, b in spans])
            elif spans:
                ((start, stop),) = spans
                column.values.append(joined[offset + start : offset + stop])
            else:
                column.values.append(b"")

    def fill_all(self, columns: list[_Columns]) -> None:
        count = self.matched.size
        offsets = range(0, count * self.length, self.length)
        joined = self.joined
        for spec_index, column in enumerate(columns):
            kind = self.kinds[spec_index]
            column.kinds = [kind] * count
            if kind == wire.NONE or kind != self.spec_kinds[spec_index]:
                column.values = [None] * count
                continue
            spans = self.ranges[spec_index]
            if kind == wire.BYTES:
                if len(spans) == 1:
                    ((start, stop),) = spans
                    column.values = [[joined[o + start : o + stop]] for o in offsets]
                else:
                    column.values = [[joined[o + a : o + b] for a, b in spans] for o in offsets]
            elif not spans:
                column.values = [b""] * count
            else:
                ((start, stop),) = spans
                column.values = [joined[o + start : o + stop] for o in offsets]


class _Builder:
    """Checks and assembles one requested feature for the whole batch."""

    __slots__ = ("base", "column", "counts", "int_values", "names", "present", "single", "spec")

    def __init__(
        self, spec: _Spec, column: _Columns, names: list[str] | None, single: bool, base: int
    ) -> None:
        self.base = base
        self.spec = spec
        self.column = column
        self.names = names
        self.single = single
        kinds = np.array(column.kinds, dtype=np.int8)
        self.present = kinds == spec.kind
        self.int_values: np.ndarray | None = None
        self.counts = self._counts()

    def _counts(self) -> np.ndarray:
        values = self.column.values
        if self.spec.kind == wire.INT64:
            streams = [value if value is not None else b"" for value in values]
            lengths = np.fromiter(map(len, streams), dtype=np.intp, count=len(streams))
            joined = b"".join(streams)  # type: ignore[arg-type]
            self.int_values = self._decode_varints(joined, lengths)
            ends = np.frombuffer(joined, dtype=np.uint8) < 0x80
            before = np.concatenate(([0], np.cumsum(ends, dtype=np.intp)))
            stops = np.cumsum(lengths)
            counts: np.ndarray = before[stops] - before[stops - lengths]
            return counts
        return np.fromiter(
            (0 if value is None else len(value) for value in values),
            dtype=np.intp,
            count=len(values),
        ) // (4 if self.spec.kind == wire.FLOAT else 1)

    def _decode_varints(self, joined: bytes, lengths: np.ndarray) -> np.ndarray:
        try:
            return wire.decode_varints(joined)
        except wire.WireError as exc:
            # Only an over-long varint gets here (truncation is caught per example); find it.
            stops = np.cumsum(lengths)
            for index in range(len(lengths)):
                start = int(stops[index] - lengths[index])
                try:
                    wire.decode_varints(joined[start : int(stops[index])])
                except wire.WireError:
                    raise InvalidArgumentError(
                        f"Could not parse example input, value: '' ({exc})",
                        record=None if self.single else index + self.base,
                    ) from None
            raise AssertionError("unreachable") from exc

    def _prefix(self, index: int) -> str:
        if self.single:
            return f"Key: {self.spec.name}.  "
        index += self.base
        name = self.names[index] if self.names else "<unknown>"
        return f"Name: {name}, Key: {self.spec.name}, Index: {index}.  "

    def first_error(self) -> tuple[tuple[int, int], InvalidArgumentError] | None:
        spec = self.spec
        kinds = np.array(self.column.kinds, dtype=np.int8)
        fixed = isinstance(spec.spec, FixedLenFeature)
        wrong_type = (kinds != wire.NONE) & (kinds != spec.kind)
        bad = wrong_type.copy()
        missing = kinds == wire.NONE
        if fixed:
            assert isinstance(spec.spec, FixedLenFeature)
            if spec.spec.default_value is None:
                bad |= missing
            bad |= self.present & (self.counts != spec.size)
        if not bad.any():
            return None
        index = int(np.argmax(bad))
        expected = tf_name(spec.spec.dtype)
        actual = tf_name(_KIND_DTYPES.get(int(kinds[index]), STRING))
        record = None if self.single else index + self.base
        if wrong_type[index]:
            if fixed:
                text = f"Data types don't match. Data type: {actual} but expected type: {expected}"
            else:
                text = f"Data types don't match. Expected type: {expected}, Actual type: {actual}"
            message = self._prefix(index) + text
        elif missing[index]:
            message = (
                f"Feature: {spec.name} (data type: {expected}) is required but could not be found."
            )
            if not self.single:
                name = self.names[index + self.base] if self.names else "<unknown>"
                message = f"Name: {name}, " + message
        else:
            count = int(self.counts[index])
            if self.single:
                kind_name = _KIND_NAMES[spec.kind]
                if spec.kind == wire.BYTES and count > spec.size:
                    detail = "Parsing bytes_list failed."
                else:
                    detail = f"Some {kind_name} slice was not parsed."
                message = self._prefix(index) + "Can't parse serialized Example: " + detail
            elif spec.kind == wire.BYTES and count > spec.size:
                message = self._prefix(index) + "Can't parse serialized Example."
            else:
                message = self._prefix(index) + (
                    f"Number of {_COUNT_NAMES[spec.kind]} values != expected.  Values size: "
                    f"{count} but output shape: {_shape_text(spec.dims)}"
                )
        return (index, 0), InvalidArgumentError(message, record=record)

    def build(self) -> np.ndarray | SparseTensorValue:
        if isinstance(self.spec.spec, FixedLenFeature):
            return self._dense(self.spec.spec)
        return self._sparse()

    def _flat_values(self) -> np.ndarray:
        """All present values of the batch, concatenated in example order."""
        kind = self.spec.kind
        present_values = [value for value in self.column.values if value is not None]
        if kind == wire.INT64:
            assert self.int_values is not None
            return self.int_values
        if kind == wire.FLOAT:
            raw = bytearray().join(present_values)  # type: ignore[arg-type]
            return np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)
        flat = [item for value in present_values for item in value]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array

    def _dense(self, spec: FixedLenFeature) -> np.ndarray:
        batch = len(self.column.kinds)
        dims = self.spec.dims
        values = self._flat_values()
        if self.present.all():
            out = values.reshape((batch, *dims))
        else:
            out = np.empty((batch, *dims), dtype=spec.dtype)
            out[self.present] = values.reshape((-1, *dims))
            out[~self.present] = spec.default_value
        return out.reshape(dims) if self.single else out

    def _sparse(self) -> SparseTensorValue:
        counts = np.where(self.present, self.counts, 0)
        values = self._flat_values()
        batch = counts.size
        total = int(counts.sum())
        rows = np.repeat(np.arange(batch, dtype=np.int64), counts)
        starts = np.cumsum(counts) - counts
        positions = np.arange(total, dtype=np.int64) - np.repeat(starts, counts)
        longest = int(counts.max()) if batch else 0
        if self.single:
            return SparseTensorValue(
                positions.reshape(-1, 1), values, np.array([longest], dtype=np.int64)
            )
        return SparseTensorValue(
            np.stack([rows, positions], axis=1), values, np.array([batch, longest], dtype=np.int64)
        )
