"""Rows as ``tf.train.Example`` records: the value format of the database readers.

A row becomes one serialized Example with a feature per column, named as the column:
an integer (or boolean) is an ``int64_list`` of one value, a float a ``float_list`` of one
float32, text (UTF-8) and blobs a ``bytes_list`` of one value, an array of those a list of
several, and NULL no feature at all (so ``parse_example`` gives the spec's
``default_value``, or nothing in a ``VarLenFeature``).

The bytes are written directly, without building :class:`~asyncreader.Example` objects,
and are TensorFlow's deterministic serialization. A chunk of rows is encoded at once,
column by column with numpy (:meth:`RowEncoder.encode_chunk`): each column's entries are
a head (computed once per column and value length) and the value's bytes (varints,
float32s, the texts joined), laid out as padded rows whose padding one mask drops, so no
Python object or call is made per value. A chunk whose columns hold only integers or only
floats takes a fixed form instead, integers as 10-byte varints: every row then has the
same length and layout, which ``parse_example``'s shared-layout fast path decodes as one
matrix. A chunk given as arrays (:meth:`RowEncoder.encode_arrays`) otherwise takes a
fixed form too when it pays: each integer column's varints padded to its longest, the
entries of the number columns without NULL first, at one place in every row, and the
others (text, blobs, numbers with NULLs) after them (any order parses the same), each
placed with one mask, so that each record is one padded row of a matrix.
Values the column form cannot hold (arrays, a column of mixed kinds, a value out of range)
send the chunk row by row (:meth:`RowEncoder.encode`), which names the row.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING, Final, Generic, TypeVar

import numpy as np

from .._decoders import wire
from .._errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["ColumnValues", "RowEncoder", "gather"]

#: A column name: text (a table's), or bytes (a CSV header's, as written).
Name = TypeVar("Name", str, bytes)

_FLOAT: Final = struct.Struct("<f")
#: The shift of each 7-bit group of a 64-bit varint.
_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)
#: The smallest value of each varint length from 2 bytes on.
_VARINT_LIMITS: Final = np.array([1 << (7 * k) for k in range(1, 10)], dtype=np.uint64)
_GROUPS: Final = np.arange(9)
#: Rows below which the whole-chunk encoding costs more than row by row.
_MATRIX_MIN_ROWS: Final = 16
#: How many times the bytes of its records a chunk's padded rows may take.
_PADDING: Final = 4
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


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The minimal protobuf varints of ``int64`` ``values`` (negative ones as their 64-bit
    two's complement) as a ``(len(values), width)`` ``uint8`` matrix, ``width`` the longest
    one's length (at least 1), and each one's length."""
    unsigned = values.view(np.uint64)
    lengths = np.searchsorted(_VARINT_LIMITS, unsigned, side="right") + 1
    # Only as many 7-bit groups as the longest varint has: small numbers are the rule.
    width = int(lengths.max()) if len(lengths) else 1
    matrix = (unsigned[:, None] >> _SHIFTS[:width]).astype(np.uint8)
    matrix &= 0x7F
    # Every group but a varint's last has its continuation bit.
    matrix[:, : width - 1] |= ((lengths - 1)[:, None] > _GROUPS[: width - 1]).view(np.uint8) << 7
    return matrix, lengths


def _varint_width(values: np.ndarray) -> int:
    """The length of the longest minimal varint of ``int64`` ``values`` (10 if one is
    negative; 1 for none)."""
    if not len(values):
        return 1
    if int(values.min()) < 0:
        return 10
    return int(np.searchsorted(_VARINT_LIMITS, np.uint64(values.max()), side="right")) + 1


def _columns_between(width: int, firsts: np.ndarray | None, stops: np.ndarray) -> np.ndarray:
    """The mask of a ``(rows, width)`` matrix that holds row ``r``'s columns
    ``firsts[r]`` (0 for ``None``) up to ``stops[r]``."""
    # Narrow integers: less to compare (the comparisons are most of the cost).
    small = np.int16 if width < 1 << 15 else np.int64
    place: np.ndarray = np.arange(width, dtype=small)
    below: np.ndarray = place < stops.astype(small)[:, None]
    if firsts is None:
        return below
    after: np.ndarray = place >= firsts.astype(small)[:, None]
    both: np.ndarray = below & after
    return both


