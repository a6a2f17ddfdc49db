"""One requested feature's values across a batch, checked and assembled into its result.

``parse_example`` gathers, for each requested feature, the raw list of every example into a
:class:`Column` (by :class:`~.example_layout.SharedLayout` or example by example); a
:class:`ColumnBuilder` then finds the first bad example (TensorFlow's error messages) and
builds the dense array or :class:`~.features.SparseTensorValue` for the whole batch with a
few numpy calls: one ``np.frombuffer`` over all float lists, one vectorised varint decode
over all int64 lists.
"""

from __future__ import annotations

import dataclasses
from typing import Final

import numpy as np

from .._errors import InvalidArgumentError
from . import wire
from .dtypes import STRING, tf_name
from .example_proto import KIND_NAMES
from .features import KIND_DTYPES, FixedLenFeature, SparseTensorValue, VarLenFeature

__all__ = [
    "Column",
    "ColumnBuilder",
    "RequestedFeature",
    "decode_int64_streams",
    "varint_counts",
]

_COUNT_NAMES: Final = {wire.BYTES: "bytes", wire.FLOAT: "float", wire.INT64: "int64"}


@dataclasses.dataclass(slots=True)
class RequestedFeature:
    """One entry of ``parse_example``'s ``features``, checked and ready for the parser.

    Attributes:
        name: The feature's name.
        key: The name as UTF-8, as it appears in serialized Examples.
        spec: The spec asked for.
        kind: The wire kind (:data:`.wire.BYTES`, ...) that the spec's dtype is stored as.
        dims: The shape of one example's value (``()`` for a VarLenFeature).
        size: The number of values in ``dims`` (0 for a VarLenFeature).
    """

    name: str
    key: bytes
    spec: FixedLenFeature | VarLenFeature
    kind: int
    dims: tuple[int, ...]
    size: int


def _shape_text(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(dim) for dim in dims) + "]"


class Column:
    """The per-example raw lists of one requested feature, gathered across the batch."""

    __slots__ = ("kinds", "values")

    def __init__(self) -> None:
        self.kinds: list[int] = []
        self.values: list[bytes | list[bytes] | None] = []


class ColumnBuilder:
    """Checks and assembles one requested feature for the whole batch."""

    __slots__ = (
        "base",
        "column",
        "counts",
        "flat",
        "int_values",
        "kinds",
        "names",
        "present",
        "single",
        "spec",
    )

    def __init__(
        self,
        spec: RequestedFeature,
        column: Column,
        names: list[str] | None,
        single: bool,
        base: int,
    ) -> None:
        self.base = base
        self.spec = spec
        self.column: Column | None = column
        self.names = names
        self.single = single
        self.kinds = np.array(column.kinds, dtype=np.int8)
        self.present = self.kinds == spec.kind
        self.int_values: np.ndarray | None = None
        self.flat: np.ndarray | None = None
        self.counts = self._counts(column)

    @classmethod
    def from_arrays(
        cls,
        spec: RequestedFeature,
        kinds: np.ndarray,
        counts: np.ndarray,
        flat: np.ndarray,
        names: list[str] | None,
        single: bool,
        base: int,
    ) -> ColumnBuilder:
        """A builder for values gathered without a :class:`Column`: every example's kind
        (``int8``), its number of values (any number where the kind is not the spec's) and
        the values of the examples of the spec's kind, concatenated in example order (int64
        streams decoded with :func:`decode_int64_streams`)."""
        builder = cls.__new__(cls)
        builder.base = base
        builder.spec = spec
        builder.column = None
        builder.names = names
        builder.single = single
        builder.kinds = kinds
        builder.present = kinds == spec.kind
        builder.int_values = flat if spec.kind == wire.INT64 else None
        builder.flat = flat
        builder.counts = counts
        return builder

    def _counts(self, column: Column) -> np.ndarray:
        values = column.values
        if self.spec.kind == wire.INT64:
            streams = [value if value is not None else b"" for value in values]
            lengths = np.fromiter(map(len, streams), dtype=np.intp, count=len(streams))
            joined = b"".join(streams)  # type: ignore[arg-type]
            self.int_values = decode_int64_streams(joined, lengths, self.single, self.base)
            return varint_counts(np.frombuffer(joined, dtype=np.uint8), lengths)
        return np.fromiter(
            (0 if value is None else len(value) for value in values),
            dtype=np.intp,
            count=len(values),
        ) // (4 if self.spec.kind == wire.FLOAT else 1)

    def _prefix(self, index: int) -> str:
        if self.single:
            return f"Key: {self.spec.name}.  "
        index += self.base
        name = self.names[index] if self.names else "<unknown>"
        return f"Name: {name}, Key: {self.spec.name}, Index: {index}.  "

    def first_error(self) -> tuple[tuple[int, int], InvalidArgumentError] | None:
        """The first bad example's sort key and error, in TensorFlow's words; None if none."""
        spec = self.spec
        kinds = self.kinds
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
        actual = tf_name(KIND_DTYPES.get(int(kinds[index]), STRING))
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
                kind_name = KIND_NAMES[spec.kind]
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
        """The feature's result for the batch (call once :meth:`first_error` found none)."""
        if isinstance(self.spec.spec, FixedLenFeature):
            return self._dense(self.spec.spec)
        return self._sparse()

    def _flat_values(self) -> np.ndarray:
        """All present values of the batch, concatenated in example order."""
        kind = self.spec.kind
        if kind == wire.INT64:
            assert self.int_values is not None
            return self.int_values
        if self.flat is not None:
            return self.flat
        assert self.column is not None
        present_values = [value for value in self.column.values if value is not None]
        if kind == wire.FLOAT:
            raw = bytearray().join(present_values)  # type: ignore[arg-type]
            return np.frombuffer(raw, dtype="<f4").astype(np.float32, copy=False)
        flat = [item for value in present_values for item in value]
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array

    def _dense(self, spec: FixedLenFeature) -> np.ndarray:
        batch = len(self.kinds)
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


def varint_counts(stream: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The number of varints in each of the consecutive pieces of ``stream`` (``uint8``)
    whose lengths are ``lengths``: the final bytes (below 0x80) in each piece."""
    ends = stream < 0x80
    before = np.concatenate(([0], np.cumsum(ends, dtype=np.intp)))
    stops = np.cumsum(lengths)
    counts: np.ndarray = before[stops] - before[stops - lengths]
    return counts


def decode_int64_streams(
    joined: bytes | np.ndarray, lengths: np.ndarray, single: bool, base: int
) -> np.ndarray:
    """Decode the int64 lists of a batch's examples, their varint streams joined in
    example order (``lengths`` bytes each; every stream ends on a final byte).

    Raises:
        InvalidArgumentError: a varint is longer than 10 bytes; the error names the first
            example that holds one (``record``: its position plus ``base``).
    """
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
                    record=None if single else index + base,
                ) from None
        raise AssertionError("unreachable") from exc
