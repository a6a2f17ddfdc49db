"""Parallel map: ``map(fn, source, num_parallel_calls)``, tf.data's ``Dataset.map`` for sources.

A :class:`MapStage` applies ``fn`` to every example of its source with up to
``num_parallel_calls`` calls in flight, and is itself a source: an async callable (one result
per call, :class:`~asyncreader.OutOfRangeError` at the end) and an async iterable, so it feeds
every batching function and ``async for``.

How it runs. ``num_parallel_calls`` worker tasks in the Coordinator each take the source's
next example (one at a time, under a lock, so examples keep the source's order), call ``fn``
and keep the result until a consumer takes it. Every example counts against the stage's
``num_parallel_calls`` *slots* from the moment a worker starts fetching it until a consumer
takes its result, so at most that many calls are in flight or results wait unconsumed
(back-pressure). ``ordered=True`` hands results out in the source's order, ``False`` as they
finish.

Where ``fn`` runs. A coroutine function is awaited in the worker task. A plain function runs
on a worker thread under the stage's own capacity limiter of ``num_parallel_calls`` tokens,
not on the readers' shared I/O executor: map functions are usually CPU work (decoding) that
would otherwise hold the readers' I/O threads, and ``num_parallel_calls`` is already the
parallelism the caller asked for. With ``executor="process"`` it runs in
``num_parallel_calls`` worker processes (:mod:`.workers`), started with ``forkserver``
where the platform has it and ``spawn`` otherwise (never ``fork``: the program has threads),
so ``fn`` and the examples must pickle. The processes start at the first call and are shut
down when the stage ends; a cancelled or closed stage terminates them at once, so a slow
``fn`` is not waited for.

Inline calls. A plain function on threads that proves cheap runs on the event loop instead
(``inline="auto"``, the default), as tf.data fuses cheap maps: each call on a thread is
timed, and once ``_PROBE_WINDOW`` calls in a row have each taken under ``_INLINE_BELOW``
(well under the thread round trip they would otherwise pay) the worker tasks call ``fn``
directly, timing each call. The first inline call that takes longer sends the stage back to
threads and doubles the run of cheap threaded calls needed before the next try (up to
``_MAX_PROBE_WINDOW``), so a function that turns slow or blocks holds the loop up once per
window at most. Order, slots, checkpoints and errors do not change: an inline call is a
call that finished without the worker awaiting.

Direct calls. With ``num_parallel_calls=1`` and an async callable source, inline calls skip
the worker task too: a consumer finding nothing ready and nothing in flight pulls the source
and calls ``fn`` itself (``_call_direct``) while the worker stands by, which
saves the two task switches of handing each example over; such a take is a cancellation
point but leaves yielding to the scheduler to the source, as a direct call of the source
would (a reader with records in memory does not yield). Nothing is awaited between the
pull and the return, so the stage never holds an example in a consumer that a checkpoint
would miss; a stop or close cancels a consumer's pull as it would a worker's; a slow call
wakes the worker, which goes back to threads. An async iterator source stays with the
worker: a consumer's cancellation inside an async generator would end the generator.

Errors. An exception from ``fn`` goes through the stage's :class:`~asyncreader.ErrorPolicy`
when its result's turn comes: raised (the default), as the same library error or as an
:class:`~asyncreader.InvalidArgumentError` for any other exception, naming the example's
position, work item and record key when the example carries a reader key; or skipped with a
:class:`~asyncreader.DeadLetter` in :attr:`MapStage.dead_letters`. An error of the source
itself ends the stage: it is raised, in order, once the results before it are taken, and
again on every later call.

Checkpoints. Built in a Session, a stage registers as a checkpoint component: it saves, in
the source's order, the results waiting to be taken and the *examples* of the calls in
flight. A restore calls ``fn`` on those examples again before taking new ones from the
source, so a restored stream continues exactly (``fn`` should be a function of its example).
A worker running ``fn`` holds nothing the checkpoint does not have, so a checkpoint does not
wait for slow calls.
"""

from __future__ import annotations

import collections
import inspect
import pickle
import threading
import time
from dataclasses import dataclass
from time import perf_counter
from typing import TYPE_CHECKING, Any, ClassVar, Final, Generic, Literal, TypeVar, overload

import anyio
import anyio.lowlevel
import anyio.to_thread
import numpy as np

from .._error_policy import MAX_DEAD_LETTERS, DeadLetter, OnError, as_policy
from .._errors import (
    AsyncReaderError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
    QueueClosedError,
)
from .._records.batch import RecordBatch
from .._runtime.checkpoint import current_stage, outside_stage
from .._runtime.context import current_checkpointer, current_session, track
from .._runtime.stages import StageState, StageStatistics
from .common import resolve_coordinator
from .sources import as_source
from .workers import WorkerDied, Workers

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from .._runtime.checkpoint import Checkpointer, RestoredWork, StageTask
    from .._runtime.coordinator import Coordinator

