"""PriorityQueue: dequeues the element with the smallest int64 priority first."""

from __future__ import annotations

import heapq
import itertools
from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

import numpy as np

from .._errors import InvalidArgumentError
from .._typing import ElementT
from .base import QueueBase
from .elements import Row, TypedCodec, format_shape, split_shapes

if TYPE_CHECKING:
    from .record_refs import RecordRefsArg

__all__ = ["PriorityQueue"]


class _PriorityCodec(TypedCodec):
    """A typed codec whose component 0 is the int64 scalar priority."""

    __slots__ = ()

    def encode_one(self, vals: Any) -> Row:
        row = super().encode_one(vals)
        priority = row[0][0]
        if priority.ndim != 1:
            raise InvalidArgumentError(
                "Expected the priority element to be a scalar, but received shape: "
                f"{format_shape(priority.shape[1:])}"
            )
        return row

    def encode_many(self, vals: Any) -> list[Row]:
        rows = super().encode_many(vals)
        if rows and rows[0][0][0].ndim != 1:
            raise InvalidArgumentError(
                "Expected the priority element to be a vector, but received shape: "
                f"{format_shape(rows[0][0][0].shape)}"
            )
        return rows


class PriorityQueue(QueueBase[ElementT]):
    """A queue that hands out the element with the smallest priority first.

    TensorFlow's ``tf.queue.PriorityQueue`` on anyio (SPEC §2.7). ``types`` and ``shapes``
    describe the value components; the queue prepends an int64 scalar priority, so an
    element is ``(priority, *values)`` (``enqueue_many`` takes a vector of priorities) and
    dequeues return the priority as component 0. ``names``, when given, name every
    component including the priority. Values always stay paired with their priority.
    Among equal priorities elements come out in insertion order (TensorFlow leaves that
    order unspecified).

    ``dequeue_many(n)`` and ``dequeue_up_to(n)`` are all-or-nothing while the queue is
    open: they wait until ``n`` elements are stored and take the ``n`` smallest at once, so
    batches are sorted. After close, ``dequeue_many(n)`` with fewer than ``n`` stored raises
    :class:`~asyncreader.OutOfRangeError` and takes nothing, and ``dequeue_up_to(n)``
    returns the sorted remainder. (TensorFlow loses that remainder and raises; returning
    it is a deliberate improvement.)

    Ordering of blocked callers, closing, cancellation and the fairness note are as in
    :class:`~asyncreader.FIFOQueue`.

    Args:
        capacity: Maximum number of stored elements; ``None`` or negative means unbounded.
        types: The dtypes of the value components (not the priority).
        shapes: One fully defined shape per value component, or ``None`` (then batched
            dequeues are not available).
        names: One name per component, the priority's first; elements are then dicts.
        name: The name used in error messages.
        shared_name: Share the queue under this name.
        container: The container for ``shared_name``.
        record_refs: Save reader records as references in checkpoints, as in
            :class:`~asyncreader.FIFOQueue`.

    Raises:
        InvalidArgumentError: inconsistent types / shapes / names, or a ``shared_name``
            taken by another type or configuration.
    """

    # Public as asyncreader.<name>: tracebacks and docs show the public path.
    __module__ = "asyncreader"

    _kind_name: ClassVar[str] = "PriorityQueue"
    _kind_name_many: ClassVar[str] = "PriorityQueue"
    _atomic_many = True

    _buf: list[tuple[int, int, Any]]

    def __init__(
        self,
        capacity: SupportsIndex | None,
        types: Any,
        shapes: Any,
        names: Any = None,
        *,
        name: str | None = None,
        shared_name: str | None = None,
        container: str | None = None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        if types is None:
            raise InvalidArgumentError("PriorityQueue needs the types of its components")
        value_types = list(types) if isinstance(types, (list, tuple)) else [types]
        all_shapes = None if shapes is None else [(), *split_shapes(shapes)]
        if shapes is not None and len(all_shapes or ()) != len(value_types) + 1:
            raise InvalidArgumentError("Queue shapes must have the same length as dtypes")
        codec = _PriorityCodec([np.int64, *value_types], all_shapes, names)
        super().__init__(capacity, codec, name, record_refs)
        self._buf = []
        self._seq = itertools.count()
        self._push = self._heap_push
        self._push_list = self._heap_push_list
        self._pop = self._heap_pop

    def _heap_push(self, elem: Row) -> None:
        arrays, i = elem
        heapq.heappush(self._buf, (int(arrays[0][i]), next(self._seq), elem))

    def _heap_push_list(self, elems: list[Any]) -> None:
        seq = self._seq
        entries = [(int(e[0][0][e[1]]), next(seq), e) for e in elems]
        if len(entries) > len(self._buf):
            self._buf.extend(entries)
            heapq.heapify(self._buf)
        else:
            for entry in entries:
                heapq.heappush(self._buf, entry)

    def _heap_pop(self) -> Any:
        return heapq.heappop(self._buf)[2]

    def _pop_list(self, k: int) -> list[Any]:
        buf = self._buf
        if k >= len(buf):
            buf.sort()
            out = [entry[2] for entry in buf]
            buf.clear()
            return out
        pop = heapq.heappop
        return [pop(buf)[2] for _ in range(k)]

    def _put_back(self, elems: list[Any]) -> None:
        self._heap_push_list(elems)

    def _stored_rows(self, taken: list[Any]) -> list[Any]:
        # In priority (then insertion) order: re-inserted, ties keep their order.
        return [entry[2] for entry in sorted(self._buf, key=lambda e: (e[0], e[1]))] + taken

    def _check_n(self, n: SupportsIndex, up_to: bool) -> int:
        count = self._check_count(n, up_to)
        # TensorFlow's PriorityQueue names only DequeueMany in this message.
        if self._codec.shapes is None:
            raise InvalidArgumentError(
                "PriorityQueue's DequeueMany requires the components to have specified shapes."
            )
        return count