def gather(source: np.ndarray, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The spans ``source[start : start + length]``, back to back, in one take: the index
    runs up by one within a span and jumps at each span's start (a cumulative sum)."""
    keep = lengths > 0
    starts, lengths = starts[keep], lengths[keep]
    ends = np.cumsum(lengths)
    total = int(ends[-1]) if len(ends) else 0
    small = max(total, len(source)) < 1 << 31
    steps = np.ones(total, dtype=np.int32 if small else np.int64)
    if total:
        # At a span's start, step from the previous span's last byte to its first one.
        steps[0] = starts[0]
        steps[ends[:-1]] = starts[1:] - (starts[:-1] + lengths[:-1] - 1)
    return source[np.cumsum(steps, dtype=steps.dtype)]


def _delimited(field: int, payload: bytes) -> bytes:
    """``payload`` as length-delimited field ``field``."""
    return bytes((field << 3 | 2,)) + _varint(len(payload)) + payload


def _name_bytes(name: str | bytes) -> bytes:
    return name if isinstance(name, bytes) else name.encode("utf-8")


def _key_order(name: str | bytes) -> tuple[int, ...]:
    return wire.upb_key_order(_name_bytes(name))


def _is_none(value: object) -> bool:
    return value is None


class _Slot:
    """One span of every row, column-wise: each row's bytes and how many of them count.

    ``data`` is either a ``(rows, width)`` ``uint8`` matrix (row ``r``'s bytes lead row
    ``r``, the rest is padding) or, with ``starts``, a flat buffer holding row ``r``'s
    bytes at ``starts[r]``.
    """

    __slots__ = ("data", "lengths", "starts")

    def __init__(
        self, data: np.ndarray, lengths: np.ndarray, starts: np.ndarray | None = None
    ) -> None:
        self.data = data
        self.lengths = lengths
        self.starts = starts

    def width(self) -> int:
        """The slot's width in a padded row: its longest span."""
        if self.starts is None:
            return int(self.data.shape[1])
        return int(self.lengths.max()) if len(self.lengths) else 0

    def matrix(self) -> np.ndarray:
        """The slot as a padded ``(rows, width)`` matrix."""
        if self.starts is None:
            return self.data
        width = self.width()
        out = np.zeros((len(self.lengths), width), dtype=np.uint8)
        # Boolean assignment fills row-major: each row's span, in row order.
        out[np.arange(width) < self.lengths[:, None]] = self.data
        return out

    def flat(self) -> tuple[np.ndarray, np.ndarray]:
        """The slot as a flat buffer and each row's start in it."""
        if self.starts is not None:
            return self.data, self.starts
        rows, width = self.data.shape
        return self.data.reshape(-1), np.arange(rows, dtype=np.int64) * width


def _spread(slot: _Slot, null: np.ndarray) -> _Slot:
    """A matrix ``slot`` of the non-NULL rows as one of every row (NULL ones empty)."""
    data = np.zeros((len(null), slot.data.shape[1]), dtype=np.uint8)
    data[~null] = slot.data
    return _Slot(data, _spread_lengths(slot.lengths, null))


def _spread_lengths(lengths: np.ndarray, null: np.ndarray) -> np.ndarray:
    out = np.zeros(len(null), dtype=np.int64)
    out[~null] = lengths
    return out


def _table(heads: list[bytes]) -> np.ndarray:
    """``heads`` as the rows of a zero-padded ``uint8`` matrix."""
    table = np.zeros((len(heads), max(map(len, heads))), dtype=np.uint8)
    for i, head in enumerate(heads):
        table[i, : len(head)] = np.frombuffer(head, dtype=np.uint8)
    return table


def _float32(doubles: np.ndarray) -> np.ndarray | None:
    """``doubles`` as float32; ``None`` if one is beyond float32's range (not inf)."""
    with np.errstate(over="ignore"):
        floats = doubles.astype("<f4")
    if np.count_nonzero(np.isinf(floats)) != np.count_nonzero(np.isinf(doubles)):
        return None
    return floats


def _empty_slots(n: int) -> tuple[_Slot, _Slot]:
    """The slots of a column that is NULL in all ``n`` rows: no entry anywhere."""
    empty = np.zeros((n, 0), dtype=np.uint8)
    zeros = np.zeros(n, dtype=np.int64)
    return _Slot(empty, zeros), _Slot(empty, zeros)


def _spread_pair(heads: _Slot, values: _Slot, null: np.ndarray | None) -> tuple[_Slot, _Slot]:
    """Matrix slots of the non-NULL rows as those of every row (NULL ones empty)."""
    if null is None:
        return heads, values
    return _spread(heads, null), _spread(values, null)


class ColumnValues:
    """One column of a chunk of rows as arrays, as a driver that hands columns over
    gives them, for :meth:`RowEncoder.encode_arrays`.

    ``kind`` is ``"int"`` (``data``: ``int64``), ``"float"`` (``data``: ``float64``) or
    ``"bytes"`` (``data``: a ``uint8`` buffer holding row ``i``'s value at
    ``starts[i] : starts[i] + lengths[i]``, the values back to back in row order, NULL
    ones empty); ``null`` marks the NULL rows (``None``: none),
    whose ``data`` entries are ignored.
    """

    __slots__ = ("data", "kind", "lengths", "null", "starts")

    def __init__(
        self,
        kind: str,
        data: np.ndarray,
        *,
        lengths: np.ndarray | None = None,
        starts: np.ndarray | None = None,
        null: np.ndarray | None = None,
    ) -> None:
        self.kind = kind
        self.data = data
        self.lengths = lengths
        self.starts = starts
        self.null = null

    def __len__(self) -> int:
        return len(self.lengths if self.lengths is not None else self.data)

    def slice(self, start: int, stop: int) -> ColumnValues:
        """Rows ``start`` to ``stop`` (sharing the arrays)."""
        null = None if self.null is None else self.null[start:stop]
        if self.kind == "bytes":
            assert self.lengths is not None
            assert self.starts is not None
            return ColumnValues(
                "bytes",
                self.data,
                lengths=self.lengths[start:stop],
                starts=self.starts[start:stop],
                null=null,
            )
        return ColumnValues(self.kind, self.data[start:stop], null=null)

    def tolist(self) -> list[object]:
        """The values as a driver's rows hold them (``None`` for NULL)."""
        if self.kind == "bytes":
            assert self.lengths is not None
            assert self.starts is not None
            blob = self.data.tobytes()
            ends = (self.starts + self.lengths).tolist()
            out: list[object] = [
                blob[a:b]
                for a, b in zip(self.starts.tolist(), ends)  # noqa: B905
            ]
        else:
            out = self.data.tolist()
        if self.null is not None:
            for i in np.flatnonzero(self.null).tolist():
                out[i] = None
        return out


class _Unencodable(Exception):
    """A value the Example format cannot hold (turned into InvalidArgumentError)."""


class _Column:
    """The encoders of one column's values into a ``features`` map entry."""

    __slots__ = (
        "_bytes_heads",
        "_float_head",
        "_int_head_lengths",
        "_int_heads",
        "_int_table",
        "_name_part",
        "name",
    )

    def __init__(self, name: str | bytes) -> None:
        self.name = name
        self._name_part = _delimited(1, _name_bytes(name))
        # Entry header for an int64_list of one value of each varint length 1..10.
        self._int_heads = [b""] + [self._head(wire.INT64, length) for length in range(1, 11)]
        self._float_head = self._head(wire.FLOAT, 4)
        # The same, as a padded matrix and lengths, for whole columns.
        self._int_table = _table(self._int_heads)
        self._int_head_lengths = np.array([len(h) for h in self._int_heads], dtype=np.int64)
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
            return self.fixed_ints(ints)
        if kinds == {float}:
            return self.fixed_floats(np.array(values, dtype=np.float64))
        return None

    def fixed_ints(self, ints: np.ndarray, width: int = 10) -> tuple[bytes, np.ndarray]:
        """:meth:`fixed` of ``int64`` values, as varints of ``width`` bytes (at least
        :func:`_varint_width`'s)."""
        # Every varint padded to ``width`` bytes (continuation bits on all but the last):
        # the same value for a protobuf parser, and one width for every row.
        groups = (ints.view(np.uint64)[:, None] >> _SHIFTS[:width]) & np.uint64(0x7F)
        matrix = groups.astype(np.uint8)
        matrix[:, : width - 1] |= 0x80
        return self._int_heads[width], matrix

    def int_head(self, width: int) -> bytes:
        """The bytes of a map entry up to its one int64 value, a varint of ``width`` bytes."""
        return self._int_heads[width]

    @property
    def float_head(self) -> bytes:
        """The bytes of a map entry up to its one float."""
        return self._float_head

    def fixed_floats(self, doubles: np.ndarray) -> tuple[bytes, np.ndarray] | None:
        """:meth:`fixed` of ``float64`` values; ``None`` if one is beyond float32's range."""
        floats = _float32(doubles)
        if floats is None:
            return None  # the row path names the row
        return self._float_head, floats.view(np.uint8).reshape(-1, 4)

    def bytes_head(self, length: int) -> bytes:
        """The bytes of a map entry up to its one ``bytes_list`` value of ``length`` bytes."""
        head = self._bytes_heads.get(length)
        if head is None:
            head = self._head(wire.BYTES, length)
            if length < _CACHED_LENGTHS:
                self._bytes_heads[length] = head
        return head

    def slots(self, values: Sequence[object], kinds: set[type]) -> tuple[_Slot, _Slot] | None:
        """The entries of a whole column as two slots, the entries' heads and their values
        (both empty for NULL), when every value but NULLs is an integer, or every one a
        float, or every one text, or every one a blob; ``None`` otherwise (arrays, mixed
        kinds, a value out of range: the row path handles or names it)."""
        n = len(values)
        null: np.ndarray | None = None
        present = values
        if type(None) in kinds:
            null = np.fromiter(map(_is_none, values), dtype=bool, count=n)
            present = [v for v in values if v is not None]
        kinds = kinds - {type(None)}
        if not kinds:
            return _empty_slots(n)
        if kinds <= {int, bool}:
            try:
                ints = np.array(present, dtype=np.int64)
            except OverflowError:
                return None
            return self._int_slots(ints, null)
        if kinds == {float}:
            return self._float_slots(np.array(present, dtype=np.float64), null)
        if kinds == {str} or kinds == {bytes}:
            if kinds == {str}:
                text = "".join(present)  # type: ignore[arg-type]
                if text.isascii():  # a byte a character: the lengths need no encoding
                    blob = text.encode("ascii")
                else:
                    present = [v.encode("utf-8") for v in present]  # type: ignore[attr-defined]
                    blob = b"".join(present)  # type: ignore[arg-type]
            else:
                blob = b"".join(present)  # type: ignore[arg-type]
            lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))  # type: ignore[arg-type]
            starts = np.cumsum(lengths) - lengths
            return self._bytes_slots(np.frombuffer(blob, dtype=np.uint8), lengths, starts, null)
        return None

    def array_slots(self, column: ColumnValues) -> tuple[_Slot, _Slot] | None:
        """:meth:`slots` of a column given as arrays; ``None`` when a float is beyond
        float32's range."""
        null = column.null
        if null is not None and not null.any():
            null = None
        if null is not None and null.all():
            return _empty_slots(len(null))
        keep = slice(None) if null is None else ~null
        if column.kind == "int":
            return self._int_slots(column.data[keep], null)
        if column.kind == "float":
            return self._float_slots(column.data[keep], null)
        assert column.lengths is not None
        assert column.starts is not None
        lengths, starts = column.lengths[keep], column.starts[keep]
        # The values lie back to back: the rows' span of the buffer, from 0, as slots take it.
        base = int(starts[0]) if len(starts) else 0
        blob = column.data[base : base + int(lengths.sum())]
        return self._bytes_slots(blob, lengths, starts - base, null)

    def _int_slots(self, ints: np.ndarray, null: np.ndarray | None) -> tuple[_Slot, _Slot]:
        """The slots of the non-NULL ``int64`` values ``ints`` (``null``: which rows are
        NULL, ``None`` for none)."""
        value, lengths = _varints(ints)
        heads = _Slot(self._int_table[lengths], self._int_head_lengths[lengths])
        return _spread_pair(heads, _Slot(value, lengths), null)

    def _float_slots(
        self, doubles: np.ndarray, null: np.ndarray | None
    ) -> tuple[_Slot, _Slot] | None:
        floats = _float32(doubles)
        if floats is None:
            return None  # beyond float32's range: the row path names the row
        m = len(doubles)
        value = floats.view(np.uint8).reshape(m, 4)
        lengths = np.full(m, 4, dtype=np.int64)
        head = np.frombuffer(self._float_head, dtype=np.uint8)
        heads = _Slot(np.broadcast_to(head, (m, len(head))), np.full(m, len(head)))
        return _spread_pair(heads, _Slot(value, lengths), null)

    def _bytes_slots(
        self, blob: np.ndarray, lengths: np.ndarray, starts: np.ndarray, null: np.ndarray | None
    ) -> tuple[_Slot, _Slot]:
        """The slots of the non-NULL values ``blob[starts[i] : starts[i] + lengths[i]]``."""
        unique, which = np.unique(lengths, return_inverse=True)
        head_list = [self.bytes_head(length) for length in unique.tolist()]
        head_lengths = np.array([len(h) for h in head_list], dtype=np.int64)
        heads = _Slot(_table(head_list)[which], head_lengths[which])
        if null is None:
            return heads, _Slot(blob, lengths, starts)
        return _spread(heads, null), _Slot(
            blob, _spread_lengths(lengths, null), _spread_lengths(starts, null)
        )

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