__all__ = ["MapStage", "MapStatistics", "map"]

R = TypeVar("R")

#: Where a plain ``fn`` runs.
Executor = Literal["thread", "process"]

_EXECUTORS: Final = ("thread", "process")

#: ``inline``: ``"auto"`` runs a plain ``fn`` that proves cheap on the event loop.
Inline = Literal["auto", False]

# A plain fn whose calls take less than this runs inline: a to_thread round trip measured
# 55-110 us of wall time here (55-72 us of CPU), so a call this cheap costs the loop less
# than the hop would, and a mistaken guess holds the loop up for little.
_INLINE_BELOW: Final = 50e-6
# Threaded calls in a row under _INLINE_BELOW before the stage tries inline calls; doubled
# each time an inline call runs long, up to _MAX_PROBE_WINDOW.
_PROBE_WINDOW: Final = 8
_MAX_PROBE_WINDOW: Final = 1024


class _Call:
    """One example taken from the source, from its fetch until a consumer takes its result."""

    __slots__ = ("done", "error", "example", "result", "seq")

    def __init__(self, seq: int, example: Any) -> None:
        self.seq = seq
        self.example = example
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None


class _Wait:
    """A wait on the stage, as a checkpoint pause sees it (``Attempt``): woken once the
    event it waits for is set."""

    __slots__ = ("event",)

    def __init__(self, event: anyio.Event) -> None:
        self.event = event

    @property
    def woken(self) -> bool:
        return self.event.is_set()


class _Running:
    """A worker running ``fn`` on an example the stage keeps: never "woken", since it holds
    nothing a checkpoint does not save (the result is stored before the worker goes on)."""

    __slots__ = ()

    @property
    def woken(self) -> bool:
        return False


_RUNNING: Final = _Running()

#: What ``MapStage._pull`` returns once the source has ended.
_END: Final = object()


@dataclass(frozen=True, slots=True)
class MapStatistics:
    """A snapshot of a :class:`MapStage`.

    Attributes:
        name: The stage's name.
        num_parallel_calls: Calls in flight plus results waiting, at most.
        ordered: Whether results keep the source's order.
        executor: ``"coroutine"``, ``"thread"`` or ``"process"``: where ``fn`` runs.
        calls_in_flight: Calls of ``fn`` running now.
        results_waiting: Results (and errors) ready but not yet taken.
        workers_waiting: Worker tasks waiting for a slot (results are not taken fast
            enough).
        consumers_waiting: Tasks waiting for a result.
        examples_fetched: Examples taken from the source so far.
        results_taken: Results handed out so far.
        errors_skipped: Examples whose ``fn`` failed and which the policy skipped.
        closed: Whether the stage has ended (source exhausted and drained, failed,
            stopped or closed).
        calls_inline: Calls of a plain ``fn`` that ran on the event loop because they
            proved cheap (``inline="auto"``); the others ran on worker threads or
            processes.
    """

    name: str
    num_parallel_calls: int
    ordered: bool
    executor: str
    calls_in_flight: int
    results_waiting: int
    workers_waiting: int
    consumers_waiting: int
    examples_fetched: int
    results_taken: int
    errors_skipped: int
    closed: bool
    calls_inline: int = 0


@overload
def map(
    fn: Callable[[Any], Awaitable[R]],
    source: object,
    num_parallel_calls: int = 1,
    *,
    ordered: bool = True,
    executor: Executor = "thread",
    inline: Inline = "auto",
    on_error: OnError = None,
    coord: Coordinator | None = None,
    name: str | None = None,
) -> MapStage[R]: ...


@overload
def map(
    fn: Callable[[Any], R],
    source: object,
    num_parallel_calls: int = 1,
    *,
    ordered: bool = True,
    executor: Executor = "thread",
    inline: Inline = "auto",
    on_error: OnError = None,
    coord: Coordinator | None = None,
    name: str | None = None,
) -> MapStage[R]: ...


