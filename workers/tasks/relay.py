"""liaison.relay: tell the domain app what happened, signed with its secret."""

from __future__ import annotations

import time

from celery import Task, shared_task

from app.extensions import liaison
from app.observability import metrics
from models import service
from models.base import utcnow
from models.client import Client
from models.failures import disable_endpoint, endpoint_disabled, park
from models.task import ExternalTask
from webhooks.delivery import deliver
from webhooks.urls import strip_url
from workers.errors import CallError, OutboundRefused
from workers.retry_policy import relay_policy
from workers.tasks.outcomes import retry_or_dead_letter, start_delivery

GONE = 410


@shared_task(bind=True, name="liaison.relay", max_retries=None)
def relay(self: Task, outbox_id: int) -> str:
    ctx = liaison()
    if not start_delivery(ctx, outbox_id):
        return "skipped"
    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is None:
            return "done"
        task = session.get(ExternalTask, row.task_id, options=service.WITHOUT_PAYLOAD)  # the payload has all it needs
        client = session.get(Client, task.client_id) if task is not None else None
        url = (task and task.callback_url) or (client and client.callback_url)
        if not url or client is None:
            service.mark_done(session, row, utcnow(), "relay.skipped", reason="no callback_url")
            metrics.relay_delivery("skipped")
            return "skipped"
        client_id = client.id
        if endpoint_disabled(session, client_id, url):
            park(session, row, url, utcnow())
            metrics.relay_delivery("parked")
            return "parked"
        row.target = strip_url(url)  # the task keeps the whole URL; what is stored beside it has no secrets
        secrets = list(client.callback_secrets)
        message_id = row.message_id
        payload = dict(row.payload, message_id=message_id)

    settings = ctx.settings
    policy = relay_policy(settings)
    try:
        status = deliver(url, secrets, message_id, payload, time.time(), settings.relay_timeout_s,
                         allow=settings.outbound_allow, max_response_bytes=settings.callback_max_response_bytes)
    except CallError as exc:
        if exc.status == GONE:
            # The domain app says this endpoint is gone for good: stop calling it, keep every event.
            with ctx.db.transaction() as session:
                row = service.claim_outbox(session, outbox_id)
                if row is not None:
                    disable_endpoint(session, client_id, url, f"answered 410 Gone to {payload['type']}", utcnow())
                    park(session, row, url, utcnow())
            metrics.relay_delivery("parked")
            return "parked"
        # Anything else but 2xx is retried (DESIGN §4); a 4xx that outlives the schedule is the caller's.
        # A URL the outbound guard refuses is not: nothing was sent, and asking again sends nothing.
        fault = exc.fault(callers_endpoint=True)
        return retry_or_dead_letter(self, ctx, outbox_id, exc, policy, fault=fault,
                                    retry_permanent=not isinstance(exc, OutboundRefused))

    with ctx.db.transaction() as session:
        row = service.claim_outbox(session, outbox_id)
        if row is not None:
            service.mark_done(session, row, utcnow(), "relay.delivered", type=payload["type"], status=status)
    metrics.relay_delivery("delivered", metrics.since(payload.get("occurred_at")))
    return "delivered"
