"""liaison.relay: tell the domain app what happened, signed with its secret."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from functools import cache
from typing import Any

from celery import Task, shared_task
from sqlalchemy import Select, and_, bindparam, select
from sqlalchemy.orm import Session

from core.errors import CallError, OutboundRefused
from foundation import metrics
from models import service
from models.attention import CallbackEndpoint
from models.base import utcnow
from models.client import Client
from models.dead_letters import disable_endpoint, park, url_hash
from models.leases import give_back, release, take_slot
from models.messages import OutboxMessage
from models.ordering import AWAITING_EARLIER, held_by, hold
from models.task import ExternalTask
from webhooks.urls import strip_url
from workers.delivery import deliver
from workers.policies import relay_policy
from workers.runtime import Liaison, liaison
from workers.tasks.attempt import Attempt, ComeBackLater, OutboxTask, run

GONE = 410


def slot_group(client_id: int) -> str:
    """The relay slots of one client: a semaphore of LIAISON_RELAY_CLIENT_CONCURRENCY leases."""
    return f"relay:client:{client_id}"


@dataclass(frozen=True)
class Callback:
    client_id: int
    url: str
    secrets: list[str]
    message_id: str
    payload: dict[str, Any]


@shared_task(bind=True, name="liaison.relay", max_retries=None)
def relay(self: Task, outbox_id: int) -> str:
    """Deliver one callback within the client's share of relay slots.

    The slot is taken before the delivery is counted (poison guard) or attempted: a relay that finds
    every slot of its client taken waits a short countdown and tries again, which costs it nothing,
    so one tenant's slow endpoint holds at most its own slots and never the other tenants'.
    Before that, a relay with an earlier relay of its task still on its way is held until that one
    is settled (``models.ordering``): a task's callbacks are delivered in order.
    """
    return run(self, liaison(), outbox_id, Relay())


@cache
def _start_statement() -> Select[Any]:
    """The relay's start statement, built once: constructing it (and its cache key) on every call
    cost more CPU than running it."""
    return (
        select(OutboxMessage, ExternalTask.callback_url, Client, held_by(), CallbackEndpoint.url_hash)
        .outerjoin(ExternalTask, ExternalTask.id == OutboxMessage.task_id)
        .outerjoin(Client, Client.id == ExternalTask.client_id)
        .outerjoin(
            CallbackEndpoint,
            and_(CallbackEndpoint.client_id == Client.id, CallbackEndpoint.disabled_at.is_not(None)),
        )
        .where(OutboxMessage.id == bindparam("outbox_id"))
        .with_for_update(of=OutboxMessage)
        .execution_options(populate_existing=True)
    )


class Relay(OutboxTask[Callback, int]):
    def __init__(self) -> None:
        self.slot: str | None = None
        self.holder = uuid.uuid4().hex
        self.target: tuple[str | None, Client] | None = None  # (the task's callback_url, its client)
        self.disabled: set[str] = set()  # url_hash of the client's disabled endpoints
        self.held_by: int | None = None  # the earlier relay of the task this one must wait for

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        """At the start, with the row: the task's callback URL, its client, the client's disabled
        endpoints (usually none) and the earlier relay of the task this one must wait for (usually
        none), in one statement. The task's payload is not read: the outbox row carries the
        callback's body."""
        if stage != "start":
            return service.claim_outbox(session, outbox_id)
        found = session.execute(_start_statement(), {"outbox_id": outbox_id}).all()
        if not found or found[0][0].done_at is not None:
            return None
        row, task_url, client, self.held_by, _ = found[0]
        self.target = (task_url, client) if client is not None else None
        self.disabled = {hashed for *_, hashed in found if hashed is not None}
        return row

    def admit(self, ctx: Liaison, session: Session, row: OutboxMessage) -> str | None:
        settings = ctx.settings
        if self.held_by is not None:
            if hold(session, row, self.held_by, utcnow(), settings.outbox_lease_s):
                metrics.relay_delivery("held")
                return "held"
            # the earlier relay was settled since the start statement read it, or is being settled
            # right now (its row locked: models.ordering.hold never waits for it): look again shortly
            raise ComeBackLater(0.05, "held")
        if row.parked_reason == AWAITING_EARLIER:
            row.parked_reason = None  # released (or rechecked by the sweep): nothing holds it now
        if self.target is None:
            return None  # nothing to deliver: prepare says why
        client = self.target[1]
        self.slot = take_slot(
            session,
            slot_group(client.id),
            settings.relay_client_concurrency,
            self.holder,
            utcnow(),
            settings.relay_slot_ttl_s,
        )
        if self.slot is None:
            metrics.relay_delivery("slot_wait")
            raise ComeBackLater(settings.relay_slot_wait_s, "slot_wait")
        return None

    def release(self, ctx: Liaison) -> None:
        if self.slot is not None:
            release(ctx.db, self.slot, self.holder)

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[Callback] | str:
        task_url, client = self.target or (None, None)
        url = task_url or (client and client.callback_url)
        if not url or client is None:
            service.mark_done(session, row, utcnow(), "relay.skipped", reason="no callback_url")
            metrics.relay_delivery("skipped")
            return "skipped"
        if url_hash(url) in self.disabled:
            park(session, row, url, utcnow())
            metrics.relay_delivery("parked")
            return "parked"
        row.target = strip_url(url)  # the task keeps the whole URL; what is stored beside it has no secrets
        callback = Callback(
            client.id, url, list(client.callback_secrets), row.message_id, dict(row.payload, message_id=row.message_id)
        )
        return Attempt(callback, relay_policy(ctx.settings), callers_endpoint=True)

    def call(self, ctx: Liaison, attempt: Attempt[Callback]) -> int:
        cb, settings = attempt.work, ctx.settings
        return deliver(
            cb.url,
            cb.secrets,
            cb.message_id,
            cb.payload,
            time.time(),
            settings.relay_timeout_s,
            allow=settings.outbound_allow,
            max_response_bytes=settings.callback_max_response_bytes,
        )

    def record(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[Callback], result: int
    ) -> str:
        payload = attempt.work.payload
        service.mark_done(session, row, utcnow(), "relay.delivered", type=payload["type"], status=result)
        if self.slot is not None:  # given back with the outcome: no transaction of its own
            give_back(session, self.slot, self.holder)
            self.slot = None
        metrics.relay_delivery("delivered", metrics.since(payload.get("occurred_at")))
        return "delivered"

    def settles(self, exc: CallError) -> bool:
        return exc.status == GONE

    def settle(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[Callback], exc: CallError
    ) -> str:
        # The domain app says this endpoint is gone for good: stop calling it, keep every event.
        cb = attempt.work
        disable_endpoint(session, cb.client_id, cb.url, f"answered 410 Gone to {cb.payload['type']}", utcnow())
        park(session, row, cb.url, utcnow())
        metrics.relay_delivery("parked")
        return "parked"

    def retry_permanent(self, exc: CallError) -> bool:
        # Anything else but 2xx is retried (docs/design.md §4); a 4xx that outlives the schedule is the caller's.
        # A URL the outbound guard refuses is not: nothing was sent, and asking again sends nothing.
        return not isinstance(exc, OutboundRefused)

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        return Attempt(None, relay_policy(ctx.settings), callers_endpoint=True)
