"""The pipeline's metrics as OpenTelemetry observable instruments."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .._errors import FailedPreconditionError
from .metrics import METRICS, Metric
from .snapshot import Sampler

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

    from .._runtime.session import Session

__all__ = ["instrument_opentelemetry"]

# A collection calls every instrument's callback in turn: they share one sample this young.
_SAMPLE_REUSE_SECONDS = 0.25


def instrument_opentelemetry(session: Session, *, meter_provider: Any = None) -> None:
    """Report ``session``'s pipeline metrics as OpenTelemetry observable instruments.

    Creates, on the meter ``"asyncreader"``, one observable counter or gauge per metric
    of :class:`PrometheusCollector` with the dotted name (``asyncreader.queue.fill_ratio``,
    ``asyncreader.queue.dequeued``, ``asyncreader.reader.read`` in ``By``, ...), the unit
    apart and the same attributes (``stage``, ``kind``, ``side``, ``state``). Their
    callbacks take one sample of :meth:`Session.stage_statistics
    <asyncreader.Session.stage_statistics>` per collection, in the session's event loop
    (an exporting reader's thread waits for the loop); after the loop has ended they
    report nothing. Nothing is counted per record.

    Args:
        session: The session whose stages are reported. Call this in its event loop.
        meter_provider: The ``MeterProvider`` to create the instruments with; by default
            the global one (``opentelemetry.metrics.get_meter_provider()``).

    Raises:
        FailedPreconditionError: ``opentelemetry-api`` is not installed
            (``pip install opentelemetry-sdk``).
    """
    try:
        from opentelemetry import metrics
    except ImportError:
        raise FailedPreconditionError(
            "OpenTelemetry metrics need the OpenTelemetry SDK: pip install opentelemetry-sdk"
        ) from None
    provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
    meter = provider.get_meter("asyncreader")
    sampler = Sampler(session)
    cache: list[Any] = [-1.0, []]  # [monotonic time of the sample, its rows]

    def rows() -> list[dict[str, Any]]:
        now = time.monotonic()
        if now - cache[0] > _SAMPLE_REUSE_SECONDS:
            snapshot = sampler()
            cache[:] = [now, snapshot["stages"] if snapshot is not None else []]
        rows_now: list[dict[str, Any]] = cache[1]
        return rows_now

    def callback(metric: Metric) -> Callable[[Any], Iterable[Any]]:
        def observe(options: Any) -> Iterable[Any]:
            return [metrics.Observation(value, labels) for labels, value in metric.read(rows())]

        return observe

    for metric in METRICS:
        create = (
            meter.create_observable_counter if metric.counter else meter.create_observable_gauge
        )
        create(
            metric.otel_name,
            callbacks=[callback(metric)],
            unit=metric.unit,
            description=metric.doc,
        )
