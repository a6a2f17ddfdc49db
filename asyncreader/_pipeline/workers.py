"""Worker processes for ``map(..., executor="process")``: one pipe per process.

``concurrent.futures.ProcessPoolExecutor`` moves every call through a call queue, a feeder
thread, a result queue and a manager thread: four thread wake-ups per call, which on a busy
machine cost more than a decode of a 1024-line batch. Here each worker process has its own
pipe, and the thread that makes a call (one of the map stage's worker threads) sends the
example down it and waits for the answer itself: one hop each way.

The function is sent once, when a process starts. Processes start with ``forkserver``
where the platform has it and ``spawn`` otherwise, never ``fork`` (the program has
threads), on the first call. :meth:`Workers.close` ends them: politely when no call is
running, by ``terminate()`` otherwise, so a slow call is not waited for.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import queue
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

__all__ = ["WorkerDied", "Workers"]


class WorkerDied(Exception):
    """A worker process ended before answering (killed, crashed, or the stage closed)."""


class _Failed:
    """The exception ``fn`` raised in a worker process (or a stand-in if it won't pickle)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _serve(conn: Connection, fn: Callable[[Any], Any]) -> None:
    """A worker process: call ``fn`` on each example received until told to stop."""
    while True:
        try:
            message = conn.recv()
        except (EOFError, OSError):
            return
        if message is None:
            return
        try:
            answer: Any = fn(message[0])
        except Exception as exc:
            answer = _Failed(exc)
        try:
            conn.send(answer)
        except Exception as exc:  # the result or the error does not pickle
            conn.send(_Failed(RuntimeError(f"{type(exc).__name__}: {exc}")))


class Workers:
    """``count`` worker processes calling ``fn``, used from several threads at once."""

    def __init__(self, fn: Callable[[Any], Any], count: int) -> None:
        self._fn = fn
        self._count = count
        self._lock = threading.Lock()
        self._idle: queue.SimpleQueue[Connection] = queue.SimpleQueue()
        self._processes: list[BaseProcess] = []
        self._conns: list[Connection] = []
        self._started = False
        self._closed = False
        self._busy = 0

    def _start(self) -> None:
        methods = multiprocessing.get_all_start_methods()
        # Never fork: this program has threads (the loop's, the I/O executor's).
        if "forkserver" in methods:
            context: Any = multiprocessing.get_context("forkserver")
            # Processes forked from a server that has imported these start in milliseconds
            # instead of importing numpy and the library again (0.5 s each time). It only
            # takes effect if this program's forkserver is not running yet.
            modules = ["__main__", "asyncreader", getattr(self._fn, "__module__", None)]
            context.set_forkserver_preload(list(dict.fromkeys(m for m in modules if m)))
        else:
            context = multiprocessing.get_context("spawn")
        for _ in range(self._count):
            parent, child = context.Pipe()
            process = context.Process(target=_serve, args=(child, self._fn), daemon=True)
            process.start()
            child.close()
            self._processes.append(process)
            self._conns.append(parent)
            self._idle.put(parent)
        self._started = True

    def call(self, example: Any) -> Any:
        """Call ``fn(example)`` in a free worker process and return its result (blocking).

        Raises:
            WorkerDied: the process ended before answering, or the workers are closed.
            Exception: what ``fn`` raised.
        """
        with self._lock:
            if self._closed:
                raise WorkerDied("the worker processes are shut down")
            if not self._started:
                self._start()
            self._busy += 1
        try:
            conn = self._idle.get()
            try:
                conn.send((example,))
                answer = conn.recv()
            except (EOFError, OSError) as exc:
                raise WorkerDied("a worker process ended before answering") from exc
            self._idle.put(conn)
        finally:
            with self._lock:
                self._busy -= 1
        if isinstance(answer, _Failed):
            raise answer.error
        return answer

    def pids(self) -> list[int]:
        """The worker processes' ids (none before the first call)."""
        return [p.pid for p in self._processes if p.pid is not None]

    def close(self, *, kill: bool) -> None:
        """End the processes (blocking): terminate them with ``kill`` or while a call runs,
        else ask them to stop. Idempotent."""
        with self._lock:
            self._closed = True
            kill = kill or self._busy > 0
        if kill:
            for process in self._processes:
                process.terminate()
        else:
            for conn in self._conns:
                with contextlib.suppress(OSError):  # (it ended already)
                    conn.send(None)
        for process in self._processes:
            process.join(5)
            if process.is_alive():
                process.kill()
                process.join()
        for conn in self._conns:
            conn.close()
        self._processes.clear()
        self._conns.clear()
