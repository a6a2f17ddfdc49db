"""Slab storage: a RandomShuffleQueue's typed elements in per-component arrays.

Rows of enqueued batches (see :mod:`.elements`) suit FIFO storage, where a batch's rows
leave together and in order. Drawn in random order they do not: a batch stays alive until
its last row is drawn, and with ``min_after_dequeue`` elements mixing that keeps several
times the queue's own size of batches in memory. A slab holds each stored element once, in
one row of a preallocated array per component (TensorFlow's layout), so memory follows
the number of elements stored, and a batch comes out with one fancy index per component
wherever its elements came from.

An element from ``enqueue_many`` is stored as a *slot* (an int): taken from the free list
when the element is inserted into the queue, returned to it when a dequeue copies the
element out. An element from a single ``enqueue`` keeps its one-row batch (a row), which
pins nothing else and costs no copy; the two kinds mix freely.

A fresh slab's memory is faulted in by the kernel the first time each page is written: for
a CIFAR-10 shuffle queue of 20,000 float32 crops, 140 MB that took 0.05-0.4 s of the event
loop's time inside :meth:`SlabCodec.store_many` (the slow end when the virtual machine's
host backs the memory lazily). Rows the queue is certain to fill (``prefault_rows``, a
RandomShuffleQueue's ``min_after_dequeue``) are therefore faulted in ahead on a short-lived
thread with Linux's ``MADV_POPULATE_WRITE`` (5.14 and later), which maps the pages without
writing to them, so it never races with the rows being stored; elsewhere nothing changes.
"""

from __future__ import annotations

import ctypes
import mmap
import sys
import threading
import weakref
from typing import Any, Final

import numpy as np

from .elements import Row, TypedCodec

__all__ = ["SlabCodec"]

#: Rows allocated the first time: small, so an idle queue with a large capacity costs
#: little; the slab doubles as elements arrive.
_INITIAL_ROWS: Final = 64
#: The largest slab reserved whole for a bounded queue (address space, not memory).
_RESERVE_BYTES: Final = 8 << 30
#: Slabs smaller than this are not worth a thread to fault in ahead.
_PREFAULT_MIN_BYTES: Final = 4 << 20
#: Bytes faulted in per call, so that a dropped queue's thread stops soon.
_PREFAULT_STEP: Final = 8 << 20
#: Linux's ``MADV_POPULATE_WRITE``.
_MADV_POPULATE_WRITE: Final = 23

_madvise: Any = None
_madvise_loaded = False


def _load_madvise() -> Any:
    """Return libc's ``madvise`` through ctypes (which releases the GIL), or None."""
    global _madvise, _madvise_loaded
    if not _madvise_loaded:
        _madvise_loaded = True
        if sys.platform.startswith("linux"):
            try:
                fn = ctypes.CDLL(None, use_errno=True).madvise
            except (OSError, AttributeError):
                fn = None
            if fn is not None:
                fn.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
                fn.restype = ctypes.c_int
            _madvise = fn
    return _madvise


