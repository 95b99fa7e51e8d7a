"""Celery signal wiring: our logging stays in charge, every task line carries its context, and
prefork children's metric files are looked after.

Celery signals are process-global; receivers are connected once (``dispatch_uid``) and find the
Flask app of the task's Celery app through :data:`_apps`, so several apps in one process (tests)
each get their own database.
"""

from __future__ import annotations

import logging
import time
from typing import Any
from weakref import WeakKeyDictionary

from celery import Celery, Task
from celery.signals import (
    before_task_publish,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_shutdown,
)
from flask import Flask
from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from foundation import metrics
from foundation.logging import bind, clear
from foundation.metrics import PUBLISHED_AT_HEADER
from models.messages import OutboxMessage

log = logging.getLogger(__name__)

#: Tasks whose first argument is an outbox id (see ``workers.outbox.TASK_FOR_KIND``).
OUTBOX_TASKS = frozenset({"liaison.submit", "liaison.relay", "liaison.cancel"})
_apps: WeakKeyDictionary[Celery, Flask] = WeakKeyDictionary()


def instrument(celery_app: Celery, flask_app: Flask) -> None:
    """Connect the receivers (once per process) and remember which Flask app serves ``celery_app``."""
    _apps[celery_app] = flask_app
    setup_logging.connect(_keep_our_logging, weak=False, dispatch_uid="liaison.obs.setup_logging")
    task_prerun.connect(_bind_task_context, weak=False, dispatch_uid="liaison.obs.task_prerun")
    task_postrun.connect(_clear_task_context, weak=False, dispatch_uid="liaison.obs.task_postrun")
    before_task_publish.connect(_stamp_published_at, weak=False, dispatch_uid="liaison.obs.before_publish")
    worker_process_shutdown.connect(_mark_process_dead, weak=False, dispatch_uid="liaison.obs.process_shutdown")


def _keep_our_logging(**_: Any) -> None:
    """With any receiver on ``setup_logging``, Celery (worker and beat) leaves logging alone: no
    root-logger hijack, no handlers of its own. ``create_app`` has already configured it from the
    settings (``LIAISON_LOG_FORMAT``/``LIAISON_LOG_LEVEL``), so worker lines share the web's format."""


def _bind_task_context(task: Task | None = None, task_id: str | None = None, args: Any = None, **_: Any) -> None:
    clear()
    if task is None:
        return
    request = task.request
    values: dict[str, Any] = {
        "task": task.name,
        "task_id": task_id,
        "attempt": (request.retries or 0) + 1,
        "message_id": getattr(request, "liaison_message_id", None),  # header set by the Publisher
    }
    if task.name in OUTBOX_TASKS and args:
        values["outbox_id"] = args[0]
        values.update(_outbox_context(task.app, args[0]))
    bind(**values)


def _outbox_context(celery_app: Celery, outbox_id: Any) -> dict[str, Any]:
    """correlation_id, message_id and attempt number from the outbox row, so *every* line of the
    task -- Celery's own retry/failure lines included -- names the business operation. One
    primary-key read."""
    flask_app = _apps.get(celery_app)
    if flask_app is None or "liaison" not in flask_app.extensions:
        return {}
    try:
        with flask_app.extensions["liaison"].db.engine.connect() as conn:
            row = conn.execute(
                select(OutboxMessage.correlation_id, OutboxMessage.message_id, OutboxMessage.attempts).where(
                    OutboxMessage.id == outbox_id
                )
            ).first()
    except SQLAlchemyError as exc:
        # The task itself will hit the same problem and report it; a log context is not worth failing for.
        log.debug("no log context for outbox %s: %s", outbox_id, type(exc).__name__)
        return {}
    if row is None:
        return {}
    # Attempts are counted on the outbox row: a retry held in the database comes back as a new
    # Celery message (request.retries = 0), so the row is the truth about which attempt this is.
    return {"correlation_id": row.correlation_id, "message_id": row.message_id, "attempt": row.attempts + 1}


def _clear_task_context(**_: Any) -> None:
    clear()


def _stamp_published_at(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Publish time in the message, so queue age can be read where the broker lets us peek."""
    if headers is not None:
        headers[PUBLISHED_AT_HEADER] = time.time()


def _mark_process_dead(pid: int | None = None, **_: Any) -> None:
    if pid is not None:
        metrics.mark_process_dead(pid)
