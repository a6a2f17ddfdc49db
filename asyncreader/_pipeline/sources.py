"""Example sources and the enqueue step that feeds a batcher's queue from them.

``tensors`` (or each entry of ``tensors_list``) is an async callable returning one example,
or an async iterable of examples (an async generator, a :class:`SliceProducer`, ...).
:class:`Source` makes both uniform: ``await source.next()`` returns the next example or
raises :class:`~asyncreader.OutOfRangeError` at the end, and examples fetched ahead (the
first one, which fixes the queue's dtypes and shapes, and look-ahead fetches) wait in
:attr:`Source.pending`, oldest first.

:class:`EnqueueStep` is one runner task's enqueue op: fetch an example (a batch with
``enqueue_many=True``), apply ``keep_input`` (the ``maybe_`` variants), enqueue. It is the
batching hot path, so it binds everything it needs once.

Look-ahead. When an enqueue has to wait for room, the step fetches its source's next
example meanwhile (in a task of its own, a stage task of its own for checkpoints), so that
several runner tasks prepare examples in parallel instead of taking turns at the full
queue. The example lands in :attr:`Source.pending`, where the next call takes it: the
source is called in the same order as without look-ahead and examples are enqueued in the
same order, and a checkpoint saves it as an example in hand. An error the fetch raises is
held there too (:class:`Failed`) and raised by the call that would have fetched it. An
enqueue that does not wait, or a source whose last call returned at once (an example from
memory: :data:`AHEAD_MIN_SECONDS`), takes none of this path.

A :class:`~asyncreader.RecordBatch` result (``read_batch``) with ``enqueue_many=True`` is
the example ``(keys, values)``, exactly what ``read_up_to`` returns: :class:`Source` turns
it into that tuple of two string arrays as it fetches it, so everything downstream (the
layout, ``keep_input``, checkpoints, ``record_refs``) sees a ``read_up_to`` result. Without
``enqueue_many`` it is refused: a batch of records is not one example.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterable, AsyncIterator, Callable
from time import perf_counter
from typing import TYPE_CHECKING, Any, Final

import anyio
import numpy as np

from .. import _errors
from .._errors import AsyncReaderError, InvalidArgumentError, OutOfRangeError
from .._queues.elements import record_components, record_strings
from .._records.batch import RecordBatch
from .._runtime.checkpoint import StageTask, current_stage
from .._runtime.context import current_checkpointer
from .structure import format_shape

if TYPE_CHECKING:
    from .._queues.base import QueueBase
    from .._runtime.checkpoint import Checkpointer

__all__ = [
    "AHEAD_MIN_SECONDS",
    "NOTHING",
    "DropCount",
    "EnqueueStep",
    "ExampleSource",
    "Failed",
    "restore_error",
    "save_error",
    "Source",
    "as_keep",
    "batch_len",
    "check_keep_input",
]

#: What a ``tensors`` argument may be.
ExampleSource = Callable[[], Any] | AsyncIterable[Any]

#: Example types that are not a RecordBatch.
_EXAMPLES: Final = frozenset({tuple, dict, list, np.ndarray, bytes, str, int, float})

#: A source call shorter than this (seconds) is not fetched ahead: starting the task that
#: would fetch it costs about as much (a source that returns examples from memory).
AHEAD_MIN_SECONDS: Final = 50e-6

#: A marker for "no example" (e.g. before the first one was fetched).
NOTHING: Any = object()


class Failed:
    """An error a look-ahead fetch raised, held in :attr:`Source.pending` in place of the
    example until the call that would have fetched it raises it.

    Attributes:
        error: The exception.
    """

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __repr__(self) -> str:
        return f"<Failed {self.error!r}>"


def save_error(error: Exception) -> list[Any]:
    """Return a held error as a checkpoint tree: its class name and fields."""
    if isinstance(error, AsyncReaderError):
        return [type(error).__name__, error.message, error.work_item, error.record, error.offset]
    return [type(error).__name__, str(error), None, None, None]


def restore_error(tree: Any) -> AsyncReaderError:
    """Rebuild an error :func:`save_error` saved.

    asyncreader's own errors come back as themselves; any other exception as an
    :class:`~asyncreader.AsyncReaderError` naming its type, since a checkpoint names no
    code to run.

    Raises:
        InvalidArgumentError: the tree is malformed.
    """
    try:
        name, message, work_item, record, offset = tree
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"malformed held error in a checkpoint: {tree!r}") from None
    cls = getattr(_errors, str(name), None) if str(name) in _errors.__all__ else None
    if isinstance(cls, type) and issubclass(cls, AsyncReaderError):
        return cls(str(message), work_item=work_item, record=record, offset=offset)
    return AsyncReaderError(f"the example source raised {name}: {message}")


def as_source(
    source: object, where: str
) -> tuple[Callable[[], Any] | None, AsyncIterator[Any] | None, bool]:
    """Classify an example source: ``(async callable, None, is a coroutine function)`` or
    ``(None, its async iterator, False)``.

    Raises:
        InvalidArgumentError: ``source`` is an async generator function rather than a
            generator, or neither an async callable nor an async iterable (the message
            starts with ``where``).
    """
    if inspect.isasyncgenfunction(source):
        name = getattr(source, "__name__", "source")
        raise InvalidArgumentError(
            f"{where} got the async generator function {name!r}: pass the generator "
            f"itself ({name}()), or an async callable returning one example per call"
        )
    if callable(source):
        # Async functions skip the awaitable check on every call.
        coro = inspect.iscoroutinefunction(source) or inspect.iscoroutinefunction(
            type(source).__call__
        )
        return source, None, coro
    if hasattr(source, "__aiter__"):
        return None, source.__aiter__(), False
    raise InvalidArgumentError(
        f"{where} takes an async callable or an async iterable of examples, "
        f"not {type(source).__name__}"
    )


class Source:
    """One example source, made uniform: ``await next()`` or OutOfRangeError at the end.

    Raises:
        InvalidArgumentError: (at construction) ``source`` is an async generator function
            rather than a generator, or neither an async callable nor an async iterable.
    """

    __slots__ = (
        "_call",
        "_coro",
        "_exhausted",
        "_iter",
        "_lock",
        "_many",
        "_what",
        "index",
        "pending",
        "slow",
    )

    def __init__(self, source: object, index: int, what: str, *, enqueue_many: bool) -> None:
        self._call: Callable[[], Any] | None = None
        self._iter: AsyncIterator[Any] | None = None
        self._lock: anyio.Lock | None = None
        self._exhausted = False
        #: Examples fetched ahead, oldest first; a :class:`Failed` holds an error instead.
        self.pending: list[Any] = []
        #: Whether the last source call took long enough for a fetch ahead to pay.
        self.slow = False
        self.index = index
        self._what = what
        self._many = enqueue_many
        call, iterator, self._coro = as_source(source, f"{what}()")
        if call is not None:
            self._call = call
        else:
            self._iter = iterator
            # Several tasks may share one iterator; an async generator can't be re-entered.
            self._lock = anyio.Lock()

    async def next(self) -> Any:
        """Return the oldest pending example if there is one, else the source's next example.

        A :class:`~asyncreader.RecordBatch` comes back as the tuple ``(keys, values)``.

        Raises:
            OutOfRangeError: the source is exhausted.
            InvalidArgumentError: the source returned a RecordBatch without
                ``enqueue_many``.
            Exception: whatever the source raised, also when a look-ahead fetch raised it
                (then here, where it would have been fetched).
        """
        if self.pending:
            example = self.pending.pop(0)
            if type(example) is Failed:
                raise example.error
            return example
        start = perf_counter()
        example = await self._fetch()
        self.slow = perf_counter() - start >= AHEAD_MIN_SECONDS
        return example

    async def fetch_ahead(self) -> None:
        """Fetch the source's next example into :attr:`pending`; hold an error there too."""
        start = perf_counter()
        try:
            example = await self._fetch()
        except Exception as exc:
            self.pending.append(Failed(exc))
        else:
            self.pending.append(example)
            self.slow = perf_counter() - start >= AHEAD_MIN_SECONDS

    async def _fetch(self) -> Any:
        if self._exhausted:
            raise OutOfRangeError(f"example source {self.index} is exhausted")
        if self._coro:
            result = await self._call()  # type: ignore[misc]
        elif self._call is not None:
            result = self._call()
            if inspect.isawaitable(result):
                result = await result
        else:
            assert self._iter is not None
            assert self._lock is not None
            async with self._lock:
                if self._exhausted:
                    raise OutOfRangeError(f"example source {self.index} is exhausted")
                try:
                    result = await self._iter.__anext__()
                except StopAsyncIteration:
                    self._exhausted = True
                    raise OutOfRangeError(f"example source {self.index} is exhausted") from None
        # (the common example types skip the RecordBatch check: it is an abstract
        # Sequence check, comparatively slow)
        if type(result) not in _EXAMPLES and isinstance(result, RecordBatch):
            return self._records(result)
        return result

    def _records(self, batch: RecordBatch) -> tuple[Any, Any]:
        if not self._many:
            raise InvalidArgumentError(
                f"{self._what}(): example source {self.index} returned a RecordBatch, a "
                "batch of records (keys, values), not one example: pass enqueue_many=True"
            )
        return record_components(batch)