def map(
    fn: Callable[[Any], Any],
    source: object,
    num_parallel_calls: int = 1,
    *,
    ordered: bool = True,
    executor: Executor = "thread",
    inline: Inline = "auto",
    on_error: OnError = None,
    coord: Coordinator | None = None,
    name: str | None = None,
) -> MapStage[Any]:
    """Apply ``fn`` to each example of ``source`` with up to ``num_parallel_calls`` in flight.

    The result is a :class:`MapStage`, itself a source: pass it as ``tensors`` to
    :func:`~asyncreader.batch` and its relatives, or iterate it with ``async for``. Its
    worker tasks start at once in the Coordinator.

    Args:
        fn: A coroutine function (awaited on the event loop) or a plain function (run on
            worker threads, or worker processes with ``executor="process"``), taking one
            example and returning its result. Should depend only on the example: a
            restored checkpoint calls it again on the examples that were in flight.
        source: An async callable returning one example per call (raising
            :class:`~asyncreader.OutOfRangeError` at the end), or an async iterable of
            examples, as ``tensors`` of :func:`~asyncreader.batch`. Examples are passed to
            ``fn`` unchanged (a :class:`~asyncreader.RecordBatch` stays one).
        num_parallel_calls: Calls in flight at most; also the most results that wait
            unconsumed (back-pressure).
        ordered: ``True``: results in the source's order (deterministic, checkpoints
            restore exactly). ``False``: results as their calls finish.
        executor: Where a plain ``fn`` runs: ``"thread"`` (the stage's own worker
            threads) or ``"process"`` (a pool of ``num_parallel_calls`` processes, for
            work that holds the GIL; ``fn`` and examples must pickle).
        inline: ``"auto"`` (the default): a plain ``fn`` on threads whose calls prove
            cheap (under 50 us each, 8 in a row) runs on the event loop instead, saving
            the thread round trip; a call that runs long sends it back to threads, and
            each such return doubles the run of cheap threaded calls needed before the
            next try (up to 1024), so a ``fn`` that turns slow holds the loop up once per
            window at most. With ``num_parallel_calls=1`` and an async callable
            ``source``, inline calls are made by the task taking the result, which
            pulls the source itself (a take cancelled while it waits in the source
            cancels that source call). ``False``: always on threads, for a ``fn`` that
            may block for long without warning or must run off the event loop's
            thread. No effect on coroutine functions or ``executor="process"``.
        on_error: What an exception from ``fn`` does: ``"raise"`` (the default),
            ``"skip"`` or an :class:`~asyncreader.ErrorPolicy`; skipped examples leave
            :class:`~asyncreader.DeadLetter` records in :attr:`MapStage.dead_letters`.
        coord: The Coordinator to run the worker tasks in; default the current one.
        name: The stage's name in statistics and errors; default ``"map(<fn name>)"``.

    Returns:
        A :class:`MapStage`.

    Raises:
        InvalidArgumentError: ``fn`` is not callable; ``source`` is an async generator
            function or neither an async callable nor an async iterable;
            ``num_parallel_calls`` is not an integer >= 1; ``executor`` or ``inline`` is
            unknown; a coroutine function is given with ``executor="process"``, or a
            function that does not pickle; ``on_error`` is invalid; ``ordered=False`` in a
            deterministic Session.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return MapStage(
        fn,
        source,
        num_parallel_calls,
        ordered=ordered,
        executor=executor,
        inline=inline,
        on_error=on_error,
        coord=coord,
        name=name,
    )


class MapStage(Generic[R]):
    """``fn`` applied to a source's examples by parallel calls: the result of :func:`map`.

    A source in its own right: ``await stage()`` returns the next result (raising
    :class:`~asyncreader.OutOfRangeError` at the end) and ``async for result in stage``
    iterates them, so it can be passed as ``tensors`` to every batching function. Several
    tasks may take results at once; each result goes to one of them.

    Its worker tasks run in the Coordinator until the source is exhausted, the stage is
    closed (:meth:`aclose`, or ``async with``) or the Coordinator stops. In a Session it is
    closed when the Session ends, and :meth:`Session.stage_statistics
    <asyncreader.Session.stage_statistics>` lists it (kind ``"map"``).
    """

    __slots__ = (
        "__weakref__",
        "_call_source",
        "_calls",
        "_closed",
        "_consumers",
        "_coro_source",
        "_dead",
        "_done",
        "_ended",
        "_exhausted",
        "_fast",
        "_fetch_busy",
        "_fetch_free",
        "_fetched",
        "_fetching",
        "_fn",
        "_inline",
        "_inline_calls",
        "_inline_now",
        "_iter_source",
        "_kind",
        "_limiter",
        "_live",
        "_n",
        "_name",
        "_ordered",
        "_policy",
        "_pool",
        "_pool_closed",
        "_pool_lock",
        "_probe_window",
        "_pull_scope",
        "_rerun",
        "_results",
        "_scopes",
        "_seq",
        "_skipped",
        "_slot_freed",
        "_source_error",
        "_stopped",
        "_taken",
        "_wake",
        "_workers_waiting",
    )

    _checkpoint_kind: ClassVar[str] = "map"

    def __init__(
        self,
        fn: Callable[[Any], Any],
        source: object,
        num_parallel_calls: int = 1,
        *,
        ordered: bool = True,
        executor: Executor = "thread",
        inline: Inline = "auto",
        on_error: OnError = None,
        coord: Coordinator | None = None,
        name: str | None = None,
    ) -> None:
        """Check the arguments and start the worker tasks; see :func:`map`.

        Raises:
            InvalidArgumentError: see :func:`map`.
            FailedPreconditionError: no Coordinator to run in.
        """
        if not callable(fn):
            raise InvalidArgumentError(f"map() takes a callable fn, not {type(fn).__name__}")
        fn_name = getattr(fn, "__qualname__", None) or type(fn).__name__
        self._name = name if name is not None else f"map({fn_name})"
        if (
            isinstance(num_parallel_calls, bool)
            or not isinstance(num_parallel_calls, (int, np.integer))
            or num_parallel_calls < 1
        ):
            raise InvalidArgumentError(
                f"{self._name}: num_parallel_calls must be an integer >= 1, not "
                f"{num_parallel_calls!r}"
            )
        if executor not in _EXECUTORS:
            raise InvalidArgumentError(
                f"{self._name}: executor must be 'thread' or 'process', not {executor!r}"
            )
        is_coro = inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
        if is_coro and executor == "process":
            raise InvalidArgumentError(
                f"{self._name}: a coroutine function runs on the event loop; "
                "executor='process' takes a plain function"
            )
        if executor == "process":
            try:
                pickle.dumps(fn)
            except Exception as exc:
                raise InvalidArgumentError(
                    f"{self._name}: executor='process' sends fn to worker processes, but it "
                    f"does not pickle ({type(exc).__name__}: {exc}); use a function defined "
                    "at module level"
                ) from exc
        if not (inline is False or (isinstance(inline, str) and inline == "auto")):
            raise InvalidArgumentError(
                f"{self._name}: inline must be 'auto' or False, not {inline!r}"
            )
        self._kind: str = "coroutine" if is_coro else executor
        # Inline calls: whether the stage may try them, runs them now, how many it ran,
        # the current run of cheap threaded calls and the run needed to try them.
        self._inline = inline == "auto" and self._kind == "thread"
        self._inline_now = False
        self._inline_calls = 0
        self._fast = 0
        self._probe_window = _PROBE_WINDOW
        self._policy = as_policy(on_error)
        self._fn = fn
        self._n = int(num_parallel_calls)
        self._ordered = bool(ordered)
        session = current_session()
        if session is not None and session.deterministic and not self._ordered:
            raise InvalidArgumentError(
                f"{self._name}: a deterministic Session needs ordered=True (unordered "
                "results depend on task timing)"
            )
        # The source, made uniform: an async callable, or an async iterator.
        self._call_source, self._iter_source, self._coro_source = as_source(
            source, f"{self._name}:"
        )
        coordinator = resolve_coordinator(coord, "map")
        # Examples fetched and not yet taken, in fetch order (the source's order).
        self._calls: collections.deque[_Call] = collections.deque()
        # Unordered: finished calls in finishing order.
        self._results: collections.deque[_Call] = collections.deque()
        self._rerun: collections.deque[_Call] = collections.deque()  # restored, to call again
        self._seq = 0
        self._fetching = 0
        self._fetched = 0
        self._taken = 0
        self._skipped = 0
        self._dead: collections.deque[DeadLetter] = collections.deque(maxlen=MAX_DEAD_LETTERS)
        self._exhausted = False
        self._source_error: BaseException | None = None
        self._ended = False  # every worker has returned
        self._closed = False
        self._live = 0
        self._workers_waiting = 0
        self._consumers = 0
        self._fetch_busy = False
        self._fetch_free = anyio.Event()
        self._slot_freed = anyio.Event()
        self._done = anyio.Event()  # a result is ready, or the stage ended
        # Set when a worker standing by while consumers call fn themselves has work again.
        self._wake = anyio.Event()
        self._stopped = anyio.Event()  # every worker returned and the pool is shut down
        self._scopes: list[anyio.CancelScope] = []
        self._pull_scope: anyio.CancelScope | None = None  # a consumer's pull (see _direct)
        self._limiter: anyio.CapacityLimiter | None = None
        self._pool: Workers | None = None
        self._pool_lock = threading.Lock()
        self._pool_closed = False
        # In a Session: closed with it, listed in stage_statistics(), saved in checkpoints
        # (a restore happens here, before the workers start).
        track(self)
        for i in range(self._n):
            self._live += 1
            coordinator.start_soon(self._worker, i, name=f"{self._name}-worker-{i}")

    # -- workers ---------------------------------------------------------------------------

    async def _worker(self, index: int) -> None:
        scope = anyio.CancelScope()
        self._scopes.append(scope)
        try:
            with scope:
                if self._closed:
                    return
                pause = current_checkpointer()
                if pause is None:
                    await self._work(None, None)
                else:
                    with pause.stage(f"{self._name}-worker-{index}", self) as stage:
                        await self._work(pause, stage)
        finally:
            self._live -= 1
            if self._live == 0:
                self._ended = True
                self._cancel_pull()
                self._notify_results()
                with anyio.CancelScope(shield=True):
                    await self._shutdown_pool()
                    await self._close_source()
                self._stopped.set()

    async def _work(self, pause: Checkpointer | None, stage: StageTask | None) -> None:
        """Fetch, call, keep the result; until the source ends."""
        if self._kind != "coroutine" and self._limiter is None:
            self._limiter = anyio.CapacityLimiter(self._n)
        while True:
            if pause is not None and pause.paused:
                await pause.park(stage)  # type: ignore[arg-type]
            if self._rerun:
                call = self._rerun.popleft()
            else:
                if self._exhausted:
                    return
                if self._direct():
                    # Consumers pull the source and call fn themselves (see __call__);
                    # standing by holds nothing.
                    await self._wait(self._wake, stage)
                    continue
                if len(self._calls) + self._fetching >= self._n:
                    await self._wait_slot(stage)
                    continue
                if self._fetch_busy:
                    # One fetch at a time keeps the source's order; waiting holds nothing.
                    await self._wait(self._fetch_free, stage)
                    continue
                fetched = await self._fetch()
                if fetched is None:
                    return
                call = fetched
            await self._run(call, stage)

    async def _wait_slot(self, stage: StageTask | None) -> None:
        self._workers_waiting += 1
        try:
            await self._wait(self._slot_freed, stage)
        finally:
            self._workers_waiting -= 1

    async def _wait(self, event: anyio.Event, stage: StageTask | None) -> None:
        """Wait for ``event`` as a worker holding nothing: a checkpoint may be taken."""
        if stage is None:
            await event.wait()
        else:
            with stage.blocked(self, _Wait(event), dequeue=False):
                await event.wait()

    async def _fetch(self) -> _Call | None:
        """Take the source's next example as a new call; ``None`` once it has ended."""
        self._fetching += 1
        self._fetch_busy = True
        try:
            example = await self._pull()
            if example is _END:
                return None
            call = _Call(self._seq, example)
            self._seq += 1
            self._fetched += 1
            self._calls.append(call)
            return call
        finally:
            self._fetching -= 1
            self._fetch_busy = False
            self._fetch_free.set()
            self._fetch_free = anyio.Event()
            if self._exhausted:
                self._notify_results()
                self._free_slot()  # workers waiting for a slot have nothing more to do

    async def _pull(self) -> Any:
        """The source's next example, or ``_END`` once it has ended (noting its error)."""
        try:
            if self._coro_source:
                return await self._call_source()  # type: ignore[misc]
            if self._call_source is not None:
                example = self._call_source()
                if inspect.isawaitable(example):
                    example = await example
                return example
            assert self._iter_source is not None
            return await self._iter_source.__anext__()
        except (OutOfRangeError, StopAsyncIteration):
            self._exhausted = True
        except Exception as exc:
            # The source is broken: raised in order, after the results before it.
            self._exhausted = True
            self._source_error = exc
        return _END

    async def _run(self, call: _Call, stage: StageTask | None) -> None:
        try:
            if stage is None:
                call.result = await self._invoke(call.example)
            else:
                # The stage keeps the example: a checkpoint saves it and need not wait.
                with stage.blocked(self, _RUNNING, dequeue=False):
                    call.result = await self._invoke(call.example)
        except Exception as exc:
            call.error = exc
        call.done = True
        if not self._ordered:
            self._results.append(call)
        self._notify_results()

    async def _invoke(self, example: Any) -> Any:
        kind = self._kind
        if kind == "coroutine":
            # fn's own queue operations must not mark the worker as blocked in them.
            with outside_stage():
                return await self._fn(example)
        if kind == "thread":
            if not self._inline:
                return await anyio.to_thread.run_sync(
                    self._fn, example, limiter=self._limiter, abandon_on_cancel=True
                )
            if self._inline_now:
                return self._call_inline(example)
            result, error, seconds = await anyio.to_thread.run_sync(
                _timed, self._fn, example, limiter=self._limiter, abandon_on_cancel=True
            )
            self._timed_on_thread(seconds)
            if error is not None:
                raise error
            return result
        return await anyio.to_thread.run_sync(
            self._in_process, example, limiter=self._limiter, abandon_on_cancel=True
        )

    def _call_inline(self, example: Any) -> Any:
        """Call ``fn`` on the event loop, and go back to threads if the call ran long."""
        self._inline_calls += 1
        start = perf_counter()
        try:
            return self._fn(example)
        finally:
            if perf_counter() - start >= _INLINE_BELOW:
                self._inline_ran_long()

    def _inline_ran_long(self) -> None:
        """An inline call held the loop up once: back to threads, and prove cheap for
        longer before the next try."""
        self._inline_now = False
        self._fast = 0
        self._probe_window = min(2 * self._probe_window, _MAX_PROBE_WINDOW)
        self._wake_workers()  # if they stood by for consumers calling fn

    def _timed_on_thread(self, seconds: float) -> None:
        """Note how long a call on a thread took; go inline after a run of cheap ones."""
        if seconds >= _INLINE_BELOW:
            self._fast = 0
            self._inline_now = False  # (a call started on a thread before going inline)
            return
        self._fast += 1
        if self._fast >= self._probe_window:
            self._inline_now = True

    def _in_process(self, example: Any) -> Any:
        """Run ``fn`` in a worker process (on a worker thread: it waits for the result)."""
        with self._pool_lock:
            pool = self._pool
            if pool is None:
                if self._pool_closed:
                    # A call the stage abandoned when it ended: start no processes for it.
                    raise WorkerDied("the stage has ended")
                pool = self._pool = Workers(self._fn, self._n)
        return pool.call(example)

    async def _close_source(self) -> None:
        """Close an async generator the stage stopped iterating part-way, here in its
        loop, rather than leave it to the garbage collector (which trio refuses)."""
        source = self._iter_source
        close = getattr(source, "aclose", None)
        if close is None or (self._exhausted and self._source_error is None):
            return
        self._exhausted = True
        try:
            await close()
        except Exception as exc:  # the generator's own cleanup failed: report it in order
            if self._source_error is None:
                self._source_error = exc

    async def _shutdown_pool(self) -> None:
        """End the worker processes: at once (terminating them) when calls were cut short."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
            self._pool_closed = True
        if pool is None:
            return
        cut_short = any(not c.done for c in self._calls) or self._closed
        await anyio.to_thread.run_sync(lambda: pool.close(kill=cut_short))

    # -- results ---------------------------------------------------------------------------

    def _notify_results(self) -> None:
        self._done.set()
        self._done = anyio.Event()

    def _take(self) -> _Call | None:
        """The next result to hand out, removed from the stage; ``None`` if none is ready."""
        calls = self._calls
        if self._ordered:
            if calls and calls[0].done:
                call = calls.popleft()
            else:
                return None
        elif self._results:
            call = self._results.popleft()
            calls.remove(call)  # (at most num_parallel_calls long)
        else:
            return None
        self._free_slot()
        return call

    def _free_slot(self) -> None:
        self._slot_freed.set()
        self._slot_freed = anyio.Event()

    async def __call__(self) -> R:
        """Return the next result.

        Returns:
            ``fn``'s result for the next example (in the source's order with
            ``ordered=True``).

        Raises:
            OutOfRangeError: the source is exhausted and every result was taken, or the
                stage was closed or stopped.
            AsyncReaderError: ``fn`` failed on the example whose turn it is and the policy
                raises: a library error from ``fn`` as its own class, any other exception
                as :class:`~asyncreader.InvalidArgumentError` (chained from it), naming
                the example's position and its work item and record key when known; or
                the source's own error, once the results before it are taken.
        """
        call: _Call | None = None
        if (
            self._direct()
            and not self._calls
            and not self._fetching
            and not self._ended
            and not self._closed
        ):
            # This take calls the source itself, which decides whether to yield to the
            # scheduler (a reader with records in memory does not): as when the source is
            # called directly, only a cancellation point here. Straight to the pull: the
            # loop below would find nothing ready (this path is most takes, so its checks
            # are not repeated).
            await anyio.lowlevel.checkpoint_if_cancelled()
            call = await self._call_direct()
        else:
            await anyio.lowlevel.checkpoint()
        while True:
            if call is None:
                if self._closed:
                    raise OutOfRangeError(f"{self._name} is closed")
                call = self._take()
            if call is None:
                if self._drained():
                    if self._source_error is not None:
                        raise self._source_error
                    raise OutOfRangeError(f"{self._name}: end of input")
                if self._ended:
                    # Stopped (or cancelled) before the next result could be made.
                    raise OutOfRangeError(f"{self._name} was stopped")
                if self._direct() and not self._calls and not self._fetching:
                    call = await self._call_direct()
                else:
                    await self._wait_result()
                continue
            if call.error is None:
                self._taken += 1
                result: R = call.result
                return result
            self._failed(call)
            call = None

    def _direct(self) -> bool:
        """Whether consumers pull the source and call ``fn`` themselves, the worker standing
        by: calls run inline, one at a time, from an async callable source."""
        return (
            self._inline_now and self._n == 1 and self._call_source is not None and not self._rerun
        )

    async def _call_direct(self) -> _Call | None:
        """Pull the source's next example and call ``fn`` on it here, in the consumer: what
        the worker would do, without the two task switches of handing the example over.

        ``None`` when the source has ended or the stage was closed meanwhile. Nothing is
        awaited between the pull and the return, so a cancelled take cancels only the
        source call it was in, and a checkpoint never sees the example in the consumer.
        """
        self._fetching += 1
        self._fetch_busy = True
        self._consumers += 1  # waiting on the source, as it would for the worker
        # A stop or close cancels the pull, as it would cancel a worker in the source.
        example: Any = _END
        scope = self._pull_scope = anyio.CancelScope()
        try:
            with scope:
                if self._coro_source:
                    # _pull's first branch, without its own coroutine frame.
                    example = await self._call_source()  # type: ignore[misc]
                else:
                    example = await self._pull()
        except (OutOfRangeError, StopAsyncIteration):
            self._exhausted = True
        except Exception as exc:
            # The source is broken: raised in order, after the results before it.
            self._exhausted = True
            self._source_error = exc
        finally:
            self._pull_scope = None
            self._consumers -= 1
            self._fetching -= 1
            self._fetch_busy = False
        if example is _END or self._closed:
            self._wake_workers()  # to end
            self._notify_results()
            return None
        call = _Call(self._seq, example)
        self._seq += 1
        self._fetched += 1
        # _call_inline, inlined: this is the path of most takes.
        self._inline_calls += 1
        start = perf_counter()
        try:
            call.result = self._fn(example)
        except Exception as exc:
            call.error = exc
        except BaseException:
            # Not fn's answer (KeyboardInterrupt, ...): keep the example for a worker to
            # call again, as a restored checkpoint would.
            self._calls.append(call)
            self._rerun.append(call)
            self._wake_workers()
            raise
        finally:
            if perf_counter() - start >= _INLINE_BELOW:
                self._inline_ran_long()
        call.done = True
        if self._consumers:
            self._notify_results()  # another consumer's turn to pull
        return call

    def _cancel_pull(self) -> None:
        if self._pull_scope is not None:
            self._pull_scope.cancel()

    def _wake_workers(self) -> None:
        self._wake.set()
        self._wake = anyio.Event()

    def _drained(self) -> bool:
        """Whether the source has ended and every result before its end was taken."""
        return self._exhausted and not self._calls and not self._fetching

    async def _wait_result(self) -> None:
        event = self._done
        self._consumers += 1
        try:
            stage = current_stage()
            if stage is None:
                await event.wait()
            else:
                # A consumer waiting here holds nothing yet: a checkpoint may be taken, and
                # the workers are let through to make its result.
                with stage.blocked(self, _Wait(event), dequeue=True):
                    await event.wait()
        finally:
            self._consumers -= 1

    def _failed(self, call: _Call) -> None:
        """Raise ``call``'s error, or note it as a dead letter when the policy skips it."""
        assert call.error is not None
        error = self._as_error(call)
        if not self._policy.skip or isinstance(call.error, WorkerDied):
            raise error from call.error
        work, key = _record_key(call.example)
        self._skipped += 1
        self._dead.append(DeadLetter(work or b"", key, error, False, call.seq))
        reason = self._policy.exceeded(self._skipped, self._taken)
        if reason is not None:
            error.add_note(f"{self._name}: {reason} (see dead_letters)")
            raise error from call.error

    def _as_error(self, call: _Call) -> AsyncReaderError:
        exc = call.error
        work, key = _record_key(call.example)
        where = f"{self._name}: fn failed on example {call.seq}"
        if isinstance(exc, WorkerDied):
            # Not the example's fault, and not skippable: the stage cannot call fn any more.
            return FailedPreconditionError(
                f"{where}: a worker process died ({exc}); a program using "
                "executor='process' must start from an `if __name__ == '__main__':` block",
                work_item=work,
                record=key,
            )
        if isinstance(exc, AsyncReaderError) and not isinstance(
            exc, (OutOfRangeError, QueueClosedError)
        ):
            if exc.work_item is not None or work is None:
                return exc
            try:
                named = type(exc)(
                    f"{where}: {exc.message}", work_item=work, record=key, offset=exc.offset
                )
            except TypeError:
                return exc
            named.__notes__ = list(getattr(exc, "__notes__", []))
            return named
        # Anything else, and an end-of-input error (which would end the consumer's stream
        # as if the source were exhausted): a bad argument to fn.
        return InvalidArgumentError(
            f"{where}: {type(exc).__name__}: {exc}", work_item=work, record=key
        )

    def __aiter__(self) -> MapStage[R]:
        return self

    async def __anext__(self) -> R:
        try:
            return await self()
        except OutOfRangeError:
            raise StopAsyncIteration from None

    # -- closing ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Stop the stage: cancel its calls, shut its worker processes down, drop results.

        Idempotent. Afterwards taking a result raises :class:`~asyncreader.OutOfRangeError`.
        Calls running on worker threads are not waited for (their results are dropped).
        """
        self._closed = True
        for scope in self._scopes:
            scope.cancel()
        self._cancel_pull()
        self._notify_results()
        self._slot_freed.set()
        with anyio.CancelScope(shield=True):
            if self._live:
                await self._stopped.wait()
            else:
                await self._shutdown_pool()

    async def _session_close(self) -> None:
        await self.aclose()

    async def __aenter__(self) -> MapStage[R]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    # -- observing -------------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The stage's name."""
        return self._name

    @property
    def dead_letters(self) -> tuple[DeadLetter, ...]:
        """Examples skipped because ``fn`` failed on them, oldest first (the last 10,000).

        ``index`` is the example's position in the source; ``work_item`` and ``record``
        come from the example's reader key when it has one (``b""`` and ``None``
        otherwise).
        """
        return tuple(self._dead)

    def statistics(self) -> MapStatistics:
        """Return a snapshot of the stage."""
        waiting = sum(1 for c in self._calls if c.done)
        return MapStatistics(
            name=self._name,
            num_parallel_calls=self._n,
            ordered=self._ordered,
            executor=self._kind,
            calls_in_flight=len(self._calls) - waiting - len(self._rerun),
            results_waiting=waiting,
            workers_waiting=self._workers_waiting,
            consumers_waiting=self._consumers,
            examples_fetched=self._fetched,
            results_taken=self._taken,
            errors_skipped=self._skipped,
            closed=self._closed or self._ended or self._drained(),
            calls_inline=self._inline_calls,
        )

    def _stage_statistics(self) -> StageStatistics:
        s = self.statistics()
        state: StageState
        if s.closed and not s.consumers_waiting:
            state = "closed"
        elif s.workers_waiting and s.results_waiting:
            state = "full"  # results wait for consumers: look downstream
        elif s.consumers_waiting and not s.calls_in_flight:
            state = "starved"  # consumers wait on the source: look upstream
        elif s.calls_in_flight:
            state = "running"
        else:
            state = "idle"
        return StageStatistics(
            "map",
            self._name,
            state,
            s.workers_waiting,
            s.consumers_waiting,
            s.calls_in_flight,
            s,
        )

    def __repr__(self) -> str:
        s = self.statistics()
        return (
            f"<MapStage {self._name} executor={s.executor} num_parallel_calls={self._n} "
            f"ordered={self._ordered} in_flight={s.calls_in_flight} "
            f"waiting={s.results_waiting} closed={s.closed}>"
        )

    # -- checkpoints -----------------------------------------------------------------------

    def _checkpoint_save(self) -> dict[str, Any]:
        calls: list[Any] = []
        for call in self._calls:
            if call.done and call.error is None:
                calls.append(["out", *_save_value(call.result)])
            else:
                # In flight (or failed: the restored stage calls fn again and fails again).
                calls.append(["in", *_save_value(call.example)])
        return {
            "name": self._name,
            "ordered": self._ordered,
            "calls": calls,
            "exhausted": self._exhausted and self._source_error is None,
            "counters": [self._fetched, self._taken, self._skipped],
        }

    def _checkpoint_restore(self, tree: Any) -> None:
        if tree["name"] != self._name or bool(tree["ordered"]) != self._ordered:
            raise InvalidArgumentError(
                f"checkpoint of {tree['name']!r} (ordered={tree['ordered']}) does not fit "
                f"{self._name!r} (ordered={self._ordered})"
            )
        self._fetched, self._taken, self._skipped = (int(c) for c in tree["counters"])
        for entry in tree["calls"]:
            what, form, value = entry
            call = _Call(self._seq, _load_value(form, value))
            self._seq += 1
            if what == "out":
                call.result, call.example, call.done = call.example, None, True
                if not self._ordered:
                    self._results.append(call)
            elif what == "in":
                self._rerun.append(call)
            else:
                raise InvalidArgumentError(f"malformed checkpoint of {self._name!r}: {what!r}")
            self._calls.append(call)
        self._exhausted = bool(tree["exhausted"])

    def _checkpoint_work_items(self, tree: Any) -> RestoredWork | None:
        # Examples and results are data, not work items a reader would open.
        return None


