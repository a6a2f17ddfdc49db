"""The second fast path of ``parse_example``: examples that share their structure.

See :func:`parse_lockstep`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, NamedTuple

import numpy as np

from .._records.batch import RecordBatch
from . import wire
from .example_columns import ColumnBuilder, decode_int64_streams, varint_counts

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .example_columns import Column, RequestedFeature

__all__ = ["LOCKSTEP_MIN_BATCH", "LOCKSTEP_PER_FEATURE", "parse_lockstep"]

#: Below ``LOCKSTEP_MIN_BATCH + LOCKSTEP_PER_FEATURE * features`` examples, a walk over the
#: batch (a fixed number of numpy calls per feature) costs more than parsing one by one:
#: measured, the two cost the same at about 44 examples of 2 features, 66 of 8.
LOCKSTEP_MIN_BATCH = 32
LOCKSTEP_PER_FEATURE = 4

#: Average value bytes per example above which values are copied row by row (a ``memcpy``
#: each) rather than gathered byte by byte with one index array.
_GATHER_MAX_BYTES: Final = 64

_TAGS: Final = (0x0A, 0x12, 0x1A)
_TEN: Final = np.arange(10, dtype=np.int64)
_SHIFTS: Final = np.arange(0, 70, 7, dtype=np.uint64)

_U8 = np.ndarray[Any, np.dtype[np.uint8]]
_I64 = np.ndarray[Any, np.dtype[np.int64]]


class _Entry(NamedTuple):
    """One map entry of the first example: its key and the tag of its Feature's list."""

    key: bytes
    tag: int


class _Spans(NamedTuple):
    """Where one requested feature's values lie in every example of the walk.

    For a float or int64 list, ``starts`` / ``stops`` (one per example) bound its packed
    payload. For a bytes list, ``rows`` / ``starts`` / ``stops`` hold one entry per value,
    sorted by example, and ``counts`` the number of values of each example.
    """

    starts: _I64
    stops: _I64
    rows: _I64 | None = None
    counts: _I64 | None = None


def _template(buf: bytes) -> list[_Entry] | None:
    """The structure of one example, or None when it is not laid out the plain way.

    The plain way is what every writer produces: ``features`` alone, each map entry as
    key then value, each Feature a single list, no key twice, no Feature empty.
    """
    try:
        if not buf or buf[0] != 0x0A:
            return None
        pos, end = wire._length(buf, 1, len(buf))
        if end != len(buf):
            return None
        entries: list[_Entry] = []
        while pos < end:
            if buf[pos] != 0x0A:
                return None
            start, stop = wire._length(buf, pos + 1, end)
            if start >= stop or buf[start] != 0x0A:
                return None
            key_start, key_stop = wire._length(buf, start + 1, stop)
            if key_stop >= stop or buf[key_stop] != 0x12:
                return None
            value_start, value_stop = wire._length(buf, key_stop + 1, stop)
            if value_stop != stop or value_start == stop or buf[value_start] not in _TAGS:
                return None
            entries.append(_Entry(buf[key_start:key_stop], buf[value_start]))
            pos = stop
    except (wire.WireError, IndexError):
        return None
    if len({entry.key for entry in entries}) != len(entries):
        return None
    return entries


