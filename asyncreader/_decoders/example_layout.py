"""The fast path of ``parse_example``: a batch of examples that share one byte layout.

See :class:`SharedLayout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from .._records.batch import RecordBatch
from . import wire
from .features import FixedLenFeature

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .example_columns import Column, RequestedFeature

__all__ = ["LAYOUT_MIN_BATCH", "SharedLayout"]

#: Below this many examples the layout check costs more than it saves.
LAYOUT_MIN_BATCH = 4

# One example's raw values of one feature, as a Column holds them.
_Values = list[bytes | list[bytes] | None]


class _Rows(NamedTuple):
    """The examples of the layout's length: as a matrix, and where each row starts in a
    buffer to slice values out of (bytes slices without a temporary copy of a column)."""

    matrix: np.ndarray[Any, np.dtype[np.uint8]]
    source: bytes | memoryview
    offsets: Sequence[int]


class SharedLayout:
    """The byte layout of the first example, reused for every example laid out the same way.

    Examples written by one program usually differ only in their values: every tag, length
    and key sits at the same offset. The first example is parsed normally, and its bytes are
    split into *payload* (float and int64 data, bytes values, unrequested features) and
    *structure* (everything the parser reads to find them). Every example of the same length
    whose structure bytes are identical parses identically, so its values lie at the same
    offsets, and the whole check is one numpy comparison over the batch. Examples that
    differ are parsed one by one.

    The examples of the layout's length are held as one ``uint8`` matrix, a row per example:
    for a :class:`~asyncreader.RecordBatch` a strided view of the block the records were read
    into (no copy), for a list of ``bytes`` the records joined once. A dense float or int64
    feature is then one column range of that matrix, converted with numpy for the whole batch
    (:meth:`dense`).
    """

    __slots__ = (
        "_rows",
        "_values",
        "kinds",
        "matched",
        "matrix",
        "position",
        "ranges",
        "spec_kinds",
    )

    def __init__(
        self,
        rows: _Rows,
        matched: np.ndarray,
        kinds: list[int],
        ranges: list[list[tuple[int, int]]],
        specs: list[RequestedFeature],
        position: np.ndarray | None,
    ) -> None:
        self._rows = rows
        self.matrix = rows.matrix
        self.matched = matched
        self.kinds = kinds
        self.ranges = ranges
        self.spec_kinds = [spec.kind for spec in specs]
        # Row of each example in ``matrix`` when only some examples have the layout's length.
        self.position = position
        self._values: list[_Values | None] = [None] * len(specs)

    @classmethod
    def build(
        cls, items: Sequence[bytes], specs: list[RequestedFeature], *, whole: bool = False
    ) -> SharedLayout | None:
        """The layout of ``items[0]`` checked against every item, or None when not worth it.

        ``items`` is a list of ``bytes`` or a :class:`~asyncreader.RecordBatch` (read from
        its buffers). None when the batch is smaller than :data:`LAYOUT_MIN_BATCH`, when the
        first example is empty, malformed or not encoded the plain way (e.g. a feature split
        in two), or when fewer than :data:`LAYOUT_MIN_BATCH` examples have its length (with
        ``whole``, when any example has another length).
        """
        if len(items) < LAYOUT_MIN_BATCH:
            return None
        first = items[0]
        length = len(first)
        if isinstance(items, RecordBatch):
            lengths = items.lengths
        else:
            lengths = np.fromiter(map(len, items), dtype=np.intp, count=len(items))
        same = lengths == length
        if whole and not same.all():
            return None
        try:
            found = cls._payload(first, specs)
        except wire.WireError:
            return None
        if found is None or length == 0:
            return None
        kinds, ranges, payload = found
        position: np.ndarray | None = None
        rows: np.ndarray | None = None
        if not same.all():
            rows = np.flatnonzero(same)
            if rows.size < LAYOUT_MIN_BATCH:
                return None
            position = np.full(len(items), -1, dtype=np.intp)
            position[rows] = np.arange(rows.size)
        found_rows = _matrix(items, rows, length)
        matrix = found_rows.matrix
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
        return cls(found_rows, matched, kinds, ranges, specs, position)

    @staticmethod
    def _payload(
        buf: bytes, specs: list[RequestedFeature]
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

    def dense(self, index: int, spec: RequestedFeature) -> np.ndarray | None:
        """Requested feature ``index`` for the whole batch, when it is a dense float / int64
        feature every example holds at the same offsets with the right number of values;
        None otherwise (the per-column path then builds it, or reports the bad example).

        The values are taken from the matrix in one copy of its column range, never as a
        bytes slice per example.
        """
        if self.position is not None or not self.matched.all():
            return None
        kind = self.kinds[index]
        spans = self.ranges[index]
        if (
            not isinstance(spec.spec, FixedLenFeature)
            or kind != spec.kind
            or kind not in (wire.FLOAT, wire.INT64)
            or len(spans) != 1
        ):
            return None
        ((start, stop),) = spans
        block = self.matrix[:, start:stop]
        shape = (block.shape[0], *spec.dims)
        if kind == wire.FLOAT:
            if (stop - start) // 4 != spec.size:
                return None
            # A copy the result owns (the batch's block is read-only and may be large).
            floats = np.array(block, order="C").view("<f4").astype(np.float32, copy=False)
            return floats.reshape(shape)
        final = block < 0x80  # one final byte per varint
        if stop - start == spec.size:
            if not final.all():
                return None
            return block.astype(np.int64).reshape(shape)
        if not (final.sum(axis=1) == spec.size).all():
            return None
        try:
            values = wire.decode_varints(block.tobytes())
        except wire.WireError:
            return None  # an over-long varint: the per-column path names the example
        return values.reshape(shape)

    def fill_row(self, index: int, columns: list[Column]) -> None:
        """Append example ``index``'s values (it must be :attr:`matched`) to ``columns``."""
        row = index if self.position is None else int(self.position[index])
        for spec_index, column in enumerate(columns):
            column.kinds.append(self.kinds[spec_index])
            column.values.append(self._column(spec_index)[row])

    def fill_all(self, columns: list[Column], skip: Sequence[int] = ()) -> None:
        """Fill empty ``columns`` with every example's values (all must be :attr:`matched`),
        except the columns at the positions in ``skip`` (built by :meth:`dense`)."""
        count = self.matched.size
        for spec_index, column in enumerate(columns):
            if spec_index in skip:
                continue
            column.kinds = [self.kinds[spec_index]] * count
            column.values = self._column(spec_index)

    def _column(self, index: int) -> _Values:
        """Requested feature ``index``'s raw values, one per row of the matrix."""
        values = self._values[index]
        if values is None:
            values = self._values[index] = self._build_column(index)
        return values

    def _build_column(self, index: int) -> _Values:
        rows = self.matrix.shape[0]
        kind = self.kinds[index]
        if kind == wire.NONE or kind != self.spec_kinds[index]:
            return [None] * rows
        spans = self.ranges[index]
        if kind != wire.BYTES:
            values: _Values = [*self._slices(*spans[0])] if spans else [b""] * rows
            return values
        if not spans:
            return [[] for _ in range(rows)]
        if len(spans) == 1:
            return [[value] for value in self._slices(*spans[0])]
        slices = [self._slices(a, b) for a, b in spans]
        return [list(values) for values in zip(*slices, strict=True)]

    def _slices(self, start: int, stop: int) -> list[bytes]:
        """Bytes ``start:stop`` of every row, sliced from the buffer the rows are in."""
        source, offsets = self._rows.source, self._rows.offsets
        if isinstance(source, bytes):
            return [source[offset + start : offset + stop] for offset in offsets]
        return [source[offset + start : offset + stop].tobytes() for offset in offsets]


def _matrix(items: Sequence[bytes], rows: np.ndarray | None, length: int) -> _Rows:
    """The items (those at ``rows``, or all), each ``length`` bytes long, as the rows of one
    ``uint8`` matrix: a view of a RecordBatch's block where it allows, else one join."""
    if isinstance(items, RecordBatch):
        picked = items if rows is None else items.take(rows)
        matrix = picked.to_numpy()
        if matrix.flags.c_contiguous:
            flat: Any = matrix.reshape(-1)
            return _Rows(matrix, memoryview(flat), range(0, matrix.size, length))
        # A strided view of the one block the records are in (so ``data`` is that block).
        block: Any = picked.data
        return _Rows(matrix, memoryview(block), picked.starts.tolist())
    joined = b"".join(items if rows is None else [items[row] for row in rows.tolist()])
    matrix = np.frombuffer(joined, dtype=np.uint8).reshape(-1, length)
    return _Rows(matrix, joined, range(0, len(joined), length))
