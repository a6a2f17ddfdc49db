"""The Batcher: batches of examples from a queue that runner tasks fill in the background.

A :class:`Batcher` is built from a :class:`BatchSpec`, which the batching functions
(:mod:`.batching`) fill in from their arguments. It checks the spec, then, in a task of its
Coordinator, fetches the first example, makes the queue from it — a FIFOQueue, a
PaddingFIFOQueue (``dynamic_pad=True``) or a RandomShuffleQueue (the shuffle variants) —
and starts a QueueRunner whose tasks are :class:`~.sources.EnqueueStep` ops.
``await b.dequeue()`` takes one batch with ``dequeue_many`` (``dequeue_up_to`` when
``allow_smaller_final_batch=True``).

Types and shapes. TensorFlow reads dtypes and static shapes from the graph; here they come
from ``shapes`` and from the first example, which the first task fetches *before* the queue
exists: it becomes the queue's first element, so nothing is lost. Without ``shapes``
every later example must have the first one's shape — except with ``dynamic_pad=True``,
where only the rank is fixed and every dimension is padded per batch.

Checkpoints. Inside a Session with checkpoints the Batcher registers itself: it saves its
queue, the examples fetched ahead and its counters, and a restore rebuilds the queue from
the checkpoint instead of from a first example. In a deterministic Session a shuffle
batcher draws each batch from a full queue, so batches do not depend on task timing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, Protocol

import anyio
import numpy as np

from .._errors import InvalidArgumentError, OutOfRangeError
from .._queues.elements import record_strings
from .._queues.fifo import FIFOQueue
from .._queues.padding import PaddingFIFOQueue
from .._queues.random_shuffle import RandomShuffleQueue, deterministic_shuffle_queue
from .._queues.record_refs import RecordRefs, as_record_refs, referenced_works
from .._records.batch import RecordBatch
from .._runtime import input_waits
from .._runtime.checkpoint import note_payload, owned_resources
from .._runtime.context import current_checkpointer, current_session
from .._runtime.queue_runner import QueueRunner
from .._typing import BatchT
from .common import resolve_coordinator
from .sources import (
    NOTHING,
    DropCount,
    EnqueueStep,
    Failed,
    Source,
    batch_len,
    check_keep_input,
    restore_error,
    save_error,
)
from .structure import (
    Shape,
    Structure,
    component_spec,
    format_shape,
    normalize_shapes,
    order_shapes,
)

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from .._queues.record_refs import RecordRefsArg
    from .._runtime.coordinator import Coordinator

__all__ = ["BatchSpec", "Batcher", "BatcherStatistics", "QueueKind", "StepSource"]


class StepSource(Protocol):
    """Where a batcher of a ranked session takes its batches (the ``_distributed`` layer:
    every rank gets the same number per epoch)."""

    padded: int
    last_padding: int
    dropped: int

    async def next(self) -> list[Any]:
        """The next batch's flat components; ``OutOfRangeError`` at the epoch's end."""
        ...

    def tail_state(self) -> dict[str, Any] | None:
        """What a job checkpoint keeps of the batcher's part of the epoch's tail."""
        ...


#: Which queue a batcher makes: FIFOQueue, PaddingFIFOQueue or RandomShuffleQueue.
QueueKind = Literal["fifo", "padding", "shuffle"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchSpec:
    """What a batching function was asked for: everything a :class:`Batcher` is built from.

    Holds the arguments as the caller gave them; the Batcher checks them.

    Attributes:
        what: The batching function's name, quoted in error messages and checkpoints.
        sources: The example sources (``tensors``, or the entries of ``tensors_list``).
        threads_per_source: Runner tasks drawing from each source.
        batch_size: Examples per batch.
        capacity: The queue's capacity (``None``: unbounded).
        kind: Which queue to make.
        min_after_dequeue: For ``"shuffle"``: examples kept in the queue while open.
        seed: For ``"shuffle"``: the seed of the queue's random order.
        enqueue_many: Each source result is a batch of examples.
        shapes: The components' shapes as the caller gave them, or ``None``.
        allow_smaller_final_batch: Hand out a last, smaller batch at the end of input.
        keep_input: ``True``, or the ``maybe_`` variants' filter.
        coord: The Coordinator to run in (``None``: the current one).
        record_refs: The example components saved as record references in checkpoints.
        remainder: In a ranked session, what the examples left at the epoch's end become
            (``"drop"``, ``"pad"``, ``"smaller"``); ``None``: ``"smaller"`` with
            ``allow_smaller_final_batch``, else ``"drop"``.
    """

    what: str
    sources: Sequence[object]
    threads_per_source: int
    batch_size: int
    capacity: int | None
    kind: QueueKind
    min_after_dequeue: int = 0
    seed: int | None = None
    enqueue_many: bool
    shapes: object
    allow_smaller_final_batch: bool
    keep_input: object = True
    coord: Coordinator | None
    record_refs: RecordRefsArg = None
    remainder: object = None


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
        examples_padded: In a ranked session, rows of this rank's batches that repeat an
            example to fill a batch (see ``remainder``).
        last_batch_padding: Rows of the last batch handed out that are padding (its
            last rows).
        remainder_dropped: In a ranked session, examples of the whole job dropped at the
            epoch's end (``remainder="drop"``, or fewer left than ranks with
            ``"smaller"``); known once this rank's batches ended.
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
    examples_padded: int = 0
    last_batch_padding: int = 0
    remainder_dropped: int = 0


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
        "_finish",
        "_keep_input",
        "_kind",
        "_min_after_dequeue",
        "_num_threads",
        "_queue",
        "_ready",
        "_record_refs",
        "_remainder",
        "_restore",
        "_restored_works",
        "_runner",
        "_seed",
        "_shapes",
        "_sources",
        "_steps",
        "_steps_backend",
        "_structure",
        "_tail_restore",
        "_what",
    )

    def __init__(self, spec: BatchSpec) -> None:
        """Check ``spec`` and start fetching the first example in the Coordinator.

        Raises:
            InvalidArgumentError: a number is out of range, ``shapes`` is malformed or not
                fully defined without ``dynamic_pad``, ``keep_input`` or a source is
                invalid, or a deterministic Session cannot batch this way.
            FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
        """
        what, kind, capacity = spec.what, spec.kind, spec.capacity
        self._what = what
        _check_int("batch_size", spec.batch_size, minimum=1)
        _check_int("num_threads", spec.threads_per_source, minimum=1)
        if capacity is not None:
            _check_int("capacity", capacity, minimum=0)
        if kind == "shuffle":
            _check_int("min_after_dequeue", spec.min_after_dequeue, minimum=0)
            if capacity is not None and capacity <= spec.min_after_dequeue:
                raise InvalidArgumentError(
                    f"capacity {capacity} must be bigger than min_after_dequeue "
                    f"{spec.min_after_dequeue}."
                )
        self._shapes = None if spec.shapes is None else normalize_shapes(spec.shapes)
        if self._shapes is not None and kind != "padding":
            for shape in self._shapes.values() if isinstance(self._shapes, dict) else self._shapes:
                if None in shape:
                    raise InvalidArgumentError(
                        f"All shapes must be fully defined: {format_shape(shape)} is not "
                        "(use dynamic_pad=True for varying sizes)"
                    )
        self._keep_input = check_keep_input(spec.keep_input, spec.enqueue_many)
        self._coord = resolve_coordinator(spec.coord, what)
        self._sources = [
            Source(src, i, what, enqueue_many=bool(spec.enqueue_many))
            for i, src in enumerate(spec.sources)
        ]
        self._num_threads = spec.threads_per_source * len(self._sources)
        self._batch_size = int(spec.batch_size)
        self._capacity = None if capacity is None else int(capacity)
        self._kind = kind
        self._min_after_dequeue = int(spec.min_after_dequeue) if kind == "shuffle" else 0
        self._seed = spec.seed
        self._enqueue_many = bool(spec.enqueue_many)
        self._allow_smaller = bool(spec.allow_smaller_final_batch)
        self._finish: Callable[[Any], Any] | None = None
        self._structure: Structure | None = None
        self._queue: Any = None
        self._runner: Any = None
        self._ready = anyio.Event()
        self._dropped = DropCount()
        self._batches = 0
        self._restore: Any = None
        #: The work items whose records a restored checkpoint's buffers name (a ranked
        #: session finds from them which shared queue the batcher's examples come from).
        self._restored_works: frozenset[bytes] = frozenset()
        #: The rank's part of the epoch's tail in a job checkpoint restored (see
        #: ``EqualSteps.tail_state``), for its step source.
        self._tail_restore: Any = None
        self._record_refs = as_record_refs(spec.record_refs)
        remainder = spec.remainder
        if remainder is None:
            remainder = "smaller" if self._allow_smaller else "drop"
        if remainder not in ("drop", "pad", "smaller"):
            raise InvalidArgumentError(
                f"{what}: remainder must be 'drop', 'pad' or 'smaller', not {remainder!r}"
            )
        self._remainder: Literal["drop", "pad", "smaller"] = remainder
        self._steps: StepSource | Literal[False] | None = None
        session = current_session()
        # A ranked session's backend levels the batch counts of every rank (equal steps).
        self._steps_backend = getattr(session, "_backend", None)
        if session is not None and session.deterministic:
            self._check_deterministic()
        checkpointer = current_checkpointer()
        if checkpointer is not None:
            checkpointer.register(
                "batcher", self, Batcher._checkpoint_save, Batcher._checkpoint_restore
            )
        self._coord.start_soon(self._start, spec.threads_per_source, name=f"{what}-start")

    def _check_deterministic(self) -> None:
        """Refuse what makes batches depend on task timing in a deterministic Session."""
        what = self._what
        if self._num_threads != 1:
            raise InvalidArgumentError(
                f"{what}: a deterministic Session needs one task filling the queue "
                f"(num_threads=1 and one example source), not {self._num_threads}"
            )
        if self._kind == "shuffle":
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
        if self._restore is not None:
            try:
                await self._start_restored(threads_per_source)
            finally:
                self._ready.set()
            return
        try:
            live: list[Source] = []
            first: Any = NOTHING
            for source in self._sources:
                if first is NOTHING:
                    try:
                        first = await source.next()
                    except OutOfRangeError:
                        continue  # an empty source has nothing to run
                    source.pending.append(first)
                live.append(source)
            if first is NOTHING:
                return  # no source produced anything: dequeue reports end of input
            self._structure = Structure(first, self._what)
            self._queue = self._make_queue(first)
            self._start_enqueue_steps(live, threads_per_source)
        finally:
            self._ready.set()

    async def _start_restored(self, threads_per_source: int) -> None:
        """Rebuild the queue from the checkpoint instead of a first example."""
        tree, self._restore = self._restore, None
        self._structure = Structure.from_state(tree["structure"])
        queue_tree = tree["queue"]
        config = queue_tree["config"]
        dtypes = list(config["dtypes"])
        shapes = [tuple(s) for s in config["shapes"]]
        self._queue = self._new_queue(dtypes, shapes)
        # A rank's pipeline from a job checkpoint in which its input had ended (its
        # queue closed, or its look-ahead fetch ended): its readers take their restored
        # leases again all the same, and the input ends when they do. They skip what was
        # acknowledged and what the buffers hold, and read what was delivered but not
        # acknowledged at the checkpoint (or dropped by a filter, which drops it again).
        # Left untaken, those leases would wait for this rank's readers for ever, and
        # every other rank's reader at the end of the queue with them.
        checkpointer = current_checkpointer()
        again = checkpointer is not None and checkpointer.from_job
        if again and queue_tree.get("closed"):
            queue_tree = {**queue_tree, "closed": False}
        self._queue._checkpoint_restore(queue_tree)
        for index, comps in tree["pending"]:
            if isinstance(comps, dict) and "error" in comps:  # a look-ahead fetch's error
                error = restore_error(comps["error"])
                if again and isinstance(error, OutOfRangeError):
                    continue
                self._sources[index].pending.append(Failed(error))
                continue
            if isinstance(comps, dict):  # saved as record references
                snapshot = await self._queue._restore_outside(comps["record_refs"])
                comps = self._from_rows(snapshot["rows"])
            self._sources[index].pending.append(self._structure.pack(comps))
        if self._queue.is_closed():
            return  # the input had ended: what is stored drains
        self._start_enqueue_steps(self._sources, threads_per_source)

    def _start_enqueue_steps(self, sources: list[Source], threads_per_source: int) -> None:
        """Start the QueueRunner: ``threads_per_source`` enqueue steps per source."""
        queue = self._queue
        flatten = self._structure_or_fail().flatten
        ops = [
            EnqueueStep(
                self._what,
                source,
                queue,
                flatten,
                enqueue_many=self._enqueue_many,
                keep_input=self._keep_input,
                dropped=self._dropped,
            )
            for source in sources
            for _ in range(threads_per_source)
        ]
        self._runner = QueueRunner(queue, ops)
        self._runner.start(coord=self._coord)

    def _checkpoint_save(self) -> dict[str, Any]:
        queue = self._queue
        header = {"what": self._what, "kind": self._kind, "batch_size": self._batch_size}
        counters = (self._dropped.value, self._batches)
        if queue is None:
            return {**header, "queue": None, "counters": counters}
        structure = self._structure_or_fail()
        pending: list[Any] = []
        for source in self._sources:
            # Examples in hand, oldest first (the first example, look-ahead fetches).
            for example in source.pending:
                if type(example) is Failed:
                    pending.append([source.index, {"error": save_error(example.error)}])
                    continue
                # A RecordBatch component is saved as what the queue makes of it: its
                # records, as strings.
                comps = [
                    record_strings(c) if isinstance(c, RecordBatch) else c
                    for c in structure.flatten(example)
                ]
                # An example in hand holds records too: saved as the queue saves its own.
                saved = queue._save_outside(self._rows(comps))
                if saved is not None:
                    pending.append([source.index, {"record_refs": saved}])
                else:
                    note_payload(self._what)
                    pending.append([source.index, comps])
        tree = {
            **header,
            "structure": structure.to_state(),
            "queue": queue._checkpoint_save(),
            "pending": pending,
            "counters": counters,
        }
        tail = self._steps.tail_state() if self._steps else None
        if tail is not None:
            tree["tail"] = tail
        return tree

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
        self._dropped.value, self._batches = dropped, batches
        self._restored_works = referenced_works(tree)
        tail = tree.get("tail")
        if tail is not None:
            joined, pushed, window = tail.get("joined"), tail.get("pushed"), tail.get("window")
            if not (
                isinstance(joined, int)
                and 0 <= joined <= batches
                and isinstance(pushed, list)
                and all(isinstance(p, dict) for p in pushed)
                and (window is None or isinstance(window, dict))
            ):
                raise InvalidArgumentError(f"{self._what}: malformed checkpoint of its tail")
            self._tail_restore = tail
        if tree["queue"] is not None:
            self._restore = tree

    def _rows(self, comps: list[Any]) -> dict[str, Any]:
        """Return an example's components as a typed queue's snapshot of its rows."""
        if not self._enqueue_many:
            return {"rows": [comps]}
        n = batch_len(comps[0])
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
        elif self._kind == "padding":
            # Only the rank is fixed: every dimension may vary and is padded per batch.
            shapes = [tuple(None for _ in s) for _, s in specs]
        else:
            shapes = [s for _, s in specs]
        return self._new_queue(dtypes, shapes)

    def _new_queue(self, dtypes: list[Any], shapes: list[Shape]) -> Any:
        capacity = self._capacity
        session = current_session()
        deterministic = session is not None and session.deterministic
        refs = self._queue_record_refs()
        with owned_resources():  # saved with the batcher's checkpoint
            if self._kind == "shuffle":
                if deterministic:
                    # Hand out a batch only from a full queue: which elements it holds
                    # then does not depend on how far the filling task ran ahead.
                    assert capacity is not None
                    return deterministic_shuffle_queue(
                        capacity,
                        self._batch_size,
                        dtypes,
                        shapes,
                        seed=self._seed,
                        record_refs=refs,
                    )
                return RandomShuffleQueue(
                    capacity,
                    self._min_after_dequeue,
                    dtypes,
                    shapes,
                    seed=self._seed,
                    record_refs=refs,
                )
            if self._kind == "padding":
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
        steps = self._steps
        if steps is None:
            steps = self._steps = self._equal_steps()
        if steps:
            # Waiting here, a rank's acknowledging task holds no step (see input_waits).
            waiter = input_waits.enter() if input_waits.watched else None
            try:
                comps = await steps.next()
            finally:
                input_waits.leave(waiter)
            self._batches += 1
            ranked: BatchT = self._structure_or_fail().pack(comps)
            return ranked if self._finish is None else self._finish(ranked)
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
        # Synchronous, so a batch taken out of the queue is never lost to a cancellation.
        return batch if self._finish is None else self._finish(batch)

    def _finish_with(self, finish: Callable[[Any], Any]) -> None:
        """Hand out ``finish(batch)`` instead of each batch (called in the caller's task,
        before the first batch is taken): the library's own pipelines queue a compact
        form of their examples, which ``finish`` expands, to keep the queue small."""
        self._finish = finish

    def _equal_steps(self) -> StepSource | Literal[False]:
        """The ranked session's step source for this batcher, or ``False`` (local)."""
        backend = self._steps_backend
        make = getattr(backend, "equal_steps", None)
        if make is None:
            return False
        steps: StepSource | None = make(self, self._remainder)
        return False if steps is None else steps

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
        if self._kind == "shuffle" and capacity is not None:
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
            examples_dropped=self._dropped.value,
            batches_dequeued=self._batches,
            **self._steps_statistics(),
        )

    def _steps_statistics(self) -> dict[str, int]:
        steps = self._steps
        if not steps:
            return {}
        return {
            "examples_padded": steps.padded,
            "last_batch_padding": steps.last_padding,
            "remainder_dropped": steps.dropped,
        }

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