class _Walk:
    """Cursors into the batch's buffer, one per example, advanced in lockstep.

    Every read checks its bounds and clears :attr:`ok` for the examples where the bytes are
    not what the structure says; their cursors then point anywhere, and only ``ok``
    examples' results are used.
    """

    __slots__ = ("data", "ok")

    def __init__(self, data: _U8, ok: np.ndarray) -> None:
        self.data = data
        self.ok = ok

    def byte(self, pos: _I64) -> np.ndarray:
        """The byte at each cursor (any byte for a cursor past the buffer)."""
        return self.data.take(pos, mode="clip") if self.data.size else np.zeros_like(pos)

    def expect(self, pos: _I64, value: int) -> None:
        """Clear ``ok`` where the byte at ``pos`` is not ``value``.

        Every tag is followed by a length read at ``pos + 1`` within the same bounds, so the
        length's check that its payload ends in bounds covers the tag too.
        """
        self.ok &= self.byte(pos) == value

    def length(self, pos: _I64, limit: _I64) -> tuple[_I64, _I64]:
        """Read a length prefix at ``pos``; return where its payload starts and stops.

        ``ok`` is cleared where the varint is unterminated within 10 bytes or the payload
        runs past ``limit``.
        """
        first = self.byte(pos)
        value = first.astype(np.int64)
        start = pos + 1
        # Most lengths are one byte: the longer ones are looked at only when there are any.
        long = np.flatnonzero((first >= 0x80) & self.ok) if first.max() >= 0x80 else ()
        if len(long):
            assert isinstance(long, np.ndarray)
            groups = self.data.take(pos[long, None] + _TEN, mode="clip")
            final = groups < 0x80
            size = np.argmax(final, axis=1)
            parts = (groups & 0x7F).astype(np.uint64) << _SHIFTS
            parts[_TEN[None, :] > size[:, None]] = 0
            number = np.bitwise_or.reduce(parts, axis=1)
            after = pos[long] + size + 1
            room = np.maximum(limit[long] - after, 0).astype(np.uint64)
            fits = final.any(axis=1) & (number <= room)
            self.ok[long[~fits]] = False
            value[long] = np.where(fits, number, 0).astype(np.int64)
            start[long] = after
        stop = start + value
        self.ok &= stop <= limit
        return start, stop


def parse_lockstep(
    items: Sequence[bytes],
    specs: list[RequestedFeature],
    names: list[str] | None,
    single: bool,
    base: int,
    parse_rows: Callable[[list[int]], list[Column]],
) -> list[ColumnBuilder] | None:
    """A :class:`ColumnBuilder` per spec for ``items`` (a list of ``bytes`` or a
    :class:`~asyncreader.RecordBatch`), walking all examples at once; None when the batch
    is too small (see :data:`LOCKSTEP_MIN_BATCH`) or none of its examples shares the
    structure of its first plain example.

    Examples that lay out the same features, keys, list kinds and order as the batch's first
    example parse the same way whatever their lengths: the walk follows that structure with
    one array of cursors, checking each tag and key for the whole batch with one comparison
    and decoding each length prefix for the whole batch at once, and the values are then
    gathered from their spans with numpy. Any example that departs from it (another order,
    a missing or extra feature, another kind, an unpacked list, a bad length) is handed to
    ``parse_rows`` (the per-example parser, which raises its error), so results and errors
    are those of parsing every example by itself.
    """
    count = len(items)
    if count < LOCKSTEP_MIN_BATCH:
        return None
    entries = None
    for index in range(min(count, 3)):
        entries = _template(items[index])
        if entries is not None:
            break
    if entries is None or count < LOCKSTEP_MIN_BATCH + LOCKSTEP_PER_FEATURE * len(entries):
        return None
    source: bytes | memoryview
    if isinstance(items, RecordBatch):
        data, starts, lengths = items.data, items.starts.astype(np.int64), items.lengths
        block: Any = data
        source = memoryview(block)
    else:
        source = b"".join(items)
        data = np.frombuffer(source, dtype=np.uint8)
        lengths = np.fromiter(map(len, items), dtype=np.int64, count=count)
        starts = np.cumsum(lengths) - lengths
    ends = starts + lengths.astype(np.int64)
    walk = _Walk(data, lengths > 0)
    walk.expect(starts, 0x0A)
    pos, stop = walk.length(starts + 1, ends)
    walk.ok &= stop == ends
    wanted = {spec.key: spec for spec in specs}
    found: dict[bytes, tuple[int, _Spans | None]] = {}
    for entry in entries:
        walk.expect(pos, 0x0A)
        start, stop = walk.length(pos + 1, ends)
        walk.expect(start, 0x0A)
        key_start, key_stop = walk.length(start + 1, stop)
        key = np.frombuffer(entry.key, dtype=np.uint8)
        walk.ok &= key_stop - key_start == key.size
        if key.size:
            held = walk.data.take(key_start[:, None] + np.arange(key.size), mode="clip")
            walk.ok &= (held == key).all(axis=1)
        walk.expect(key_stop, 0x12)
        value_start, value_stop = walk.length(key_stop + 1, stop)
        walk.ok &= value_stop == stop
        spec = wanted.get(entry.key)
        if spec is not None:
            # Only a requested Feature is looked into, as the per-example parser does.
            walk.expect(value_start, entry.tag)
            list_start, list_stop = walk.length(value_start + 1, stop)
            walk.ok &= list_stop == stop
            kind = entry.tag >> 3
            spans = None
            if kind == spec.kind:
                spans = _list_spans(walk, kind, list_start, list_stop)
            found[entry.key] = (kind, spans)
        pos = stop
    walk.ok &= pos == ends
    fast = walk.ok
    slow = np.flatnonzero(~fast).tolist()
    if len(slow) == count:
        return None
    columns = parse_rows(slow) if slow else []
    gather = _Gather(data, source, fast, slow)
    builders = []
    for spec_index, spec in enumerate(specs):
        kind, spans = found.get(spec.key, (wire.NONE, None))
        column = columns[spec_index] if columns else None
        builders.append(gather.builder(spec, kind, spans, column, names, single, base))
    return builders


