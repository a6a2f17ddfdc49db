"""Rows as ``tf.train.Example`` records: the value format of the database readers.

A row becomes one serialized Example with a feature per column, named as the column:
an integer (or boolean) is an ``int64_list`` of one value, a float a ``float_list`` of one
float32, text (UTF-8) and blobs a ``bytes_list`` of one value, an array of those a list of
several, and NULL no feature at all (so ``parse_example`` gives the spec's
``default_value``, or nothing in a ``VarLenFeature``).

The bytes are written directly, without building :class:`~asyncreader.Example` objects:
each column's encoder prepends header bytes computed once per column (and per varint
length for integers) to the value's own bytes, so a row costs a few concatenations per
column, and the bytes are TensorFlow's deterministic serialization. A chunk whose columns
hold only integers or only floats is instead encoded at once with numpy
(:meth:`RowEncoder.encode_matrix`), integers as 10-byte varints: every row then has the
same length and layout, which ``parse_example``'s shared-layout fast path decodes as one
matrix.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final

import numpy as np

from .._decoders import wire
from .._errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["RowEncoder"]

_FLOAT: Final = struct.Struct("<f")
#: The shift of each 7-bit group of a 64-bit varint.
_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)
#: Rows below which the whole-chunk encoding costs more than row by row.
_MATRIX_MIN_ROWS: Final = 16
_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1


def _long_varint(value: int) -> bytes:
    """A protobuf varint (negative int64 values as their 64-bit two's complement)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


#: The varints of 0..16383 (one or two bytes), looked up instead of computed.
_SHORT_VARINTS: Final = [_long_varint(i) for i in range(1 << 14)]
_SHORT_LIMIT: Final = 1 << 14
#: Text and blob values up to this long have their entry header cached per length.
_CACHED_LENGTHS: Final = 4096


def _varint(value: int) -> bytes:
    """A protobuf varint (negative int64 values as their 64-bit two's complement)."""
    if 0 <= value < _SHORT_LIMIT:
        return _SHORT_VARINTS[value]
    return _long_varint(value)


def _delimited(field: int, payload: bytes) -> bytes:
    """``payload`` as length-delimited field ``field``."""
    return bytes((field << 3 | 2,)) + _varint(len(payload)) + payload


class _Unencodable(Exception):
    """A value the Example format cannot hold (turned into InvalidArgumentError)."""


class _Column:
    """The encoders of one column's values into a ``features`` map entry."""

    __slots__ = ("_bytes_heads", "_float_head", "_int_heads", "_name_part", "name")

    def __init__(self, name: str) -> None:
        self.name = name
        self._name_part = _delimited(1, name.encode("utf-8"))
        # Entry header for an int64_list of one value of each varint length 1..10.
        self._int_heads = [b""] + [self._head(wire.INT64, length) for length in range(1, 11)]
        self._float_head = self._head(wire.FLOAT, 4)
        # Entry header of a bytes_list of one value, by the value's length.
        self._bytes_heads: dict[int, bytes] = {}

    def _bytes_entry(self, value: bytes) -> bytes:
        length = len(value)
        head = self._bytes_heads.get(length)
        if head is None:
            entry = self._entry(wire.BYTES, _delimited(1, value))
            if length < _CACHED_LENGTHS:
                self._bytes_heads[length] = entry[: len(entry) - length]
            return entry
        return head + value

    def fixed(self, values: Sequence[object]) -> tuple[bytes, np.ndarray] | None:
        """The entries of a whole column as one header and a ``(rows, width)`` matrix of
        value bytes, when every value is an integer (a 10-byte varint each) or every one a
        float (4 bytes); ``None`` otherwise (NULLs, text, a value out of range)."""
        kinds = set(map(type, values))
        if kinds and kinds <= {int, bool}:
            try:
                ints = np.array(values, dtype=np.int64)
            except OverflowError:
                return None
            # Every varint padded to 10 bytes (continuation bits on the first nine): the
            # same value for a protobuf parser, and one width for every row.
            groups = (ints.view(np.uint64)[:, None] >> _SHIFTS) & np.uint64(0x7F)
            matrix = groups.astype(np.uint8)
            matrix[:, :9] |= 0x80
            return self._int_heads[10], matrix
        if kinds == {float}:
            doubles = np.array(values, dtype=np.float64)
            with np.errstate(over="ignore"):
                floats = doubles.astype("<f4")
            if np.count_nonzero(np.isinf(floats)) != np.count_nonzero(np.isinf(doubles)):
                return None  # beyond float32's range: the row path names the row
            return self._float_head, floats.view(np.uint8).reshape(-1, 4)
        return None

    def _head(self, kind: int, length: int) -> bytes:
        """The bytes of a map entry up to its one packed value of ``length`` bytes."""
        packed = b"\x0a" + _varint(length)  # the list's field 1, packed
        feature_len = len(packed) + length
        feature = bytes((kind << 3 | 2,)) + _varint(feature_len)  # Feature's oneof field
        value_len = len(feature) + feature_len
        entry_body = self._name_part + b"\x12" + _varint(value_len) + feature + packed
        return b"\x0a" + _varint(len(entry_body) + length) + entry_body

    def encode(self, value: object) -> bytes:
        """The map entry of ``value`` (``b""`` for NULL: no feature)."""
        kind = type(value)
        if kind is int or kind is bool:
            number = int(value)  # type: ignore[call-overload]
            if not _INT64_MIN <= number <= _INT64_MAX:
                raise _Unencodable(f"integer {number} does not fit in int64")
            digits = _varint(number)
            return self._int_heads[len(digits)] + digits
        if kind is float:
            try:
                return self._float_head + _FLOAT.pack(value)
            except OverflowError:
                raise _Unencodable(f"float {value!r} does not fit in float32") from None
        if kind is bytes:
            return self._bytes_entry(value)  # type: ignore[arg-type]
        if kind is str:
            return self._bytes_entry(value.encode("utf-8"))  # type: ignore[attr-defined]
        if value is None:
            return b""
        if isinstance(value, (bytes, bytearray, memoryview)):
            return self._bytes_entry(bytes(value))
        if isinstance(value, (list, tuple)):
            return self._list(value)
        raise _Unencodable(
            f"a value of type {kind.__name__} has no Example form (integers, floats, text, "
            "blobs and arrays of them have)"
        )

    def _entry(self, kind: int, body: bytes) -> bytes:
        return _delimited(1, self._name_part + _delimited(2, _delimited(kind, body)))

    def _list(self, values: list[object] | tuple[object, ...]) -> bytes:
        """An array column: a list of several values of one kind (NULL elements refused)."""
        kinds = {type(v) for v in values}
        try:
            if kinds <= {int, bool}:  # an empty array too: an empty int64_list
                body = wire.encode_feature(wire.INT64, np.array(values, dtype=np.int64))
            elif kinds <= {float, int}:
                with np.errstate(over="raise"):
                    body = wire.encode_feature(wire.FLOAT, np.array(values, dtype=np.float32))
            elif kinds <= {bytes, str}:
                items = [v.encode("utf-8") if isinstance(v, str) else v for v in values]
                body = wire.encode_feature(wire.BYTES, items)
            else:
                raise _Unencodable(
                    f"an array of {', '.join(sorted(k.__name__ for k in kinds))} has no "
                    "Example form (one of integers, floats or text/blobs, without NULLs, has)"
                )
        except (OverflowError, FloatingPointError) as exc:
            raise _Unencodable(f"an array value does not fit: {exc}") from None
        return _delimited(1, self._name_part + _delimited(2, body))


class RowEncoder:
    """Encodes rows (sequences of column values) as serialized Examples."""

    __slots__ = ("_columns", "_encoders", "columns")

    def __init__(self, columns: Sequence[str]) -> None:
        #: The column names, in the order rows hold their values: protobuf's deterministic
        #: order of map keys, so that a row's bytes equal TensorFlow's
        #: ``SerializeToString(deterministic=True)`` of the same Example.
        self.columns = tuple(sorted(columns, key=lambda c: wire.upb_key_order(c.encode())))
        self._columns = [_Column(c) for c in self.columns]
        self._encoders: list[Callable[[object], bytes]] = [c.encode for c in self._columns]

    def encode_matrix(self, rows: Sequence[Sequence[object]]) -> np.ndarray | None:
        """Encode ``rows`` at once as a ``(rows, length)`` ``uint8`` matrix, a row per
        Example, when every column holds only integers or only floats (no NULL) and there
        are enough rows for it to pay; else ``None`` (use :meth:`encode`).

        Integers are 10-byte varints here, so every row has the same length and layout:
        ``parse_example`` then decodes a batch of them as one matrix.
        """
        if len(rows) < _MATRIX_MIN_ROWS:
            return None
        columns = list(zip(*rows))  # noqa: B905 - the key, last, has no column
        parts: list[tuple[bytes, np.ndarray]] = []
        for column, column_values in zip(self._columns, columns):  # noqa: B905
            part = column.fixed(column_values)
            if part is None:
                return None
            parts.append(part)
        body = sum(len(head) + values.shape[1] for head, values in parts)
        prefix = b"\x0a" + _varint(body)
        matrix = np.empty((len(rows), len(prefix) + body), dtype=np.uint8)
        at = len(prefix)
        matrix[:, :at] = np.frombuffer(prefix, np.uint8)
        for head, values in parts:
            matrix[:, at : at + len(head)] = np.frombuffer(head, np.uint8)
            at += len(head)
            matrix[:, at : at + values.shape[1]] = values
            at += values.shape[1]
        return matrix

    def encode(self, rows: Sequence[Sequence[object]], start: int = 0) -> tuple[list[bytes], int]:
        """Encode ``rows[start:]`` in order; return the values and the index of the first
        row that cannot be encoded (``len(rows)`` when all can)."""
        encoders = self._encoders
        out: list[bytes] = []
        add = out.append
        i = start
        try:
            for i in range(start, len(rows)):
                # A row may hold more values than there are columns (the key, last).
                body = b"".join([enc(v) for enc, v in zip(encoders, rows[i])])  # noqa: B905
                add(b"\x0a" + _varint(len(body)) + body)
        except _Unencodable:
            return out, i
        return out, len(rows)

    def error(self, row: Sequence[object]) -> str:
        """Describe why ``row`` cannot be encoded (the first bad column)."""
        for name, encode, value in zip(self.columns, self._encoders, row):  # noqa: B905
            try:
                encode(value)
            except _Unencodable as exc:
                return f"column {name!r}: {exc}"
        raise InvalidArgumentError("the row encodes")  # pragma: no cover - callers check
