"""liaison.relay: tell the domain app what happened, signed with its secret."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from random import Random
from typing import Any

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.endpoint_health import Signal, Verdict, admit, signal_of
from core.errors import CallError, OutboundRefused
from core.origins import origin_of
from core.urls import strip_url
from foundation import metrics
from models.base import utcnow
from models.client import Client
from models.endpoint_health import EndpointHealth, origin_hash
from models.messages import OutboxKind, OutboxMessage
from models.store import store_of
from models.store.slots import release
from runtime.context import Liaison, liaison
from service import claims, start_leases, transitions
from service.dead_letters import disable_endpoint, park, url_hash
from service.ordering import hold
from workers.delivery import deliver
from workers.policies import relay_policy
from workers.tasks.attempt import Attempt, ComeBackLater, OutboxTask, run

GONE = 410
log = logging.getLogger(__name__)
_rng = Random()


def slot_group(client_id: int) -> str:
    """The relay slots of one client: a semaphore of LIAISON_RELAY_CLIENT_CONCURRENCY leases."""
    return f"relay:client:{client_id}"


def endpoint_slot_group(client_id: int, hashed_origin: str) -> str:
    """The relay slots of one callback origin of one client: LIAISON_RELAY_ENDPOINT_CONCURRENCY leases."""
    return f"relay:endpoint:{client_id}:{hashed_origin[:32]}"


@dataclass(frozen=True)
class Callback:
    client_id: int
    url: str
    secrets: list[str]
    message_id: str
    payload: dict[str, Any]
    outbox_id: int  # the delivery, as endpoint health names the one whose failure paused it


@shared_task(bind=True, name="liaison.relay", max_retries=None)
def relay(self: Task, outbox_id: int, published: str | None = None) -> str:
    """Deliver one callback within its client's and its endpoint's share of relay slots.

    A delivery spends its time waiting on the domain app's network, so the relay process runs many
    at once on threads (``LIAISON_RELAY_THREADS``); each client may hold at most
    ``LIAISON_RELAY_CLIENT_CONCURRENCY`` of them and each callback origin of a client at most
    ``LIAISON_RELAY_ENDPOINT_CONCURRENCY``, well below the process's capacity. The slots are taken
    before the delivery is counted (poison guard) or attempted: a relay that finds none free waits
    a short countdown and tries again, which costs it nothing, so a slow endpoint holds a few
    sockets and never the capacity other endpoints or tenants need. An endpoint that keeps failing
    is paused and probed (``core.endpoint_health``): its relays wait without calling it.
    Before all that, a relay with an earlier relay of its task still on its way is held until that
    one is settled (``service.ordering``): a task's callbacks are delivered in order.
    ``published``: the stamp the message went out under (``service.start_leases.superseded``).
    """
    return run(self, liaison(), outbox_id, Relay(), published)


class Relay(OutboxTask[Callback, int]):
    def __init__(self) -> None:
        self.slots: list[str] = []
        self.holder = uuid.uuid4().hex
        self.target: tuple[str | None, Client] | None = None  # (the task's callback_url, its client)
        self.any_disabled = False  # the client has a disabled endpoint (then prepare looks up this URL)
        self.any_unhealthy = False  # the client has a failing endpoint (then admit looks up this origin)
        self.health: EndpointHealth | None = None  # this delivery's endpoint, if it is failing
        self.probe_until: datetime | None = None  # this delivery is the probe of a pause, until then
        self.origin: str | None = None
        self.held_by: int | None = None  # the earlier relay of the task this one must wait for

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        """At the start, with the row: the task's callback URL, its client, whether the client has
        disabled or failing endpoints (usually not) and the earlier relay of the task this one must
        wait for (usually none), in one statement of one row (``service.claims.claim_relay``). At the
        record, which only a delivered callback reaches, the row is locked and marked done in one
        statement too."""
        if stage == "record":
            return claims.claim_finished(session, outbox_id, utcnow())
        found = claims.claim_relay(session, outbox_id)
        if found is None:
            return None
        self.held_by = found.held_by
        self.traceparent = found.traceparent
        self.target = (found.callback_url, found.client) if found.client is not None else None
        self.any_disabled = found.any_disabled
        self.any_unhealthy = found.any_unhealthy
        return found.row

    def admit(self, ctx: Liaison, session: Session, row: OutboxMessage) -> str | None:
        settings = ctx.settings
        if self.held_by is not None:
            if hold(session, row, self.held_by, utcnow(), settings.outbox_lease_s):
                metrics.relay_delivery("held")
                return "held"
            # the earlier relay was settled since the start statement read it, or is being settled
            # right now (its row locked: service.ordering.hold never waits for it): look again shortly
            raise ComeBackLater(0.05, "held")
        store_of(session).outbox.resume(row)  # released (or rechecked by the sweep): nothing holds it now
        task_url, client = self.target or (None, None)
        url = task_url or (client and client.callback_url)
        if not url or client is None:
            return None  # nothing to deliver: prepare says why
        now = utcnow()
        self.origin = origin_of(url)  # None for a URL the outbound guard will refuse anyway
        hashed = origin_hash(self.origin) if self.origin is not None else None
        if self.any_unhealthy and self.origin is not None:  # one row at most: this origin's
            found = store_of(session).endpoint_health.find(session, client.id, self.origin)
            self.health = found if found is not None and found.failures > 0 else None
        if self.health is not None and (paused := self._paused(ctx, session, row, self.health, now)):
            return paused
        groups = [(slot_group(client.id), settings.relay_client_concurrency)]
        if hashed is not None:
            groups.append((endpoint_slot_group(client.id, hashed), settings.relay_endpoint_concurrency))
        taken, self.counted_by_claim = claims.take_relay_slots(
            session,
            row,
            groups,
            self.holder,
            now,
            settings.relay_slot_ttl_s,
            strip_url(url),
            lease_until=start_leases.until(now, settings.start_leases.get(OutboxKind.RELAY)),
        )
        if taken is None:  # the transaction rolls back: a slot taken before the full group is free again
            metrics.relay_delivery("slot_wait")
            raise ComeBackLater(settings.relay_slot_wait_s, "slot_wait")
        self.slots = taken
        return None

    def _paused(self, ctx: Liaison, session: Session, row: OutboxMessage, health: EndpointHealth, now: datetime) -> str:
        """Let the delivery go (""), make it the probe of a pause that ran out (""), or leave it for
        when the endpoint may be called again: a Celery countdown, or held in the database past
        ``LIAISON_MAX_COUNTDOWN_S`` ("paused"). Nothing is counted either way."""
        policy = ctx.settings.endpoint_health
        admission = admit(health.health, now, policy, row.id)
        if admission.verdict is Verdict.GO:
            return ""
        if admission.verdict is Verdict.PROBE:
            assert admission.health.probe_until is not None
            if store_of(session).endpoint_health.claim_probe(session, health.id, now, admission.health.probe_until):
                self.probe_until = admission.health.probe_until
                log.info("callback endpoint %s: probing it after a pause", health.origin)
                metrics.relay_delivery("probe")
                return ""
            until = now + timedelta(seconds=policy.probe_s)  # another relay took the probe just now
        else:
            assert admission.until is not None
            until = admission.until
        wait = max((until - now).total_seconds(), 0.1) + _rng.uniform(0.0, ctx.settings.relay_slot_wait_s)
        metrics.relay_delivery("endpoint_paused")
        if wait <= ctx.settings.max_countdown_s:
            raise ComeBackLater(wait, "endpoint_paused")
        store_of(session).outbox.hold_until(row, now + timedelta(seconds=wait))  # the sweep publishes it then
        return "paused"

    def release(self, ctx: Liaison) -> None:
        if self.slots:
            release(ctx.db, self.slots, self.holder)

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[Callback] | str:
        task_url, client = self.target or (None, None)
        url = task_url or (client and client.callback_url)
        if not url or client is None:
            transitions.mark_done(session, row, utcnow(), "relay.skipped", reason="no callback_url")
            metrics.relay_delivery("skipped")
            return "skipped"
        if self.any_disabled and claims.disabled_endpoint(session, client.id, url_hash(url)):
            park(session, row, url, utcnow())
            metrics.relay_delivery("parked")
            return "parked"
        target = strip_url(url)  # the task keeps the whole URL; what is stored beside it has no secrets
        if row.target != target:  # written with the slots, when they were free at the first try
            row.target = target
        callback = Callback(
            client.id,
            url,
            list(client.callback_secrets),
            row.message_id,
            dict(row.payload, message_id=row.message_id),
            row.id,
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

    def succeeded(self, ctx: Liaison, session: Session, outbox_id: int, attempt: Attempt[Callback], result: int) -> str:
        """On PostgreSQL the row is finished, its timeline entry written and the slots given back in
        one statement (``service.claims.finish_delivered``); elsewhere, one statement each."""
        if not store_of(session).outbox.finishes_delivered_at_once:
            return super().succeeded(ctx, session, outbox_id, attempt, result)
        now = utcnow()
        event = ("relay.delivered", self._delivered(attempt, result))
        row = claims.finish_delivered(session, outbox_id, now, event, self.slots, self.holder)
        self.slots = []  # given back by that statement, whether or not the row was still open
        return "done" if row is None else self.record(ctx, session, row, attempt, result, event_written=True)

    @staticmethod
    def _delivered(attempt: Attempt[Callback], result: int) -> dict[str, Any]:
        """The ``relay.delivered`` entry's detail, as ``service.transitions.finished`` writes it."""
        return {"message_id": attempt.work.message_id, "type": attempt.work.payload["type"], "status": result}

    def record(
        self,
        ctx: Liaison,
        session: Session,
        row: OutboxMessage,
        attempt: Attempt[Callback],
        result: int,
        *,
        event_written: bool = False,
    ) -> str:
        """``event_written``: :meth:`succeeded` wrote the ``relay.delivered`` entry with the row."""
        now = utcnow()
        payload = attempt.work.payload
        transitions.finished(
            session, row, now, "relay.delivered", event_written=event_written, type=payload["type"], status=result
        )
        if self.slots:  # given back with the outcome: no transaction of its own
            store_of(session).slots.give_back(session, self.slots, self.holder)
            self.slots = []
        if self.health is not None:  # it had failed: it answers again
            store_of(session).endpoint_health.record_success(session, self.health.id, now)
            log.info("callback endpoint %s of client %s answers again", self.health.origin, attempt.work.client_id)
        metrics.relay_delivery("delivered", metrics.since(payload.get("occurred_at")))
        return "delivered"

    def settles(self, exc: CallError) -> bool:
        return exc.status == GONE

    def settle(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[Callback], exc: CallError
    ) -> str:
        # The domain app says this endpoint is gone for good: stop calling it, keep every event.
        cb = attempt.work
        self._hand_on_probe(session)  # the endpoint answered: the probe is no longer this one's
        disable_endpoint(session, cb.client_id, cb.url, f"answered 410 Gone to {cb.payload['type']}", utcnow())
        park(session, row, cb.url, utcnow())
        metrics.relay_delivery("parked")
        return "parked"

    def _hand_on_probe(self, session: Session) -> None:
        if self.probe_until is not None and self.health is not None:
            store_of(session).endpoint_health.hand_on_probe(session, self.health.id, self.probe_until)
            self.probe_until = None

    def note_failure(self, ctx: Liaison, session: Session, attempt: Attempt[Callback], exc: CallError) -> None:
        """Count the failure against the endpoint's health, in the transaction that records it, when
        it says the endpoint is down (``core.endpoint_health.signal_of``). An answer that rejects
        this message (3xx, most 4xx) says nothing of the endpoint: the message is retried on its own
        schedule, nothing is counted, and a rejected probe hands the probe on at once. A URL the
        outbound guard refused says nothing of the endpoint either."""
        if self.origin is None or isinstance(exc, OutboundRefused):
            return
        if signal_of(exc.status, exc.failure) is Signal.REJECTED:
            self._hand_on_probe(session)
            return
        row, paused = store_of(session).endpoint_health.record_failure(
            session,
            attempt.work.client_id,
            self.origin,
            str(exc),
            utcnow(),
            ctx.settings.endpoint_health,
            attempt.work.outbox_id,
        )
        if paused:
            metrics.endpoint_paused("failures" if row.pauses == 1 else "probe_failed")
            assert row.paused_until is not None
            log.warning(
                "callback endpoint %s of client %s paused until %s after %d failures in a row",
                row.origin,
                attempt.work.client_id,
                row.paused_until.isoformat(timespec="seconds"),
                row.failures,
            )

    def retry_permanent(self, exc: CallError) -> bool:
        # Anything else but 2xx is retried (docs/design.md §4); a 4xx that outlives the schedule is the caller's.
        # A URL the outbound guard refuses is not: nothing was sent, and asking again sends nothing.
        return not isinstance(exc, OutboundRefused)

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        return Attempt(None, relay_policy(ctx.settings), callers_endpoint=True)
