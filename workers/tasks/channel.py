"""liaison.channel: one event to a domain app's broker channel, done once the broker confirmed it.

The outbox row (kind ``channel``) was written with the state change that caused it
(``service.outbox_rows.add_channel_event``): a task event beside its HTTP relay, or a command's
rejection. Its body, ``message_id`` and ``sequence`` are the callback's; the signature goes in the
message headers (``workers.channels``).

Order: a task's channel rows are published in the order they were written (ids grow under the
task's row lock, as the sequence does). A row finds an earlier row of its task still on its way
(not done: queued, retrying or in flight) and comes back once that one may be done instead of
publishing (shortly, or when its retry is due; a long wait is held in the database): so the
broker receives a task's events in sequence order, and keeps that order on the one queue or
stream they reach. A row dead-lettered is done, and no longer holds the later ones (a gap, as for
HTTP relays).
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.errors import CallError
from foundation import metrics
from models.base import utcnow
from models.client import Client
from models.messages import OutboxMessage
from models.store import store_of
from runtime.context import Liaison, liaison
from service import claims, transitions
from service.ordering import earlier_channel_rows
from wire.channel_messages import ChannelEvent
from workers.policies import relay_policy
from workers.tasks.attempt import Attempt, ComeBackLater, OutboxTask, run

#: How soon a row held behind an earlier one of its task looks again.
HELD_RECHECK_S = 0.2


@shared_task(bind=True, name="liaison.channel", max_retries=None)
def channel(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, ChannelDelivery())


def held_for(due: list[datetime | None], now: datetime) -> float:
    """How long a row waits for its earlier ones: a moment while one is queued or in flight, else
    until the last of their retries is due."""
    if any(when is None for when in due):
        return HELD_RECHECK_S
    latest = max(when for when in due if when is not None)
    return max(HELD_RECHECK_S, (latest - now).total_seconds() + HELD_RECHECK_S)


class ChannelDelivery(OutboxTask[ChannelEvent, str]):
    def __init__(self) -> None:
        self.client: Client | None = None

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        row = claims.claim_outbox(session, outbox_id)
        if row is None or stage != "start":
            return row
        self.client, self.traceparent = claims.channel_client(session, row)
        return row

    def admit(self, ctx: Liaison, session: Session, row: OutboxMessage) -> str | None:
        """Wait for an earlier row of the task: shortly while it is queued or in flight; until its
        retry is due while it waits for one — in the database (the sweep publishes this row then)
        when that is past ``LIAISON_MAX_COUNTDOWN_S``, so a long outage costs no message churn."""
        earlier = earlier_channel_rows(session, row)
        if earlier is None:
            return None
        metrics.relay_delivery("held")
        now = utcnow()
        wait = held_for(earlier, now)
        if wait <= ctx.settings.max_countdown_s:
            raise ComeBackLater(wait, "held")
        store_of(session).outbox.hold_until(row, now + timedelta(seconds=wait))  # published by the sweep then
        return "held"

    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[ChannelEvent] | str:
        client = self.client
        if client is None or client.channel is None:
            transitions.mark_done(session, row, utcnow(), "channel.skipped", reason="the client has no channel now")
            return "skipped"
        body = {k: v for k, v in row.payload.items() if k != "client_id"}
        event = ChannelEvent(client.channel, client.name, list(client.callback_secrets), body)
        return Attempt(event, relay_policy(ctx.settings), callers_endpoint=False)

    def call(self, ctx: Liaison, attempt: Attempt[ChannelEvent]) -> str:
        return ctx.channels.publish(attempt.work, time.time())

    def record(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[ChannelEvent], result: str
    ) -> str:
        event = attempt.work
        transitions.mark_done(
            session, row, utcnow(), "channel.published", type=event.type, channel=event.channel, to=result
        )
        metrics.relay_delivery("delivered", metrics.since(event.body.get("occurred_at")))
        return "published"

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        return Attempt(None, relay_policy(ctx.settings))

    def settles(self, exc: CallError) -> bool:
        return False
