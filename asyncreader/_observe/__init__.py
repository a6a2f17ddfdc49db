"""Observability: the pipeline's metrics for Prometheus and OpenTelemetry, and a live page.

Everything here reads :meth:`Session.stage_statistics
<asyncreader.Session.stage_statistics>` when asked (a scrape, a poll of the page, an
OpenTelemetry collection), so a pipeline pays nothing per record for being watched.
"""

from .asgi import metrics_app
from .otel import instrument_opentelemetry
from .prometheus import PrometheusCollector
from .server import serve_metrics

__all__ = ["PrometheusCollector", "instrument_opentelemetry", "metrics_app", "serve_metrics"]
