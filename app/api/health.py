"""Liveness, readiness and the Prometheus scrape. ``/healthz`` is open (it says nothing); ``/readyz``
and ``/metrics`` need ``LIAISON_METRICS_TOKEN`` (``app.auth.require_metrics_token``)."""

from __future__ import annotations

from flask import Blueprint, Response, jsonify
from kombu.exceptions import KombuError
from sqlalchemy.exc import SQLAlchemyError

from app.auth import require_metrics_token
from app.errors import problem
from app.observability.migrations import migration_status
from app.observability.web import business_collector
from foundation import metrics
from models.base import utcnow
from models.store.heartbeats import beat_liveness
from runtime.context import liaison

bp = Blueprint("health", __name__)


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/readyz")
def readyz() -> Response:
    """503 when the database or broker does not answer or a migration is pending; otherwise 200,
    with when beat last ticked and whether that is stale (``core.beat_liveness``)."""
    require_metrics_token()
    ctx = liaison()
    problems: list[str] = []
    beat: dict[str, object] | None = None
    try:
        with ctx.db.engine.connect() as conn:
            ctx.db.store.reads.answer(conn)
            status = migration_status(conn)
            if not status.pending:
                beat = beat_liveness(conn, utcnow()).as_dict()
        if status.pending:
            problems.append(status.describe())
    except SQLAlchemyError as exc:
        problems.append(f"database unreachable ({type(exc).__name__})")
    try:
        with ctx.publisher.celery.connection_for_write() as conn:
            conn.ensure_connection(max_retries=1, timeout=2)
    except (KombuError, OSError) as exc:
        problems.append(f"broker unreachable ({type(exc).__name__})")
    if problems:
        return problem(503, "Service Unavailable", "; ".join(problems))
    # A stale beat is reported, not a reason to take this web process out of rotation: it serves
    # requests as well as before, and the beat alert is its own (docs/runbook.md "Beat is stale").
    return jsonify({"status": "ready", "beat": beat})


@bp.get("/metrics")
def prometheus_metrics() -> Response:
    """Prometheus text format: this process's (or, in multiprocess mode, all processes') counters,
    plus business gauges read from the database and broker (at most every ``LIAISON_METRICS_CACHE_S``).
    Counts only, never a secret."""
    require_metrics_token()
    return Response(metrics.render(business_collector()), content_type=metrics.CONTENT_TYPE_LATEST)
