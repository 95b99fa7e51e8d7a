"""Operations: metrics, structured logs and health, kept out of the business code.

Call sites elsewhere stay one line: ``metrics.webhook_rejected(provider, "signature")``,
``bind(correlation_id=...)``. Everything that knows metric names, label sets, log processors or
probe details lives in this package:

- :mod:`app.observability.metrics` -- process-level counters/histograms (multiprocess-safe) and the
  ``/metrics`` rendering;
- :mod:`app.observability.collectors` -- business gauges read from the database and the broker at
  scrape time (never process-local);
- :mod:`app.observability.logging` -- structlog configuration, context binding, secret redaction;
- :mod:`app.observability.celery` -- the Celery signal wiring (logging, task context, metrics files);
- :mod:`app.observability.migrations` -- "is the schema at head?" for ``/readyz``;
- :mod:`app.observability.gunicorn` -- gunicorn's own log lines in the same format.
"""

from __future__ import annotations

from app.observability.logging import bind, configure_logging, get_logger
from app.observability.web import init_app

__all__ = ["bind", "configure_logging", "get_logger", "init_app"]