#: The matrix of a piece whose bytes are made later (:meth:`RowEncoder._fixed_first`).
_NOT_YET: Final = np.zeros((0, 0), dtype=np.uint8)


class _Piece:
    """An entry of every row that varies in length (0: none), for
    :meth:`RowEncoder._fixed_first`: its bytes as a ``(rows, width)`` matrix, row ``r``'s
    leading, or ``flat``, back to back in row order, or both."""

    __slots__ = ("flat", "lengths", "matrix", "width")

    def __init__(
        self,
        lengths: np.ndarray,
        width: int,
        *,
        matrix: np.ndarray | None = None,
        flat: np.ndarray | None = None,
    ) -> None:
        self.lengths = lengths
        self.width = width
        self.matrix = matrix
        self.flat = flat

    def source(self) -> np.ndarray:
        """The entries' bytes back to back, in row order."""
        if self.flat is not None:
            return self.flat
        assert self.matrix is not None
        width = self.matrix.shape[1]
        if int(self.lengths.min()) == width:  # no padding (the rule for short texts' heads)
            return self.matrix.reshape(-1)
        picked: np.ndarray = self.matrix[_columns_between(width, None, self.lengths)]
        return picked


def _steady(piece: _Piece) -> bool:
    """Whether ``piece`` is as long in every row."""
    return int(piece.lengths.min()) == int(piece.lengths.max())


