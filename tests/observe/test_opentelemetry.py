"""The pipeline's metrics as OpenTelemetry instruments, read with the in-memory reader."""

from __future__ import annotations

import sys
from typing import Any

import anyio
import anyio.to_thread
import pytest

import asyncreader as ar

from .conftest import build_pipeline, wait_until

pytest.importorskip("opentelemetry.sdk", reason="opentelemetry-sdk is not installed")
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

pytestmark = pytest.mark.anyio


def points(reader: InMemoryMetricReader) -> dict[str, tuple[Any, list[Any]]]:
    """Each metric's instrument (data) and data points, by name."""
    data = reader.get_metrics_data()
    assert data is not None
    return {
        metric.name: (metric, list(metric.data.data_points))
        for resource in data.resource_metrics
        for scope in resource.scope_metrics
        for metric in scope.metrics
    }


def point(found: dict[str, tuple[Any, list[Any]]], name: str, **attributes: str) -> float:
    matches = [p.value for p in found[name][1] if dict(p.attributes) == attributes]
    assert len(matches) == 1, (name, attributes)
    value: float = matches[0]
    return value


@pytest.mark.both_backends
async def test_instruments_report_the_stage_statistics(lines_file: str) -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    try:
        with anyio.fail_after(20):
            async with ar.Session() as sess:
                _batches = build_pipeline(lines_file)
                await wait_until(
                    lambda: sum(s.state == "full" for s in sess.stage_statistics()) == 4
                )
                ar.instrument_opentelemetry(sess, meter_provider=provider)
                # Collected in the loop's thread, then from another one (an exporter's).
                for found in (points(reader), await anyio.to_thread.run_sync(points, reader)):
                    stages = {(s.kind, s.name): s for s in sess.stage_statistics()}
                    queue = stages["queue", "filenames"].statistics
                    lines = stages["reader", "lines"].statistics
                    assert point(found, "asyncreader.queue.size", stage="filenames") == queue.size
                    assert point(found, "asyncreader.queue.fill_ratio", stage="filenames") == 1.0
                    assert (
                        point(found, "asyncreader.queue.enqueued", stage="filenames")
                        == queue.total_enqueued
                    )
                    assert (
                        point(found, "asyncreader.reader.records", stage="lines")
                        == lines.records_produced
                    )
                    assert (
                        point(found, "asyncreader.reader.read", stage="lines") == lines.bytes_read
                    )
                    assert (
                        point(
                            found,
                            "asyncreader.stage.state",
                            stage="filenames",
                            kind="queue",
                            state="full",
                        )
                        == 1
                    )
                    metric, _ = found["asyncreader.reader.read"]
                    assert metric.unit == "By"
                    assert metric.data.is_monotonic
                    assert found["asyncreader.queue.blocked"][0].unit == "s"
                sess.coord.request_stop()
    finally:
        provider.shutdown()


async def test_without_opentelemetry_the_error_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry", None)
    async with ar.Session() as sess:
        with pytest.raises(ar.FailedPreconditionError, match="opentelemetry-sdk"):
            ar.instrument_opentelemetry(sess)
