"""The shared I/O executor: worker threads under one capacity limiter per event loop.

TensorFlow hands every reader's blocking work to a thread pool so that a read waiting on
disk never blocks unrelated ops. asyncreader does the same with anyio worker threads; the
limiter bounds how many run at once across all readers of an event loop. It lives in a
:class:`anyio.lowlevel.RunVar` because a limiter belongs to one event loop.

A thread blocked for good (a named pipe with no writer, a stalled mount, a server that never
answers) cannot be interrupted. Readers therefore run their calls as :class:`IoCall`: when
the caller is cancelled it stops waiting at once and *abandons* the thread, which stops
counting against the limiter (so new reads are not starved). The call's outcome is kept for
the caller to take later, or the thread cleans up (closes what it opened) when it finally
returns. :func:`abandoned_io` counts such threads.

What such a thread waits on may still be interruptible from another thread (a remote
file's requests on fsspec's event loop). Code on the thread marks that wait with
:func:`interruptible`; :meth:`IoCall.interrupt` (a reader closing, its abandoned call's
outcome discarded) then interrupts it, so the thread returns at once instead of when its
requests and their retries end.
"""

from __future__ import annotations

import contextlib
import math
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar, TypeVarTuple, Unpack, cast

import anyio
import anyio.to_thread
from anyio.lowlevel import RunVar

from .._errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = [
    "Interruptible",
    "IoCall",
    "abandoned_io",
    "get_io_limiter",
    "interruptible",
    "io_threads",
    "run_io",
    "run_detached",
    "run_io_abandoning",
    "set_io_threads",
]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

#: Default size: enough to overlap a few files' reads on a small machine without
#: oversubscribing the GIL-bound parsing that follows each read.
DEFAULT_IO_THREADS = 8

_io_threads = DEFAULT_IO_THREADS
_limiter: RunVar[anyio.CapacityLimiter] = RunVar("asyncreader_io_limiter")
# Abandonable calls run under this one instead: the I/O limiter's token is taken and given
# back by the caller, so an abandoned thread does not keep it (trio's own limiter would
# hold it until the thread returns).
_unbounded: RunVar[anyio.CapacityLimiter] = RunVar("asyncreader_io_unbounded")

#: Longest pause between two looks at whether an abandoned call has returned.
_POLL_MAX = 0.05

_abandoned_lock = threading.Lock()
_abandoned_running = 0
_abandoned_total = 0

#: Threads of the pool that runs cleanup outside the I/O executor (see run_detached).
DETACHED_THREADS = 2
_detached_lock = threading.Lock()
_detached_pool: ThreadPoolExecutor | None = None


def set_io_threads(n: int) -> None:
    """Set how many worker threads the shared I/O executor may use at once.

    Applies to every event loop: a loop that already has a limiter is resized now, others
    get the new size when they first read.

    Args:
        n: The number of threads, at least 1.

    Raises:
        InvalidArgumentError: if ``n`` is smaller than 1.
    """
    global _io_threads
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"io threads must be an integer >= 1, not {n!r}")
    _io_threads = n
    try:
        limiter = _limiter.get()
    except (LookupError, RuntimeError):
        return
    limiter.total_tokens = n


def io_threads() -> int:
    """Return the configured size of the shared I/O executor."""
    return _io_threads


def get_io_limiter() -> anyio.CapacityLimiter:
    """Return the current event loop's I/O limiter, creating it on first use."""
    try:
        return _limiter.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(_io_threads)
        _limiter.set(limiter)
        return limiter


def abandoned_io() -> tuple[int, int]:
    """Return ``(running, total)``: abandoned calls whose thread has not returned yet, and
    all calls abandoned since the process started."""
    with _abandoned_lock:
        return _abandoned_running, _abandoned_total


def _count_abandoned(delta: int) -> None:
    global _abandoned_running, _abandoned_total
    with _abandoned_lock:
        _abandoned_running += delta
        if delta > 0:
            _abandoned_total += delta


