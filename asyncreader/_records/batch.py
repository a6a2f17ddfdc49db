"""``RecordBatch``: the records of one read as buffers, with no Python object per record.

A reader frames records inside the blocks it reads from a file; a batch keeps those blocks
and, per record, where it starts and how long it is. Nothing is copied per record: a
TFRecord payload stays between its header and footer in the block it was read into.
Records become ``bytes`` only when asked for (``b[i]``, iteration, :meth:`~RecordBatch.tolist`),
and keys only when :meth:`~RecordBatch.keys` is called.

A batch may span several blocks (a read that crossed a block or a work item): it keeps one
*segment* per block. :attr:`~RecordBatch.data` joins them the first time it is asked for;
indexing, iteration, :meth:`~RecordBatch.to_numpy`, :meth:`~RecordBatch.to_arrow` and the
decoders work segment by segment and never need the join.

Blocks are never reused while a batch holds them: a reader reads every block into a fresh
buffer, so a batch, and any array taken from it, stays valid for as long as it lives.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple, SupportsIndex, overload

import numpy as np

from .._errors import InvalidArgumentError
from .keys import bulk_keys, range_keys

if TYPE_CHECKING:
    import pyarrow

__all__ = ["KeyRun", "RecordBatch", "Segment", "assemble", "concat"]

_U8: Final = np.dtype(np.uint8)
_I64: Final = np.dtype(np.int64)
_EMPTY_U8: Final = np.empty(0, _U8)
_EMPTY_I64: Final = np.empty(0, _I64)

ByteArray = np.ndarray[Any, np.dtype[np.uint8]]
IntArray = np.ndarray[Any, np.dtype[np.int64]]


class Segment(NamedTuple):
    """Records framed in one buffer.

    Record ``i`` is ``buffer[starts[i] : starts[i] + lengths[i]]``.
    """

    buffer: ByteArray
    starts: IntArray
    lengths: IntArray


class KeyRun(NamedTuple):
    """The keys of consecutive records of one work item.

    With ``ids`` (record numbers or byte offsets), record ``i``'s key is
    ``work + b":" + str(ids[i])`` (SPEC §3.7), or ``stem + str(ids[i])`` with a ``stem``
    (a database row's ``b"<table>:"``); otherwise ``keys`` lists them.
    """

    work: bytes | None
    size: int
    ids: range | IntArray | None = None
    keys: Sequence[bytes] | None = None
    stem: bytes | None = None

    def build(self) -> list[bytes]:
        """Return the run's keys as ``bytes``."""
        if self.ids is None:
            assert self.keys is not None
            return list(self.keys)
        prefix = self._stem()
        ids = self.ids
        if isinstance(ids, range) and ids.step == 1 and ids.start >= 0:
            return range_keys(prefix, ids.start, ids.stop)
        if (
            isinstance(ids, np.ndarray)
            and len(ids)
            and ids[0] >= 0
            and bool(np.all(np.diff(ids) == 1))
        ):
            # Consecutive (line numbers, record indices): a thousand keys share a stem.
            return range_keys(prefix, int(ids[0]), int(ids[-1]) + 1)
        values = ids.tolist() if isinstance(ids, np.ndarray) else list(ids)
        return bulk_keys(prefix, values)

    def key(self, i: int) -> bytes:
        """Return the key of the run's record ``i``."""
        if self.ids is None:
            assert self.keys is not None
            return self.keys[i]
        return b"%s%d" % (self._stem(), int(self.ids[i]))

    def _stem(self) -> bytes:
        if self.stem is not None:
            return self.stem
        assert self.work is not None
        return self.work + b":"


def _as_index_array(values: object, what: str) -> IntArray:
    array = np.asarray(values)
    if array.ndim != 1 or (array.size and array.dtype.kind not in "iu"):
        raise InvalidArgumentError(f"RecordBatch {what} must be a 1-D array of integers")
    return array.astype(_I64, copy=False)


class RecordBatch(Sequence[bytes]):
    """The records of one ``read_batch``: buffers with offsets, not one object per record.

    ``len(b)``, ``b[i]`` (``bytes``), iteration and :meth:`tolist` give the records as
    ``bytes``; :attr:`data`, :attr:`starts` and :attr:`lengths` give them as buffers
    (record ``i`` is ``data[starts[i] : starts[i] + lengths[i]]``); :meth:`keys` gives
    TensorFlow's keys, built only when asked for. Slicing gives a batch of the chosen
    records, sharing the buffers.

    Args:
        data: The bytes the records are in (anything with the buffer protocol; a 1-D
            ``uint8`` array is used as it is, without a copy).
        starts: Where each record starts in ``data``.
        lengths: How long each record is.
        keys: One key per record.
        work: The work item the records came from, named in decoders' errors.

    Raises:
        InvalidArgumentError: ``starts`` and ``lengths`` differ in length, or a record
            lies outside ``data``, or ``keys`` does not have one key per record.
    """

    __module__ = "asyncreader"
    __slots__ = ("_counts", "_data", "_keys", "_len", "_segments")

    def __init__(
        self,
        data: object,
        starts: object,
        lengths: object,
        *,
        keys: Sequence[bytes],
        work: bytes | None = None,
    ) -> None:
        buffer = data if isinstance(data, np.ndarray) else np.frombuffer(data, _U8)  # type: ignore[call-overload]
        if buffer.dtype != _U8 or buffer.ndim != 1:
            raise InvalidArgumentError("RecordBatch data must be bytes or a 1-D uint8 array")
        starts_a = _as_index_array(starts, "starts")
        lengths_a = _as_index_array(lengths, "lengths")
        if len(starts_a) != len(lengths_a):
            raise InvalidArgumentError(
                f"RecordBatch has {len(starts_a)} starts but {len(lengths_a)} lengths"
            )
        if len(starts_a) and (
            int(starts_a.min()) < 0
            or int(lengths_a.min()) < 0
            or int((starts_a + lengths_a).max()) > len(buffer)
        ):
            raise InvalidArgumentError(
                f"RecordBatch records must lie inside its {len(buffer)} bytes of data"
            )
        key_list = list(keys)
        if len(key_list) != len(starts_a) or not all(isinstance(k, bytes) for k in key_list):
            raise InvalidArgumentError(
                f"RecordBatch needs one bytes key per record ({len(starts_a)}), got {len(key_list)}"
            )
        self._init(
            [Segment(buffer, starts_a, lengths_a)], [KeyRun(work, len(key_list), None, key_list)]
        )

    def _init(self, segments: list[Segment], keys: list[KeyRun]) -> None:
        segments = [s for s in segments if len(s.starts)]
        self._segments = segments
        self._keys = keys
        counts = [0]
        for s in segments:
            counts.append(counts[-1] + len(s.starts))
        self._counts = counts
        self._len = counts[-1]
        self._data: Segment | None = segments[0] if len(segments) == 1 else None

    @classmethod
    def from_records(
        cls, keys: Sequence[bytes], values: Sequence[bytes], *, work: bytes | None = None
    ) -> RecordBatch:
        """Return a batch holding ``values`` (joined once into one buffer) under ``keys``.

        Raises:
            InvalidArgumentError: ``keys`` and ``values`` differ in length, or a value is
                not ``bytes``-like.
        """
        if len(keys) != len(values):
            raise InvalidArgumentError(
                f"RecordBatch needs one key per record: {len(keys)} keys, {len(values)} values"
            )
        try:
            lengths = np.fromiter((len(v) for v in values), _I64, len(values))
            data = np.frombuffer(b"".join(values), _U8)
        except TypeError as exc:
            raise InvalidArgumentError(f"RecordBatch records must be bytes: {exc}") from None
        starts = np.zeros(len(values), _I64)
        if len(values) > 1:
            np.cumsum(lengths[:-1], out=starts[1:])
        return cls(data, starts, lengths, keys=keys, work=work)

    # -- sequence ------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    def _locate(self, i: int) -> tuple[Segment, int]:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record {i} of a batch of {self._len}")
        n = bisect.bisect_right(self._counts, i) - 1
        return self._segments[n], i - self._counts[n]

    @overload
    def __getitem__(self, index: SupportsIndex) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> RecordBatch: ...

    def __getitem__(self, index: SupportsIndex | slice) -> bytes | RecordBatch:
        """Record ``index`` as ``bytes``; a slice gives a batch sharing the buffers."""
        if isinstance(index, slice):
            lo, hi, step = index.indices(self._len)
            if step == 1:
                return self._range(lo, hi)
            return self.take(np.arange(self._len)[index])
        segment, j = self._locate(int(index))
        start = int(segment.starts[j])
        return segment.buffer[start : start + int(segment.lengths[j])].tobytes()

    def _range(self, lo: int, hi: int) -> RecordBatch:
        """Records ``lo:hi`` as a batch of views of this one's arrays (no copy)."""
        if lo <= 0 and hi >= self._len:
            return self
        segments: list[Segment] = []
        for n, s in enumerate(self._segments):
            first, stop = self._counts[n], self._counts[n + 1]
            if stop > lo and first < hi:
                i, j = max(lo - first, 0), min(hi, stop) - first
                segments.append(Segment(s.buffer, s.starts[i:j], s.lengths[i:j]))
        runs: list[KeyRun] = []
        first = 0
        for run in self._keys:
            stop = first + run.size
            if stop > lo and first < hi:
                i, j = max(lo - first, 0), min(hi, stop) - first
                ids = None if run.ids is None else run.ids[i:j]
                keys = None if run.keys is None else run.keys[i:j]
                runs.append(KeyRun(run.work, j - i, ids, keys, run.stem))
            first = stop
        return assemble(segments, runs)

    def __iter__(self) -> Iterator[bytes]:
        for segment in self._segments:
            view = memoryview(segment.buffer)  # type: ignore[arg-type]
            ends = (segment.starts + segment.lengths).tolist()
            for start, end in zip(segment.starts.tolist(), ends, strict=True):
                yield view[start:end].tobytes()

    def tolist(self) -> list[bytes]:
        """Return the records as a list of ``bytes`` (one object per record)."""
        out: list[bytes] = []
        for segment in self._segments:
            out += _segment_list(segment)
        return out

    def take(self, indices: object) -> RecordBatch:
        """Return a batch of the records at ``indices`` (in that order), sharing the buffers.

        Raises:
            IndexError: an index is out of range.
        """
        picks = np.asarray(indices, dtype=_I64).reshape(-1)
        if len(picks) and (int(picks.min()) < -self._len or int(picks.max()) >= self._len):
            raise IndexError(f"record index out of range for a batch of {self._len}")
        picks = np.where(picks < 0, picks + self._len, picks)
        segments: list[Segment] = []
        for n, local in _runs(picks, self._counts):
            s = self._segments[n]
            segments.append(Segment(s.buffer, s.starts[local], s.lengths[local]))
        bounds = [0]
        for run in self._keys:
            bounds.append(bounds[-1] + run.size)
        runs: list[KeyRun] = []
        for n, local in _runs(picks, bounds):
            run = self._keys[n]
            if run.ids is not None:
                runs.append(
                    KeyRun(run.work, len(local), np.asarray(run.ids, _I64)[local], None, run.stem)
                )
            else:
                assert run.keys is not None
                keys = [run.keys[k] for k in local.tolist()]
                runs.append(KeyRun(run.work, len(local), None, keys))
        return assemble(segments, runs)

    def join(self, separator: bytes = b"") -> bytes:
        """Return the records joined with ``separator``, as ``separator.join(b)`` would,
        without making an object per record (one copy, none when the records already lie
        that way in one block, as lines do)."""
        if not self._len:
            return b""
        sep = np.frombuffer(separator, _U8)
        if len(self._segments) == 1:
            s = self._segments[0]
            lo, hi = int(s.starts[0]), int(s.starts[-1] + s.lengths[-1])
            gaps = s.starts[1:] - (s.starts[:-1] + s.lengths[:-1])
            if bool(np.all(gaps == len(sep))) and (
                not len(sep)
                or bool(
                    np.all(s.buffer[(s.starts[1:, None] - len(sep)) + np.arange(len(sep))] == sep)
                )
            ):
                return s.buffer[lo:hi].tobytes()
        records = np.concatenate([_gather(s) for s in self._segments])
        if not len(sep):
            return records.tobytes()
        lengths = self.lengths
        out = np.empty(len(records) + len(sep) * (self._len - 1), _U8)
        is_sep = np.zeros(len(out), bool)
        # Record i starts at the sum of the lengths before it plus i separators.
        ends = np.cumsum(lengths[:-1]) + np.arange(self._len - 1) * len(sep)
        for k in range(len(sep)):
            out[ends + k] = sep[k]
            is_sep[ends + k] = True
        out[~is_sep] = records
        return out.tobytes()

    # -- keys ----------------------------------------------------------------------------

    def keys(self) -> list[bytes]:
        """Return TensorFlow's key of every record (built now, one ``bytes`` each)."""
        out: list[bytes] = []
        for run in self._keys:
            out += run.build()
        return out

    def key_view(self) -> Sequence[bytes]:
        """The keys as a sequence that builds each key only when it is looked up (for
        naming the records of errors without building every key)."""
        return _KeyView(self)

    def key(self, i: int) -> bytes:
        """Return record ``i``'s key without building the others."""
        run, j = self._run(i)
        return run.key(j)

    def work_item(self, i: int) -> bytes | None:
        """Return the work item record ``i`` came from, when the reader said."""
        return self._run(i)[0].work

    def _run(self, i: int) -> tuple[KeyRun, int]:
        if i < 0:
            i += self._len
        if not 0 <= i < self._len:
            raise IndexError(f"record {i} of a batch of {self._len}")
        for run in self._keys:
            if i < run.size:
                return run, i
            i -= run.size
        raise AssertionError("key runs do not cover the batch")  # pragma: no cover

    def describe(self, i: int) -> str:
        """Name record ``i`` for an error message: its key and work item."""
        run, j = self._run(i)
        key = run.key(j)
        if run.work is None or run.work == key:
            return f"record {key!r}"
        return f"record {key!r} of work item {run.work!r}"

    # -- buffers -------------------------------------------------------------------------

    def _joined(self) -> Segment:
        if self._data is None:
            if not self._segments:
                self._data = Segment(_EMPTY_U8, _EMPTY_I64, _EMPTY_I64)
            else:
                # Join only the span each segment's records cover.
                parts: list[ByteArray] = []
                starts: list[IntArray] = []
                offset = 0
                for s in self._segments:
                    lo = int(s.starts.min())
                    hi = int((s.starts + s.lengths).max())
                    parts.append(s.buffer[lo:hi])
                    starts.append(s.starts - lo + offset)
                    offset += hi - lo
                self._data = Segment(
                    np.concatenate(parts),
                    np.concatenate(starts),
                    np.concatenate([s.lengths for s in self._segments]),
                )
        return self._data

    @property
    def data(self) -> ByteArray:
        """The bytes the records are in (1-D ``uint8``; read-only for the reader's blocks)."""
        return self._joined().buffer

    @property
    def starts(self) -> IntArray:
        """Where each record starts in :attr:`data` (1-D ``int64``)."""
        return self._joined().starts

    @property
    def lengths(self) -> IntArray:
        """Each record's length in bytes (1-D ``int64``)."""
        if self._data is not None:
            return self._data.lengths
        if not self._segments:
            return _EMPTY_I64
        return np.concatenate([s.lengths for s in self._segments])

    @property
    def nbytes(self) -> int:
        """The total length of the records."""
        return sum(int(s.lengths.sum()) for s in self._segments)

    def to_numpy(self) -> ByteArray:
        """Return the records as a 2-D ``uint8`` array ``(len(b), length)``.

        A read-only strided view of the reader's block where the records lie at equal
        steps in one block (fixed-length records), else a copy.

        Raises:
            InvalidArgumentError: the records are not all of one length.
        """
        if not self._segments:
            return np.empty((0, 0), _U8)
        length = int(self._segments[0].lengths[0])
        for n, s in enumerate(self._segments):
            if int(s.lengths.min()) != length or int(s.lengths.max()) != length:
                bad = int(np.flatnonzero(s.lengths != length)[0])
                i = self._counts[n] + bad
                raise InvalidArgumentError(
                    f"to_numpy needs records of one length: {self.describe(0)} has {length} "
                    f"bytes, {self.describe(i)} has {int(s.lengths[bad])}"
                )
        if length == 0:
            return np.empty((self._len, 0), _U8)
        if len(self._segments) == 1:
            view = _strided(self._segments[0], length)
            if view is not None:
                return view
        out = np.empty((self._len, length), _U8)
        for n, s in enumerate(self._segments):
            out[self._counts[n] : self._counts[n + 1]] = _gather(s).reshape(-1, length)
        return out

    def to_arrow(self) -> pyarrow.LargeBinaryArray:
        """Return the records as a ``pyarrow.LargeBinaryArray`` (pyarrow is optional).

        Shares the reader's block when the records lie back to back in one block;
        otherwise joins them once.

        Raises:
            ModuleNotFoundError: pyarrow is not installed (``pip install
                "asyncreader[arrow]"``).
        """
        try:
            import pyarrow as pa
        except ModuleNotFoundError as exc:
            exc.msg = 'RecordBatch.to_arrow needs pyarrow: pip install "asyncreader[arrow]"'
            raise
        if len(self._segments) == 1 and _back_to_back(self._segments[0]):
            s = self._segments[0]
            offsets = np.empty(self._len + 1, _I64)
            offsets[:-1] = s.starts
            offsets[-1] = int(s.starts[-1] + s.lengths[-1])
            data: ByteArray = s.buffer
        else:
            lengths = [s.lengths for s in self._segments]
            offsets = np.zeros(self._len + 1, _I64)
            if lengths:
                np.cumsum(np.concatenate(lengths), out=offsets[1:])
            parts = [_gather(s) for s in self._segments]
            data = np.concatenate(parts) if parts else _EMPTY_U8
        return pa.LargeBinaryArray.from_buffers(
            pa.large_binary(), self._len, [None, pa.py_buffer(offsets), pa.py_buffer(data)]
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Only the bytes the records cover: the records are often views into a whole
        # read block (4 MiB), which a worker process must not be sent with every batch.
        segments = []
        for s in self._segments:
            lo = int(s.starts.min())
            hi = int((s.starts + s.lengths).max())
            segments.append(Segment(s.buffer[lo:hi], s.starts - lo, s.lengths))
        return (_rebuild, (segments, self._keys))

    def __repr__(self) -> str:
        if not self._len:
            return "<RecordBatch 0 records>"
        lengths = [s.lengths for s in self._segments]
        lo = min(int(x.min()) for x in lengths)
        hi = max(int(x.max()) for x in lengths)
        size = f"{lo} bytes each" if lo == hi else f"{lo}..{hi} bytes"
        works = {r.work for r in self._keys if r.work is not None}
        where = ""
        if len(works) == 1:
            where = f" from {next(iter(works))!r}"
        elif works:
            where = f" from {len(works)} work items"
        return f"<RecordBatch {self._len} records, {size}, {self.nbytes} bytes{where}>"


def _rebuild(segments: list[Segment], keys: list[KeyRun]) -> RecordBatch:
    """Unpickle a RecordBatch."""
    return assemble(segments, keys)


def assemble(segments: list[Segment], keys: list[KeyRun]) -> RecordBatch:
    """A batch of framed segments and key runs (both covering the same records, in order):
    how readers make the batches they return, without copying anything."""
    batch = RecordBatch.__new__(RecordBatch)
    batch._init(segments, keys)
    return batch


def concat(batches: Sequence[RecordBatch]) -> RecordBatch:
    """The records of ``batches``, one after another, in one batch sharing their buffers
    (how a read that gathered several runs returns them, without copying)."""
    if len(batches) == 1:
        return batches[0]
    segments: list[Segment] = []
    runs: list[KeyRun] = []
    for b in batches:
        segments += b._segments
        runs += [r for r in b._keys if r.size]
    return assemble(segments, runs)


class _KeyView(Sequence[bytes]):
    """A batch's keys, each built when looked up."""

    __slots__ = ("_batch",)

    def __init__(self, batch: RecordBatch) -> None:
        self._batch = batch

    def __len__(self) -> int:
        return len(self._batch)

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | Sequence[bytes]:
        if isinstance(index, slice):
            return self._batch[index].keys()
        return self._batch.key(index)


def _segment_list(s: Segment) -> list[bytes]:
    """``s``'s records as ``bytes``, made in C where the layout allows."""
    n = len(s.starts)
    if not n:
        return []
    starts, lengths = s.starts, s.lengths
    length = int(lengths[0])
    first = int(starts[0])
    step = int(starts[1] - starts[0]) if n > 1 else length
    if (
        length
        and step >= length
        and bool((lengths == length).all())
        and (n < 3 or bool((np.diff(starts) == step).all()))
    ):
        # Records of one length at equal steps (fixed-length records, a uniform TFRecord
        # run): numpy makes each bytes object, with no Python step per record.
        records: list[bytes] = np.ndarray(
            (n,), dtype=np.dtype((np.void, length)), buffer=s.buffer, offset=first, strides=(step,)
        ).tolist()
        return records
    lo = int(starts.min())
    hi = int((starts + lengths).max())
    if hi - lo <= 2 * int(lengths.sum()) + 4096:
        # One copy of the records' extent, sliced: cheaper than a memoryview per record.
        span = s.buffer[lo:hi].tobytes()
        firsts = (starts - lo).tolist()
        return [span[a:b] for a, b in zip(firsts, (starts + lengths - lo).tolist(), strict=True)]
    view = memoryview(s.buffer)  # type: ignore[arg-type]
    ends = (starts + lengths).tolist()
    return [view[a:b].tobytes() for a, b in zip(starts.tolist(), ends, strict=True)]


def _strided(s: Segment, length: int) -> ByteArray | None:
    """``s``'s records as a strided view of its buffer if they lie at equal steps."""
    n = len(s.starts)
    first = int(s.starts[0])
    step = int(s.starts[1] - s.starts[0]) if n > 1 else length
    if step < length and n > 1:
        return None
    if n > 2 and not np.array_equal(np.diff(s.starts), np.full(n - 1, step, _I64)):
        return None
    view = np.lib.stride_tricks.as_strided(
        s.buffer[first:], shape=(n, length), strides=(step, 1), writeable=False
    )
    return view


def _runs(picks: IntArray, bounds: list[int]) -> Iterator[tuple[int, IntArray]]:
    """Split ``picks`` into runs that stay in one part (``bounds`` are the parts' first
    indices, then the total): yield each run's part and its indices within the part."""
    if not len(picks):
        return
    edges = np.asarray(bounds, _I64)
    part = np.searchsorted(edges, picks, side="right") - 1
    cuts = np.flatnonzero(np.diff(part)) + 1
    for run in np.split(np.arange(len(picks)), cuts):
        n = int(part[run[0]])
        yield n, picks[run] - edges[n]


def _gather(s: Segment) -> ByteArray:
    """``s``'s records one after another, without what lies between them (headers)."""
    if _back_to_back(s):
        lo = int(s.starts[0])
        return s.buffer[lo : lo + int(s.lengths.sum())]
    ends = s.starts + s.lengths
    if len(s.starts) and bool(np.all(s.starts[1:] >= ends[:-1])):
        # Records in order and apart: mark the bytes inside them, then one masked copy.
        lo, hi = int(s.starts[0]), int(ends[-1])
        edges = np.zeros(hi - lo + 1, np.int8)
        np.add.at(edges, s.starts - lo, 1)
        np.add.at(edges, ends - lo, -1)
        inside = np.cumsum(edges[:-1], dtype=np.int8).astype(bool)
        picked: ByteArray = s.buffer[lo:hi][inside]
        return picked
    # Overlapping or out of order (a batch built by hand, or a slice): index every byte.
    total = int(s.lengths.sum())
    out_starts = np.zeros(len(s.starts), _I64)
    np.cumsum(s.lengths[:-1], out=out_starts[1:])
    index = np.arange(total, dtype=_I64) + np.repeat(s.starts - out_starts, s.lengths)
    return s.buffer[index]


def _back_to_back(s: Segment) -> bool:
    """Whether ``s``'s records follow one another without gaps."""
    return bool(np.array_equal(s.starts[1:], s.starts[:-1] + s.lengths[:-1]))