def _list_spans(walk: _Walk, kind: int, start: _I64, stop: _I64) -> _Spans:
    """Where the values of a list (from ``start`` to ``stop`` in every example) lie."""
    if kind != wire.BYTES:
        # Packed (the only layout taken here): one length-delimited field, or nothing.
        empty = start == stop
        before = walk.ok.copy()
        walk.expect(start, 0x0A)
        payload_start, payload_stop = walk.length(start + 1, stop)
        walk.ok &= payload_stop == stop
        walk.ok |= empty & before  # an empty list holds no field to check
        payload_start = np.where(empty, start, payload_start)
        size = stop - payload_start
        if kind == wire.FLOAT:
            walk.ok &= size % 4 == 0
        else:
            # A packed varint stream must end on a final byte.
            walk.ok &= (size == 0) | (walk.byte(stop - 1) < 0x80)
        return _Spans(payload_start, stop)
    rows_found: list[_I64] = []
    starts_found: list[_I64] = []
    stops_found: list[_I64] = []
    cursor = start
    active = np.flatnonzero(walk.ok & (start < stop))
    while active.size:
        # Only the examples with values left are walked on; a bad one leaves the walk.
        limit = stop[active]
        at = cursor[active]
        sub = _Walk(walk.data, walk.ok[active])
        sub.expect(at, 0x0A)
        value_start, value_stop = sub.length(at + 1, limit)
        walk.ok[active] = sub.ok
        good = sub.ok
        rows_found.append(active[good])
        starts_found.append(value_start[good])
        stops_found.append(value_stop[good])
        cursor = cursor.copy()
        cursor[active] = value_stop
        active = active[good & (value_stop < limit)]
    if rows_found:
        rows = np.concatenate(rows_found)
        order = np.argsort(rows, kind="stable")
        rows = rows[order]
        value_starts = np.concatenate(starts_found)[order]
        value_stops = np.concatenate(stops_found)[order]
    else:
        rows = value_starts = value_stops = np.empty(0, dtype=np.int64)
    counts = np.bincount(rows, minlength=start.size).astype(np.int64)
    return _Spans(value_starts, value_stops, rows, counts)


