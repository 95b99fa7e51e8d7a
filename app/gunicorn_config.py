"""Gunicorn settings for Liaison's web process: ``gunicorn -c python:app.gunicorn_config
'app:create_app()'`` (the Procfile's web line). A module of the ``app`` package, so an installed
server (``pip install .``, a wheel) runs that line from any folder; a checkout's ``gunicorn.conf.py``
imports it, for a ``gunicorn`` started at the repository root without ``-c``.

Bind address, worker and thread counts stay on the command line (Procfile); this file holds what
must be code: structured logging for gunicorn's own lines, the prometheus-client multiprocess
hooks (``PROMETHEUS_MULTIPROC_DIR``, see docs/observability.md), OpenTelemetry's start in each
worker after the fork (``OTEL_EXPORTER_OTLP_ENDPOINT``: app/observability/tracing.py), and the worker
class: gunicorn's threaded worker that reads each request whole, head and body, before a thread runs
it (app/gunicorn_worker.py), so slow or half-open connections cost sockets, not ``--threads``; its
deadlines are ``LIAISON_HEADER_READ_TIMEOUT_S`` and ``LIAISON_BODY_READ_TIMEOUT_S``.
"""

from app import startup
from app.gunicorn_worker import worker_class as read_ahead_worker
from app.observability import tracing
from app.observability.gunicorn import StructuredLogger
from foundation import metrics
from foundation.logging import configure_logging

# A bad setting, or a database or broker that does not answer, stops the master here with one line
# naming the variable or the host (app/startup.py), before any worker boots.
_settings = startup.load_settings()
startup.check_services(_settings)
configure_logging(_settings.log_format, _settings.log_level)
logger_class = StructuredLogger
worker_class = read_ahead_worker(
    header_timeout_s=_settings.header_read_timeout_s,
    body_timeout_s=_settings.body_read_timeout_s,
    max_body_bytes=_settings.max_body_bytes,
)


def on_starting(server):
    """The samples directory must exist before any worker counts; wiping it is the launcher's job
    (other processes of this host -- the Celery worker -- may be writing there too)."""
    metrics.ensure_multiprocess_dir()


def child_exit(server, worker):
    """A dead worker's live gauges must stop counting; its counters keep their totals."""
    metrics.mark_process_dead(worker.pid)


def post_fork(server, worker):
    """The span exporter's thread must be the worker's own: started after the fork (a no-op unless
    OTEL_EXPORTER_OTLP_ENDPOINT is set)."""
    tracing.start(_settings, "liaison-web")


def worker_exit(server, worker):
    """Flush the worker's buffered spans before it goes."""
    tracing.shutdown()