def _as_rows(piece: _Piece, n: int) -> np.ndarray:
    """The ``(n, length)`` matrix of a piece as long in every row."""
    length = int(piece.lengths[0])
    if piece.matrix is not None:
        return piece.matrix[:, :length]
    assert piece.flat is not None
    return piece.flat.reshape(n, length)


def _text_pieces(column: _Column, values: ColumnValues, null: np.ndarray | None) -> list[_Piece]:
    """The entries of a text or blob column: the heads, then the values (none for NULL)."""
    assert values.lengths is not None
    assert values.starts is not None
    lengths = values.lengths if null is None else np.where(null, 0, values.lengths)
    longest = int(lengths.max()) if len(lengths) else 0
    if longest < 1 << 16:  # a lookup table of the lengths: cheaper than sorting them
        unique = np.flatnonzero(np.bincount(lengths))
        lookup = np.zeros(longest + 1, dtype=np.intp)
        lookup[unique] = np.arange(len(unique))
        which = lookup[lengths]
    else:
        unique, which = np.unique(lengths, return_inverse=True)
    head_list = [column.bytes_head(length) for length in unique.tolist()]
    heads = _table(head_list)[which]
    head_lengths = np.array([len(h) for h in head_list], dtype=np.int64)[which]
    if null is not None:
        head_lengths[null] = 0
    # The values lie back to back: the rows' span of the buffer.
    base = int(values.starts[0]) if len(lengths) else 0
    blob = values.data[base : base + int(lengths.sum())]
    return [
        _Piece(head_lengths, heads.shape[1], matrix=heads),
        _Piece(lengths, longest, flat=blob),
    ]


