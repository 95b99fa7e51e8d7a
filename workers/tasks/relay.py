"""liaison.relay: tell the domain app what happened, signed with its secret."""

from __future__ import annotations

import logging
import time
import uuid

from celery import Task, shared_task
from celery.exceptions import SoftTimeLimitExceeded

from workers.runtime import Liaison, liaison
from foundation import metrics
from models import service
from models.base import utcnow
from models.client import Client
from models.failures import disable_endpoint, endpoint_disabled, park
from models.leases import acquire_slot, release
from models.messages import OutboxMessage
from models.task import ExternalTask
from workers.delivery import deliver
from webhooks.urls import strip_url
from core.errors import CallError, OutboundRefused
from workers.policies import relay_policy
from workers.tasks.outcomes import retry_or_dead_letter, start_delivery, time_limit_reached

GONE = 410
log = logging.getLogger(__name__)


def slot_group(client_id: int) -> str:
    """The relay slots of one client: a semaphore of LIAISON_RELAY_CLIENT_CONCURRENCY leases."""
    return f"relay:client:{client_id}"


def _client_of(ctx: Liaison, outbox_id: int) -> int | None:
    """The client a relay is for (None: nothing to deliver, the delivery itself says why)."""
    with ctx.db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        if row is None or row.done_at is not None or row.task_id is None:
            return None
        task = session.get(ExternalTask, row.task_id)
        return task.client_id if task is not None else None


@shared_task(bind=True, name="liaison.relay", max_retries=None)
def relay(self: Task, outbox_id: int) -> str:
    """Deliver one callback within the client's share of relay slots.

    The slot is taken before the delivery is counted (poison guard) or attempted: a relay that finds
    every slot of its client taken waits a short countdown and tries again, which costs it nothing,
    so one tenant's slow endpoint holds at most its own slots and never the other tenants'.
    """
    ctx = liaison()
    client_id = _client_of(ctx, outbox_id)
    slot, holder = None, uuid.uuid4().hex
    if client_id is not None:
        settings = ctx.settings
        slot = acquire_slot(ctx.db, slot_group(client_id), settings.relay_client_concurrency, holder, utcnow(),
                            settings.relay_slot_ttl_s)
        if slot is None:
            metrics.relay_delivery("slot_wait")
            raise self.retry(countdown=settings.relay_slot_wait_s)
    try:
        return _relay(self, ctx, outbox_id)
    except SoftTimeLimitExceeded:
        return time_limit_reached(self, ctx, outbox_id, relay_policy(ctx.settings), callers_endpoint=True)
    finally:
        if slot is not None:
            release(ctx.db, slot, holder)


def _relay(self: Task, ctx: Liaison, outbox_id: int) -> str:
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
