"""RandomShuffleQueue: dequeues in random order, keeping a minimum buffered while open."""

from __future__ import annotations

import operator
import random
import sys
from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

import numpy as np

from .._errors import InvalidArgumentError
from .._typing import ElementT
from .base import QueueBase
from .elements import TypedCodec, as_int, make_codec
from .slab import SlabCodec

if TYPE_CHECKING:
    from .record_refs import RecordRefsArg

__all__ = ["RandomShuffleQueue", "deterministic_shuffle_queue"]


class RandomShuffleQueue(QueueBase[ElementT]):
    """A queue that hands out a uniformly random stored element on each dequeue.

    TensorFlow's ``tf.queue.RandomShuffleQueue`` on anyio (SPEC §2.5). Storage is an
    unordered list: a dequeue picks a random index and moves the last element into the
    hole, so each removal is O(1).

    While the queue is open, dequeues only take elements while more than
    ``min_after_dequeue`` are stored, which keeps the mix well shuffled; ``dequeue_many``
    takes what it may and waits for the rest. Once the queue is closed
    ``min_after_dequeue`` no longer applies and the remaining elements drain in random
    order. A ``dequeue_many`` that cannot be completed after close puts its elements back
    (order is irrelevant here) and raises :class:`~asyncreader.OutOfRangeError`.

    Seeds: with an integer ``seed`` the order is the same on every run that performs the
    same sequence of operations; with ``None`` it differs per run. The order cannot match
    TensorFlow's, which draws from its Philox generator with a derived seed pair.

    Memory: typed elements with declared shapes are copied into per-component arrays (a
    *slab*, grown by doubling) and dequeued out of them, as TensorFlow stores them, so the
    queue holds only its elements' bytes. Storing rows of the enqueued batches instead would
    keep each batch alive until its last row is drawn, which in random order takes long:
    several times the queue's own size. Without shapes, rows are kept as in FIFOQueue.
    The ``min_after_dequeue`` rows a queue must fill before its first dequeue are faulted in
    on a short-lived helper thread when the slab is first reserved (Linux 5.14 and later,
    slabs of 4 MB and more), so the event loop does not stall on fresh pages as they are
    stored; the memory is that the queue uses anyway once it is filled.

    Ordering of blocked callers, progressive batches, closing and cancellation behave as in
    :class:`~asyncreader.FIFOQueue`, including its fairness note: an operation that can
    complete at once does not yield, except once every 256 operations.

    Args:
        capacity: Maximum number of stored elements; ``None`` or negative means unbounded.
        min_after_dequeue: Elements that must stay stored after a dequeue while open.
        dtypes: Component dtypes, or ``None`` for an untyped queue (see FIFOQueue).
        shapes: One fully defined shape per component, or ``None``.
        names: One name per component; elements are then dicts.
        seed: An integer for a reproducible order, or ``None``.
        name: The name used in error messages.
        shared_name: Share the queue under this name.
        container: The container for ``shared_name``.
        record_refs: Save reader records as references in checkpoints, as in
            :class:`~asyncreader.FIFOQueue`.

    Raises:
        InvalidArgumentError: ``min_after_dequeue`` is negative or not below the capacity,
            the seed is not an integer, dtypes / shapes / names are inconsistent, or a
            ``shared_name`` is taken by a queue of another type or configuration.
    """

    # Public as asyncreader.<name>: tracebacks and docs show the public path.
    __module__ = "asyncreader"

    _kind_name: ClassVar[str] = "RandomShuffleQueue"
    _kind_name_many: ClassVar[str] = "RandomShuffleQueue"

    _buf: list[Any]

    def __init__(
        self,
        capacity: SupportsIndex | None,
        min_after_dequeue: SupportsIndex,
        dtypes: Any = None,
        shapes: Any = None,
        names: Any = None,
        seed: SupportsIndex | None = None,
        *,
        name: str | None = None,
        shared_name: str | None = None,
        container: str | None = None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        codec = make_codec(dtypes, shapes, names)
        if isinstance(codec, TypedCodec) and codec.shapes is not None:
            cap = as_int(capacity) if capacity is not None else None
            codec = SlabCodec(codec, cap if cap is not None and cap >= 0 else sys.maxsize)
        super().__init__(capacity, codec, name, record_refs)
        mad = as_int(min_after_dequeue)
        if mad is None:
            raise InvalidArgumentError(
                f"min_after_dequeue must be an int, got {min_after_dequeue!r}"
            )
        min_after_dequeue = mad
        if min_after_dequeue < 0:
            raise InvalidArgumentError(f"min_after_dequeue {min_after_dequeue} must be >= 0")
        if min_after_dequeue >= self._cap:
            raise InvalidArgumentError(
                f"min_after_dequeue {min_after_dequeue} must be < capacity {self._cap}"
            )
        if seed is not None:
            value = as_int(seed)
            if value is None:
                raise InvalidArgumentError(f"seed must be an int or None, got {seed!r}")
            seed = value
        self._min_after_dequeue = min_after_dequeue
        self._hold = min_after_dequeue
        if isinstance(codec, SlabCodec):
            # While open, no dequeue happens before this many elements are stored.
            codec.prefault_rows = min_after_dequeue
        self._seed = seed
        # Single removals draw from random.Random (cheap per call); batches draw their
        # indices at once from a numpy Generator seeded from it.
        rng = random.Random(seed)
        self._random = rng.random
        self._batch_rng = np.random.default_rng(rng.getrandbits(64))
        self._buf = []
        self._pop = self._random_pop
        if isinstance(codec, SlabCodec):
            # enqueue_many's elements become slots of the slab as they are inserted (a
            # pending enqueue holds none), freed when a dequeue copies them out.
            keep_row, store_many, append, extend = (
                codec.keep_row,
                codec.store_many,
                self._buf.append,
                self._buf.extend,
            )
            self._push = lambda row: append(keep_row(row))
            self._push_list = lambda rows: extend(store_many(rows))
        else:
            self._push = self._buf.append
            self._push_list = self._buf.extend

    @property
    def min_after_dequeue(self) -> int:
        """Elements kept stored after each dequeue while the queue is open."""
        return self._min_after_dequeue

    @property
    def seed(self) -> int | None:
        """The seed given at construction."""
        return self._seed

    def _shared_config(self) -> dict[str, object]:
        config = super()._shared_config()
        config["min_after_dequeue"] = self._min_after_dequeue
        config["seed"] = self._seed
        return config

    def _random_pop(self) -> Any:
        buf = self._buf
        i = int(self._random() * len(buf))
        last = buf.pop()
        if i < len(buf):
            elem = buf[i]
            buf[i] = last
            return elem
        return last

    def _pop_list(self, k: int) -> list[Any]:
        buf = self._buf
        n = len(buf)
        if k == 1:
            return [self._random_pop()]
        if k >= n:
            # Taking everything: one in-place shuffle (C loop) of a copy.
            out = buf[:]
            buf.clear()
            self._batch_rng.shuffle(out)
            return out
        picks = self._batch_rng.choice(n, k, replace=False).tolist()
        out = list(operator.itemgetter(*picks)(buf))
        # Remove the picked slots from the highest down, filling each hole with the last
        # element; slots above the current one are already gone, so a moved element is
        # never a picked one.
        pop = buf.pop
        for i in sorted(picks, reverse=True):
            last = pop()
            if i < len(buf):
                buf[i] = last
        return out

    def _put_back(self, elems: list[Any]) -> None:
        self._buf.extend(elems)

    def _stored_rows(self, taken: list[Any]) -> list[Any]:
        # Restored in this order, the elements take the same indices: the same draws.
        return self._buf + taken

    def _checkpoint_extra(self) -> Any:
        single: random.Random = self._random.__self__  # type: ignore[attr-defined]
        return {"random": single.getstate(), "batch": self._batch_rng.bit_generator.state}

    def _checkpoint_restore_extra(self, extra: Any) -> None:
        try:
            self._random.__self__.setstate(extra["random"])  # type: ignore[attr-defined]
            self._batch_rng.bit_generator.state = extra["batch"]
        except (TypeError, ValueError, KeyError) as exc:
            raise InvalidArgumentError(
                f"checkpoint of RandomShuffleQueue '{self.name}' has a bad generator state: {exc}"
            ) from None


def deterministic_shuffle_queue(
    capacity: int,
    batch_size: int,
    dtypes: Any,
    shapes: Any,
    *,
    seed: SupportsIndex | None,
    record_refs: RecordRefsArg = None,
) -> RandomShuffleQueue[Any]:
    """Return a RandomShuffleQueue that, while open, hands out batches only when full.

    It keeps ``capacity - batch_size`` elements (its ``min_after_dequeue``), and a
    ``dequeue_many`` takes its whole batch at once or waits, never part of it: so which
    elements a batch is drawn from does not depend on how far the filling task ran ahead
    of the consumer. A deterministic Session's shuffle batchers use it. Once closed it
    drains like any RandomShuffleQueue.

    Raises:
        InvalidArgumentError: as :class:`RandomShuffleQueue` (``batch_size`` must be at
            least 1 and at most ``capacity``).
    """
    queue: RandomShuffleQueue[Any] = RandomShuffleQueue(
        capacity, capacity - batch_size, dtypes, shapes, seed=seed, record_refs=record_refs
    )
    # All-or-nothing batches while open, as PriorityQueue's.
    queue._atomic_many = True
    return queue