class _Gather:
    """Builds each requested feature's values from the walk's spans (the examples it kept)
    and the per-example parser's columns (the examples it handed over), in example order."""

    __slots__ = ("data", "fast", "slow", "source")

    def __init__(self, data: _U8, source: bytes | memoryview, fast: np.ndarray, slow: list[int]):
        self.data = data
        self.source = source
        self.fast = fast
        self.slow = slow

    def builder(
        self,
        spec: RequestedFeature,
        kind: int,
        spans: _Spans | None,
        column: Column | None,
        names: list[str] | None,
        single: bool,
        base: int,
    ) -> ColumnBuilder:
        fast = self.fast
        kinds = np.full(fast.size, kind, dtype=np.int8)
        if column is not None:
            kinds[self.slow] = column.kinds
        present = kinds == spec.kind
        if spec.kind == wire.BYTES:
            counts = self._byte_counts(spans, column)
            flat = self._strings(spans, column, counts)
            return ColumnBuilder.from_arrays(spec, kinds, counts, flat, names, single, base)
        sizes = np.zeros(fast.size, dtype=np.int64)
        if spans is not None:
            sizes[fast] = (spans.stops - spans.starts)[fast]
        slow_values: list[bytes] = []
        if column is not None:
            slow_values = [value if isinstance(value, bytes) else b"" for value in column.values]
            sizes[self.slow] = [len(value) for value in slow_values]
        sizes[~present] = 0
        stream = self._payload(spans, sizes, slow_values)
        if spec.kind == wire.FLOAT:
            counts = sizes // 4
            flat = stream.view("<f4").astype(np.float32, copy=False)
        else:
            counts = varint_counts(stream, sizes)
            flat = decode_int64_streams(stream, sizes, single, base)
        return ColumnBuilder.from_arrays(spec, kinds, counts, flat, names, single, base)

    def _payload(self, spans: _Spans | None, sizes: _I64, slow_values: list[bytes]) -> _U8:
        """Every example's list payload (``sizes`` bytes each) joined in example order."""
        total = int(sizes.sum())
        if total == 0:
            return np.empty(0, dtype=np.uint8)
        fast_sizes = np.where(self.fast, sizes, 0)
        fast_part = np.empty(0, dtype=np.uint8)
        if spans is not None and fast_sizes.any():
            fast_part = self._join(spans.starts, fast_sizes)
        if not self.slow:
            return fast_part
        out = np.empty(total, dtype=np.uint8)
        mine = np.repeat(self.fast, sizes)
        out[mine] = fast_part
        out[~mine] = np.frombuffer(b"".join(slow_values), dtype=np.uint8)
        return out

    def _join(self, starts: _I64, sizes: _I64) -> _U8:
        """The bytes ``starts[i] : starts[i] + sizes[i]`` of the buffer, joined."""
        total = int(sizes.sum())
        if total > _GATHER_MAX_BYTES * sizes.size:
            source = self.source
            pieces = [
                source[start : start + size]
                for start, size in zip(starts.tolist(), sizes.tolist(), strict=True)
                if size
            ]
            # A bytearray: the results built on it are writable, as the other paths' are.
            return np.frombuffer(bytearray().join(pieces), dtype=np.uint8)
        offsets = np.cumsum(sizes) - sizes
        index = np.repeat(starts - offsets, sizes) + np.arange(total, dtype=np.int64)
        joined: _U8 = self.data[index]
        return joined

    def _byte_counts(self, spans: _Spans | None, column: Column | None) -> _I64:
        counts = np.zeros(self.fast.size, dtype=np.int64)
        if spans is not None:
            assert spans.counts is not None
            counts[self.fast] = spans.counts[self.fast]
        if column is not None:
            counts[self.slow] = [len(value) if value is not None else 0 for value in column.values]
        return counts

    def _strings(self, spans: _Spans | None, column: Column | None, counts: _I64) -> np.ndarray:
        """The values of the examples of the bytes kind as one object array, in order."""
        fast_values: list[bytes] = []
        if spans is not None:
            assert spans.rows is not None
            keep = self.fast[spans.rows]
            fast_values = self._slices(spans.starts[keep], spans.stops[keep])
        array = np.empty(int(counts.sum()), dtype=object)
        if column is None:
            array[:] = fast_values
            return array
        slow_values = [item for value in column.values if isinstance(value, list) for item in value]
        mine = np.repeat(self.fast, counts)
        array[mine] = fast_values
        array[~mine] = slow_values
        return array

    def _slices(self, starts: _I64, stops: _I64) -> list[bytes]:
        """The bytes ``starts[i] : stops[i]`` of the buffer, each its own ``bytes``."""
        source = self.source
        if not isinstance(source, bytes):
            sizes = stops - starts
            if int(sizes.sum()) > _GATHER_MAX_BYTES * sizes.size:
                pairs = zip(starts.tolist(), stops.tolist(), strict=True)
                return [source[start:stop].tobytes() for start, stop in pairs]
            # Short values: one gather into a bytes object, then slices of it (cheaper than
            # a memoryview's copy per value).
            source = self._join(starts, sizes).tobytes()
            stops = np.cumsum(sizes)
            starts = stops - sizes
        pairs = zip(starts.tolist(), stops.tolist(), strict=True)
        return [source[start:stop] for start, stop in pairs]
