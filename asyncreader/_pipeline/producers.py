"""Input producers: queues refilled epoch after epoch with the rows of an input.

``string_input_producer`` (file names for readers), ``range_input_producer`` (indices),
``slice_input_producer`` (aligned rows of several arrays) and the general
``input_producer`` each make a FIFOQueue and a QueueRunner with **one** task. Each step of
that task enqueues one whole epoch — the input's rows, freshly permuted when
``shuffle=True`` — with a single ``enqueue_many``, so epochs never interleave; after
``num_epochs`` epochs the step raises :class:`~asyncreader.OutOfRangeError`, the runner
closes the queue, and consumers see ``OutOfRangeError`` once it is drained.

The task's enqueue op is an :class:`~.input_producer.InputProducer`, which keeps the epoch
counter and the random generator and saves them in checkpoints; :func:`producer_of` finds
it from the queue. This module holds the functions that make the queue and start that
task, plus :class:`SliceProducer` (what ``slice_input_producer`` returns) and
``limit_epochs``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError
from .._queues.fifo import FIFOQueue
from .._runtime.checkpoint import owned_resources
from .._runtime.context import current_checkpointer, current_session
from .._runtime.queue_runner import QueueRunner
from .._runtime.resources import current_resources
from .common import resolve_coordinator
from .input_producer import InputProducer
from .structure import format_shape

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._runtime.coordinator import Coordinator
    from .input_producer import ProducerStatistics

T = TypeVar("T")

__all__ = [
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
    patterns: Sequence[str] | None = None,
) -> FIFOQueue:
    """Make the queue, the producer and its runner, and start the runner in the coordinator.

    ``inputs``: what identifies the input in checkpoints, when it is not ``rows``.
    ``patterns``: glob patterns the runner lists before the first epoch (``rows`` is then
    empty until they are listed).
    """
    backend = current_resources().backend
    if shared_name and backend is not None and backend.shares(FIFOQueue):
        # Each rank would run its own producer into the one shared queue: every item
        # would be enqueued once per rank.
        raise FailedPreconditionError(
            f"{what} with shared_name={shared_name!r} in a Session with a cluster is not "
            "available yet: fill a shared FIFOQueue from one rank (enqueue_many, then close)"
        )
    owner = resolve_coordinator(coord, what)
    session = current_session()
    if session is not None and session.deterministic and shuffle and seed is None:
        raise InvalidArgumentError(f"{what}: a deterministic Session needs a seed for shuffle=True")
    with owned_resources():  # the producer's state stands for the queue's contents
        queue = FIFOQueue(
            capacity, rows.dtype, tuple(rows.shape[1:]), name=name, shared_name=shared_name
        )
    checkpointer = current_checkpointer()
    producer = InputProducer(
        what,
        rows,
        queue,
        num_epochs=num_epochs,
        shuffle=shuffle,
        seed=seed,
        inputs=inputs,
        patterns=patterns,
        # The listed files are work items an unsigned restore may make readers read.
        on_expanded=checkpointer.allow_work_items if checkpointer is not None else None,
    )
    setattr(queue, _PRODUCER_ATTR, producer)
    if checkpointer is not None:
        if checkpointer.vetting:  # the names an unsigned restore may make readers read
            for array in producer._inputs:
                if array.dtype.kind == "O":
                    checkpointer.allow_work_items(array.reshape(-1).tolist())
        checkpointer.register(
            "producer", producer, InputProducer._checkpoint_save, InputProducer._checkpoint_restore
        )
        if patterns is not None:
            # Readers restored before the runner lists the files may read those the
            # checkpoint says the patterns matched, if the patterns can name them; the
            # listing then checks the checkpoint's list against the files found.
            checkpointer.allow_work_items(producer._claimed_files())
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
    glob: bool = False,
) -> FIFOQueue:
    """Return a queue of strings (typically file names) refilled epoch after epoch.

    With ``glob=True`` the strings are glob patterns, local (``data/train-*.tfrecord``,
    ``**`` across directories) or fsspec URLs (``s3://bucket/train-*``), as for
    :func:`~asyncreader.match_filenames_once`: the runner task lists the files they match
    before the first epoch (on the I/O executor: construction does no I/O), and the queue
    carries those files, sorted, each once, shuffled per epoch as usual. Checkpoints
    identify the input by that list of files. Without ``glob`` every string is taken as it
    is, as TensorFlow does, also one containing ``*``, ``?`` or ``[``.

    Args:
        string_tensor: A 1-D sequence of ``str`` / ``bytes`` (with ``glob=True``: of
            ``str`` or ``os.PathLike`` patterns).
        num_epochs: How many times to enqueue the strings; ``None`` for ever.
        shuffle: Permute the strings afresh each epoch.
        seed: Seed for the permutations; the same seed gives the same sequence.
        capacity: The queue's capacity.
        coord: The Coordinator to run the runner in; default the current one.
        shared_name: Share the queue under this name (see FIFOQueue).
        name: The queue's name, quoted in its error messages.
        glob: Take the strings as glob patterns and produce the files they match. A
            pattern that matches no file stops the pipeline with
            :class:`~asyncreader.NotFoundError` naming it (raised by the Coordinator
            and the Session, as any runner error; a reader waiting on the queue sees it
            closed). A string without wildcards names one file, which must exist; to
            name a file whose name holds wildcard characters, escape them
            (:func:`glob.escape`).

    Returns:
        The FIFOQueue (one string component, scalar shape). :func:`producer_of` returns
        its :class:`InputProducer`.

    Raises:
        InvalidArgumentError: ``string_tensor`` is empty
            (``string_input_producer requires a non-null input tensor``) or not 1-D;
            ``num_epochs <= 0`` (``num_epochs must be > 0 not <n>``); with ``glob=True``,
            a pattern that is not a ``str`` or path.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current,
            or ``shared_name`` was given in a Session with a cluster.
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
    patterns: list[str] | None = None
    if glob:
        patterns = [os.fspath(p) if isinstance(p, os.PathLike) else p for p in rows.tolist()]
        if not all(isinstance(p, str) for p in patterns):
            raise InvalidArgumentError(
                "string_input_producer with glob=True needs str or os.PathLike patterns, not "
                f"{next(p for p in patterns if not isinstance(p, str))!r}"
            )
        rows = np.empty(0, dtype=object)  # the files, once the runner has listed them
    return _start(
        what,
        rows,
        patterns=patterns,
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
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current,
            or ``shared_name`` was given in a Session with a cluster.
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
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current,
            or ``shared_name`` was given in a Session with a cluster.
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
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current,
            or ``shared_name`` was given in a Session with a cluster.
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
