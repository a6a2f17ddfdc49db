"""The Coordinator: a task group plus a stop flag, TensorFlow's ``tf.train.Coordinator`` for tasks.

TensorFlow's coordinator lets threads ask each other to stop and reports the first error at
``join()``. Here the threads are anyio tasks owned by the coordinator's task group, and the
end of the ``async with`` block is the join::

    async with ar.Coordinator() as coord:
        qr.start()                      # runner tasks in this coordinator
        try:
            while not coord.should_stop():
                await consume(await queue.dequeue())
        except ar.OutOfRangeError:
            pass                        # end of input
        coord.request_stop()            # end runners that would otherwise run forever

Behaviour:

* **Stopping cancels.** A stop request cancels the background tasks at once (tasks blocked in
  a queue operation, a sleep or a socket wait end immediately; a call running on a worker
  thread ends when the thread returns), where TensorFlow could only wait for threads to poll
  ``should_stop()``. With ``stop_grace_period=s`` the tasks get ``s`` seconds
  to finish on their own first (TensorFlow's ``join(stop_grace_period_secs=...)``), which
  suits producers that should finish the item in hand; ``None`` waits for them indefinitely.
* **Errors stop everything.** A task that raises requests a stop with its exception. The
  first exception that is not a clean stop is recorded; later ones never replace it. A real
  error also cancels the body of the ``async with`` block (it cannot succeed any more), while
  a clean stop leaves the body running so that it can finish its work.
* **One exception comes out.** Leaving the block waits for every task. Then, in this order:
  a ``KeyboardInterrupt`` / ``SystemExit`` from anywhere, the recorded error, an exception
  of the body itself, and finally the event loop's cancellation, each re-raised as itself
  (never wrapped in an ExceptionGroup) with its ``__cause__`` and ``__context__`` intact.
* **Leaving without a stop request waits** for the tasks to end by themselves, exactly like
  ``join()`` and like a task group. A producer that runs forever keeps the block open until
  someone calls :meth:`Coordinator.request_stop`; :class:`~asyncreader.Session` requests the
  stop for you when it ends.
* **Clean stops.** By default :class:`~asyncreader.OutOfRangeError` (end of input) *and*
  :class:`~asyncreader.QueueClosedError` (enqueue into a queue closed during shutdown) are
  clean: they stop the coordinator without being reported. TensorFlow's default is
  ``OutOfRangeError`` only; pass ``clean_stop_exception_types=(ar.OutOfRangeError,)`` for that.

Inside the block the coordinator is the *current* one, also in every task started in it, so
functions that take ``coord=None`` find it.

**Threads.** As TensorFlow's, the coordinator may be told to stop from any thread: a plain
(synchronous) reader hook running on a worker thread, or a ``threading.Thread`` the program
started itself. :meth:`~Coordinator.request_stop`, :meth:`~Coordinator.should_stop`,
:meth:`~Coordinator.clear_stop`, :meth:`~Coordinator.stop_on_exception` and
:meth:`~Coordinator.raise_requested_exception` are thread-safe; starting tasks and
awaiting :meth:`~Coordinator.wait_for_stop` belong to the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import itertools
import threading
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeAlias, TypeVarTuple

import anyio
import anyio.abc
import anyio.lowlevel

from .._errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
    QueueClosedError,
)
from . import context, stages

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator

    from .queue_runner import QueueRunner
    from .stages import StageStatistics

__all__ = ["Coordinator", "CoordinatorStatistics"]

Ts = TypeVarTuple("Ts")

ExcInfo: TypeAlias = tuple[type[BaseException], BaseException, TracebackType | None]

#: Clean-stop types when none are given: end of input and enqueue into a closed queue.
DEFAULT_CLEAN_STOP_EXCEPTION_TYPES: tuple[type[BaseException], ...] = (
    OutOfRangeError,
    QueueClosedError,
)

#: The coordinator task running the current code, so that waits can leave it out.
_running_task: ContextVar[_Task | None] = ContextVar("asyncreader_coordinator_task", default=None)

_task_ids = itertools.count(1)


class _Task:
    """One task of a coordinator: its name and the cancel scope a stop request cancels."""

    __slots__ = ("coord", "id", "name", "scope")

    def __init__(self, coord: Coordinator, name: str) -> None:
        self.coord = coord
        self.id = next(_task_ids)
        self.name = name
        self.scope = anyio.CancelScope()


@dataclass(frozen=True)
class CoordinatorStatistics:
    """A snapshot of a :class:`Coordinator`'s state.

    Attributes:
        tasks_running: How many tasks started in the coordinator have not ended yet.
        task_names: Their names, in start order (shows which stage is stalled).
        stop_requested: Whether a stop was requested.
        exception: The recorded error, if any.
        joined: Whether the coordinator's block has been left.
    """

    tasks_running: int
    task_names: tuple[str, ...]
    stop_requested: bool
    exception: BaseException | None
    joined: bool


class _StopOnException:
    """The context manager returned by :meth:`Coordinator.stop_on_exception`."""

    __slots__ = ("_coord",)

    def __init__(self, coord: Coordinator) -> None:
        self._coord = coord

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if isinstance(exc, Exception):
            self._coord.request_stop(exc)
            return True
        return False


class _Loop:
    """The event loop a coordinator runs in: its thread, and a way into it from others."""

    __slots__ = ("_call_soon", "thread")

    def __init__(self) -> None:
        self.thread = threading.get_ident()
        call_soon: Callable[[Callable[[], object]], object]
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # not asyncio: anyio's other backend
            import trio

            call_soon = trio.lowlevel.current_trio_token().run_sync_soon
        else:
            call_soon = functools.partial(_call_soon_asyncio, loop)
        self._call_soon = call_soon

    def run_soon(self, fn: Callable[[], object]) -> None:
        """Run ``fn`` in the loop's thread soon, without waiting for it.

        Never blocks, so a thread the loop itself waits for cannot deadlock here. A loop
        that has ended runs nothing (its blocks have ended too: nothing is left to stop).
        """
        with contextlib.suppress(RuntimeError):  # the loop is closed / the run finished
            self._call_soon(fn)


def _call_soon_asyncio(loop: asyncio.AbstractEventLoop, fn: Callable[[], object]) -> None:
    # A loop callback runs outside any task, where sniffio (which anyio asks when it
    # starts a task) cannot tell the library: name it in the callback's own context.
    ctx = contextvars.Context()
    with contextlib.suppress(ImportError):
        import sniffio

        ctx.run(sniffio.current_async_library_cvar.set, "asyncio")
    loop.call_soon_threadsafe(ctx.run, fn)


def _task_name(fn: Callable[..., object]) -> str:
    name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
    return name if isinstance(name, str) else repr(fn)


def _leaves(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _leaves(inner)
    else:
        yield exc


def _reraise(exc: BaseException) -> None:
    # ``raise`` inside exception handling overwrites ``__context__``; put the original back.
    original = exc.__context__
    try:
        raise exc
    finally:
        exc.__context__ = original
        del exc, original


class Coordinator:
    """Run tasks together, stop them together, and report the first error.

    Use it as an async context manager; see the module documentation for the stop and error
    rules. A coordinator may be entered again after it was left (call :meth:`clear_stop`
    first if a stop was requested), but only by one block at a time.

    Args:
        clean_stop_exception_types: Exception types that request a stop without being
            reported as errors. ``None`` means ``(OutOfRangeError, QueueClosedError)``.
        stop_grace_period: Seconds the background tasks get to end by themselves after a
            stop request before they are cancelled. ``0`` (the default) cancels at once;
            ``None`` never cancels them (cooperative stop only).

    Raises:
        TypeError: if ``clean_stop_exception_types`` holds something that is not an
            exception class.
        InvalidArgumentError: if ``stop_grace_period`` is negative.
    """

    __module__ = "asyncreader"

    def __init__(
        self,
        clean_stop_exception_types: Iterable[type[BaseException]] | None = None,
        *,
        stop_grace_period: float | None = 0.0,
    ) -> None:
        if clean_stop_exception_types is None:
            clean: tuple[type[BaseException], ...] = DEFAULT_CLEAN_STOP_EXCEPTION_TYPES
        else:
            clean = tuple(clean_stop_exception_types)
            for cls in clean:
                if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                    raise TypeError(
                        f"clean_stop_exception_types must hold exception classes, not {cls!r}"
                    )
        if stop_grace_period is not None and not stop_grace_period >= 0:
            raise InvalidArgumentError(
                f"stop_grace_period must be >= 0 or None, not {stop_grace_period!r}"
            )
        self._clean_types = clean
        self._grace = stop_grace_period
        self._stop_requested = False
        self._exception: BaseException | None = None
        self._joined = False
        self._stop_event: anyio.Event | None = None
        self._changed: anyio.Event | None = None
        self._tasks: dict[int, _Task] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._body_scope: anyio.CancelScope | None = None
        self._block_cm: contextlib.AbstractAsyncContextManager[None] | None = None
        self._token: Any = None
        self._loop: _Loop | None = None
        # Guards the stop state, which other threads may change (see request_stop).
        self._lock = threading.Lock()
        self._cancelling = False
        self._generation = 0
        # Runners started in this coordinator, in start order, for stage_statistics();
        # weak, so a coordinator reused for many blocks keeps no finished runner alive.
        self._runners: weakref.WeakValueDictionary[int, QueueRunner] = weakref.WeakValueDictionary()

    # -- the block -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tg is not None:
            raise FailedPreconditionError("this Coordinator is already running a block")
        block = self._block()
        await block.__aenter__()
        self._block_cm = block
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        block, self._block_cm = self._block_cm, None
        assert block is not None
        return bool(await block.__aexit__(exc_type, exc, tb))

    @contextlib.asynccontextmanager
    async def _block(self) -> AsyncIterator[None]:
        """One ``async with`` block: the task group, the body's own scope, one exception out."""
        self._joined = False
        self._loop = _Loop()
        cancelled = anyio.get_cancelled_exc_class()
        outcome: list[BaseException] = []
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                self._token = context._coordinator.set(self)
                # The body gets its own scope so an error can cancel it without touching
                # tasks that are still inside their grace period.
                self._body_scope = anyio.CancelScope()
                if self._stop_requested and self._grace == 0:
                    self._cancelling = True  # (a stop from a thread after the last loop ended)
                if self._stop_requested and self._grace:
                    tg.start_soon(
                        self._cancel_after_grace,
                        self._generation,
                        self._grace,
                        name="stop grace period",
                    )
                try:
                    with self._body_scope:
                        try:
                            yield
                        except BaseException as exc:
                            self._body_failed(exc, tg)
                            raise
                # An ordinary error of the body is kept aside: letting it reach the task
                # group would cancel the tasks at once and skip their grace period.
                except Exception as exc:  # the body's scope may have replaced the error
                    outcome.append(exc)
        except BaseException as raised:
            outcome.extend(_leaves(raised))
        finally:
            self._finish_block()
        chosen = self._choose(outcome, cancelled)
        del outcome
        if chosen is not None:
            _reraise(chosen)  # the body's own exception comes out as itself, too

    def _body_failed(self, exc: BaseException, tg: anyio.abc.TaskGroup) -> None:
        if isinstance(exc, Exception):
            self.request_stop(exc)
        else:
            # Cancellation, KeyboardInterrupt, SystemExit: stop and cancel everything now.
            self.request_stop()
            self._cancel_tasks()
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                tg.cancel_scope.cancel()

    def _finish_block(self) -> None:
        with self._lock:
            self._joined = True
        self._tg = None
        self._body_scope = None
        with contextlib.suppress(ValueError, RuntimeError):
            context._coordinator.reset(self._token)
        self._token = None

    def _choose(
        self, outcome: list[BaseException], cancelled: type[BaseException]
    ) -> BaseException | None:
        for exc in outcome:
            if not isinstance(exc, (Exception, cancelled)):
                return exc  # KeyboardInterrupt, SystemExit
        if self._exception is not None:
            return self._exception
        for exc in outcome:
            if isinstance(exc, Exception):
                return exc
        return outcome[0] if outcome else None

    # -- tasks ---------------------------------------------------------------------------

    def start_soon(
        self,
        fn: Callable[[*Ts], Awaitable[Any]],
        *args: *Ts,
        name: str | None = None,
    ) -> None:
        """Start ``fn(*args)`` as a task of this coordinator.

        An exception from the task requests a stop with that exception (clean-stop types
        request a plain stop); the task then ends. Tasks started after a stop request that
        already cancelled the others are cancelled at their first checkpoint.

        Args:
            fn: An async callable.
            *args: Positional arguments for ``fn``.
            name: The task's name in :meth:`statistics`, ``repr()`` and tracebacks;
                defaults to the callable's qualified name.

        Raises:
            FailedPreconditionError: if the coordinator's block is not running.
        """
        tg = self._tg
        if tg is None:
            raise FailedPreconditionError(
                "Coordinator is not running: start tasks inside 'async with Coordinator()'"
            )
        task = _Task(self, name or _task_name(fn))
        if self._cancelling:
            task.scope.cancel()
        self._tasks[task.id] = task
        tg.start_soon(self._run, task, fn, args, name=task.name)

    async def _run(
        self, task: _Task, fn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]
    ) -> None:
        _running_task.set(task)
        try:
            with task.scope:
                await fn(*args)
        except Exception as exc:
            self.request_stop(exc)
        except BaseException as exc:
            if not isinstance(exc, anyio.get_cancelled_exc_class()):
                self.request_stop()
            raise
        finally:
            del self._tasks[task.id]
            self._notify_changed()

    def _notify_changed(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()

    async def _wait_tasks_done(self) -> None:
        """Wait until every task but the calling one has ended."""
        me = _running_task.get()
        while any(task is not me for task in self._tasks.values()):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    # -- stopping ------------------------------------------------------------------------

    def request_stop(self, exc: BaseException | ExcInfo | None = None) -> None:
        """Ask every task to stop, recording ``exc`` if it is the first real error.

        An exception of a clean-stop type counts as no exception. Only the first stop
        request can record an error (as in TensorFlow, a plain stop followed by an error
        keeps no error). A stop cancels the background tasks (after the grace period, if
        one was set); a recorded error also cancels the body of the ``async with`` block.

        Thread-safe: from a thread other than the event loop's (a plain reader hook on a
        worker thread, a ``threading.Thread``), the stop is recorded at once
        (:meth:`should_stop` is true on return) and the cancelling is handed to the loop
        without waiting for it.

        Args:
            exc: The exception that caused the stop, or an ``exc_info`` triple.

        Raises:
            BaseException: ``exc`` itself, when it is a real error and the coordinator has
                already been joined (nobody is left to report it).
        """
        if isinstance(exc, tuple):
            exc = exc[1]
        if exc is not None and isinstance(exc, self._clean_types):
            exc = None
        with self._lock:
            if self._joined and exc is not None:
                raise exc
            if self._stop_requested:
                return
            self._stop_requested = True
            self._exception = exc
            generation = self._generation
            loop = self._loop
        if loop is None or loop.thread == threading.get_ident():
            self._apply_stop(generation)
        else:
            loop.run_soon(functools.partial(self._apply_stop, generation))

    def _apply_stop(self, generation: int) -> None:
        """Carry out a stop request on the event loop's thread."""
        if generation != self._generation:
            return  # clear_stop() came first: that stop is forgotten
        if self._stop_event is not None:
            self._stop_event.set()
        if self._exception is not None and self._body_scope is not None:
            self._body_scope.cancel()
        if self._grace == 0:
            self._cancel_tasks()
        elif self._grace is not None and self._tg is not None:
            try:
                self._tg.start_soon(
                    self._cancel_after_grace, generation, self._grace, name="stop grace period"
                )
            except RuntimeError:  # the block is closing: no grace period to give any more
                self._cancel_tasks()

    def _cancel_tasks(self) -> None:
        self._cancelling = True
        for task in self._tasks.values():
            task.scope.cancel()

    async def _cancel_after_grace(self, generation: int, grace: float) -> None:
        with anyio.move_on_after(grace):
            await self._wait_tasks_done()
        if generation == self._generation and self._stop_requested:
            self._cancel_tasks()

    def should_stop(self) -> bool:
        """Return whether a stop was requested."""
        return self._stop_requested

    async def wait_for_stop(self, timeout: float | None = None) -> bool:  # noqa: ASYNC109
        """Wait until a stop is requested.

        Args:
            timeout: Seconds to wait at most; ``None`` waits indefinitely.

        Returns:
            ``True`` if a stop was requested, ``False`` if the timeout expired first.
        """
        if self._stop_requested:
            await anyio.lowlevel.checkpoint()
            return True
        if self._stop_event is None:
            if self._loop is None:
                self._loop = _Loop()  # so that a stop from another thread can wake us
            self._stop_event = anyio.Event()
        event = self._stop_event
        with anyio.move_on_after(timeout):
            await event.wait()
        return self._stop_requested

    def stop_on_exception(self) -> _StopOnException:
        """Report any exception raised in the block as a stop request and suppress it.

        ``with coord.stop_on_exception(): ...`` is TensorFlow's idiom for worker loops.
        ``KeyboardInterrupt``, ``SystemExit`` and the event loop's cancellation are not
        caught.

        Returns:
            A context manager (usable with ``with``) that suppresses every
            :class:`Exception` after passing it to :meth:`request_stop`.
        """
        return _StopOnException(self)

    def clear_stop(self) -> None:
        """Forget the stop request, the recorded error and the joined mark.

        Tasks already cancelled stay cancelled; tasks started afterwards run normally.
        Thread-safe; a stop requested from another thread that the loop has not carried
        out yet is then dropped.
        """
        with self._lock:
            self._stop_requested = False
            self._exception = None
            self._joined = False
            self._cancelling = False
            self._generation += 1
            if self._stop_event is not None and self._stop_event.is_set():
                self._stop_event = None  # waiters still on an unset event keep waiting on it

    def raise_requested_exception(self) -> None:
        """Raise the recorded error, if there is one.

        Raises:
            BaseException: the first real error passed to :meth:`request_stop`.
        """
        if self._exception is not None:
            _reraise(self._exception)

    @property
    def joined(self) -> bool:
        """Whether the coordinator's block has been left (all its tasks have ended)."""
        return self._joined

    # -- introspection -------------------------------------------------------------------

    def statistics(self) -> CoordinatorStatistics:
        """Return a snapshot of the running tasks and the stop state."""
        names = tuple(task.name for task in self._tasks.values())
        return CoordinatorStatistics(
            tasks_running=len(names),
            task_names=names,
            stop_requested=self._stop_requested,
            exception=self._exception,
            joined=self._joined,
        )

    def _add_runner(self, runner: QueueRunner) -> None:
        """Remember ``runner`` (started in this coordinator) for :meth:`stage_statistics`."""
        if runner not in self._runners.values():
            self._runners[next(_task_ids)] = runner

    def stage_statistics(self) -> tuple[StageStatistics, ...]:
        """Return where the tasks of the pipeline run by this coordinator are blocked.

        One record per :class:`~asyncreader.QueueRunner` started in the coordinator (still
        alive), each followed by its queue: whether the runner's tasks are blocked on a
        full queue, and whether consumers are blocked on an empty one. A
        :class:`~asyncreader.Session` also knows the readers and the other queues; see
        :meth:`Session.stage_statistics <asyncreader.Session.stage_statistics>`.

        Returns:
            The records, in the order the runners were started.
        """
        return tuple(stages.collect((), list(self._runners.values())))

    def __repr__(self) -> str:
        names = [task.name for task in self._tasks.values()]
        state = "joined" if self._joined else ("running" if self._tg else "idle")
        stop = ""
        if self._stop_requested:
            stop = f" stop_requested exception={self._exception!r}"
        return f"<Coordinator {state} tasks={names}{stop}>"
