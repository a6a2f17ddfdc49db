"""Input producers: queues refilled epoch after epoch with the rows of an input.

``string_input_producer`` (file names for readers), ``range_input_producer`` (indices),
``slice_input_producer`` (aligned rows of several arrays) and the general
``input_producer`` each make a FIFOQueue and a QueueRunner with **one** task. Each step of
that task enqueues one whole epoch — the input's rows, freshly permuted when
``shuffle=True`` — with a single ``enqueue_many``, so epochs never interleave; after
``num_epochs`` epochs the step raises :class:`~asyncreader.OutOfRangeError`, the runner
closes the queue, and consumers see ``OutOfRangeError`` once it is drained.

The task's enqueue op is an :class:`InputProducer`. It keeps the epoch counter and the
random generator, and can report and restore them (:meth:`InputProducer.state`,
:meth:`InputProducer.restore`) so a checkpoint can resume a pipeline where it stopped.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError
from .._runtime.checkpoint import owned_resources
from .._runtime.context import current_checkpointer, current_session
from .common import resolve_coordinator
from .structure import format_shape

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._queues.fifo import FIFOQueue
    from .._runtime.coordinator import Coordinator

T = TypeVar("T")

__all__ = [
    "InputProducer",
    "ProducerState",
    "ProducerStatistics",
    "SliceProducer",
    "input_producer",
    "limit_epochs",
    "producer_of",
    "range_input_producer",
    "slice_input_producer",
    "string_input_producer",
]

# The attribute of a producer's queue naming the producer that fills it, for producer_of().
# The queue holds its producer (and the producer its queue): a cycle the garbage collector
# frees once both are unused. A registry keyed weakly by the queue would not do, since its
# value (the producer) keeps the key alive, so every producer's queue would be kept for ever.
_PRODUCER_ATTR = "_input_producer"


def _check_num_epochs(num_epochs: int | None) -> int | None:
    if num_epochs is None:
        return None
    if isinstance(num_epochs, bool) or not isinstance(num_epochs, (int, np.integer)):
        raise InvalidArgumentError(f"num_epochs must be an integer or None, not {num_epochs!r}")
    if num_epochs <= 0:
        raise InvalidArgumentError(f"num_epochs must be > 0 not {num_epochs}")
    return int(num_epochs)


def _shorten(value: object, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _fingerprint(rows: np.ndarray[Any, Any]) -> dict[str, Any]:
    """What identifies one input array in a producer's checkpoint.

    Strings (file names, above all) are stored as they are, so a restore over other
    inputs can say which one differs; other rows by count, dtype, row shape and a SHA-256
    of their bytes (object rows that are not strings: of their ``repr``).
    """
    flat = rows.reshape(-1)
    out: dict[str, Any] = {
        "count": len(rows),
        "dtype": rows.dtype.str,
        "shape": list(rows.shape[1:]),
    }
    if rows.dtype.kind == "O":
        items = flat.tolist()
        if all(isinstance(v, (str, bytes)) for v in items):
            out["values"] = items
            return out
        digest = hashlib.sha256()
        for v in items:
            digest.update(repr(v).encode("utf-8", "backslashreplace") + b"\0")
    else:
        digest = hashlib.sha256(memoryview(np.ascontiguousarray(rows).data).cast("B"))
    out["sha256"] = digest.hexdigest()
    return out


def _fingerprint_difference(saved: Any, mine: dict[str, Any], what: str) -> str | None:
    """Describe how a saved input fingerprint differs from ``mine`` (``None``: it doesn't)."""
    if not isinstance(saved, dict):
        return "the checkpoint's description of the input is malformed"
    if saved.get("count") != mine["count"]:
        return f"the checkpoint's {what} has {saved.get('count')!r} rows, this one {mine['count']}"
    for field in ("dtype", "shape"):
        if saved.get(field) != mine[field]:
            return (
                f"the checkpoint's {what} has rows of {field} {_shorten(saved.get(field))}, "
                f"this one {_shorten(mine[field])}"
            )
    if "values" in mine:
        theirs = saved.get("values")
        if not isinstance(theirs, list) or len(theirs) != len(mine["values"]):
            return f"the checkpoint's {what} is not stored as {mine['count']} strings"
        for index, (a, b) in enumerate(zip(theirs, mine["values"], strict=True)):
            if a != b:
                return (
                    f"{what} row {index} differs: the checkpoint has {_shorten(a)}, "
                    f"this one {_shorten(b)}"
                )
        return None
    if saved.get("sha256") != mine["sha256"]:
        return (
            f"the checkpoint's {what} has other contents (same {mine['count']} rows, dtype "
            "and shape, different SHA-256)"
        )
    return None


@dataclass(frozen=True, slots=True)
class ProducerState:
    """Where an :class:`InputProducer` stands, to resume it with :meth:`~InputProducer.restore`.

    Attributes:
        epoch: The epoch to resume (0-based; equals ``num_epochs`` when all are done).
        position: Rows of that epoch already handed to consumers.
        rng_state: The random generator's state at the start of that epoch (``None``
            without shuffling); the epoch's permutation is drawn from it again.
    """

    epoch: int
    position: int
    rng_state: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of an :class:`InputProducer` and its queue.

    Attributes:
        epochs_started: Epochs whose enqueue has begun (TensorFlow's epoch counter).
        epochs_completed: Epochs fully enqueued.
        num_epochs: The epoch limit (``None``: unlimited).
        epoch_size: Rows per epoch.
        size: Rows in the queue now.
        capacity: The queue's capacity.
        fill_fraction: ``size / capacity``: TensorFlow's ``fraction_of_<capacity>_full``.
        closed: Whether the queue is closed.
    """

    epochs_started: int
    epochs_completed: int
    num_epochs: int | None
    epoch_size: int
    size: int
    capacity: int | None
    fill_fraction: float
    closed: bool


class _Epoch:
    """Bookkeeping for one epoch that was (or is being) enqueued."""

    __slots__ = ("first_row", "index", "rng_state", "rows", "start")

    def __init__(self, index: int, start: int, first_row: int, rows: int, rng_state: Any) -> None:
        self.index = index  # which epoch
        self.start = start  # rows skipped at its beginning (a restored position)
        self.first_row = first_row  # its first row's number in the producer's output
        self.rows = rows  # rows enqueued for it
        self.rng_state = rng_state


class InputProducer:
    """The enqueue op of an input producer's QueueRunner: one call enqueues one epoch.

    Made by the producer functions; find it with :func:`producer_of`.

    Each call checks the epoch limit (raising :class:`~asyncreader.OutOfRangeError`
    ``Reached limit of <num_epochs>`` once it is reached), permutes the rows when
    shuffling, and enqueues them with one ``enqueue_many``.
    """

    __slots__ = (
        "__weakref__",
        "_completed",
        "_enqueuing",
        "_epoch",
        "_fingerprint",
        "_inputs",
        "_log",
        "_num_epochs",
        "_queue",
        "_resume_position",
        "_rng",
        "_rows",
        "_scheduled",
        "_shuffle",
        "_what",
    )

    def __init__(
        self,
        what: str,
        rows: np.ndarray[Any, Any],
        queue: FIFOQueue,
        *,
        num_epochs: int | None,
        shuffle: bool,
        seed: int | None,
        inputs: Sequence[np.ndarray[Any, Any]] | None = None,
    ) -> None:
        self._what = what
        self._rows = rows
        # What the checkpoint identifies: the rows, or the arrays a slice producer indexes.
        self._inputs = [rows] if inputs is None else list(inputs)
        self._fingerprint: list[dict[str, Any]] | None = None
        self._queue = queue
        self._num_epochs = num_epochs
        self._shuffle = bool(shuffle)
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._epoch = 0
        self._completed = 0
        self._resume_position = 0
        self._scheduled = 0
        self._log: deque[_Epoch] = deque()
        self._enqueuing = False

    @property
    def queue(self) -> FIFOQueue:
        """The queue this producer fills."""
        return self._queue

    async def __call__(self) -> None:
        """Enqueue the next epoch.

        Raises:
            OutOfRangeError: once ``num_epochs`` epochs have been enqueued.
            QueueClosedError: if the queue was closed meanwhile.
        """
        if self._num_epochs is not None and self._epoch >= self._num_epochs:
            await anyio.lowlevel.checkpoint()
            raise OutOfRangeError(f"Reached limit of {self._num_epochs}")
        rows = self._rows
        rng_state = None
        if self._shuffle:
            rng_state = self._rng.bit_generator.state
            rows = rows[self._rng.permutation(len(rows))]
        start, self._resume_position = self._resume_position, 0
        if start:
            rows = rows[start:]
        self._forget_delivered(self._delivered())
        self._log.append(_Epoch(self._epoch, start, self._scheduled, len(rows), rng_state))
        self._epoch += 1
        self._scheduled += len(rows)
        self._enqueuing = True
        try:
            await self._queue.enqueue_many(rows)
        finally:
            self._enqueuing = False
        self._completed += 1

    def _delivered(self) -> int:
        """Rows of this producer's output that consumers have taken from the queue.

        Read from the queue's ``total_dequeued`` counter (this producer being its only
        source). Without that counter it is exact only while no epoch is being enqueued;
        during an ``enqueue_many`` it then assumes nothing of the current epoch was taken
        (so resuming repeats rows rather than skipping any).
        """
        stats = getattr(self._queue, "statistics", None)
        total = getattr(stats(), "total_dequeued", None) if stats is not None else None
        if isinstance(total, int):
            return total
        size = int(self._queue.size())
        if not self._enqueuing:
            return max(0, self._scheduled - size)
        return max(0, self._log[-1].first_row - size)

    def state(self) -> ProducerState:
        """Return where consumers stand in this producer's output.

        The state names the first row no consumer has taken: its epoch, its position in
        that epoch and the generator state that epoch's permutation came from. Give it to
        :meth:`restore` on a fresh producer with the same input and ``seed`` to continue
        from there. Assumes this producer is the queue's only source. The position
        is exact whenever the queue counts its dequeues (asyncreader's queues do).
        """
        delivered = self._delivered()
        self._forget_delivered(delivered)
        if self._log:
            entry = self._log[0]
            return ProducerState(
                epoch=entry.index,
                position=entry.start + (delivered - entry.first_row),
                rng_state=entry.rng_state,
            )
        return ProducerState(
            epoch=self._epoch,
            position=self._resume_position,
            rng_state=self._rng.bit_generator.state if self._shuffle else None,
        )

    def _forget_delivered(self, delivered: int) -> None:
        """Drop the bookkeeping of epochs consumers have taken completely."""
        log = self._log
        while log and delivered >= log[0].first_row + log[0].rows:
            log.popleft()

    def restore(self, state: ProducerState) -> None:
        """Continue from ``state`` (from :meth:`state`) instead of the first epoch.

        Call it right after creating the producer, before its first epoch is enqueued
        (the runner task starts at the next checkpoint of the calling task).

        Raises:
            FailedPreconditionError: if an epoch has already been enqueued.
            InvalidArgumentError: if the state does not fit this producer (position past
                the end of an epoch, negative epoch, a missing generator state).
        """
        if self._epoch or self._enqueuing:
            raise FailedPreconditionError(
                f"{self._what}: restore() must come before the first epoch is enqueued"
            )
        n = len(self._rows)
        if state.epoch < 0 or not 0 <= state.position <= n:
            raise InvalidArgumentError(
                f"{self._what}: cannot restore epoch {state.epoch} position "
                f"{state.position} with {n} rows per epoch"
            )
        if self._shuffle:
            if state.rng_state is None:
                raise InvalidArgumentError(
                    f"{self._what}: a shuffling producer needs the state's rng_state"
                )
            try:
                self._rng.bit_generator.state = dict(state.rng_state)
            except (TypeError, ValueError, KeyError) as exc:
                raise InvalidArgumentError(f"{self._what}: invalid rng_state: {exc}") from exc
        epoch, position = state.epoch, state.position
        if position == n:  # that epoch was used up
            epoch, position = epoch + 1, 0
            if self._shuffle:
                self._rng.permutation(n)  # advance past the used-up epoch's permutation
        self._epoch = epoch
        self._resume_position = position

    def _inputs_fingerprint(self) -> list[dict[str, Any]]:
        # Computed once: the inputs do not change while the producer runs.
        if self._fingerprint is None:
            self._fingerprint = [_fingerprint(a) for a in self._inputs]
        return self._fingerprint

    def _checkpoint_save(self) -> dict[str, Any]:
        state = self.state()
        return {
            "what": self._what,
            "rows": len(self._rows),
            "shuffle": self._shuffle,
            "inputs": self._inputs_fingerprint(),
            "epoch": state.epoch,
            "position": state.position,
            "rng_state": state.rng_state,
        }

    def _checkpoint_restore(self, tree: Any) -> None:
        if isinstance(tree, dict) and "epoch" in tree and "inputs" not in tree:
            raise InvalidArgumentError(
                f"{self._what}: the checkpoint does not identify the producer's input (it "
                "was written by an older asyncreader), so a restore cannot check that it "
                "continues over the same input"
            )
        try:
            what, rows, shuffle = tree["what"], tree["rows"], tree["shuffle"]
            inputs = tree["inputs"]
            state = ProducerState(tree["epoch"], tree["position"], tree["rng_state"])
        except (TypeError, KeyError):
            raise InvalidArgumentError(f"{self._what}: malformed checkpoint") from None
        if what != self._what:
            raise InvalidArgumentError(
                f"checkpoint of a {_shorten(what)} does not fit this {self._what}"
            )
        self._check_inputs(inputs)
        if (
            rows != len(self._rows)
            or not isinstance(state.epoch, int)
            or not isinstance(state.position, int)
        ):
            raise InvalidArgumentError(
                f"{self._what}: malformed checkpoint (rows {_shorten(rows)}, epoch "
                f"{_shorten(state.epoch)}, position {_shorten(state.position)})"
            )
        if shuffle is not self._shuffle:
            raise InvalidArgumentError(
                f"checkpoint of a {what} with shuffle={shuffle!r} does not fit this one with "
                f"shuffle={self._shuffle}: the saved position is in another order of the rows"
            )
        self.restore(state)

    def _check_inputs(self, saved: Any) -> None:
        """Refuse a checkpoint whose producer ran over other inputs than this one.

        Raises:
            InvalidArgumentError: naming the first difference.
        """
        mine = self._inputs_fingerprint()
        if not isinstance(saved, list) or len(saved) != len(mine):
            count = len(saved) if isinstance(saved, list) else "?"
            raise InvalidArgumentError(
                f"checkpoint of a {self._what} over {count} input arrays does not fit this "
                f"one over {len(mine)}"
            )
        for index, (theirs, ours) in enumerate(zip(saved, mine, strict=True)):
            label = "input" if len(mine) == 1 else f"input array {index}"
            difference = _fingerprint_difference(theirs, ours, label)
            if difference is not None:
                raise InvalidArgumentError(
                    f"{self._what}: the checkpoint was taken over other inputs: {difference}. "
                    "Restore it over the same inputs, in the same order."
                )

    def statistics(self) -> ProducerStatistics:
        """Return a snapshot of the epoch counters and the queue's fill level."""
        size = int(self._queue.size())
        capacity = self._queue.capacity
        return ProducerStatistics(
            epochs_started=self._epoch,
            epochs_completed=self._completed,
            num_epochs=self._num_epochs,
            epoch_size=len(self._rows),
            size=size,
            capacity=capacity,
            fill_fraction=size / capacity if capacity else 0.0,
            closed=bool(self._queue.is_closed()),
        )

    def fill_fraction(self) -> float:
        """Return ``size / capacity`` of the queue (TensorFlow's ``fraction_of_N_full``)."""
        return self.statistics().fill_fraction

    def __repr__(self) -> str:
        s = self.statistics()
        limit = "inf" if s.num_epochs is None else str(s.num_epochs)
        return (
            f"<InputProducer {self._what} epoch={s.epochs_started}/{limit} "
            f"rows={s.epoch_size} size={s.size}/{s.capacity} closed={s.closed}>"
        )


def producer_of(queue: Any) -> InputProducer:
    """Return the :class:`InputProducer` filling ``queue`` (made by a producer function).

    Raises:
        InvalidArgumentError: if no input producer fills ``queue``.
    """
    if isinstance(queue, SliceProducer):
        return queue.producer
    producer = getattr(queue, _PRODUCER_ATTR, None)
    if not isinstance(producer, InputProducer):
        raise InvalidArgumentError(f"no input producer fills {queue!r}")
    return producer


def _start(
    what: str,
    rows: np.ndarray[Any, Any],
    *,
    num_epochs: int | None,
    shuffle: bool,
    seed: int | None,
    capacity: int | None,
    coord: Coordinator | None,
    shared_name: str | None,
    name: str | None,
    inputs: Sequence[np.ndarray[Any, Any]] | None = None,
) -> FIFOQueue:
    """Make the queue, the producer and its runner, and start the runner in the coordinator.

    ``inputs``: what identifies the input in checkpoints, when it is not ``rows``.
    """
    from .. import FIFOQueue, QueueRunner

    owner = resolve_coordinator(coord, what)
    session = current_session()
    if session is not None and session.deterministic and shuffle and seed is None:
        raise InvalidArgumentError(f"{what}: a deterministic Session needs a seed for shuffle=True")
    with owned_resources():  # the producer's state stands for the queue's contents
        queue = FIFOQueue(
            capacity, rows.dtype, tuple(rows.shape[1:]), name=name, shared_name=shared_name
        )
    producer = InputProducer(
        what, rows, queue, num_epochs=num_epochs, shuffle=shuffle, seed=seed, inputs=inputs
    )
    setattr(queue, _PRODUCER_ATTR, producer)
    checkpointer = current_checkpointer()
    if checkpointer is not None:
        if checkpointer.vetting:  # the names an unsigned restore may make readers read
            for array in producer._inputs:
                if array.dtype.kind == "O":
                    checkpointer.allow_work_items(array.reshape(-1).tolist())
        checkpointer.register(
            "producer", producer, InputProducer._checkpoint_save, InputProducer._checkpoint_restore
        )
    QueueRunner(queue, [producer]).start(coord=owner)
    return queue


def _as_rows(value: object, what: str) -> np.ndarray[Any, Any]:
    try:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
    except UnicodeError:  # bytes and str mixed, the bytes not ASCII: keep them as they are
        array = np.array(value, dtype=object)
    if array.dtype.kind in "SU":
        # Build text as objects from the original values: numpy's fixed-width bytes
        # dtype would drop trailing NUL bytes.
        array = array.astype(object) if value is array else np.array(value, dtype=object)
    if array.ndim == 0:
        raise InvalidArgumentError(
            f"{what} needs an input with at least one dimension, got a scalar"
        )
    if len(array) == 0:
        raise InvalidArgumentError(f"{what} requires a non-null input tensor")
    return array


def string_input_producer(
    string_tensor: Sequence[str | bytes] | np.ndarray[Any, Any],
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int | None = 32,
    *,
    coord: Coordinator | None = None,
    shared_name: str | None = None,
    name: str | None = None,
) -> FIFOQueue:
    """Return a queue of strings (typically file names) refilled epoch after epoch.

    Args:
        string_tensor: A 1-D sequence of ``str`` / ``bytes``.
        num_epochs: How many times to enqueue the strings; ``None`` for ever.
        shuffle: Permute the strings afresh each epoch.
        seed: Seed for the permutations; the same seed gives the same sequence.
        capacity: The queue's capacity.
        coord: The Coordinator to run the runner in; default the current one.
        shared_name: Share the queue under this name (see FIFOQueue).
        name: The queue's name, quoted in its error messages.

    Returns:
        The FIFOQueue (one string component, scalar shape). :func:`producer_of` returns
        its :class:`InputProducer`.

    Raises:
        InvalidArgumentError: ``string_tensor`` is empty
            (``string_input_producer requires a non-null input tensor``) or not 1-D;
            ``num_epochs <= 0`` (``num_epochs must be > 0 not <n>``).
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    what = "string_input_producer"
    epochs = _check_num_epochs(num_epochs)
    if string_tensor is None or (isinstance(string_tensor, (list, tuple)) and not string_tensor):
        raise InvalidArgumentError("string_input_producer requires a non-null input tensor")
    rows = _as_rows(string_tensor, "string_input_producer")
    if rows.ndim != 1:
        raise InvalidArgumentError(
            f"string_input_producer needs a 1-D input, got shape {format_shape(rows.shape)}"
        )
    if rows.dtype != np.dtype(object):
        raise InvalidArgumentError(f"string_input_producer needs strings, got {rows.dtype} values")
    return _start(
        what,
        rows,
        num_epochs=epochs,
        shuffle=shuffle,
        seed=seed,
        capacity=capacity,
        coord=coord,
        shared_name=shared_name,
        name=name,
    )


def range_input_producer(
    limit: int,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int | None = 32,
    *,
    coord: Coordinator | None = None,
    shared_name: str | None = None,
    name: str | None = None,
) -> FIFOQueue:
    """Return a queue of the ints ``0 .. limit - 1`` (int32), refilled epoch after epoch.

    The other arguments are as for :func:`string_input_producer`.

    Args:
        limit: How many indices per epoch (at least 1).

    Returns:
        The FIFOQueue (one int32 component, scalar shape).

    Raises:
        InvalidArgumentError: ``limit < 1`` (the input would be empty); ``num_epochs <= 0``.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    what = "range_input_producer"
    epochs = _check_num_epochs(num_epochs)
    if isinstance(limit, bool) or not isinstance(limit, (int, np.integer)):
        raise InvalidArgumentError(f"range_input_producer needs an integer limit, not {limit!r}")
    if limit < 1:
        raise InvalidArgumentError(
            f"range_input_producer requires a non-null input tensor (limit {limit})"
        )
    return _start(
        what,
        np.arange(int(limit), dtype=np.int32),
        num_epochs=epochs,
        shuffle=shuffle,
        seed=seed,
        capacity=capacity,
        coord=coord,
        shared_name=shared_name,
        name=name,
    )


def input_producer(
    input_tensor: object,
    element_shape: Sequence[int | None] | None = None,
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int | None = 32,
    *,
    coord: Coordinator | None = None,
    shared_name: str | None = None,
    name: str | None = None,
) -> FIFOQueue:
    """Return a queue of the rows of ``input_tensor``, refilled epoch after epoch.

    The other arguments are as for :func:`string_input_producer`.

    Args:
        input_tensor: An array (or nested sequence) whose first dimension indexes rows.
        element_shape: The row shape, checked against ``input_tensor.shape[1:]``.

    Returns:
        The FIFOQueue (one component of the input's dtype, strings as ``object``).

    Raises:
        InvalidArgumentError: the input is empty (``input_producer requires a non-null
            input tensor``) or a scalar; ``element_shape`` does not match the rows;
            ``num_epochs <= 0``.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    what = "input_producer"
    epochs = _check_num_epochs(num_epochs)
    if input_tensor is None:
        raise InvalidArgumentError("input_producer requires a non-null input tensor")
    rows = _as_rows(input_tensor, "input_producer")
    if element_shape is not None:
        want = tuple(element_shape)
        have = tuple(rows.shape[1:])
        if len(want) != len(have) or any(
            w is not None and w != h for w, h in zip(want, have, strict=True)
        ):
            raise InvalidArgumentError(
                f"input_producer: element_shape {format_shape(want)} does not match the "
                f"rows' shape {format_shape(have)}"
            )
    return _start(
        what,
        rows,
        num_epochs=epochs,
        shuffle=shuffle,
        seed=seed,
        capacity=capacity,
        coord=coord,
        shared_name=shared_name,
        name=name,
    )


class SliceProducer:
    """Aligned slices of several arrays, one row index per call: ``slice_input_producer``.

    TensorFlow's ``slice_input_producer`` returns a list of tensors that, evaluated,
    dequeue one index and gather that row of every input. Here that is an async callable:
    ``await slices()`` dequeues one index from :attr:`queue` and returns the rows of every
    input at that index, laid out as the inputs were given (a list gives a list, a tuple a
    tuple, a dict a dict). It is also an async iterable ending at the last epoch, and can
    be passed directly as the ``tensors`` of :func:`~asyncreader.batch`.
    """

    __slots__ = ("_keys", "_kind", "_tensors", "producer", "queue")

    def __init__(
        self, tensors: list[np.ndarray[Any, Any]], keys: tuple[Any, ...] | None, kind: type
    ) -> None:
        self._tensors = tensors
        self._keys = keys
        self._kind = kind
        #: The queue of row indices (a range producer's queue).
        self.queue: FIFOQueue
        #: The :class:`InputProducer` filling :attr:`queue`.
        self.producer: InputProducer

    async def __call__(self) -> Any:
        """Return the rows at the next index.

        Raises:
            OutOfRangeError: after the last epoch (the index queue is closed and empty).
        """
        index = await self.queue.dequeue()
        if isinstance(index, (tuple, list)):
            index = index[0]
        rows = [t[index] for t in self._tensors]
        if self._keys is not None:
            return dict(zip(self._keys, rows, strict=True))
        return tuple(rows) if self._kind is tuple else rows

    def __aiter__(self) -> SliceProducer:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self()
        except OutOfRangeError:
            raise StopAsyncIteration from None

    def statistics(self) -> ProducerStatistics:
        """Return the index producer's statistics."""
        return self.producer.statistics()

    def __repr__(self) -> str:
        return f"<SliceProducer tensors={len(self._tensors)} {self.producer!r}>"


def slice_input_producer(
    tensor_list: Sequence[object] | Mapping[Any, object],
    num_epochs: int | None = None,
    shuffle: bool = True,
    seed: int | None = None,
    capacity: int | None = 32,
    *,
    coord: Coordinator | None = None,
    shared_name: str | None = None,
    name: str | None = None,
) -> SliceProducer:
    """Return an async callable giving aligned rows of every array in ``tensor_list``.

    A range producer over the rows feeds one index per call; all arrays are sliced at that
    same index, so rows stay aligned. Each epoch visits every row once (in a fresh random
    order when ``shuffle``).

    The other arguments are as for :func:`string_input_producer`.

    Args:
        tensor_list: A list or tuple (or dict) of arrays with the same first dimension.

    Returns:
        A :class:`SliceProducer`: ``await s()`` returns one row of each array in the
        layout of ``tensor_list``; ``async for row in s`` iterates to the end.

    Raises:
        InvalidArgumentError: ``tensor_list`` is empty
            (``Expected at least one tensor in slice_input_producer().``); the arrays'
            first dimensions differ (TensorFlow fails later, at gather time) or are 0;
            ``num_epochs <= 0``.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    epochs = _check_num_epochs(num_epochs)
    keys: tuple[Any, ...] | None = None
    if isinstance(tensor_list, Mapping):
        keys = tuple(tensor_list)
        values = [tensor_list[k] for k in keys]
    else:
        values = list(tensor_list) if tensor_list is not None else []
    if not values:
        raise InvalidArgumentError("Expected at least one tensor in slice_input_producer().")
    arrays = [_as_rows(v, "slice_input_producer") for v in values]
    n = len(arrays[0])
    for i, array in enumerate(arrays[1:], start=1):
        if len(array) != n:
            raise InvalidArgumentError(
                "All tensors in slice_input_producer() must have the same size in the 0th "
                f"dimension. Tensor {i} has {len(array)}, and should have {n}"
            )
    owner = resolve_coordinator(coord, "slice_input_producer")
    slices = SliceProducer(arrays, keys, tuple if isinstance(tensor_list, tuple) else list)
    # A range producer over the row indices, whose checkpoint identifies the sliced arrays.
    slices.queue = _start(
        "slice_input_producer",
        np.arange(n, dtype=np.int32),
        num_epochs=epochs,
        shuffle=shuffle,
        seed=seed,
        capacity=capacity,
        coord=owner,
        shared_name=shared_name,
        name=name,
        inputs=arrays,
    )
    slices.producer = producer_of(slices.queue)
    return slices


class _EpochLimiter(Generic[T]):
    """The async callable returned by :func:`limit_epochs`."""

    __slots__ = ("_count", "_limit", "_value")

    def __init__(self, value: T, limit: int | None) -> None:
        self._value = value
        self._limit = limit
        self._count = 0

    async def __call__(self) -> T:
        await anyio.lowlevel.checkpoint()
        if self._limit is not None:
            if self._count >= self._limit:
                raise OutOfRangeError(f"Reached limit of {self._limit}")
            self._count += 1
        return self._value

    @property
    def count(self) -> int:
        """How many times the value was returned."""
        return self._count

    def __repr__(self) -> str:
        return f"<limit_epochs {self._count}/{self._limit}>"


def limit_epochs(tensor: T, num_epochs: int | None = None) -> Callable[[], Awaitable[T]]:
    """Return an async callable that returns ``tensor`` ``num_epochs`` times, then ends.

    Each call returns ``tensor``; the call after the ``num_epochs``-th raises
    :class:`~asyncreader.OutOfRangeError` (``Reached limit of <num_epochs>``). With
    ``num_epochs=None`` it never ends. Pass it as ``tensors`` to a batching function with
    ``enqueue_many=True`` to feed a fixed batch a number of times.

    Raises:
        InvalidArgumentError: ``num_epochs <= 0`` (``num_epochs must be > 0 not <n>``).
    """
    return _EpochLimiter(tensor, _check_num_epochs(num_epochs))
