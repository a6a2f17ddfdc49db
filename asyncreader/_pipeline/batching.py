"""Batching: ``batch``, ``shuffle_batch``, their ``_join`` and ``maybe_`` variants.

Each function builds one queue — a FIFOQueue, a PaddingFIFOQueue (``dynamic_pad=True``) or
a RandomShuffleQueue (the shuffle variants) — and a QueueRunner whose tasks call the
example source and enqueue what it returns, as ``tf.compat.v1.train.batch`` does. The
result is a :class:`Batcher`; ``await b.dequeue()`` takes one batch with ``dequeue_many``
(``dequeue_up_to`` when ``allow_smaller_final_batch=True``).

Sources. ``tensors`` is an async callable returning one example, or an async iterable of
examples (an async generator, a :class:`SliceProducer`, ...). The runner tasks call it until
it raises :class:`~asyncreader.OutOfRangeError` (an async iterable ends the same way when it
is exhausted). ``tensors_list`` gives one such source per task (the ``_join`` variants).

Examples. An example is a tuple, named tuple, list, dict or a single value; each component
is a number, ``str`` / ``bytes``, or an array. Batches come back in the same layout with
each component stacked into a numpy array with a leading batch dimension (see
:mod:`._structure`). With ``enqueue_many=True`` the source returns a *batch* of examples
(every component has the same leading dimension) which is sliced into the queue in one
``enqueue_many``: the fast path.

Types and shapes. TensorFlow reads dtypes and static shapes from the graph; here they come
from ``shapes`` and from the first example, which the first task fetches *before* the queue
exists: it becomes the queue's first element, so nothing is lost. Without ``shapes``
every later example must have the first one's shape — except with ``dynamic_pad=True``,
where only the rank is fixed and every dimension is padded per batch.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic

import anyio
import numpy as np

from .._errors import InvalidArgumentError, OutOfRangeError
from .._queues.record_refs import RecordRefs, as_record_refs
from .._runtime.checkpoint import owned_resources
from .._runtime.context import current_checkpointer, current_session
from .._typing import BatchT
from .common import resolve_coordinator
from .structure import (
    Shape,
    Structure,
    component_spec,
    format_shape,
    normalize_shapes,
    order_shapes,
)

if TYPE_CHECKING:
    from .._queues.record_refs import RecordRefsArg
    from .._runtime.coordinator import Coordinator

__all__ = [
    "Batcher",
    "BatcherStatistics",
    "batch",
    "batch_join",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "shuffle_batch",
    "shuffle_batch_join",
]

#: What a ``tensors`` argument may be.
ExampleSource = Callable[[], Any] | AsyncIterable[Any]

_FIFO = "fifo"
_PADDING = "padding"
_SHUFFLE = "shuffle"

_NOTHING: Any = object()


@dataclass(frozen=True, slots=True)
class BatcherStatistics:
    """A snapshot of a :class:`Batcher`.

    Attributes:
        batch_size: Examples per batch.
        capacity: The queue's capacity (``None``: unbounded).
        min_after_dequeue: Examples a shuffle queue keeps while open (0 otherwise).
        size: Examples in the queue now.
        fill_fraction: ``size / capacity`` (0.0 for an unbounded queue): TensorFlow's
            ``fraction_of_<capacity>_full`` summary.
        fraction_over_min_after_dequeue: For shuffle variants, TensorFlow's
            ``fraction_over_<min>_of_<capacity - min>_full`` summary
            (``max(0, size - min_after_dequeue) / (capacity - min_after_dequeue)``);
            equal to ``fill_fraction`` otherwise.
        closed: Whether the queue is closed (input ended or stop requested).
        num_threads: Runner tasks feeding the queue.
        examples_enqueued: Examples put into the queue so far.
        examples_dropped: Examples skipped because ``keep_input`` was false.
        batches_dequeued: Batches handed out so far.
    """

    batch_size: int
    capacity: int | None
    min_after_dequeue: int
    size: int
    fill_fraction: float
    fraction_over_min_after_dequeue: float
    closed: bool
    num_threads: int
    examples_enqueued: int
    examples_dropped: int
    batches_dequeued: int


class _Source:
    """One example source, made uniform: ``await next()`` or OutOfRangeError at the end."""

    __slots__ = ("_call", "_coro", "_exhausted", "_iter", "_lock", "index", "pending")

    def __init__(self, source: object, index: int, what: str) -> None:
        self._call: Callable[[], Any] | None = None
        self._iter: AsyncIterator[Any] | None = None
        self._lock: anyio.Lock | None = None
        self._exhausted = False
        self.pending: Any = _NOTHING
        self.index = index
        self._coro = False
        if inspect.isasyncgenfunction(source):
            name = getattr(source, "__name__", "source")
            raise InvalidArgumentError(
                f"{what}() got the async generator function {name!r}: pass the generator "
                f"itself ({name}()), or an async callable returning one example per call"
            )
        if callable(source):
            self._call = source
            # Async functions skip the awaitable check on every call.
            self._coro = inspect.iscoroutinefunction(source) or inspect.iscoroutinefunction(
                type(source).__call__
            )
        elif hasattr(source, "__aiter__"):
            self._iter = source.__aiter__()
            # Several tasks may share one iterator; an async generator can't be re-entered.
            self._lock = anyio.Lock()
        else:
            raise InvalidArgumentError(
                f"{what}() takes an async callable or an async iterable of examples, "
                f"not {type(source).__name__}"
            )

    async def next(self) -> Any:
        if self.pending is not _NOTHING:
            example, self.pending = self.pending, _NOTHING
            return example
        if self._exhausted:
            raise OutOfRangeError(f"example source {self.index} is exhausted")
        if self._coro:
            return await self._call()  # type: ignore[misc]
        if self._call is not None:
            result = self._call()
            if inspect.isawaitable(result):
                result = await result
            return result
        assert self._iter is not None
        assert self._lock is not None
        async with self._lock:
            if self._exhausted:
                raise OutOfRangeError(f"example source {self.index} is exhausted")
            try:
                return await self._iter.__anext__()
            except StopAsyncIteration:
                self._exhausted = True
                raise OutOfRangeError(f"example source {self.index} is exhausted") from None


def _check_keep_input(keep_input: object, enqueue_many: bool) -> object:
    """Validate a static ``keep_input``; a callable is checked on each result instead."""
    if callable(keep_input):
        return keep_input
    return _as_keep(keep_input, enqueue_many)


def _as_keep(keep_input: object, enqueue_many: bool) -> bool | np.ndarray[Any, Any]:
    array = np.asarray(keep_input)
    if array.dtype != np.bool_:
        raise InvalidArgumentError(
            f"`keep_input` must be a bool or a bool vector, not {array.dtype} {keep_input!r}"
        )
    if array.ndim > 1:
        raise InvalidArgumentError("`keep_input` must be 0 or 1 dimensions.")
    if array.ndim == 1:
        if not enqueue_many:
            raise InvalidArgumentError("`keep_input` cannot be a vector when `enqueue_many=False`.")
        return array
    return bool(array)


class _EnqueueStep:
    """One runner task's enqueue op: fetch an example (or a batch) and enqueue it.

    Made once the queue exists; binds what the hot path needs so each call does a few
    attribute reads, one source call and one enqueue.
    """

    __slots__ = ("_batcher", "_enqueue", "_flatten", "_many", "_source")

    def __init__(self, batcher: Batcher, source: _Source) -> None:
        self._batcher = batcher
        self._source = source
        self._flatten = batcher._structure_or_fail().flatten
        self._many = batcher._enqueue_many
        queue = batcher._queue
        self._enqueue = queue.enqueue_many if self._many else queue.enqueue

    async def __call__(self) -> None:
        b = self._batcher
        example = await self._source.next()
        comps = self._flatten(example)
        keep = b._keep_input
        if keep is not True:
            if callable(keep):
                keep = keep(example)
                if inspect.isawaitable(keep):
                    keep = await keep
                keep = _as_keep(keep, self._many)
            if keep is False:
                b._dropped += _batch_len(comps[0]) if self._many else 1
                await anyio.lowlevel.checkpoint()
                return
            if keep is not True:
                comps = _select_rows(comps, keep)  # type: ignore[arg-type]
                b._dropped += len(keep) - len(comps[0])  # type: ignore[arg-type]
        await self._enqueue(comps)

    def __repr__(self) -> str:
        return f"<enqueue step of {self._batcher._what} source={self._source.index}>"


def _batch_len(component: Any) -> int:
    shape = component.shape if isinstance(component, np.ndarray) else np.shape(component)
    return int(shape[0]) if shape else 1


def _select_rows(comps: tuple[Any, ...], mask: np.ndarray[Any, Any]) -> tuple[Any, ...]:
    out = []
    for i, comp in enumerate(comps):
        array = comp if isinstance(comp, np.ndarray) else np.asarray(comp)
        if array.ndim == 0 or len(array) != len(mask):
            raise InvalidArgumentError(
                f"`keep_input` has {len(mask)} entries but component {i} has shape "
                f"{format_shape(array.shape)}"
            )
        out.append(array[mask])
    return tuple(out)


class Batcher(Generic[BatchT]):
    """Batches of examples from a queue that runner tasks fill in the background.

    Made by :func:`batch`, :func:`shuffle_batch` and their variants, never directly.
    ``await b.dequeue()`` returns the next batch; ``async for batch in b`` yields batches
    until the input ends. Batches have the examples' layout (tuple, named tuple, list, dict
    or a single value) with each component a numpy array whose first dimension is the
    batch.

    The queue is created when the first example arrives (its dtypes and shapes come from
    it), so :attr:`queue` is ``None`` until then.

    For type checkers, ``Batcher`` is generic in its batch type, ``Any`` by default; code
    that knows its layout states it, e.g. ``b: ar.Batcher[tuple[np.ndarray, np.ndarray]]
    = ar.batch(...)``, and then ``dequeue()`` and ``async for`` give that type.
    """

    __slots__ = (
        "__weakref__",
        "_allow_smaller",
        "_batch_size",
        "_batches",
        "_capacity",
        "_coord",
        "_dropped",
        "_enqueue_many",
        "_keep_input",
        "_kind",
        "_min_after_dequeue",
        "_num_threads",
        "_queue",
        "_ready",
        "_record_refs",
        "_restore",
        "_runner",
        "_seed",
        "_shapes",
        "_sources",
        "_structure",
        "_what",
    )

    def __init__(
        self,
        what: str,
        sources: Sequence[object],
        *,
        threads_per_source: int,
        batch_size: int,
        capacity: int | None,
        kind: str,
        min_after_dequeue: int = 0,
        seed: int | None = None,
        enqueue_many: bool,
        shapes: object,
        allow_smaller_final_batch: bool,
        keep_input: object = True,
        coord: Coordinator | None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        self._what = what
        _check_int("batch_size", batch_size, minimum=1)
        _check_int("num_threads", threads_per_source, minimum=1)
        if capacity is not None:
            _check_int("capacity", capacity, minimum=0)
        if kind == _SHUFFLE:
            _check_int("min_after_dequeue", min_after_dequeue, minimum=0)
            if capacity is not None and capacity <= min_after_dequeue:
                raise InvalidArgumentError(
                    f"capacity {capacity} must be bigger than min_after_dequeue "
                    f"{min_after_dequeue}."
                )
        self._shapes = None if shapes is None else normalize_shapes(shapes)
        if self._shapes is not None and kind != _PADDING:
            for shape in self._shapes.values() if isinstance(self._shapes, dict) else self._shapes:
                if None in shape:
                    raise InvalidArgumentError(
                        f"All shapes must be fully defined: {format_shape(shape)} is not "
                        "(use dynamic_pad=True for varying sizes)"
                    )
        self._keep_input = _check_keep_input(keep_input, enqueue_many)
        self._coord = resolve_coordinator(coord, what)
        self._sources = [_Source(src, i, what) for i, src in enumerate(sources)]
        self._num_threads = threads_per_source * len(self._sources)
        self._batch_size = int(batch_size)
        self._capacity = None if capacity is None else int(capacity)
        self._kind = kind
        self._min_after_dequeue = int(min_after_dequeue) if kind == _SHUFFLE else 0
        self._seed = seed
        self._enqueue_many = bool(enqueue_many)
        self._allow_smaller = bool(allow_smaller_final_batch)
        self._structure: Structure | None = None
        self._queue: Any = None
        self._runner: Any = None
        self._ready = anyio.Event()
        self._dropped = 0
        self._batches = 0
        self._restore: Any = None
        self._record_refs = as_record_refs(record_refs)
        session = current_session()
        if session is not None and session.deterministic:
            self._check_deterministic()
        checkpointer = current_checkpointer()
        if checkpointer is not None:
            checkpointer.register(
                "batcher", self, Batcher._checkpoint_save, Batcher._checkpoint_restore
            )
        self._coord.start_soon(self._start, threads_per_source, name=f"{what}-start")

    def _check_deterministic(self) -> None:
        """Refuse what makes batches depend on task timing in a deterministic Session."""
        what = self._what
        if self._num_threads != 1:
            raise InvalidArgumentError(
                f"{what}: a deterministic Session needs one task filling the queue "
                f"(num_threads=1 and one example source), not {self._num_threads}"
            )
        if self._kind == _SHUFFLE:
            if self._seed is None:
                raise InvalidArgumentError(f"{what}: a deterministic Session needs a seed")
            if self._capacity is None or self._capacity < (
                self._min_after_dequeue + self._batch_size
            ):
                raise InvalidArgumentError(
                    f"{what}: a deterministic Session needs capacity >= min_after_dequeue + "
                    f"batch_size ({self._min_after_dequeue} + {self._batch_size}), "
                    f"not {self._capacity}"
                )

    # -- setup ---------------------------------------------------------------------------

    async def _start(self, threads_per_source: int) -> None:
        """Fetch the first example, build the queue from it, then start the runner."""
        checkpointer = current_checkpointer()
        if checkpointer is None:
            await self._start_runner(threads_per_source)
            return
        # A stage task: a checkpoint waits while it fetches the first example.
        with checkpointer.stage(f"{self._what}-start"):
            await self._start_runner(threads_per_source)

    async def _start_runner(self, threads_per_source: int) -> None:
        from .. import QueueRunner

        if self._restore is not None:
            try:
                await self._start_restored(threads_per_source)
            finally:
                self._ready.set()
            return
        try:
            live: list[_Source] = []
            first: Any = _NOTHING
            for source in self._sources:
                if first is _NOTHING:
                    try:
                        first = await source.next()
                    except OutOfRangeError:
                        continue  # an empty source has nothing to run
                    source.pending = first
                live.append(source)
            if first is _NOTHING:
                return  # no source produced anything: dequeue reports end of input
            self._structure = Structure(first, self._what)
            self._queue = self._make_queue(first)
            ops = [_EnqueueStep(self, s) for s in live for _ in range(threads_per_source)]
            self._runner = QueueRunner(self._queue, ops)
            self._runner.start(coord=self._coord)
        finally:
            self._ready.set()

    async def _start_restored(self, threads_per_source: int) -> None:
        """Rebuild the queue from the checkpoint instead of a first example."""
        from .. import QueueRunner

        tree, self._restore = self._restore, None
        self._structure = Structure.from_state(tree["structure"])
        queue_tree = tree["queue"]
        config = queue_tree["config"]
        dtypes = list(config["dtypes"])
        shapes = [tuple(s) for s in config["shapes"]]
        self._queue = self._new_queue(dtypes, shapes)
        self._queue._checkpoint_restore(queue_tree)
        for index, comps in tree["pending"]:
            if isinstance(comps, dict):  # saved as record references
                refs = self._queue._refs
                assert refs is not None  # else the queue's restore refused the checkpoint
                (snapshot,) = await refs.restore([comps["record_refs"]])
                comps = self._from_rows(snapshot["rows"])
            self._sources[index].pending = self._structure.pack(comps)
        if self._queue.is_closed():
            return  # the input had ended: what is stored drains
        ops = [_EnqueueStep(self, s) for s in self._sources for _ in range(threads_per_source)]
        self._runner = QueueRunner(self._queue, ops)
        self._runner.start(coord=self._coord)

    def _checkpoint_save(self) -> dict[str, Any]:
        queue = self._queue
        header = {"what": self._what, "kind": self._kind, "batch_size": self._batch_size}
        counters = (self._dropped, self._batches)
        if queue is None:
            return {**header, "queue": None, "counters": counters}
        structure = self._structure_or_fail()
        pending: list[Any] = []
        for source in self._sources:
            if source.pending is not _NOTHING:
                comps = list(structure.flatten(source.pending))
                refs = queue._refs
                if refs is not None:  # an example in hand holds records too
                    pending.append([source.index, {"record_refs": refs.strip(self._rows(comps))}])
                else:
                    pending.append([source.index, comps])
        return {
            **header,
            "structure": structure.to_state(),
            "queue": queue._checkpoint_save(),
            "pending": pending,
            "counters": counters,
        }

    def _checkpoint_restore(self, tree: Any) -> None:
        try:
            header = (tree["what"], tree["kind"], tree["batch_size"])
            dropped, batches = (int(c) for c in tree["counters"])
        except (TypeError, KeyError, ValueError):
            raise InvalidArgumentError(f"{self._what}: malformed checkpoint") from None
        if header != (self._what, self._kind, self._batch_size):
            raise InvalidArgumentError(
                f"checkpoint of {header[0]} (batch_size {header[2]}) does not fit this "
                f"{self._what} (batch_size {self._batch_size})"
            )
        self._dropped, self._batches = dropped, batches
        if tree["queue"] is not None:
            self._restore = tree

    def _rows(self, comps: list[Any]) -> dict[str, Any]:
        """Return an example's components as a typed queue's snapshot of its rows."""
        if not self._enqueue_many:
            return {"rows": [comps]}
        n = _batch_len(comps[0])
        return {"rows": [[c[i] for c in comps] for i in range(n)]}

    def _from_rows(self, rows: list[list[Any]]) -> list[Any]:
        """Return the components :meth:`_rows` was given."""
        if not self._enqueue_many:
            return list(rows[0])
        return [[r[j] for r in rows] for j in range(self._structure_or_fail().size)]

    def _queue_record_refs(self) -> RecordRefs | None:
        """Return ``record_refs`` with the example's components as queue components."""
        refs = self._record_refs
        if refs is None:
            return None
        structure = self._structure_or_fail()
        components = []
        for which in (refs.key, refs.value):
            keys = structure.keys
            if keys:
                if which not in keys:
                    raise InvalidArgumentError(
                        f"{self._what}: record_refs names {which!r}, which the examples "
                        f"(dicts of {list(keys)!r}) do not have"
                    )
                components.append(keys.index(which))
            elif isinstance(which, int) and which < structure.size:
                components.append(which)
            else:
                raise InvalidArgumentError(
                    f"{self._what}: record_refs component {which!r} is not in the examples "
                    f"({structure.describe()})"
                )
        return RecordRefs(refs.reader, components[0], components[1])

    def _make_queue(self, first: object) -> Any:
        structure = self._structure_or_fail()
        comps = structure.flatten(first)
        specs = [
            component_spec(c, enqueue_many=self._enqueue_many, index=i) for i, c in enumerate(comps)
        ]
        dtypes = [d for d, _ in specs]
        if self._shapes is not None:
            shapes = order_shapes(self._shapes, structure)
        elif self._kind == _PADDING:
            # Only the rank is fixed: every dimension may vary and is padded per batch.
            shapes = [tuple(None for _ in s) for _, s in specs]
        else:
            shapes = [s for _, s in specs]
        return self._new_queue(dtypes, shapes)

    def _new_queue(self, dtypes: list[Any], shapes: list[Shape]) -> Any:
        from .. import FIFOQueue, PaddingFIFOQueue, RandomShuffleQueue

        capacity = self._capacity
        session = current_session()
        deterministic = session is not None and session.deterministic
        refs = self._queue_record_refs()
        with owned_resources():  # saved with the batcher's checkpoint
            if self._kind == _SHUFFLE:
                hold = self._min_after_dequeue
                if deterministic:
                    # Hand out a batch only from a full queue: which elements it holds
                    # then does not depend on how far the filling task ran ahead.
                    assert capacity is not None
                    hold = capacity - self._batch_size
                queue = RandomShuffleQueue(
                    capacity, hold, dtypes, shapes, seed=self._seed, record_refs=refs
                )
                if deterministic:
                    queue._atomic_many = True
                return queue
            if self._kind == _PADDING:
                return PaddingFIFOQueue(capacity, dtypes, shapes, record_refs=refs)
            return FIFOQueue(capacity, dtypes, _fixed(shapes), record_refs=refs)

    def _structure_or_fail(self) -> Structure:
        assert self._structure is not None
        return self._structure

    # -- consuming -------------------------------------------------------------------------

    @property
    def queue(self) -> Any:
        """The queue holding examples, or ``None`` before the first example arrived."""
        return self._queue

    @property
    def batch_size(self) -> int:
        """Examples per batch."""
        return self._batch_size

    async def wait_ready(self) -> bool:
        """Wait until the queue exists; return ``False`` if the input was empty."""
        await self._ready.wait()
        return self._queue is not None

    async def dequeue(self) -> BatchT:
        """Return the next batch.

        Waits for ``batch_size`` examples. Once the input has ended, the remaining full
        batches are returned, then — with ``allow_smaller_final_batch=True`` — one batch of
        the remainder, then :class:`~asyncreader.OutOfRangeError`.

        Returns:
            The batch in the examples' layout, each component stacked into one numpy array.

        Raises:
            OutOfRangeError: at the end of input, or after a stop request once the queue
                is drained.
        """
        if not self._ready.is_set():
            await self._ready.wait()
        queue = self._queue
        if queue is None:
            await anyio.lowlevel.checkpoint()
            raise OutOfRangeError(
                f"{self._what}: the input ended before the first example "
                f"(requested {self._batch_size}, current size 0)"
            )
        if self._allow_smaller:
            out = await queue.dequeue_up_to(self._batch_size)
        else:
            out = await queue.dequeue_many(self._batch_size)
        self._batches += 1
        structure = self._structure_or_fail()
        # The layout is the examples'; BatchT is what the caller declared it to be.
        batch: BatchT = structure.pack(
            out if isinstance(out, (tuple, list)) and len(out) == structure.size else (out,)
        )
        return batch

    def __aiter__(self) -> Batcher[BatchT]:
        return self

    async def __anext__(self) -> BatchT:
        try:
            return await self.dequeue()
        except OutOfRangeError:
            raise StopAsyncIteration from None

    # -- observing -------------------------------------------------------------------------

    def fill_fraction(self) -> float:
        """Return ``size / capacity`` of the queue (TensorFlow's ``fraction_of_N_full``)."""
        return _fraction(self.size(), self._capacity)

    def size(self) -> int:
        """Return the number of examples in the queue now."""
        return int(self._queue.size()) if self._queue is not None else 0

    def statistics(self) -> BatcherStatistics:
        """Return a snapshot of the queue and the counters."""
        size = self.size()
        capacity = self._capacity
        if self._kind == _SHUFFLE and capacity is not None:
            above = _fraction(
                max(0, size - self._min_after_dequeue), capacity - self._min_after_dequeue
            )
        else:
            above = _fraction(size, capacity)
        closed = bool(self._queue.is_closed()) if self._queue is not None else self._ready.is_set()
        return BatcherStatistics(
            batch_size=self._batch_size,
            capacity=capacity,
            min_after_dequeue=self._min_after_dequeue,
            size=size,
            fill_fraction=_fraction(size, capacity),
            fraction_over_min_after_dequeue=above,
            closed=closed,
            num_threads=self._num_threads,
            # The queue's own count: rows an enqueue_many inserted before it was stopped
            # count too. (Only this batcher fills its queue.)
            examples_enqueued=(
                self._queue.statistics().total_enqueued if self._queue is not None else 0
            ),
            examples_dropped=self._dropped,
            batches_dequeued=self._batches,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        cap = "unbounded" if s.capacity is None else str(s.capacity)
        layout = self._structure.describe() if self._structure else "pending"
        return (
            f"<Batcher {self._what} batch_size={s.batch_size} size={s.size}/{cap} "
            f"threads={s.num_threads} closed={s.closed} examples={layout}>"
        )


def _fixed(shapes: list[Shape]) -> list[tuple[int, ...]]:
    return [tuple(int(d) for d in s if d is not None) for s in shapes]


def _fraction(size: int, capacity: int | None) -> float:
    if capacity is None or capacity <= 0:
        return 0.0
    return size / capacity


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise InvalidArgumentError(f"{name} must be an integer >= {minimum}, not {value!r}")


def _check_list(tensors_list: object, what: str) -> list[object]:
    if not isinstance(tensors_list, (list, tuple)) or not tensors_list:
        raise InvalidArgumentError(f"Expected at least one set of tensors in {what}()")
    return list(tensors_list)


def _check_tensors(tensors: object, what: str) -> object:
    if tensors is None:
        raise InvalidArgumentError(f"Expected at least one tensor in {what}().")
    return tensors


# -- the public functions ----------------------------------------------------------------


def batch(
    tensors: ExampleSource,
    batch_size: int,
    num_threads: int = 1,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Batch the examples that ``tensors`` produces, in order.

    Starts ``num_threads`` runner tasks in the Coordinator; each calls ``tensors`` and
    enqueues the result into a FIFOQueue (a PaddingFIFOQueue with ``dynamic_pad=True``)
    until the source raises :class:`~asyncreader.OutOfRangeError`. When the last task
    ends the queue closes. With ``num_threads=1`` batches keep the input order exactly.

    Args:
        tensors: An async callable returning one example (a tuple, named tuple, list, dict
            or single value of numbers, strings or arrays), or an async iterable of
            examples. With ``enqueue_many=True`` each result is a batch of examples.
        batch_size: Examples per batch (at least 1).
        num_threads: Runner tasks calling ``tensors`` concurrently.
        capacity: The queue's capacity; ``None`` for unbounded.
        enqueue_many: Each result is a batch to slice along its first dimension (the fast
            path: examples move in chunks).
        shapes: One shape per component (a list in component order, or a dict for dict
            examples), without the batch dimension. Default: the first example's shapes.
        dynamic_pad: Allow ``None`` dimensions (all dimensions when ``shapes`` is not
            given) and pad each batch to its longest example with 0 / ``b""``.
        allow_smaller_final_batch: Hand out a last batch smaller than ``batch_size`` at
            the end of input instead of dropping it.
        coord: The Coordinator to run in; default the current one.
        record_refs: The example components holding a reader's record keys and values,
            saved in checkpoints as references instead of bytes: a
            :class:`~asyncreader.RecordRefs` (``key`` / ``value`` are tuple indices or
            dict keys of the example), or a reader for components 0 and 1.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``tensors`` is ``None`` or neither an async callable nor an
            async iterable; ``batch_size``, ``num_threads`` or ``capacity`` is out of range;
            ``shapes`` is malformed or not fully defined without ``dynamic_pad``.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "batch",
        [_check_tensors(tensors, "batch")],
        threads_per_source=num_threads,
        batch_size=batch_size,
        capacity=capacity,
        kind=_PADDING if dynamic_pad else _FIFO,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        coord=coord,
        record_refs=record_refs,
    )


def maybe_batch(
    tensors: ExampleSource,
    keep_input: object,
    batch_size: int,
    num_threads: int = 1,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Like :func:`batch`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`batch`.

    Args:
        keep_input: A bool, a bool vector (only with ``enqueue_many=True``: one flag per
            row of each batch), or a callable taking the example (or batch) and returning
            one of those (it may be async). Examples whose flag is false are skipped.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``keep_input`` has more than one dimension
            (`` `keep_input` must be 0 or 1 dimensions.``), is a vector without
            ``enqueue_many`` (`` `keep_input` cannot be a vector when `enqueue_many=False`.``)
            or is not boolean; and everything :func:`batch` raises. A callable's result is
            checked the same way each time, failing that runner task.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "maybe_batch",
        [_check_tensors(tensors, "maybe_batch")],
        threads_per_source=num_threads,
        batch_size=batch_size,
        capacity=capacity,
        kind=_PADDING if dynamic_pad else _FIFO,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        keep_input=keep_input,
        coord=coord,
        record_refs=record_refs,
    )


def batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Batch examples from several sources, one runner task per source.

    Task ``i`` draws from ``tensors_list[i]``; batches mix the sources in whatever order
    they deliver, while each source's own order is kept. Every source must produce
    examples of the same layout and dtypes.

    The other arguments are as for :func:`batch`.

    Args:
        tensors_list: The example sources (each as ``tensors`` of :func:`batch`).

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``tensors_list`` is empty
            (``Expected at least one set of tensors``), and everything :func:`batch`
            raises. A source whose examples differ in layout fails its runner task with
            ``Expected types to be consistent`` (dict keys:
            ``All dictionaries in tensors_list must have the same keys``).
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "batch_join",
        _check_list(tensors_list, "batch_join"),
        threads_per_source=1,
        batch_size=batch_size,
        capacity=capacity,
        kind=_PADDING if dynamic_pad else _FIFO,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        coord=coord,
        record_refs=record_refs,
    )