def check_keep_input(keep_input: object, enqueue_many: bool) -> object:
    """Validate a static ``keep_input``; a callable is checked on each result instead."""
    if callable(keep_input):
        return keep_input
    return as_keep(keep_input, enqueue_many)


def as_keep(keep_input: object, enqueue_many: bool) -> bool | np.ndarray[Any, Any]:
    """Return ``keep_input`` as a bool, or a bool vector with ``enqueue_many``.

    Raises:
        InvalidArgumentError: it is not boolean, has more than one dimension, or is a
            vector without ``enqueue_many``.
    """
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


class DropCount:
    """Examples ``keep_input`` turned away, counted by all enqueue steps of one batcher."""

    __slots__ = ("value",)

    def __init__(self, value: int = 0) -> None:
        self.value = value


class EnqueueStep:
    """One runner task's enqueue op: fetch an example (or a batch) and enqueue it.

    Made once the queue exists; binds what the hot path needs so each call does a few
    attribute reads, one source call and one enqueue. An enqueue that has to wait for room
    fetches the source's next example meanwhile (see the module docstring: look-ahead).
    """

    __slots__ = (
        "_dropped",
        "_enqueue",
        "_flatten",
        "_keep_input",
        "_many",
        "_source",
        "_waits",
        "_what",
    )

    def __init__(
        self,
        what: str,
        source: Source,
        queue: QueueBase[Any],
        flatten: Callable[[Any], tuple[Any, ...]],
        *,
        enqueue_many: bool,
        keep_input: object,
        dropped: DropCount,
    ) -> None:
        self._what = what
        self._source = source
        self._flatten = flatten
        self._many = enqueue_many
        self._keep_input = keep_input
        self._dropped = dropped
        self._enqueue = queue.enqueue_many if self._many else queue.enqueue
        self._waits = queue._enqueue_waits

    async def __call__(self) -> None:
        """Enqueue the source's next example (or batch) unless ``keep_input`` rejects it.

        Raises:
            OutOfRangeError: the source is exhausted (the runner then ends this task).
            InvalidArgumentError: a ``keep_input`` callable returned something invalid.
        """
        example = await self._source.next()
        comps = self._flatten(example)
        keep = self._keep_input
        if keep is not True:
            if callable(keep):
                keep = keep(example)
                if inspect.isawaitable(keep):
                    keep = await keep
                keep = as_keep(keep, self._many)
            if keep is False:
                self._dropped.value += batch_len(comps[0]) if self._many else 1
                await anyio.lowlevel.checkpoint()
                return
            if keep is not True:
                comps = _select_rows(comps, keep)  # type: ignore[arg-type]
                self._dropped.value += len(keep) - len(comps[0])  # type: ignore[arg-type]
        source = self._source
        if (
            source.slow
            and not source.pending
            and self._waits(batch_len(comps[0]) if self._many else 1)
        ):
            await self._enqueue_fetching(comps)
        else:
            await self._enqueue(comps)

    async def _enqueue_fetching(self, comps: tuple[Any, ...]) -> None:
        """Enqueue ``comps``, which waits for room, while fetching the next example.

        The step returns once both are done, so no task outlives it; a failed or
        cancelled enqueue (a closed queue, a stop) cancels the fetch.
        """
        pause = current_checkpointer()
        if pause is not None and pause.paused:
            # A checkpoint is being taken: start nothing new.
            await self._enqueue(comps)
            return
        failure: Exception | None = None
        stage = current_stage()
        ahead = None if pause is None else StageTask(self._ahead_name, None)
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._fetch_ahead, pause, ahead)
                try:
                    await self._enqueue(comps)
                except Exception as exc:
                    # Raised after the task group, so that it is not wrapped in a group.
                    failure = exc
                    tg.cancel_scope.cancel()
                else:
                    if stage is not None:
                        # Its example is enqueued: while it waits for the fetch, it holds
                        # only what the fetch holds. A fetch whose reader waits for work
                        # (a rank at the end of a shared queue, while the other ranks
                        # wait in a job checkpoint for this one) lets a checkpoint go on.
                        stage.follows = ahead
        finally:
            if stage is not None:
                stage.follows = None
        if failure is not None:
            raise failure

    @property
    def _ahead_name(self) -> str:
        return f"{self._what}-source-{self._source.index}-ahead"

    async def _fetch_ahead(self, pause: Checkpointer | None, ahead: StageTask | None) -> None:
        if pause is None:
            await self._source.fetch_ahead()
            return
        # A stage task of its own: settled only while blocked in a queue operation (a
        # reader waiting for work), so a checkpoint waits for an example being made and
        # then saves it as an example in hand.
        with pause.stage(self._ahead_name, task=ahead):
            await self._source.fetch_ahead()

    def __repr__(self) -> str:
        return f"<enqueue step of {self._what} source={self._source.index}>"


