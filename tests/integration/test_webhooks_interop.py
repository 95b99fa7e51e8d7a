"""Inbound webhooks signed by the ``standardwebhooks`` library itself, posted to the real endpoint
under both header sets vendors use: ``webhook-*`` and Svix's ``svix-*`` (the same scheme)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
import requests
from sqlalchemy import func, select
from standardwebhooks.webhooks import Webhook

from models import OrphanEvent, ProcessedMessage
from tests.integration.stack import Stack
from webhooks.signing import HEADER_SETS

pytestmark = pytest.mark.integration
WEBHOOK, SVIX = HEADER_SETS


def _library_headers(secret: str, names: tuple[str, str, str], msg_id: str, body: bytes) -> dict[str, str]:
    now = datetime.now(UTC)
    id_name, ts_name, sig_name = names
    return {
        id_name: msg_id,
        ts_name: str(int(now.timestamp())),
        sig_name: Webhook(secret).sign(msg_id, now, body.decode()),
    }


def _post(stack: Stack, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(
        f"{stack.web.url}/webhooks/sim", data=body, headers={**headers, "Content-Type": "application/json"}, timeout=10
    )


def _stored(stack: Stack, message_id: str) -> int:
    with stack.db.transaction() as session:
        count = session.scalar(
            select(func.count()).select_from(ProcessedMessage).where(ProcessedMessage.message_id == message_id)
        )
        assert count is not None
        return count


@pytest.mark.parametrize("names", [WEBHOOK, SVIX], ids=["webhook", "svix"])
def test_a_library_signed_event_is_accepted_under_either_header_set(
    pair_stack: Stack, vendor_secret: str, names: tuple[str, str, str]
) -> None:
    job_id, msg_id = f"job_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
    body = json.dumps({"type": "job.accepted", "job_id": job_id}).encode()
    response = _post(pair_stack, body, _library_headers(vendor_secret, names, msg_id, body))
    assert response.status_code == 200, response.text
    assert response.json() == {"status": "orphan", "message_id": msg_id}
    with pair_stack.db.transaction() as session:
        orphan = session.scalars(select(OrphanEvent).where(OrphanEvent.vendor_job_id == job_id)).one()
        assert orphan.message_id == msg_id
    # The id header is the deduplication key whatever its name: the same message again is a duplicate.
    again = _post(pair_stack, body, _library_headers(vendor_secret, names, msg_id, body))
    assert again.json()["status"] == "duplicate" and _stored(pair_stack, msg_id) == 1


def test_when_both_header_sets_are_sent_webhook_names_win(pair_stack: Stack, vendor_secret: str) -> None:
    body = json.dumps({"type": "job.accepted", "job_id": f"job_{uuid.uuid4().hex}"}).encode()
    webhook_id, svix_id = f"msg_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
    good_webhook = _library_headers(vendor_secret, WEBHOOK, webhook_id, body)
    good_svix = _library_headers(vendor_secret, SVIX, svix_id, body)

    # A valid svix-* set does not rescue a bad webhook-* set: 401, nothing stored.
    bad_webhook = {**good_webhook, "webhook-signature": "v1,AAAA"}
    refused = _post(pair_stack, body, {**bad_webhook, **good_svix})
    assert refused.status_code == 401, refused.text
    assert _stored(pair_stack, webhook_id) == 0 and _stored(pair_stack, svix_id) == 0

    # A valid webhook-* set is used, and its id is the message id, whatever the svix-* set says.
    accepted = _post(pair_stack, body, {**good_webhook, **good_svix, "svix-signature": "v1,AAAA"})
    assert accepted.status_code == 200, accepted.text
    assert accepted.json()["message_id"] == webhook_id
    assert _stored(pair_stack, webhook_id) == 1 and _stored(pair_stack, svix_id) == 0
