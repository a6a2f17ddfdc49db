"""One scrape of a pipeline: :func:`sample` turns stage statistics into plain numbers.

Everything the metrics, the live page and ``asyncreader watch`` show comes from
:meth:`Session.stage_statistics <asyncreader.Session.stage_statistics>`, taken when they
ask (a scrape, a page poll): nothing is counted per record for them. Counters
(``*_total``) only grow; rates are two scrapes' difference over the time between them.
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

import anyio.from_thread
import anyio.lowlevel
import anyio.to_thread

from .._queues.statistics import QueueStatistics
from .._readers.base import ReaderStatistics
from .._runtime.queue_runner import QueueRunnerStatistics

if TYPE_CHECKING:
    from .._runtime.session import Session
    from .._runtime.stages import StageStatistics

__all__ = ["Sampler", "asample", "sample", "stage_row"]


def stage_row(stage: StageStatistics) -> dict[str, Any]:
    """Return one stage's numbers as a JSON-ready mapping.

    Every row has ``kind``, ``name``, ``state``, ``tasks_waiting_enqueue``,
    ``tasks_waiting_dequeue`` and ``tasks_busy``; queues add their size, capacity, fill
    fraction, element counters and seconds blocked; readers their records, bytes, work
    items, errors and skips; runners their running tasks and errors.
    """
    row: dict[str, Any] = {
        "kind": stage.kind,
        "name": stage.name,
        "state": stage.state,
        "tasks_waiting_enqueue": stage.tasks_blocked_enqueue,
        "tasks_waiting_dequeue": stage.tasks_blocked_dequeue,
        "tasks_busy": stage.tasks_busy,
    }
    stats = stage.statistics
    if isinstance(stats, QueueStatistics):
        capacity = stats.capacity
        row.update(
            size=stats.size,
            capacity=capacity,
            # An unbounded queue has no fill level (TensorFlow's summary needs a capacity).
            fill_fraction=stats.size / capacity if capacity else 0.0,
            enqueued_total=stats.total_enqueued,
            dequeued_total=stats.total_dequeued,
            seconds_blocked_enqueue_total=stats.seconds_blocked_enqueue,
            seconds_blocked_dequeue_total=stats.seconds_blocked_dequeue,
            closed=stats.closed,
        )
    elif isinstance(stats, ReaderStatistics):
        row.update(
            records_total=stats.records_produced,
            bytes_total=stats.bytes_read,
            work_units_total=stats.work_units_completed,
            errors_total=stats.errors,
            skipped_total=stats.errors_skipped,
            buffered=stats.buffered,
            closed=stats.closed,
        )
    elif isinstance(stats, QueueRunnerStatistics):
        row.update(
            tasks_running=stats.tasks_running,
            errors_total=stats.exceptions_raised,
        )
    return row


def sample(session: Session) -> dict[str, Any]:
    """Return a snapshot of every stage of ``session`` as a JSON-ready mapping.

    ``{"time": <seconds, monotonic>, "stages": [<stage_row>, ...]}``, in the order of
    :meth:`Session.stage_statistics <asyncreader.Session.stage_statistics>`. Call it in
    the session's event loop thread.
    """
    stages = session.stage_statistics()
    return {"time": time.monotonic(), "stages": [stage_row(s) for s in stages]}


async def asample(session: Session) -> dict[str, Any]:
    """:func:`sample`, plus the shared queues of a scale-out job (``Session(cluster=...)``).

    Their rows (``shared:<shared_name>``) come from the queues' actors, one call each,
    awaited: the job's size, counters and blocked callers of every process.
    """
    taken = sample(session)
    shared = await session.shared_stage_statistics()
    taken["stages"] += [stage_row(s) for s in shared]
    return taken


class Sampler:
    """Take :func:`sample` of a session from any thread.

    Built in the session's event loop. Called in that loop's thread, it samples at once
    (the local stages only: a shared queue's actor cannot be awaited there; async callers
    use :meth:`take`); called from another thread (a Prometheus client's HTTP server,
    OpenTelemetry's export thread), it runs :func:`asample` in the loop and waits for it,
    since the stages may only be read there. Once the loop has ended it returns ``None``.
    """

    def __init__(self, session: Session) -> None:
        self._session = session
        self._thread = threading.get_ident()
        self._token = anyio.lowlevel.current_token()

    def __call__(self) -> dict[str, Any] | None:
        if threading.get_ident() == self._thread:
            return sample(self._session)
        try:
            return anyio.from_thread.run(asample, self._session, token=self._token)
        except RuntimeError:  # the loop has ended (trio's RunFinishedError is one too)
            return None

    async def take(self) -> dict[str, Any]:
        """Return :func:`asample` of the session, from any event loop.

        In the session's own loop it awaits the sample; in another loop (an app served
        from its own thread) it waits on a worker thread for the session's loop to take
        it. An empty sample once the session's loop has ended.
        """
        if threading.get_ident() == self._thread:
            return await asample(self._session)
        taken = await anyio.to_thread.run_sync(self)
        return taken if taken is not None else {"time": None, "stages": []}
