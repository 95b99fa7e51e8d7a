"""liaison.relay: tell the domain app what happened, signed with its secret."""

from __future__ import annotations

import time

from celery import Task, shared_task

from app.extensions import liaison
from models import service
from models.base import utcnow
from models.client import Client
from models.task import ExternalTask
from webhooks.delivery import deliver
from workers.errors import CallError, PermanentError
from workers.retry_policy import RetryPolicy
from workers.tasks.outcomes import retry_or_dead_letter


@shared_task(bind=True, name="liaison.relay")
def relay(self: Task, outbox_id: int) -> str:
    ctx = liaison()
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        task = session.get(ExternalTask, row.task_id)
        client = session.get(Client, task.client_id) if task is not None else None
        url = (task and task.callback_url) or (client and client.callback_url)
        if not url or client is None:
            service.mark_done(session, row, utcnow(), "relay.skipped", reason="no callback_url")
            return "skipped"
        secrets = list(client.callback_secrets)
        message_id = row.message_id
        payload = dict(row.payload, message_id=message_id)

    settings = ctx.settings
    policy = RetryPolicy(
        max_attempts=settings.relay_max_attempts, schedule=settings.relay_schedule_s,
        cap_s=max(settings.relay_schedule_s), max_total_s=2 * 24 * 3600,
    )
    try:
        status = deliver(url, secrets, message_id, payload, time.time(), settings.relay_timeout_s)
    except CallError as exc:
        # Anything but 2xx is retried (DESIGN §4); a 4xx that outlives the schedule is the caller's.
        fault = "caller" if isinstance(exc, PermanentError) else "system"
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=fault, retry_permanent=True)

    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is not None:
            service.mark_done(session, row, utcnow(), "relay.delivered", type=payload["type"], status=status)
    return "delivered"