def maybe_batch_join(
    tensors_list: Sequence[ExampleSource],
    keep_input: object,
    batch_size: int,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Like :func:`batch_join`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`batch_join`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`batch_join`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "maybe_batch_join",
        _check_list(tensors_list, "maybe_batch_join"),
        threads_per_source=1,
        batch_size=batch_size,
        capacity=capacity,
        kind=_PADDING if dynamic_pad else _FIFO,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        keep_input=keep_input,
        coord=coord,
        record_refs=record_refs,
    )


def shuffle_batch(
    tensors: ExampleSource,
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Batch the examples that ``tensors`` produces, in random order.

    Examples go through a RandomShuffleQueue that, while the input lasts, keeps at least
    ``min_after_dequeue`` of them to draw from. At the end of input the rest drain in
    random order, ignoring ``min_after_dequeue``. The same ``seed`` and the same input
    order give the same batches.

    The other arguments are as for :func:`batch`.

    Args:
        capacity: The queue's capacity, bigger than ``min_after_dequeue``.
        min_after_dequeue: Examples kept in the queue while open, for mixing.
        seed: Seed of the queue's random order.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``capacity`` is not bigger than ``min_after_dequeue``
            (``capacity <c> must be bigger than min_after_dequeue <m>.``), and everything
            :func:`batch` raises.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "shuffle_batch",
        [_check_tensors(tensors, "shuffle_batch")],
        threads_per_source=num_threads,
        batch_size=batch_size,
        capacity=capacity,
        kind=_SHUFFLE,
        min_after_dequeue=min_after_dequeue,
        seed=seed,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        coord=coord,
        record_refs=record_refs,
    )