def _prefault(
    owner: weakref.ref[SlabCodec], cols: list[np.ndarray[Any, Any]], first: int, stop: int
) -> None:
    """Fault in rows ``first`` to ``stop`` of each of ``cols``; runs on its own thread.

    Stops when the codec is gone or has replaced its slab, or when the kernel refuses
    (``MADV_POPULATE_WRITE`` is unknown before Linux 5.14). ``cols`` holds the arrays, so
    their memory stays mapped while this runs.
    """
    madvise = _load_madvise()
    if madvise is None:
        return
    page = mmap.PAGESIZE
    for j, col in enumerate(cols):
        row_bytes = col.nbytes // max(len(col), 1)
        addr = -(-(col.ctypes.data + first * row_bytes) // page) * page
        end = (col.ctypes.data + stop * row_bytes) // page * page
        while addr < end:
            codec = owner()
            if codec is None or j >= len(codec._cols) or codec._cols[j] is not col:
                return
            del codec
            step = min(_PREFAULT_STEP, end - addr)
            if madvise(addr, step, _MADV_POPULATE_WRITE) != 0:
                return
            addr += step


class SlabCodec(TypedCodec):
    """A :class:`TypedCodec` whose stored elements are slots of a growable slab.

    Encoding checks and converts exactly as :class:`TypedCodec`; :meth:`store_one` /
    :meth:`store_many` then copy rows into the slab, and :meth:`decode_one` /
    :meth:`decode_many` copy slots out and free them.
    """

    __slots__ = (
        "__weakref__",
        "_cols",
        "_free",
        "_limit",
        "_objects",
        "_rows",
        "prefault_rows",
        "prefaulting",
    )

    # Rows are copied into the slab as they are inserted: enqueue_many needs no copy of
    # its own. (A blocked enqueue_many reads the caller's arrays until its rows are in.)
    copy_many = False

    def __init__(self, codec: TypedCodec, capacity: int) -> None:
        # Adopt the validated description rather than parsing it again.
        for attr in TypedCodec.__slots__:
            setattr(self, attr, getattr(codec, attr))
        shapes = self.shapes
        assert shapes is not None
        fixed: list[tuple[int, ...]] = [tuple(d or 0 for d in shape) for shape in shapes]
        self._cols: list[np.ndarray[Any, Any]] = [
            np.empty((0, *shape), dtype=dtype)
            for dtype, shape in zip(self.dtypes, fixed, strict=True)
        ]
        self._free: list[int] = []
        # The queue's capacity: a bounded queue's slab is reserved at about this size.
        self._limit = capacity
        # Object components hold references: cleared on free so nothing outlives its slot.
        self._objects = [i for i, dtype in enumerate(self.dtypes) if dtype.kind == "O"]
        # Rows (not slots) stored or held by dequeuers: while 0, a batch is all slots.
        self._rows = 0
        #: Rows certain to be filled (set by the queue), faulted in ahead when the slab
        #: is first reserved (see the module docstring).
        self.prefault_rows = 0
        #: The thread faulting them in, if one was started.
        self.prefaulting: threading.Thread | None = None

    @property
    def allocated(self) -> int:
        """Rows the slab has room for (stored plus free)."""
        return len(self._cols[0])

    def _grow(self, need: int) -> None:
        old = self.allocated
        # Slots in use are the stored elements plus those a blocked dequeue_many holds, so
        # a full queue needs more than its capacity: reserve a quarter more.
        reserve = self._limit + self._limit // 4
        if not old and reserve * self._row_bytes() <= _RESERVE_BYTES:
            # A bounded queue reserves at once: np.empty touches no page, so memory is used
            # only as rows arrive, and the slab rarely has to be copied.
            new = max(reserve, need)
        else:
            # Geometric growth, so copies stay amortised even past the reserve.
            new = max(old + old // 2, old + need, _INITIAL_ROWS)
            if old < self._limit:
                new = min(new, max(reserve, old + need))
        cols = []
        for col in self._cols:
            grown = np.empty((new, *col.shape[1:]), dtype=col.dtype)
            grown[:old] = col
            cols.append(grown)
        self._cols = cols
        # Lowest slots at the end: they are handed out first, keeping the slab dense.
        self._free[:0] = range(new - 1, old - 1, -1)
        ahead = min(self.prefault_rows, new) - old
        if ahead * self._row_bytes() >= _PREFAULT_MIN_BYTES and not self._objects:
            # Those are the slots handed out next: fault them in off the event loop.
            self.prefaulting = threading.Thread(
                target=_prefault,
                args=(weakref.ref(self), cols, old, old + ahead),
                name="asyncreader-slab-prefault",
                daemon=True,
            )
            self.prefaulting.start()

    def keep_row(self, row: Row) -> Row:
        """Store one element from ``enqueue`` as its own row (see the module docstring)."""
        self._rows += 1
        return row

    def _row_bytes(self) -> int:
        return sum(col.itemsize * int(np.prod(col.shape[1:])) for col in self._cols)

    def store_many(self, rows: list[Row]) -> list[int]:
        """Copy encoded elements into free slots and return the slots, in order.

        ``rows`` come from one ``enqueue_many`` (:meth:`encode_many`): consecutive rows of
        one batch, so each component is copied with one assignment.
        """
        k = len(rows)
        if not k:
            return []
        if len(self._free) < k:
            self._grow(k - len(self._free))
        slots = self._free[-k:]
        del self._free[-k:]
        slots.reverse()
        arrays, first = rows[0]
        idx = np.array(slots, dtype=np.intp)
        for col, src in zip(self._cols, arrays, strict=True):
            col[idx] = src[first : first + k]
        return slots

    def decode_one(self, row: Any) -> Any:
        """Return the element stored as ``row``; a slot is copied out and freed."""
        if type(row) is not int:
            self._rows -= 1
            return super().decode_one(row)
        slot = row
        # A scalar component comes out as a fresh numpy scalar (or the stored object); a
        # larger one is a view of the slot, which will be reused, so it is copied.
        values = [col[slot] if col.ndim == 1 else col[slot].copy() for col in self._cols]
        for j in self._objects:
            self._cols[j][slot] = None
        self._free.append(slot)
        return self._structure(values)

    def decode_many(self, rows: list[Any]) -> Any:
        """Stack the elements stored as ``rows`` into batch arrays, freeing their slots."""
        if not rows:
            return super().decode_many([])
        if self._rows:
            is_slot = [type(r) is int for r in rows]
            n_slots = sum(is_slot)
            if n_slots < len(rows):
                self._rows -= len(rows) - n_slots
                if not n_slots:
                    return super().decode_many(rows)
                return self._decode_mixed(rows, is_slot)
        slots: list[int] = rows
        idx = np.array(slots, dtype=np.intp)
        values = [col[idx] for col in self._cols]
        self._release(idx, slots)
        return self._structure(values)

    def _decode_mixed(self, rows: list[Any], is_slot: list[bool]) -> Any:
        k = len(rows)
        values = [np.empty((k, *col.shape[1:]), dtype=col.dtype) for col in self._cols]
        pos = np.flatnonzero(is_slot)
        slots = [rows[p] for p in pos]
        idx = np.array(slots, dtype=np.intp)
        for out, col in zip(values, self._cols, strict=True):
            out[pos] = col[idx]
        for p in np.flatnonzero(np.logical_not(is_slot)).tolist():
            arrays, i = rows[p]
            for out, src in zip(values, arrays, strict=True):
                out[p] = src[i]
        self._release(idx, slots)
        return self._structure(values)

    def _gather(self, rows: list[Any]) -> list[np.ndarray[Any, Any]]:
        """Copy stored elements (slots or rows) out, in order, without freeing them."""
        k = len(rows)
        out = [np.empty((k, *col.shape[1:]), dtype=col.dtype) for col in self._cols]
        is_slot = [type(r) is int for r in rows]
        pos = np.flatnonzero(is_slot)
        idx = np.array([rows[p] for p in pos], dtype=np.intp)
        for dst, col in zip(out, self._cols, strict=True):
            dst[pos] = col[idx]
        for p in np.flatnonzero(np.logical_not(is_slot)).tolist():
            arrays, i = rows[p]
            for dst, src in zip(out, arrays, strict=True):
                dst[p] = src[i]
        return out

    def _release(self, idx: np.ndarray[Any, Any], slots: list[int]) -> None:
        for j in self._objects:
            self._cols[j][idx] = None
        self._free += slots
