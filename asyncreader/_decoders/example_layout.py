"""The fast path of ``parse_example``: a batch of examples that share one byte layout.

See :class:`SharedLayout`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import wire

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .example_columns import Column, RequestedFeature

__all__ = ["LAYOUT_MIN_BATCH", "SharedLayout"]

#: Below this many examples the layout check costs more than it saves.
LAYOUT_MIN_BATCH = 4


class SharedLayout:
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
        specs: list[RequestedFeature],
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
    def build(cls, items: Sequence[bytes], specs: list[RequestedFeature]) -> SharedLayout | None:
        """The layout of ``items[0]`` checked against every item, or None when not worth it.

        None when the batch is smaller than :data:`LAYOUT_MIN_BATCH`, when the first example
        is empty, malformed or not encoded the plain way (e.g. a feature split in two), or
        when fewer than :data:`LAYOUT_MIN_BATCH` examples have its length.
        """
        if len(items) < LAYOUT_MIN_BATCH:
            return None
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
            if rows.size < LAYOUT_MIN_BATCH:
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

    def fill_row(self, index: int, columns: list[Column]) -> None:
        """Append example ``index``'s values (it must be :attr:`matched`) to ``columns``."""
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

    def fill_all(self, columns: list[Column]) -> None:
        """Fill empty ``columns`` with every example's values (all must be :attr:`matched`)."""
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