def _join_slots(slots: list[_Slot], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ``n`` records whose entries ``slots`` hold (heads and values, column after
    column) as a buffer of Examples back to back, with each one's start and length."""
    body = sum(slot.lengths for slot in slots)
    digits, prefix_len = _varints(np.asarray(body, dtype=np.int64))
    prefix = np.empty((n, 1 + digits.shape[1]), dtype=np.uint8)
    prefix[:, 0] = 0x0A
    prefix[:, 1:] = digits
    slots.insert(0, _Slot(prefix, prefix_len + 1))
    record_len = body + slots[0].lengths
    offsets = np.cumsum(record_len) - record_len
    used = int(record_len.sum())
    widths = [slot.width() for slot in slots]
    if n * sum(widths) <= _PADDING * used:
        # Padded rows, then the padding dropped: plain copies and one mask, byte-wide.
        total = sum(widths)
        padded = np.empty((n, total), dtype=np.uint8)
        at = 0
        for slot, width in zip(slots, widths):  # noqa: B905
            padded[:, at : at + width] = slot.matrix()
            at += width
        if used == n * total:
            return padded.reshape(-1), offsets, record_len  # no padding anywhere
        # Which bytes count, in one comparison: each padded byte's place in its slot
        # against its row's length of that slot (narrow integers: less to compare).
        small = np.int16 if max(widths) < 1 << 15 else np.int64
        place = np.concatenate([np.arange(width, dtype=small) for width in widths])
        slot_of = np.repeat(np.arange(len(slots)), widths)
        lengths = np.stack([slot.lengths for slot in slots], axis=1).astype(small)
        return padded[place < lengths[:, slot_of]], offsets, record_len
    # A few long values: padding would cost more than gathering the spans by index.
    sources: list[np.ndarray] = []
    starts = np.empty((n, len(slots)), dtype=np.int64)
    lengths = np.empty_like(starts)
    base = 0
    for j, slot in enumerate(slots):
        flat, slot_starts = slot.flat()
        starts[:, j] = slot_starts + base
        lengths[:, j] = slot.lengths
        sources.append(flat)
        base += len(flat)
    data = gather(np.concatenate(sources), starts.reshape(-1), lengths.reshape(-1))
    return data, offsets, record_len


class RowEncoder(Generic[Name]):
    """Encodes rows (sequences of column values) as serialized Examples; the feature names
    are the column names (``str`` in UTF-8, or ``bytes`` as they are)."""

    __slots__ = ("_columns", "_encoders", "columns")

    def __init__(self, columns: Sequence[Name]) -> None:
        #: The column names, in the order rows hold their values: protobuf's deterministic
        #: order of map keys, so that a row's bytes equal TensorFlow's
        #: ``SerializeToString(deterministic=True)`` of the same Example.
        self.columns: tuple[Name, ...] = tuple(sorted(columns, key=_key_order))
        self._columns = [_Column(c) for c in self.columns]
        self._encoders: list[Callable[[object], bytes]] = [c.encode for c in self._columns]

    def encode_chunk(
        self, rows: Sequence[Sequence[object]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """Encode ``rows`` at once, column by column, as a buffer of Examples back to back
        with each one's start and length; ``None`` when a column holds values only
        :meth:`encode` handles or refuses (arrays, mixed kinds, out of range) or there are
        too few rows for it to pay.

        When every column holds only integers or only floats (no NULL), integers are
        10-byte varints, so every row has the same length and layout: ``parse_example``
        then decodes a batch of them as one matrix. Otherwise the bytes are exactly
        :meth:`encode`'s, without a Python object or call per value.
        """
        n = len(rows)
        if n < _MATRIX_MIN_ROWS:
            return None
        columns = list(zip(*rows))  # noqa: B905 - the key, last, has no column
        kinds = [set(map(type, values)) for values in columns]
        if all(k <= {int, bool} or k == {float} for k in kinds[: len(self._columns)]):
            matrix = self._matrix(columns)
            if matrix is not None:
                width = matrix.shape[1]
                starts = np.arange(0, n * width, width, dtype=np.int64)
                return matrix.reshape(-1), starts, np.full(n, width, dtype=np.int64)
        return self._by_columns(columns, kinds)

    def encode_arrays(
        self, columns: Sequence[ColumnValues]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`encode_chunk` of rows given as one :class:`ColumnValues` per column (in
        :attr:`columns` order): the same bytes, from arrays, with no Python object per
        value, whatever the number of rows, or in the fixed form of :meth:`_fixed_first`
        when it pays (the same Examples once parsed); ``None`` when a float is beyond
        float32's range (the row path names its row)."""
        n = len(columns[0])
        if n >= _MATRIX_MIN_ROWS and all(
            c.kind != "bytes" and (c.null is None or not c.null.any()) for c in columns
        ):
            parts: list[tuple[bytes, np.ndarray]] = []
            for column, values in zip(self._columns, columns):  # noqa: B905
                part = (
                    column.fixed_ints(values.data)
                    if values.kind == "int"
                    else column.fixed_floats(values.data)
                )
                if part is None:
                    return None
                parts.append(part)
            matrix = self._join_fixed(parts, n)
            width = matrix.shape[1]
            starts = np.arange(0, n * width, width, dtype=np.int64)
            return matrix.reshape(-1), starts, np.full(n, width, dtype=np.int64)
        if n >= _MATRIX_MIN_ROWS:
            encoded = self._fixed_first(columns)
            if encoded is not None:
                return encoded
        slots: list[_Slot] = []
        for column, values in zip(self._columns, columns):  # noqa: B905
            pair = column.array_slots(values)
            if pair is None:
                return None
            slots += pair
        return _join_slots(slots, n)

    def _fixed_first(
        self, columns: Sequence[ColumnValues]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`encode_arrays` laid out as padded rows of one matrix: first the entries
        of the number columns without NULL, at the same place in every row, then the
        other entries (number columns with NULLs, text and blobs) in column order, each
        placed with one mask; each integer column's varints padded to its longest.
        ``None`` when this form does not pay (a few long values: too much padding) or a
        float is beyond float32's range (the slots' form answers).

        Copies of whole columns and a masked assignment per varying entry (then one
        compress unless every record fills its row), instead of a matrix of every entry's
        padded span, a mask of each span's length and a compress over all of it: on
        chunks of 2,048 rows of the database benchmark's table (three integers, two
        floats, one text), 0.39 -> 0.13 us a row when the texts are of one length, 0.44
        -> 0.20 when they vary, 0.52 -> 0.30 with NULLs in two number columns, 0.47 ->
        0.45 with two texts."""
        n = len(columns[0])
        fixed: list[tuple[bytes, np.ndarray]] = []
        pieces: list[_Piece] = []
        # Number columns with NULLs: their pieces' lengths now, their bytes once the form
        # is known to pay.
        later: list[tuple[_Piece, _Column, str, np.ndarray, np.ndarray, int]] = []
        for column, values in zip(self._columns, columns):  # noqa: B905
            null = values.null if values.null is not None and values.null.any() else None
            if null is not None and null.all():
                continue  # no entry in any row
            if values.kind == "bytes":
                heads, texts = _text_pieces(column, values, null)
                if null is None and _steady(heads) and _steady(texts):
                    # Texts of one length (codes, hashes, formatted numbers): an entry of
                    # one width in every row, placed with the numbers.
                    fixed.append((b"", _as_rows(heads, n)))
                    fixed.append((b"", _as_rows(texts, n)))
                else:
                    pieces += (heads, texts)
                continue
            data = values.data if null is None else values.data[~null]
            width = _varint_width(data) if values.kind == "int" else 4
            if null is None:
                entry = (
                    column.fixed_ints(data, width)
                    if values.kind == "int"
                    else column.fixed_floats(data)
                )
                if entry is None:
                    return None
                fixed.append(entry)
                continue
            head = column.int_head(width) if values.kind == "int" else column.float_head
            size = len(head) + width
            piece = _Piece(np.where(null, 0, size), size, matrix=_NOT_YET)
            pieces.append(piece)
            later.append((piece, column, values.kind, data, null, width))
        fixed_width = sum(len(head) + matrix.shape[1] for head, matrix in fixed)
        # Where each varying entry may lie after the fixed ones: from the row where it
        # starts first to the one where it ends last (a mask of that span places it).
        begins: list[np.ndarray] = []
        spans: list[tuple[int, int, bool]] = []
        masked = 0
        begin = np.zeros(n, dtype=np.int64)
        for piece in pieces:
            first, last = int(begin.min()), int((begin + piece.lengths).max())
            # Every row's entry starting at one column, a matrix of them is copied as it is.
            copied = piece.matrix is not None and first == int(begin.max())
            begins.append(begin)
            spans.append((first, last, copied))
            if not copied:
                masked += last - first
            begin = begin + piece.lengths
        body = begin + fixed_width
        digits, digit_lengths = _varints(body)
        prefix_lengths = digit_lengths + 1
        record_lengths = prefix_lengths + body
        prefix = int(prefix_lengths.max())
        tail = sum(piece.width for piece in pieces)
        width = prefix + fixed_width + tail
        used = int(record_lengths.sum())
        # Too much padding (a few long values), or masks over more than twice a row (many
        # varying entries, each one's span as wide as all before it): the slots' form
        # costs less. Measured on chunks of 2,048 rows, this form costs about 1.5 ns a
        # byte of row and 1.1 a byte of mask, the slots' 3.6 a byte of row: 8 integer
        # columns with NULLs and a text (masks 4.8 times a row) 0.71 us a row as slots,
        # 1.07 in this form; 4 float columns with NULLs (1.2 times) 0.24 and 0.22.
        if n * width > _PADDING * used or masked > 2 * width:
            return None
        for piece, column, kind, data, null, digits_width in later:
            entry = (
                column.fixed_ints(data, digits_width)
                if kind == "int"
                else column.fixed_floats(data)
            )
            if entry is None:
                return None
            head, matrix = entry
            present = np.empty((len(data), piece.width), dtype=np.uint8)
            present[:, : len(head)] = np.frombuffer(head, np.uint8)
            present[:, len(head) :] = matrix
            piece.matrix = np.empty((n, piece.width), dtype=np.uint8)
            piece.matrix[~null] = present  # a NULL row's bytes are never used
            piece.flat = present.reshape(-1)
        rows = np.empty((n, width), dtype=np.uint8)
        # The prefix ends at the same column in every row: a record starts where its own
        # prefix does.
        skip: np.ndarray | None = prefix - prefix_lengths
        assert skip is not None
        if int(skip.max()) == 0:
            skip = None
            rows[:, 0] = 0x0A
            rows[:, 1:prefix] = digits
        else:
            head_rows = np.empty((n, prefix), dtype=np.uint8)
            head_rows[:, 0] = 0x0A
            head_rows[:, 1:] = digits
            rows[:, :prefix][_columns_between(prefix, skip, np.full(n, prefix))] = head_rows[
                _columns_between(prefix, None, prefix_lengths)
            ]
        at = prefix
        for head_bytes, matrix in fixed:
            rows[:, at : at + len(head_bytes)] = np.frombuffer(head_bytes, np.uint8)
            at += len(head_bytes)
            rows[:, at : at + matrix.shape[1]] = matrix
            at += matrix.shape[1]
        # Each varying entry right after the row's previous one: row-major order is the
        # rows' order, so each entry's bytes, back to back, fill its mask.
        for piece, begin, (first, last, copied) in zip(pieces, begins, spans):  # noqa: B905
            if last > first:
                place = rows[:, at + first : at + last]
                if copied:
                    # What the matrix holds past a row's entry is overwritten by what
                    # follows, or past the record's end.
                    assert piece.matrix is not None
                    place[:, : piece.matrix.shape[1]] = piece.matrix[:, : last - first]
                else:
                    mask = _columns_between(
                        last - first, begin - first, begin - first + piece.lengths
                    )
                    place[mask] = piece.source()
        if used == n * width:  # every record fills its row
            return rows.reshape(-1), np.arange(0, used, width, dtype=np.int64), record_lengths
        if skip is None:
            keep = _columns_between(width, None, record_lengths)
        else:
            keep = _columns_between(width, skip, skip + record_lengths)
        return rows[keep], np.cumsum(record_lengths) - record_lengths, record_lengths

    def _matrix(self, columns: list[tuple[object, ...]]) -> np.ndarray | None:
        """The rows of numeric ``columns`` (no NULL) as a ``(rows, length)`` matrix."""
        parts: list[tuple[bytes, np.ndarray]] = []
        for column, column_values in zip(self._columns, columns):  # noqa: B905
            part = column.fixed(column_values)
            if part is None:
                return None
            parts.append(part)
        return self._join_fixed(parts, len(columns[0]))

    @staticmethod
    def _join_fixed(parts: list[tuple[bytes, np.ndarray]], n: int) -> np.ndarray:
        """The ``(rows, length)`` matrix of rows made of ``parts`` (head, values matrix)."""
        body = sum(len(head) + values.shape[1] for head, values in parts)
        prefix = b"\x0a" + _varint(body)
        matrix = np.empty((n, len(prefix) + body), dtype=np.uint8)
        at = len(prefix)
        matrix[:, :at] = np.frombuffer(prefix, np.uint8)
        for head, values in parts:
            matrix[:, at : at + len(head)] = np.frombuffer(head, np.uint8)
            at += len(head)
            matrix[:, at : at + values.shape[1]] = values
            at += values.shape[1]
        return matrix

    def _by_columns(
        self, columns: list[tuple[object, ...]], kinds: list[set[type]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """:meth:`encode`'s bytes of the rows of ``columns`` (whose value types are
        ``kinds``), made column-wise."""
        n = len(columns[0])
        # A row is its prefix (tag, varint length), then each column's entry head and value.
        slots: list[_Slot] = []
        for column, values, value_kinds in zip(self._columns, columns, kinds):  # noqa: B905
            pair = column.slots(values, value_kinds)
            if pair is None:
                return None
            slots += pair
        return _join_slots(slots, n)

    def encode_columns(self, columns: Sequence[Sequence[object]]) -> list[bytes]:
        """Encode the rows whose values ``columns`` hold (one sequence per column, in
        :attr:`columns` order), always in :meth:`encode`'s form, built column-wise when
        the values allow it.

        Raises:
            InvalidArgumentError: a value has no Example form (naming its row).
        """
        data: np.ndarray | None = None
        if len(columns) and len(columns[0]):
            encoded = self._by_columns(
                [tuple(c) for c in columns], [set(map(type, c)) for c in columns]
            )
            if encoded is not None:
                data, starts, lengths = encoded
                buffer = data.tobytes()
                ends = (starts + lengths).tolist()
                return [buffer[a:b] for a, b in zip(starts.tolist(), ends)]  # noqa: B905
        rows = list(zip(*columns))  # noqa: B905
        values, good = self.encode(rows)
        if good < len(rows):
            raise InvalidArgumentError(f"row {good}: {self.error(rows[good])}", record=good)
        return values

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
