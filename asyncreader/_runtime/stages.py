"""Which stage of a pipeline is stalled: :class:`StageStatistics`.

A pipeline is a chain of queues with tasks between them: a producer's runner fills a work
queue, readers take work from it, decode tasks fill a batch queue, consumers drain it. When
batches stop coming, the question is *where* the tasks are waiting. A queue answers it by
side: consumers blocked on an **empty** queue (``"starved"``) mean the stages upstream are
too slow or finished; producers blocked on a **full** queue (``"full"``) mean the stages
downstream are. A reader is either waiting for a work item (its work queue is starved) or
reading one (waiting on the I/O executor or its hooks). A runner's tasks are either
blocked on its full queue or busy upstream.

:meth:`Session.stage_statistics <asyncreader.Session.stage_statistics>` lists every queue
and reader built in the session and every runner started in its coordinator;
:meth:`Coordinator.stage_statistics <asyncreader.Coordinator.stage_statistics>` lists the
runners started in it and their queues. Building the list walks the waiters of each queue,
so it costs O(tasks) and is meant for diagnostics, not for the hot path.

Queues and readers describe themselves: the runtime knows them only through the
:class:`Stage` protocol.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from collections.abc import Iterable

    from .queue_runner import QueueRunner

__all__ = ["Stage", "StageKind", "StageState", "StageStatistics", "collect"]

#: What a stage is.
StageKind = Literal["queue", "reader", "runner", "map"]

#: Where a stage's tasks are. Queues: ``"idle"`` (nobody blocked), ``"starved"``
#: (consumers blocked on an empty queue, or one at ``min_after_dequeue``), ``"full"``
#: (producers blocked on a full queue), ``"deadlocked"`` (both sides blocked, e.g. a
#: ``dequeue_many`` larger than a PriorityQueue's capacity), ``"closed"`` (closed, nobody
#: blocked). Readers: ``"idle"``, ``"waiting_for_work"`` (a read is waiting for its work
#: queue), ``"reading"`` (a read is in a work item: on the I/O executor or in a hook),
#: ``"closed"`` (a read still opening the item it just took, in ``on_work_started``, counts
#: as waiting for work). Runners: ``"idle"`` (no task running), ``"running"`` (tasks busy
#: producing), ``"full"`` (tasks blocked on the runner's full queue). Map stages:
#: ``"idle"``, ``"running"`` (calls of ``fn`` in flight), ``"starved"`` (consumers wait and
#: no call is in flight: the source is slow), ``"full"`` (workers wait for consumers to take
#: results), ``"closed"``.
StageState = Literal[
    "idle", "starved", "full", "deadlocked", "closed", "waiting_for_work", "reading", "running"
]


@dataclass(frozen=True, slots=True)
class StageStatistics:
    """A snapshot of one pipeline stage: whether tasks are blocked on it, and on which side.

    Attributes:
        kind: ``"queue"``, ``"reader"``, ``"runner"`` or ``"map"``.
        name: The stage's name (a queue's or reader's ``name``; a runner's queue name).
        state: Where its tasks are; see :data:`StageState`.
        tasks_blocked_enqueue: Tasks blocked putting elements in: a queue's blocked
            enqueues (it is full); for a runner, those of its tasks among them.
        tasks_blocked_dequeue: Tasks blocked taking elements out: a queue's blocked
            dequeues (it is empty); for a reader, reads waiting for a work item.
        tasks_busy: Tasks working rather than waiting on a queue: a reader's reads in a
            work item; a runner's running tasks not blocked on its queue; a map stage's
            calls in flight (its waiting workers count as blocked enqueues, its waiting
            consumers as blocked dequeues).
        statistics: The stage's own ``statistics()`` record (``QueueStatistics``,
            ``ReaderStatistics``, ``QueueRunnerStatistics`` or ``MapStatistics``).
    """

    kind: StageKind
    name: str
    state: StageState
    tasks_blocked_enqueue: int
    tasks_blocked_dequeue: int
    tasks_busy: int
    statistics: Any

    @property
    def blocked(self) -> bool:
        """Whether any task is blocked on this stage's queue (either side)."""
        return bool(self.tasks_blocked_enqueue or self.tasks_blocked_dequeue)


@runtime_checkable
class Stage(Protocol):
    """A pipeline stage that reports where its tasks are: queues, readers, map stages."""

    def _stage_statistics(self) -> StageStatistics:
        """Return the stage's snapshot (O(tasks blocked on it): for diagnostics)."""
        ...


def _runner_stage(runner: QueueRunner) -> StageStatistics:
    stats = runner.statistics()
    queue = runner.queue
    blocked = queue._stage_statistics().tasks_blocked_enqueue if isinstance(queue, Stage) else 0
    on_queue = min(blocked, stats.tasks_running)
    state: StageState
    if not stats.tasks_running:
        state = "idle"
    elif on_queue:
        state = "full"
    else:
        state = "running"
    return StageStatistics(
        "runner", stats.name, state, on_queue, 0, stats.tasks_running - on_queue, stats
    )


def collect(resources: Iterable[object], runners: Iterable[QueueRunner]) -> list[StageStatistics]:
    """Return one record per queue or reader in ``resources`` and per runner, in order.

    A runner's queue is listed after the runner when ``resources`` did not list it.
    Objects that are not a :class:`Stage` (queues and readers) are skipped.
    """
    out: list[StageStatistics] = []
    seen: set[int] = set()
    for resource in resources:
        if id(resource) not in seen and isinstance(resource, Stage):
            seen.add(id(resource))
            out.append(resource._stage_statistics())
    for runner in runners:
        out.append(_runner_stage(runner))
        queue = runner.queue
        if id(queue) not in seen and isinstance(queue, Stage):
            seen.add(id(queue))
            out.append(queue._stage_statistics())
    return out