def _get_unbounded() -> anyio.CapacityLimiter:
    try:
        return _unbounded.get()
    except LookupError:
        limiter = anyio.CapacityLimiter(math.inf)
        _unbounded.set(limiter)
        return limiter


async def run_io(func: Callable[[Unpack[Ts]], T], *args: *Ts) -> T:
    """Run blocking ``func(*args)`` on the shared I/O executor and return its result.

    Cancellation waits for the running call to return, so keep calls short. Calls that may
    block for good (reading a reader's work item) go through :func:`run_io_abandoning`.
    """
    return await anyio.to_thread.run_sync(func, *args, limiter=get_io_limiter())


_NEW, _RUNNING, _DONE = 0, 1, 2

# The IoCall each worker thread runs (None: none), for interruptible().
_current = threading.local()


class Interruptible(Protocol):
    """What an I/O call's thread may wait on that another thread can interrupt."""

    def interrupt(self) -> None:
        """End the waits on it now and make later ones fail at once (thread-safe)."""


@contextlib.contextmanager
def interruptible(what: Interruptible) -> Iterator[None]:
    """Mark the block as waiting on ``what``: interrupting the :class:`IoCall` this thread
    runs interrupts ``what`` (at once when the call was interrupted already).

    Outside an :class:`IoCall` (a thread of the caller's own) it does nothing.
    """
    call: IoCall[object] | None = getattr(_current, "call", None)
    if call is None:
        yield
        return
    call._watch(what)
    try:
        yield
    finally:
        call._unwatch(what)


class _NotRun(Exception):
    """The outcome of a call abandoned before its thread started it (never seen)."""


class IoCall(Generic[T]):
    """One blocking call for :func:`run_io_abandoning`, which its caller may abandon.

    An abandoned call goes on running on its thread. Its outcome is kept: the caller may
    :meth:`wait` for it and take it with :meth:`outcome` later, or :meth:`discard` it, and
    then ``cleanup`` runs on the thread once the call returns (to close what it opened).

    Args:
        func: The call (no arguments: bind them with :func:`functools.partial`).
        cleanup: What a discarded call runs after it returns. Its errors are dropped:
            nobody is left to receive them.
    """

    __slots__ = (
        "_abandoned",
        "_cleanup",
        "_discarded",
        "_error",
        "_func",
        "_interrupted",
        "_lock",
        "_result",
        "_settled",
        "_state",
        "_watched",
    )

    def __init__(self, func: Callable[[], T], cleanup: Callable[[], object] | None = None) -> None:
        self._func = func
        self._cleanup = cleanup
        self._lock = threading.Lock()
        self._state = _NEW
        self._abandoned = False
        self._discarded = False
        self._interrupted = False
        # What the thread waits on now that can be interrupted (see interruptible()).
        self._watched: list[Interruptible] = []
        self._result: T | None = None
        self._error: BaseException | None = None
        # Set once no thread works for the call any more (after the cleanup, if any).
        self._settled = threading.Event()

    @property
    def abandoned(self) -> bool:
        """Whether the caller stopped waiting after the call had started."""
        with self._lock:
            return self._abandoned and self._state != _NEW

    @property
    def running(self) -> bool:
        """Whether the call was abandoned and its thread has not returned yet."""
        return self.abandoned and not self._settled.is_set()

    def _run(self) -> T:
        """The worker thread's side."""
        with self._lock:
            if self._abandoned:
                raise _NotRun  # given up before it started: never run
            self._state = _RUNNING
        outer = getattr(_current, "call", None)
        _current.call = self
        try:
            self._result = result = self._func()
            return result
        except BaseException as exc:
            self._error = exc
            raise
        finally:
            _current.call = outer
            self._returned()

    def _returned(self) -> None:
        with self._lock:
            self._state = _DONE
            self._watched.clear()
            abandoned, discarded = self._abandoned, self._discarded
        if discarded and self._cleanup is not None:
            with contextlib.suppress(Exception):  # nobody is left to receive it
                self._cleanup()
        if abandoned:
            _count_abandoned(-1)
        self._settled.set()

    def _abandon(self) -> None:
        """The caller stops waiting (on the event loop, when it is cancelled)."""
        with self._lock:
            self._abandoned = True
            state = self._state
            if state == _RUNNING:
                _count_abandoned(1)
        if state == _NEW:
            self._settled.set()  # it will never run: nothing to wait for

    def discard(self) -> bool:
        """Give up the outcome of an abandoned call.

        Returns:
            ``True`` when the call still runs: its thread runs ``cleanup`` when it returns.
            ``False`` when it has returned: the caller cleans up itself.
        """
        with self._lock:
            if self._state == _RUNNING:
                self._discarded = True
                return True
            return False

    def interrupt(self) -> None:
        """Interrupt what the call's thread waits on, now and from now on (thread-safe).

        For a call whose outcome nobody wants (a closing reader discards it): the waits its
        thread marked with :func:`interruptible` (remote requests, their retries) fail at
        once, so the thread returns and closes its files without waiting for them. Waits
        on anything else (a local file, a named pipe) go on as before.
        """
        with self._lock:
            self._interrupted = True
            watched = list(self._watched)
        for what in watched:
            with contextlib.suppress(Exception):  # each is interrupted, whatever the others do
                what.interrupt()

    def _watch(self, what: Interruptible) -> None:
        """The thread waits on ``what`` (see :func:`interruptible`)."""
        with self._lock:
            if not self._interrupted:
                self._watched.append(what)
                return
        what.interrupt()  # interrupted already: the thread does not wait any more

    def _unwatch(self, what: Interruptible) -> None:
        with self._lock:
            watched = self._watched
            for i, seen in enumerate(watched):
                if seen is what:
                    del watched[i]
                    return

    async def wait(self) -> None:
        """Wait, cancellably, until no thread works for the abandoned call any more."""
        delay = 0.001
        while not self._settled.is_set():
            await anyio.sleep(delay)
            delay = min(delay * 2, _POLL_MAX)

    def outcome(self) -> T:
        """Return the result of the call once it returned, or raise its error."""
        assert self._settled.is_set()
        assert self._state == _DONE
        if self._error is not None:
            raise self._error
        return cast("T", self._result)