def _timed(fn: Callable[[Any], Any], example: Any) -> tuple[Any, Exception | None, float]:
    """``fn(example)`` on a worker thread: its result or exception, and its wall time."""
    start = time.perf_counter()
    try:
        result = fn(example)
    except Exception as exc:
        return None, exc, time.perf_counter() - start
    return result, None, time.perf_counter() - start


def _save_value(value: Any) -> list[Any]:
    """An example or result as checkpoint tree: ``[form, tree]``."""
    if isinstance(value, RecordBatch):
        return ["records", [value.keys(), value.tolist()]]
    return ["value", value]


def _load_value(form: str, value: Any) -> Any:
    if form == "records":
        keys, records = value
        return RecordBatch.from_records(list(keys), list(records))
    if form == "value":
        return value
    raise InvalidArgumentError(f"malformed checkpoint of a map stage: form {form!r}")


def _record_key(example: Any) -> tuple[bytes | None, bytes | None]:
    """The work item and record key an example carries, if any: a reader key first in a
    tuple or list (``read``), a ``"key"`` entry of a dict, the first of a batch of keys
    (``read_up_to``), or a RecordBatch's first record."""
    if isinstance(example, RecordBatch):
        if not len(example):
            return None, None
        key: Any = example.key(0)
    else:
        if isinstance(example, dict):
            key = example.get("key")
        elif isinstance(example, (tuple, list)) and example:
            key = example[0]
        else:
            return None, None
        if isinstance(key, np.ndarray):
            key = key.reshape(-1)[0] if key.size and key.dtype.kind in "OS" else None
        elif isinstance(key, (list, tuple)):
            key = key[0] if key else None
    if isinstance(key, str):
        key = key.encode("utf-8", "surrogateescape")
    if not isinstance(key, bytes):
        return None, None
    work, colon, _ = key.rpartition(b":")
    return (work if colon else None), key
