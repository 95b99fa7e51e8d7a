"""Observability wired into the processes: metrics, structured logs and health, kept out of the
business code.

Call sites elsewhere stay one line: ``metrics.webhook_rejected(provider, "signature")``,
``bind(correlation_id=...)``. The primitives every layer uses live below the models, in
``foundation``; this package wires them into Flask, Celery, gunicorn and the database:

- :mod:`foundation.metrics` -- process-level counters/histograms (multiprocess-safe) and the
  ``/metrics`` rendering;
- :mod:`foundation.logging` -- structlog configuration, context binding, secret redaction;
- :mod:`app.observability.collectors` -- business gauges read from the database and the broker at
  scrape time (never process-local);
- :mod:`app.observability.web` -- request context, request metrics and the request id;
- :mod:`app.observability.celery_signals` -- the Celery signal wiring (logging, task context, metrics files);
- :mod:`app.observability.worker_metrics` -- a worker host's own metrics port (``LIAISON_WORKER_METRICS_PORT``);
- :mod:`app.observability.migrations` -- "is the schema at head?" for ``/readyz``;
- :mod:`app.observability.gunicorn` -- gunicorn's own log lines in the same format.
"""

from __future__ import annotations

from app.observability.web import init_app
from foundation.logging import bind, configure_logging, get_logger

__all__ = ["bind", "configure_logging", "get_logger", "init_app"]