async def run_io_abandoning(call: IoCall[T]) -> T:
    """Run ``call`` on the shared I/O executor; on cancellation, abandon it at once.

    The caller's cancellation is never held up by the thread: the call is abandoned (see
    :class:`IoCall`) and its I/O limiter token is given back at once. When
    :attr:`IoCall.abandoned` is then true, a thread still works (or worked) on the
    caller's objects, which it must not touch until :meth:`IoCall.wait` returns.
    """
    limiter = get_io_limiter()
    await limiter.acquire_on_behalf_of(call)
    try:
        return await anyio.to_thread.run_sync(
            call._run, abandon_on_cancel=True, limiter=_get_unbounded()
        )
    except BaseException as exc:
        if exc is not call._error:
            call._abandon()
        raise
    finally:
        limiter.release_on_behalf_of(call)


def run_detached(func: Callable[[], object]) -> IoCall[object]:
    """Run ``func`` on a thread outside the I/O executor, whatever happens to the caller.

    For cleanup that must happen (closing the files of a reader being closed) when the
    I/O executor's threads are all taken or the caller's grace ran out: the call runs once
    a thread of a small pool of its own is free, whether or not anyone waits for it. Its
    errors are dropped: nobody may be left to receive them.

    Returns:
        The call: ``await call.wait()`` waits, cancellably, until it has run.
    """
    global _detached_pool
    call: IoCall[object] = IoCall(func)
    with _detached_lock:
        if _detached_pool is None:
            _detached_pool = ThreadPoolExecutor(
                DETACHED_THREADS, thread_name_prefix="asyncreader-cleanup"
            )
        pool = _detached_pool
    pool.submit(call._run)
    return call
