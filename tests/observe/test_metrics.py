"""Prometheus metrics of a running pipeline: names, values and where they are read."""

from __future__ import annotations

import sys
import threading
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import pytest

import asyncreader as ar
from asyncreader._observe.metrics import STATES

from .conftest import build_pipeline, call, wait_until

if TYPE_CHECKING:
    from asyncreader._runtime.stages import StageStatistics

prometheus_client = pytest.importorskip(
    "prometheus_client", reason="prometheus_client is not installed: asyncreader[metrics]"
)
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

pytestmark = pytest.mark.anyio

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    """Every sample of a scrape, keyed by its name and labels."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


def at_rest(sess: ar.Session) -> bool:
    """Whether every task of the pipeline is blocked (its numbers cannot move)."""
    stages = {(s.kind, s.name): s for s in sess.stage_statistics()}
    return (
        len(stages) == 5
        and stages["queue", "filenames"].state == "full"
        and all(s.state == "full" for (kind, _), s in stages.items() if kind == "runner")
        and sum(s.state == "full" for (kind, _), s in stages.items() if kind == "queue") == 2
    )


def check_stage(samples: Samples, stage: StageStatistics) -> None:
    stats: Any = stage.statistics
    name = stage.name
    for state in STATES[stage.kind]:
        assert value(
            samples, "asyncreader_stage_state", stage=name, kind=stage.kind, state=state
        ) == float(stage.state == state)
    for side, count in (
        ("enqueue", stage.tasks_blocked_enqueue),
        ("dequeue", stage.tasks_blocked_dequeue),
    ):
        assert value(
            samples, "asyncreader_stage_tasks_waiting", stage=name, kind=stage.kind, side=side
        ) == float(count)
    assert value(samples, "asyncreader_stage_tasks_busy", stage=name, kind=stage.kind) == float(
        stage.tasks_busy
    )
    if stage.kind == "queue":
        assert value(samples, "asyncreader_queue_size_elements", stage=name) == stats.size
        assert value(samples, "asyncreader_queue_capacity_elements", stage=name) == stats.capacity
        assert value(samples, "asyncreader_queue_fill_ratio", stage=name) == pytest.approx(
            stats.size / stats.capacity
        )
        assert (
            value(samples, "asyncreader_queue_enqueued_elements_total", stage=name)
            == stats.total_enqueued
        )
        assert (
            value(samples, "asyncreader_queue_dequeued_elements_total", stage=name)
            == stats.total_dequeued
        )
        # Still growing while the tasks stay blocked: the scrape lies between two reads.
        blocked = value(
            samples, "asyncreader_queue_blocked_seconds_total", stage=name, side="enqueue"
        )
        assert 0 < blocked <= stats.seconds_blocked_enqueue
    elif stage.kind == "reader":
        assert (
            value(samples, "asyncreader_reader_records_total", stage=name) == stats.records_produced
        )
        assert value(samples, "asyncreader_reader_read_bytes_total", stage=name) == stats.bytes_read
        assert value(samples, "asyncreader_reader_errors_total", stage=name) == stats.errors
        assert (
            value(samples, "asyncreader_reader_skipped_total", stage=name) == stats.errors_skipped
        )
        assert (
            value(samples, "asyncreader_reader_work_units_total", stage=name)
            == stats.work_units_completed
        )
    else:
        assert value(samples, "asyncreader_runner_tasks_running", stage=name) == stats.tasks_running
        assert (
            value(samples, "asyncreader_runner_errors_total", stage=name) == stats.exceptions_raised
        )


@pytest.mark.both_backends
async def test_scraped_metrics_match_stage_statistics(lines_file: str) -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess:
            _batches = build_pipeline(
                lines_file
            )  # kept alive: sessions track weakly  # nobody consumes: it fills up and comes to rest
            await wait_until(lambda: at_rest(sess))
            app = ar.metrics_app(sess)
            status, headers, body = await call(app, "/metrics")
            assert status == 200
            assert headers["content-type"].startswith("text/plain; version=0.0.4")
            stages = sess.stage_statistics()
            samples = parse(body.decode())
            for stage in stages:
                check_stage(samples, stage)
            reader = next(s for s in stages if s.kind == "reader")
            assert reader.statistics.records_produced > 0
            assert reader.statistics.bytes_read > 0
            sess.coord.request_stop()


@pytest.mark.both_backends
async def test_metrics_follow_prometheus_conventions(lines_file: str) -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess:
            _batches = build_pipeline(lines_file)  # kept alive: sessions track weakly
            await wait_until(lambda: at_rest(sess))
            _, _, body = await call(ar.metrics_app(sess), "/metrics")
            sess.coord.request_stop()
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert all(name.startswith("asyncreader_") for name in families)
    counters = {name for name, f in families.items() if f.type == "counter"}
    assert counters == {
        "asyncreader_queue_enqueued_elements",
        "asyncreader_queue_dequeued_elements",
        "asyncreader_queue_blocked_seconds",
        "asyncreader_reader_records",
        "asyncreader_reader_read_bytes",
        "asyncreader_reader_work_units",
        "asyncreader_reader_errors",
        "asyncreader_reader_skipped",
        "asyncreader_runner_errors",
    }
    for name in counters:  # exposed with the _total suffix
        assert all(s.name == f"{name}_total" for s in families[name].samples)
    # Units in the names, stage names in a label.
    assert "asyncreader_queue_blocked_seconds" in families
    assert "asyncreader_reader_read_bytes" in families
    assert {s.labels["stage"] for s in families["asyncreader_queue_size_elements"].samples} == {
        "filenames",
        "FIFOQueue_"
        + next(
            s.labels["stage"].split("_")[1]
            for s in families["asyncreader_queue_size_elements"].samples
            if s.labels["stage"] != "filenames"
        ),
    }


async def test_an_unbounded_queue_has_no_capacity_and_fills_nothing() -> None:
    async with ar.Session() as sess:
        q = ar.FIFOQueue(None, name="unbounded")
        await q.enqueue_many([1, 2, 3])
        _, _, body = await call(ar.metrics_app(sess), "/metrics")
    samples = parse(body.decode())
    assert value(samples, "asyncreader_queue_size_elements", stage="unbounded") == 3
    assert value(samples, "asyncreader_queue_fill_ratio", stage="unbounded") == 0
    assert not any(name == "asyncreader_queue_capacity_elements" for name, _ in samples)


async def test_skipped_records_are_counted(tmp_path: Any) -> None:
    good = tmp_path / "good.txt"
    good.write_text("a\nb\n")
    async with ar.Session() as sess:
        files = ar.string_input_producer(
            [str(tmp_path / "missing.txt"), str(good)], num_epochs=1, shuffle=False
        )
        reader = ar.TextLineReader(name="skipping", on_error="skip")
        with anyio.fail_after(10):
            assert (await reader.read(files))[1] == b"a"
        _, _, body = await call(ar.metrics_app(sess), "/metrics")
        sess.coord.request_stop()
    samples = parse(body.decode())
    assert value(samples, "asyncreader_reader_skipped_total", stage="skipping") == 1
    assert len(reader.dead_letters) == 1


@pytest.mark.both_backends
async def test_the_collector_scrapes_from_another_thread(lines_file: str) -> None:
    # prometheus_client's own HTTP server scrapes in its thread: the collector takes the
    # sample in the session's loop and waits for it.
    registry = prometheus_client.CollectorRegistry()
    with anyio.fail_after(20):
        async with ar.Session() as sess:
            _batches = build_pipeline(lines_file)  # kept alive: sessions track weakly
            await wait_until(lambda: at_rest(sess))
            registry.register(ar.PrometheusCollector(sess))
            text = await anyio.to_thread.run_sync(prometheus_client.generate_latest, registry)
            samples = parse(text.decode())
            for stage in sess.stage_statistics():
                check_stage(samples, stage)
            sess.coord.request_stop()


def test_after_the_loop_ended_a_scrape_from_another_thread_has_no_stages() -> None:
    async def build() -> tuple[ar.PrometheusCollector, ar.FIFOQueue[Any]]:
        async with ar.Session() as sess:
            q: ar.FIFOQueue[Any] = ar.FIFOQueue(2, name="kept")
            collector = ar.PrometheusCollector(sess)
        return collector, q

    collector, _queue = anyio.run(build)
    registry = prometheus_client.CollectorRegistry()
    registry.register(collector)
    result: list[bytes] = []
    thread = threading.Thread(
        target=lambda: result.append(prometheus_client.generate_latest(registry))
    )
    thread.start()
    thread.join(10)
    assert parse(result[0].decode()) == {}


async def test_without_prometheus_client_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client.core", None)
    async with ar.Session() as sess:
        for make in (ar.metrics_app, ar.PrometheusCollector):
            with pytest.raises(ar.FailedPreconditionError, match=r"asyncreader\[metrics\]"):
                make(sess)
