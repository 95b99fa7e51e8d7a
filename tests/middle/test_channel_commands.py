"""``app.consumers.domain_commands.take``: a domain app's command over a broker, in one transaction — the
inbox on its MessageId, then the API's parser and limits, or a ``task.rejected`` outbox row; and
``add_relay`` writing the channel row beside the relay (same body and message_id)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import pytest
from sqlalchemy import func, select

from app.consumers.domain_commands import ChannelClient, take
from core.states import State
from foundation.settings import Settings
from models.base import utcnow
from models.client import Client
from models.db import Database
from models.messages import OutboxKind, OutboxMessage, ProcessedMessage
from models.task import ExternalTask
from runtime.limiter import DatabaseLimiter
from service.claims import lock_task
from service.credentials import set_channel
from service.transitions import move
from tests.middle.builders import new_client
from webhooks.signing import generate_secret
from wire.channel_messages import CANCEL_TASK, SUBMIT_TASK, row_message_id

if TYPE_CHECKING:
    from runtime.context import Liaison


@dataclass
class Ctx:
    settings: Settings
    db: Database
    limiter: DatabaseLimiter


@pytest.fixture
def rig(db: Database, published: object) -> tuple[Liaison, ChannelClient]:
    settings = Settings.from_env(
        {
            "LIAISON_PROVIDERS": "sim",
            "LIAISON_PROVIDER_SIM_BASE_URL": "http://127.0.0.1:1",
            "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": generate_secret(),
            "LIAISON_MAX_BODY_BYTES": "4096",
            "LIAISON_CLIENT_MAX_OPEN_TASKS": "2",
        }
    )
    with db.transaction() as session:
        client = new_client(session, f"shop-{uuid.uuid4().hex[:6]}", callback_url=None)
        set_channel(client, "redis")
        ref = ChannelClient(client.id, client.name)
    return cast("Liaison", Ctx(settings, db, DatabaseLimiter(db))), ref


def submit(ctx: Liaison, client: ChannelClient, cid: str, message_id: str | None = None, **body: Any) -> str:
    return take(
        ctx,
        client,
        message_id or f"m-{uuid.uuid4().hex}",
        SUBMIT_TASK,
        json.dumps({"correlation_id": cid, "input": {"a": 1}, **body}).encode(),
    ).outcome


def rows(db: Database, kind: str) -> list[OutboxMessage]:
    with db.transaction() as session:
        found = list(
            session.scalars(select(OutboxMessage).where(OutboxMessage.kind == kind).order_by(OutboxMessage.id))
        )
        session.expunge_all()
        return found


def test_a_submit_is_taken_once_per_message_id(rig, db: Database) -> None:
    ctx, client = rig
    assert submit(ctx, client, "o-1", "m-1") == "submitted"
    assert submit(ctx, client, "o-2", "m-1") == "duplicate"  # the same MessageId: nothing more
    with db.transaction() as session:
        tasks = session.scalars(select(ExternalTask.correlation_id)).all()
        assert tasks == ["o-1"]
        assert session.scalar(select(ExternalTask.channel)) == "redis"
        inbox = session.scalars(select(ProcessedMessage.source)).all()
        assert inbox == [f"channel:{client.name}"]
    assert len(rows(db, OutboxKind.SUBMIT)) == 1 and rows(db, OutboxKind.CHANNEL) == []


def test_a_command_that_cannot_be_taken_is_answered_in_the_same_transaction(rig, db: Database) -> None:
    ctx, client = rig
    assert take(ctx, client, "m-bad", SUBMIT_TASK, b'{"correlation_id": "o-1"}').outcome == "rejected"
    assert take(ctx, client, "m-bad", SUBMIT_TASK, b'{"correlation_id": "o-1"}').outcome == "duplicate"
    assert take(ctx, client, None, SUBMIT_TASK, b"{}").outcome == "rejected"  # no MessageId: answered each time
    assert take(ctx, client, "m-c", CANCEL_TASK, b'{"correlation_id": "nope"}').outcome == "rejected"
    rejections = [r.payload for r in rows(db, OutboxKind.CHANNEL)]
    assert [(r["command_message_id"], r["status"]) for r in rejections] == [("m-bad", 422), (None, 400), ("m-c", 404)]
    assert all(r["type"] == "task.rejected" and r["client_id"] for r in rejections)
    assert all(r.task_id is None for r in rows(db, OutboxKind.CHANNEL))


def test_the_open_task_cap_and_the_submit_rate_apply_as_over_http(rig, db: Database) -> None:
    ctx, client = rig
    assert submit(ctx, client, "o-1") == "submitted"
    assert submit(ctx, client, "o-2") == "submitted"
    assert submit(ctx, client, "o-3") == "rejected"  # LIAISON_CLIENT_MAX_OPEN_TASKS=2
    (capped,) = [r.payload for r in rows(db, OutboxKind.CHANNEL)]
    assert capped["status"] == 429 and "max_open_tasks" in capped["title"]
    with db.transaction() as session:
        found = session.get(Client, client.id)
        assert found is not None
        found.max_open_tasks, found.submit_rate_per_s, found.submit_burst = 100, 0.001, 1
    outcomes = [submit(ctx, client, f"r-{n}") for n in range(3)]
    assert outcomes.count("rejected") >= 2  # a burst of one: the rest wait for the rate
    assert any("submit rate limit" in r.payload["title"] for r in rows(db, OutboxKind.CHANNEL))


def test_a_reused_idempotency_key_is_refused_as_over_http(rig, db: Database) -> None:
    """The same way in as ``POST /api/v1/tasks`` (``app.commands.submit``): the same key with the same
    body finds the task; with another body it is the API's 409, its detail as the rejection's title."""

    def keyed(message_id: str, cid: str) -> str:
        body = json.dumps({"correlation_id": cid, "input": {"a": 1}}).encode()
        return take(ctx, client, message_id, SUBMIT_TASK, body, idempotency_key="k-1").outcome

    ctx, client = rig
    assert keyed("m-1", "o-1") == "submitted"
    assert keyed("m-2", "o-1") == "replayed"
    assert keyed("m-3", "o-2") == "rejected"
    (conflict,) = [r.payload for r in rows(db, OutboxKind.CHANNEL)]
    assert (conflict["command_message_id"], conflict["status"]) == ("m-3", 409)
    assert conflict["title"] == "Idempotency-Key was already used with a different body"
    assert conflict["errors"] == [] and conflict["correlation_id"] == "o-2"


def test_a_cancel_is_taken_like_the_api(rig, db: Database) -> None:
    ctx, client = rig
    submit(ctx, client, "o-1")
    outcome = take(ctx, client, "m-c", CANCEL_TASK, b'{"correlation_id": "o-1", "reason": "no longer needed"}')
    assert outcome.outcome == "cancel_requested"
    with db.transaction() as session:
        assert session.scalar(select(ExternalTask.state)) == "canceled"  # the vendor never saw it


def test_a_relay_of_a_task_on_a_channel_gets_a_channel_row_with_the_same_body(rig, db: Database) -> None:
    ctx, client = rig
    submit(ctx, client, "o-1")
    with db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id))
        assert task_id is not None
        task = lock_task(session, task_id)
        move(session, task, State.SUBMITTED, utcnow())
        move(session, task, State.ACCEPTED, utcnow())
    (relay,), (channel,) = rows(db, OutboxKind.RELAY), rows(db, OutboxKind.CHANNEL)
    assert channel.message_id == row_message_id(relay.message_id)
    assert channel.payload == {**relay.payload, "message_id": relay.message_id}
    assert channel.payload["sequence"] == relay.sequence == 1 and channel.sequence is None
    with db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(OutboxMessage)) == 3  # submit, relay, channel


def test_a_later_channel_event_waits_for_the_earlier_one_of_its_task(rig, db: Database) -> None:
    from datetime import timedelta

    from workers.tasks.attempt import ComeBackLater
    from workers.tasks.channel import ChannelDelivery

    ctx, client = rig
    submit(ctx, client, "o-1")
    with db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id))
        assert task_id is not None
        task = lock_task(session, task_id)
        for state in (State.SUBMITTED, State.ACCEPTED, State.SUCCEEDED):
            move(session, task, state, utcnow())
    first, second = rows(db, OutboxKind.CHANNEL)
    assert (first.payload["sequence"], second.payload["sequence"]) == (1, 2)
    with db.transaction() as session, pytest.raises(ComeBackLater) as shortly:
        row = session.get(OutboxMessage, second.id)
        assert row is not None
        ChannelDelivery().admit(ctx, session, row)  # the first is queued
    assert shortly.value.countdown < 1
    retry_at = utcnow() + timedelta(hours=1)
    with db.transaction() as session:
        row = session.get(OutboxMessage, first.id)
        assert row is not None
        row.next_attempt_at = retry_at
    with db.transaction() as session:
        row = session.get(OutboxMessage, second.id)
        assert row is not None
        assert ChannelDelivery().admit(ctx, session, row) == "held"  # an hour: in the database
        assert row.next_attempt_at is not None
        assert row.dispatched_at is None and row.next_attempt_at >= retry_at
    with db.transaction() as session:
        row = session.get(OutboxMessage, first.id)
        assert row is not None
        assert ChannelDelivery().admit(ctx, session, row) is None
