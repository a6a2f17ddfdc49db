"""The pipeline's metrics in the Prometheus text format, through ``prometheus_client``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import FailedPreconditionError
from .metrics import METRICS
from .snapshot import Sampler

if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator

    from prometheus_client.metrics_core import Metric as PromMetric

    from .._runtime.session import Session

__all__ = ["CONTENT_TYPE", "PrometheusCollector", "families", "render"]

INSTALL_HINT = "pip install 'asyncreader[metrics]'"

#: The Content-Type of the text format (version 0.0.4).
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _client() -> Any:
    try:
        import prometheus_client.core
    except ImportError:
        raise FailedPreconditionError(
            f"Prometheus metrics need prometheus_client: {INSTALL_HINT}"
        ) from None
    return prometheus_client.core


def families(rows: Iterable[dict[str, Any]]) -> list[PromMetric]:
    """Return the metric families of the sampled stage ``rows``."""
    core = _client()
    rows = list(rows)
    out: list[PromMetric] = []
    for metric in METRICS:
        cls = core.CounterMetricFamily if metric.counter else core.GaugeMetricFamily
        family = cls(metric.name, metric.doc, labels=metric.labels)
        for labels, value in metric.read(rows):
            family.add_metric([labels[name] for name in metric.labels], value)
        out.append(family)
    return out


class PrometheusCollector:
    """A ``prometheus_client`` collector of a session's pipeline metrics.

    Register it with a registry to export the session's stages with the rest of a
    program's metrics: ``prometheus_client.REGISTRY.register(ar.PrometheusCollector(sess))``.
    Every scrape takes :meth:`Session.stage_statistics
    <asyncreader.Session.stage_statistics>` once, in the session's event loop (from
    another thread, such as ``prometheus_client.start_http_server``'s, it waits for the
    loop to take it); nothing is counted per record. Once the loop has ended, a scrape
    from another thread exports no stages.

    The metrics (labels ``stage``, the stage's name; ``kind``; ``side``, ``enqueue`` or
    ``dequeue``; ``state``) are listed in the diagnosing-stalls guide:
    ``asyncreader_queue_fill_ratio``, ``asyncreader_queue_dequeued_elements_total``,
    ``asyncreader_reader_read_bytes_total``, ``asyncreader_queue_blocked_seconds_total``
    and the others.

    Args:
        session: The session whose stages are exported. Build the collector in the
            session's event loop.

    Raises:
        FailedPreconditionError: ``prometheus_client`` is not installed
            (``pip install 'asyncreader[metrics]'``).
    """

    __module__ = "asyncreader"

    def __init__(self, session: Session) -> None:
        _client()
        self._sample = Sampler(session)

    def collect(self) -> Iterator[PromMetric]:
        """Yield the metric families of one fresh sample of the session's stages."""
        snapshot = self._sample()
        yield from families(snapshot["stages"] if snapshot is not None else [])

    def describe(self) -> list[PromMetric]:
        """Return the metric families with no samples (so registering takes no sample)."""
        return families([])


def render(rows: Iterable[dict[str, Any]]) -> bytes:
    """Return sampled ``rows`` in the Prometheus text format."""
    core = _client()
    from prometheus_client.exposition import generate_latest

    class _Rows:
        def collect(self) -> list[PromMetric]:
            return families(rows)

    registry = core.CollectorRegistry(auto_describe=False)
    registry.register(_Rows())
    return generate_latest(registry)
