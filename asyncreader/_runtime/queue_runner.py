"""QueueRunner: tasks that keep a queue filled, TensorFlow's ``tf.train.QueueRunner``.

A runner holds a queue and a list of *enqueue ops*, async callables that each put something
into the queue (typically: read a record, decode it, enqueue it). :meth:`QueueRunner.start`
gives every op its own task in a :class:`~asyncreader.Coordinator`; the task calls its op
again and again until the op raises :class:`~asyncreader.OutOfRangeError` or
:class:`~asyncreader.QueueClosedError` (the input is exhausted or the queue was closed).

* When the *last* task ends that way, the runner closes the queue, so consumers drain it and
  then see ``OutOfRangeError``: the end of input travels down the pipeline.
* On a stop request the runner closes the queue with ``cancel_pending_enqueues=True``, so
  producers blocked on a full queue wake and consumers elsewhere are not left waiting.
* Any other exception requests a stop of the coordinator with that exception (it is then
  re-raised when the coordinator's block ends) and is kept in
  :attr:`QueueRunner.exceptions_raised`.
* A task checks ``coord.should_stop()`` before every step and yields (passes a scheduling
  point) at least every :data:`YIELD_INTERVAL` steps, so an op that never blocks cannot
  hold the event loop, while ops that do block pay no extra scheduling round trip per step.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

from .._errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
    QueueClosedError,
)
from .._yields import yield_budget
from . import context

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable, Sequence

    from .checkpoint import Checkpointer, StageTask
    from .coordinator import Coordinator

__all__ = ["QueueRunner", "QueueRunnerStatistics"]

#: What ends a runner's task quietly when none are given: end of input, closed queue.
DEFAULT_QUEUE_CLOSED_EXCEPTION_TYPES: tuple[type[BaseException], ...] = (
    OutOfRangeError,
    QueueClosedError,
)

#: Steps between the scheduling points a task passes on its own (its yield budget). Ops
#: that block or use queues already yield (queues at least once in 256 operations); this
#: bounds how long an op that never yields can hold the event loop, without a scheduler
#: round trip per step, which would cost far more than a cheap op itself.
YIELD_INTERVAL = 64


@dataclass(frozen=True)
class QueueRunnerStatistics:
    """A snapshot of a :class:`QueueRunner`'s state.

    Attributes:
        name: The runner's name (its queue's name).
        enqueue_ops: How many enqueue ops (and so tasks per start) the runner has.
        tasks_running: How many of its enqueue tasks are running now.
        exceptions_raised: How many errors its tasks have raised since the last start.
        closed_queue: Whether the runner closed the queue after its last task ended.
    """

    name: str
    enqueue_ops: int
    tasks_running: int
    exceptions_raised: int
    closed_queue: bool


def _op_name(op: Callable[..., object], index: int) -> str:
    name = getattr(op, "__name__", None)
    return f"{index}-{name}" if isinstance(name, str) else str(index)


class QueueRunner:
    """Run enqueue ops for one queue in tasks, and close the queue at the end.

    Args:
        queue: The queue the ops fill; it must have an async ``close(cancel_pending_enqueues)``
            unless both ``close_op`` and ``cancel_op`` are given.
        enqueue_ops: Async callables taking no arguments, one task each.
        close_op: Async callable that closes the queue when the last task ended cleanly;
            defaults to ``queue.close()``.
        cancel_op: Async callable that closes the queue on a stop request; defaults to
            ``queue.close(cancel_pending_enqueues=True)``. As in TensorFlow, an error of
            either close is ignored: it is not raised, does not request a stop and is not
            in :attr:`exceptions_raised`.
        queue_closed_exception_types: Exception types that end a task quietly. ``None``
            means ``(OutOfRangeError, QueueClosedError)``; TensorFlow's default is
            ``OutOfRangeError`` alone, because its enqueue into a closed queue reports
            ``CANCELLED``, which is an ordinary error there.

    Raises:
        InvalidArgumentError: if ``queue`` is ``None`` or ``enqueue_ops`` is empty
            (``Must provide queue and enqueue_ops.``).
        TypeError: if an enqueue op, ``close_op`` or ``cancel_op`` is not callable, or
            ``queue_closed_exception_types`` is not a non-empty tuple of exception classes.
    """

    __module__ = "asyncreader"

    def __init__(
        self,
        queue: Any,
        enqueue_ops: Iterable[Callable[[], Awaitable[Any]]] | None,
        close_op: Callable[[], Awaitable[Any]] | None = None,
        cancel_op: Callable[[], Awaitable[Any]] | None = None,
        queue_closed_exception_types: tuple[type[BaseException], ...] | None = None,
    ) -> None:
        ops = list(enqueue_ops) if enqueue_ops is not None else []
        if queue is None or not ops:
            raise InvalidArgumentError("Must provide queue and enqueue_ops.")
        for op in ops:
            if not callable(op):
                raise TypeError(f"enqueue_ops must be async callables, not {op!r}")
        for label, given in (("close_op", close_op), ("cancel_op", cancel_op)):
            if given is not None and not callable(given):
                raise TypeError(f"{label} must be an async callable, not {given!r}")
        if queue_closed_exception_types is None:
            closed_types = DEFAULT_QUEUE_CLOSED_EXCEPTION_TYPES
        else:
            if not isinstance(queue_closed_exception_types, tuple) or not all(
                isinstance(t, type) and issubclass(t, BaseException)
                for t in queue_closed_exception_types
            ):
                raise TypeError(
                    "queue_closed_exception_types, when given, must be a tuple of exception "
                    f"classes, not {queue_closed_exception_types!r}"
                )
            if not queue_closed_exception_types:
                raise TypeError("queue_closed_exception_types must not be empty")
            closed_types = queue_closed_exception_types
        self._queue = queue
        self._enqueue_ops: list[Callable[[], Awaitable[Any]]] = ops
        self._close_op = close_op
        self._cancel_op = cancel_op
        self._closed_types = closed_types
        self._exceptions: list[BaseException] = []
        self._live = 0
        self._watcher = anyio.CancelScope()
        self._closed_queue = False

    @property
    def queue(self) -> Any:
        """The queue this runner fills."""
        return self._queue

    @property
    def enqueue_ops(self) -> Sequence[Callable[[], Awaitable[Any]]]:
        """The enqueue ops, one task each."""
        return tuple(self._enqueue_ops)

    @property
    def queue_closed_exception_types(self) -> tuple[type[BaseException], ...]:
        """The exception types that end a task quietly."""
        return self._closed_types

    @property
    def name(self) -> str:
        """The runner's name: its queue's ``name``, else its ``shared_name``, else the type."""
        for attr in ("name", "shared_name"):
            value = getattr(self._queue, attr, None)
            if isinstance(value, str) and value:
                return value
        return type(self._queue).__name__

    @property
    def exceptions_raised(self) -> list[BaseException]:
        """Errors the runner's tasks raised since the last :meth:`start`.

        Unlike TensorFlow, which keeps them only when no coordinator is used, the errors
        are listed here *and* reported to the coordinator.
        """
        return list(self._exceptions)

    def start(self, coord: Coordinator | None = None) -> list[str]:
        """Start one task per enqueue op, plus the close-on-stop watcher, in ``coord``.

        As TensorFlow's ``create_threads``: if tasks from an earlier start are still
        running, nothing is started. Otherwise :attr:`exceptions_raised` is cleared first.

        Args:
            coord: The coordinator to run in; defaults to the current one (the innermost
                ``async with Coordinator()`` or ``async with Session()`` block).

        Returns:
            The names of the tasks started (empty when tasks were still running).

        Raises:
            FailedPreconditionError: if no coordinator is given and none is current, or the
                coordinator's block is not running.
        """
        coord = coord if coord is not None else context.current_coordinator()
        if coord is None:
            raise FailedPreconditionError(
                f"QueueRunner '{self.name}' needs a Coordinator to start in: call start() "
                "inside 'async with Coordinator()' or 'async with Session()', or pass coord="
            )
        if self._live > 0:
            return []
        names = [
            f"QueueRunner-{self.name}-{_op_name(op, i)}" for i, op in enumerate(self._enqueue_ops)
        ]
        watcher = f"QueueRunner-{self.name}-close_on_stop"
        # Probe the coordinator before changing any state, so a failed start leaves none.
        scope = anyio.CancelScope()
        coord.start_soon(self._close_on_stop, coord, scope, name=watcher)
        self._watcher = scope
        self._exceptions.clear()
        self._closed_queue = False
        self._live = len(self._enqueue_ops)
        coord._add_runner(self)
        for op, name in zip(self._enqueue_ops, names, strict=True):
            coord.start_soon(self._run, coord, op, name=name)
        return [*names, watcher]

    async def _run(self, coord: Coordinator, op: Callable[[], Awaitable[Any]]) -> None:
        pause = context.current_checkpointer()
        if pause is None:
            await self._loop(coord, op, None, None)
            return
        with pause.stage(f"QueueRunner-{self.name}", self._queue) as stage:
            await self._loop(coord, op, pause, stage)

    async def _loop(
        self,
        coord: Coordinator,
        op: Callable[[], Awaitable[Any]],
        pause: Checkpointer | None,
        stage: StageTask | None,
    ) -> None:
        ended_cleanly = False
        yield_due = yield_budget(YIELD_INTERVAL)
        try:
            while not coord.should_stop():
                if pause is not None and pause.paused:
                    # A checkpoint is being taken: hold nothing until it is.
                    await pause.park(stage)  # type: ignore[arg-type]
                    if coord.should_stop():
                        break
                try:
                    await op()
                except self._closed_types:
                    ended_cleanly = True
                    return
                except Exception as exc:
                    self._exceptions.append(exc)
                    coord.request_stop(exc)
                    return
                if yield_due():
                    # An op that never blocks must still let the rest of the loop run.
                    await anyio.lowlevel.checkpoint()
        finally:
            self._live -= 1
            last = self._live == 0
            # After a stop request the close-on-stop watcher closes the queue instead.
            if last and ended_cleanly and not coord.should_stop():
                await self._close(self._close_op, cancel_pending=False)
                self._closed_queue = True
                self._watcher.cancel()

    async def _close_on_stop(self, coord: Coordinator, scope: anyio.CancelScope) -> None:
        finished = False
        try:
            with scope:  # cancelled by the last task when it closed the queue
                await coord.wait_for_stop()
            finished = self._closed_queue and not coord.should_stop()
        finally:
            # Stopped, or cancelled with the coordinator: close so that nobody waits forever.
            if not finished:
                await self._close(self._cancel_op, cancel_pending=True)

    async def _close(
        self, op: Callable[[], Awaitable[Any]] | None, *, cancel_pending: bool
    ) -> None:
        with anyio.CancelScope(shield=True):
            try:
                if op is not None:
                    await op()
                else:
                    await self._queue.close(cancel_pending_enqueues=cancel_pending)
            except Exception:  # as in TensorFlow, a failed close is ignored
                pass

    def statistics(self) -> QueueRunnerStatistics:
        """Return a snapshot of the runner's state."""
        return QueueRunnerStatistics(
            name=self.name,
            enqueue_ops=len(self._enqueue_ops),
            tasks_running=self._live,
            exceptions_raised=len(self._exceptions),
            closed_queue=self._closed_queue,
        )

    def __repr__(self) -> str:
        return (
            f"<QueueRunner {self.name!r} enqueue_ops={len(self._enqueue_ops)} "
            f"running={self._live} exceptions={len(self._exceptions)}>"
        )
