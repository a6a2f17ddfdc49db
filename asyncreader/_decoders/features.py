"""What ``parse_example`` is asked for and what it returns: the feature specs and results.

:class:`FixedLenFeature` (a dense array of a known shape) and :class:`VarLenFeature` (any
number of values) say how to parse one named feature, as TensorFlow's classes of the same
names do; :class:`SparseTensorValue` is what a :class:`VarLenFeature` parses into. Only the
three dtypes a Feature can hold are accepted (:data:`KIND_DTYPES`).
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Final, TypeAlias

import numpy as np

from .._errors import InvalidArgumentError
from . import wire
from .dtypes import STRING, resolve_dtype, tf_name
from .strings import flatten_strings

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence

__all__ = [
    "DTYPE_KINDS",
    "KIND_DTYPES",
    "DenseResult",
    "FixedLenFeature",
    "ParseResult",
    "ParseSpec",
    "SparseResult",
    "SparseTensorValue",
    "VarLenFeature",
]

#: The numpy dtype that each wire kind of feature list parses into, and back.
KIND_DTYPES: Final = {
    wire.BYTES: STRING,
    wire.FLOAT: np.dtype(np.float32),
    wire.INT64: np.dtype(np.int64),
}
DTYPE_KINDS: Final = {dtype: kind for kind, dtype in KIND_DTYPES.items()}


def _feature_dtype(dtype: object, attr: str) -> np.dtype[np.generic]:
    resolved = resolve_dtype(dtype)
    if resolved not in DTYPE_KINDS:
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
