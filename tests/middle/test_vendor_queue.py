"""``app.consumers.vendor_queues.receive``: an amqp vendor's message read like a webhook (size, signature,
MessageId, bounded body), then ``receive_event`` in one transaction; a refusal stores nothing."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import pytest
from sqlalchemy import func, select

from app.consumers.vendor_queues import event_tolerance_s, receive
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings
from models.db import Database
from models.messages import ProcessedMessage
from service.ingress import Refused
from tests.middle.builders import at_vendor, new_client
from webhooks.signing import generate_secret, sign
from wire.broker_messages import encode, header_items

if TYPE_CHECKING:
    from runtime.context import Liaison

SECRET = generate_secret()


@dataclass
class Ctx:
    settings: Settings
    db: Database


@pytest.fixture
def rig(db: Database, published: object) -> tuple[Liaison, ProviderSettings]:
    settings = Settings.from_env(
        {
            "LIAISON_PROVIDERS": "sim",
            "LIAISON_PROVIDER_SIM_KIND": "amqp",
            "LIAISON_PROVIDER_SIM_AMQP_URL": "amqp://127.0.0.1:1//",
            "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": SECRET,
            "LIAISON_MAX_BODY_BYTES": "2048",
        }
    )
    return cast("Liaison", Ctx(settings, db)), settings.providers["sim"]


def signed(
    payload: dict[str, object], message_id: str, at: float, secret: str = SECRET
) -> tuple[dict[str, str], bytes]:
    body = encode(payload)
    return header_items(sign(secret, message_id, int(at), body).as_dict()), body


def stored(db: Database) -> int:
    with db.transaction() as session:
        return session.scalar(select(func.count()).select_from(ProcessedMessage)) or 0


def test_an_event_is_applied_once_and_its_duplicate_is_recognised(rig, db: Database) -> None:
    ctx, ps = rig
    with db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "ref-1")
    headers, body = signed({"type": "job.accepted", "job_id": "ref-1"}, "msg-1", time.time())
    assert receive(ctx, ps, headers, body, time.time()).status == "applied"
    assert receive(ctx, ps, headers, body, time.time()).status == "duplicate"
    orphan_headers, orphan_body = signed({"type": "job.accepted", "job_id": "ref-unknown"}, "msg-2", time.time())
    assert receive(ctx, ps, orphan_headers, orphan_body, time.time()).status == "orphan"


def test_a_queued_event_may_be_hours_old_but_not_older_than_half_the_inbox_retention(rig, db: Database) -> None:
    ctx, ps = rig
    now = time.time()
    assert event_tolerance_s(ctx) == ctx.settings.processed_retention_s // 2  # 48 h by default
    headers, body = signed({"type": "job.accepted", "job_id": "ref-9"}, "msg-old", now - 6 * 3600)
    assert receive(ctx, ps, headers, body, now).status == "orphan"  # a webhook this old would be stale
    headers, body = signed({"type": "job.accepted", "job_id": "ref-9"}, "msg-older", now - 3 * 86400)
    with pytest.raises(Refused) as refused:
        receive(ctx, ps, headers, body, now)
    assert refused.value.reason == "stale"


@pytest.mark.parametrize(
    ("payload", "secret", "message_id", "reason"),
    [
        ({"type": "job.accepted", "job_id": "r"}, generate_secret(), "m1", "signature"),
        ({"type": "job.exploded", "job_id": "r"}, SECRET, "m2", "malformed"),
        ({"type": "job.accepted", "job_id": "r"}, SECRET, "m" * 201, "malformed"),
        (
            {"type": "job.completed", "job_id": "r", "status": "succeeded", "outcome": {"x": "y" * 3000}},
            SECRET,
            "m3",
            "too_large",
        ),
    ],
    # named, not derived from the random secrets: every test process must collect the same ids
    ids=["forged", "unknown-type", "long-message-id", "too-large"],
)
def test_a_refused_message_stores_nothing(rig, db: Database, payload, secret, message_id, reason) -> None:
    ctx, ps = rig
    headers, body = signed(payload, message_id, time.time(), secret)
    with pytest.raises(Refused) as refused:
        receive(ctx, ps, headers, body, time.time())
    assert refused.value.reason == reason
    assert stored(db) == 0


def test_a_message_without_signature_headers_is_refused(rig, db: Database) -> None:
    ctx, ps = rig
    with pytest.raises(Refused) as refused:
        receive(ctx, ps, {}, b'{"type":"job.accepted","job_id":"r"}', time.time())
    assert refused.value.reason == "signature" and str(refused.value) == "signature rejected: missing_header"
