"""The console's overview: is work flowing, and what needs a person (``models.read_models.overview``
counts on indexes; the broker's queue depths come from the metrics collector)."""

from __future__ import annotations

from typing import Any

from flask import render_template
from kombu.exceptions import KombuError
from markupsafe import Markup

from app.console.blueprint import bp
from app.console.chart import finished_chart
from app.observability.queue_probe import BrokerProbeError
from app.observability.web import business_collector
from app.session import db_session
from core.classify import Fault
from core.states import State
from models.base import utcnow
from models.messages import DEAD_LETTER_KINDS
from models.read_models import lists, overview
from models.store.heartbeats import beat_liveness
from runtime.context import liaison


@bp.get("/", endpoint="overview")
def overview_page() -> str:
    session = db_session()
    settings = liaison().settings
    providers = sorted(settings.providers)
    counts = overview.task_counts(session, providers)
    providers = sorted({*providers, *(p for _, p in counts.cells)})
    minutes = overview.finished_per_minute(session, utcnow())
    try:
        queues: list[Any] | None = business_collector().queue_depths()
        broker_error = None
    except (KombuError, OSError, BrokerProbeError) as exc:
        queues, broker_error = None, type(exc).__name__
    dead = overview.open_dead_letters(session)
    now = utcnow()
    retrying_tasks = lists.operator_tasks(session, lists.TaskFilter(retrying=True), 10)
    return render_template(
        "console/overview.html",
        states=[s.value for s in State],
        providers=providers,
        counts=counts,
        retrying=overview.retrying_count(session),
        retrying_tasks=retrying_tasks,
        callbacks_failing=lists.callbacks_failing_of(session, [t.id for t in retrying_tasks]),
        outbox=overview.outbox_backlog(session),
        dead=dead,
        dead_total=sum(dead.values()),
        dead_kinds=DEAD_LETTER_KINDS,
        incidents=overview.open_incidents(session),
        orphans=overview.open_orphans(session),
        endpoints=overview.disabled_endpoints(session),
        paused_endpoints=overview.paused_endpoints(session),
        queues=queues,
        broker_error=broker_error,
        chart=Markup(
            finished_chart([(m.start, m.succeeded, m.failed) for m in minutes])
        ),  # the chart escapes its labels
        finished_last_hour=(sum(m.succeeded for m in minutes), sum(m.failed for m in minutes)),
        flower_url=settings.flower_url,
        beat=beat_liveness(session, now),
        workers=overview.worker_activity(session, now),
        dead_caller=sum(n for (_, fault), n in dead.items() if fault == Fault.CALLER),
    )