def maybe_shuffle_batch(
    tensors: ExampleSource,
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    keep_input: object,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Like :func:`shuffle_batch`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`shuffle_batch`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`shuffle_batch`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "maybe_shuffle_batch",
        [_check_tensors(tensors, "maybe_shuffle_batch")],
        threads_per_source=num_threads,
        batch_size=batch_size,
        capacity=capacity,
        kind=_SHUFFLE,
        min_after_dequeue=min_after_dequeue,
        seed=seed,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        keep_input=keep_input,
        coord=coord,
        record_refs=record_refs,
    )


def shuffle_batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Batch examples from several sources in random order, one task per source.

    The other arguments are as for :func:`shuffle_batch`.

    Args:
        tensors_list: The example sources (each as ``tensors`` of :func:`batch`).

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`batch_join` and :func:`shuffle_batch`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "shuffle_batch_join",
        _check_list(tensors_list, "shuffle_batch_join"),
        threads_per_source=1,
        batch_size=batch_size,
        capacity=capacity,
        kind=_SHUFFLE,
        min_after_dequeue=min_after_dequeue,
        seed=seed,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        coord=coord,
        record_refs=record_refs,
    )


def maybe_shuffle_batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    keep_input: object,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
) -> Batcher:
    """Like :func:`shuffle_batch_join`, but enqueue only what ``keep_input`` accepts.

    The other arguments are as for :func:`shuffle_batch_join`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`shuffle_batch_join`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        "maybe_shuffle_batch_join",
        _check_list(tensors_list, "maybe_shuffle_batch_join"),
        threads_per_source=1,
        batch_size=batch_size,
        capacity=capacity,
        kind=_SHUFFLE,
        min_after_dequeue=min_after_dequeue,
        seed=seed,
        enqueue_many=enqueue_many,
        shapes=shapes,
        allow_smaller_final_batch=allow_smaller_final_batch,
        keep_input=keep_input,
        coord=coord,
        record_refs=record_refs,
    )
