"""Celery signal wiring: our logging stays in charge, every task line carries its context, and
prefork children's metric files are looked after.

Celery signals are process-global; receivers are connected once (``dispatch_uid``).
"""

from __future__ import annotations

import time
from typing import Any

from celery import Task
from celery.signals import (
    before_task_publish,
    setup_logging,
    task_postrun,
    task_prerun,
    worker_process_shutdown,
)

from foundation import metrics
from foundation.logging import bind, clear
from foundation.metrics import PUBLISHED_AT_HEADER

#: Tasks whose first argument is an outbox id (see ``runtime.outbox.TASK_FOR_KIND``).
OUTBOX_TASKS = frozenset({"liaison.submit", "liaison.relay", "liaison.cancel", "liaison.probe", "liaison.check"})


def instrument() -> None:
    """Connect the receivers (once per process)."""
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
    """Every line of the task -- Celery's own retry/failure lines included -- names the business
    operation: correlation_id and message_id come from headers the Publisher sets, so binding
    them costs no database read. The attempt number is bound again once the task has read its
    outbox row (``workers.tasks.attempt``): attempts are counted there, not in ``request.retries``."""
    clear()
    if task is None:
        return
    request = task.request
    values: dict[str, Any] = {
        "task": task.name,
        "task_id": task_id,
        "attempt": (request.retries or 0) + 1,
        "message_id": getattr(request, "liaison_message_id", None),
    }
    if task.name in OUTBOX_TASKS and args:
        values["outbox_id"] = args[0]
        values["correlation_id"] = getattr(request, "liaison_correlation_id", None)
    bind(**values)


def _clear_task_context(**_: Any) -> None:
    clear()


def _stamp_published_at(headers: dict[str, Any] | None = None, **_: Any) -> None:
    """Publish time in the message, so queue age can be read where the broker lets us peek."""
    if headers is not None:
        headers[PUBLISHED_AT_HEADER] = time.time()


def _mark_process_dead(pid: int | None = None, **_: Any) -> None:
    if pid is not None:
        metrics.mark_process_dead(pid)