def batch_len(component: Any) -> int:
    """Return the length of an ``enqueue_many`` component's first dimension (1 for a scalar)."""
    if isinstance(component, RecordBatch):
        return len(component)
    shape = component.shape if isinstance(component, np.ndarray) else np.shape(component)
    return int(shape[0]) if shape else 1


def _component_array(component: Any) -> np.ndarray[Any, Any]:
    """Return an ``enqueue_many`` component as an array whose rows can be selected.

    Strings become an ``object`` array of the very values: numpy's own choice for a list
    of ``bytes`` (a fixed-width ``S`` array) would drop each value's trailing NUL bytes.
    """
    if isinstance(component, np.ndarray):
        return component
    if isinstance(component, RecordBatch):
        return record_strings(component)
    array = np.asarray(component)
    if array.dtype.kind in "SU":
        array = np.array(component, dtype=object)
    return array


def _select_rows(comps: tuple[Any, ...], mask: np.ndarray[Any, Any]) -> tuple[Any, ...]:
    out = []
    for i, comp in enumerate(comps):
        array = _component_array(comp)
        if array.ndim == 0 or len(array) != len(mask):
            raise InvalidArgumentError(
                f"`keep_input` has {len(mask)} entries but component {i} has shape "
                f"{format_shape(array.shape)}"
            )
        out.append(array[mask])
    return tuple(out)
