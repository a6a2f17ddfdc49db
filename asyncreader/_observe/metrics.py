"""The pipeline's metrics, defined once for Prometheus and OpenTelemetry.

Each :class:`Metric` turns the rows of :func:`~.snapshot.sample` into labelled values.
Names follow Prometheus conventions: the unit in the name, ``_total`` on counters (the
Prometheus client adds it), the stage's name as the ``stage`` label; OpenTelemetry gets
the dotted form with the unit apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

__all__ = ["METRICS", "STATES", "Metric"]

#: The states each kind of stage can be in (``StageState``), one series each.
STATES: dict[str, tuple[str, ...]] = {
    "queue": ("idle", "starved", "full", "deadlocked", "closed"),
    "reader": ("idle", "waiting_for_work", "reading", "closed"),
    "runner": ("idle", "running", "full"),
}

Samples = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Metric:
    """One metric: its names, type, unit, help text, labels and how to read it from rows."""

    name: str  # Prometheus name; counters without the ``_total`` the client appends
    otel_name: str
    counter: bool
    unit: str  # OpenTelemetry's unit (UCUM)
    doc: str
    labels: tuple[str, ...]
    read: Callable[[Iterable[dict[str, Any]]], Samples]


def _per_stage(kind: str, key: str) -> Callable[[Iterable[dict[str, Any]]], Samples]:
    def read(rows: Iterable[dict[str, Any]]) -> Samples:
        return [
            ({"stage": row["name"]}, float(row[key]))
            for row in rows
            if row["kind"] == kind and row.get(key) is not None
        ]

    return read


def _sides(kind: str | None, enqueue: str, dequeue: str) -> Callable[..., Samples]:
    def read(rows: Iterable[dict[str, Any]]) -> Samples:
        out: Samples = []
        for row in rows:
            if kind is None or row["kind"] == kind:
                labels = {"stage": row["name"]}
                if kind is None:
                    labels["kind"] = row["kind"]
                out.append(({**labels, "side": "enqueue"}, float(row[enqueue])))
                out.append(({**labels, "side": "dequeue"}, float(row[dequeue])))
        return out

    return read


def _states(rows: Iterable[dict[str, Any]]) -> Samples:
    return [
        ({"stage": row["name"], "kind": row["kind"], "state": state}, float(row["state"] == state))
        for row in rows
        for state in STATES[row["kind"]]
    ]


def _busy(rows: Iterable[dict[str, Any]]) -> Samples:
    return [({"stage": row["name"], "kind": row["kind"]}, float(row["tasks_busy"])) for row in rows]


_S = ("stage",)

METRICS: tuple[Metric, ...] = (
    Metric(
        "asyncreader_stage_state",
        "asyncreader.stage.state",
        False,
        "1",
        "1 for the state the stage is in (starved: consumers wait on an empty queue; full: "
        "producers wait for room), 0 for the others",
        ("stage", "kind", "state"),
        _states,
    ),
    Metric(
        "asyncreader_stage_tasks_waiting",
        "asyncreader.stage.tasks_waiting",
        False,
        "{task}",
        "Tasks blocked on the stage now, by side: enqueue (waiting for room) or dequeue "
        "(waiting for elements or work)",
        ("stage", "kind", "side"),
        _sides(None, "tasks_waiting_enqueue", "tasks_waiting_dequeue"),
    ),
    Metric(
        "asyncreader_stage_tasks_busy",
        "asyncreader.stage.tasks_busy",
        False,
        "{task}",
        "Tasks working rather than waiting: a reader's reads in a work item, a runner's "
        "tasks producing",
        ("stage", "kind"),
        _busy,
    ),
    Metric(
        "asyncreader_queue_size_elements",
        "asyncreader.queue.size",
        False,
        "{element}",
        "Elements stored in the queue",
        _S,
        _per_stage("queue", "size"),
    ),
    Metric(
        "asyncreader_queue_capacity_elements",
        "asyncreader.queue.capacity",
        False,
        "{element}",
        "The queue's capacity (no series for an unbounded queue)",
        _S,
        _per_stage("queue", "capacity"),
    ),
    Metric(
        "asyncreader_queue_fill_ratio",
        "asyncreader.queue.fill_ratio",
        False,
        "1",
        "size / capacity, TensorFlow's fraction_of_<capacity>_full (0 when unbounded)",
        _S,
        _per_stage("queue", "fill_fraction"),
    ),
    Metric(
        "asyncreader_queue_enqueued_elements",
        "asyncreader.queue.enqueued",
        True,
        "{element}",
        "Elements put into the queue",
        _S,
        _per_stage("queue", "enqueued_total"),
    ),
    Metric(
        "asyncreader_queue_dequeued_elements",
        "asyncreader.queue.dequeued",
        True,
        "{element}",
        "Elements taken out of the queue (its rate is the stage's records per second)",
        _S,
        _per_stage("queue", "dequeued_total"),
    ),
    Metric(
        "asyncreader_queue_blocked_seconds",
        "asyncreader.queue.blocked",
        True,
        "s",
        "Seconds tasks spent blocked on the queue, by side (its rate is the average number "
        "of tasks waiting)",
        ("stage", "side"),
        _sides("queue", "seconds_blocked_enqueue_total", "seconds_blocked_dequeue_total"),
    ),
    Metric(
        "asyncreader_reader_records",
        "asyncreader.reader.records",
        True,
        "{record}",
        "Records the reader delivered",
        _S,
        _per_stage("reader", "records_total"),
    ),
    Metric(
        "asyncreader_reader_read_bytes",
        "asyncreader.reader.read",
        True,
        "By",
        "Bytes the reader read from its work items (compressed bytes for compressed files)",
        _S,
        _per_stage("reader", "bytes_total"),
    ),
    Metric(
        "asyncreader_reader_work_units",
        "asyncreader.reader.work_units",
        True,
        "{work_unit}",
        "Work items (files) the reader finished",
        _S,
        _per_stage("reader", "work_units_total"),
    ),
    Metric(
        "asyncreader_reader_errors",
        "asyncreader.reader.errors",
        True,
        "{error}",
        "Errors the reader's hooks raised",
        _S,
        _per_stage("reader", "errors_total"),
    ),
    Metric(
        "asyncreader_reader_skipped",
        "asyncreader.reader.skipped",
        True,
        "{record}",
        "Bad records and work items skipped under on_error; each left a dead letter",
        _S,
        _per_stage("reader", "skipped_total"),
    ),
    Metric(
        "asyncreader_runner_tasks_running",
        "asyncreader.runner.tasks_running",
        False,
        "{task}",
        "The queue runner's enqueue tasks running",
        _S,
        _per_stage("runner", "tasks_running"),
    ),
    Metric(
        "asyncreader_runner_errors",
        "asyncreader.runner.errors",
        True,
        "{error}",
        "Errors the queue runner's tasks raised since its last start",
        _S,
        _per_stage("runner", "errors_total"),
    ),
)
