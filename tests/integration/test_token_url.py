"""The token-url scheme on a real stack (gunicorn-less web thread, a real worker and broker, PostgreSQL,
the simulator as the vendor): the submit gives the vendor a callback URL with a per-task token, the
vendor's events reach the task through it (an early one gets 409 and is sent again), and once the
task is final the same URL is refused; the token shows nowhere the client can see."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator

import pytest
import requests
from sqlalchemy import func, select

from models import CallbackToken, ExternalTask, ProcessedMessage
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import Stack
from webhooks.schemes import token_digest


@pytest.fixture(scope="module", params=PAIRS[1:], ids=lambda c: f"{c[0]}-{c[1]}")
def token_stack(request: pytest.FixtureRequest, vendor, vendor_secret: str, tmp_path_factory) -> Iterator[Stack]:
    yield from _stack(
        request, vendor, vendor_secret, tmp_path_factory, extra_env={"LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME": "token-url"}
    )


def test_the_vendor_reaches_its_task_through_the_token_and_not_after_it_is_final(token_stack: Stack) -> None:
    stack = token_stack
    api_key, _, _ = stack.new_client()
    cid = f"tok-{uuid.uuid4().hex[:8]}"
    assert stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid).status_code == 202
    body = stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded"
    assert "state.accepted" in [e["kind"] for e in body["timeline"]]

    reference = stack.reference(cid, api_key)
    job = next(j for j in stack.vendor("GET", "/_sim/jobs").json()["jobs"] if j["idempotency_key"] == reference)
    callback_url = job["callback_url"]
    prefix = f"{stack.settings.public_url}/webhooks/sim/t/"
    assert callback_url.startswith(prefix)
    token = callback_url.removeprefix(prefix)
    with stack.db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.reference == reference))
        digests = session.scalars(select(CallbackToken.digest).where(CallbackToken.task_id == task_id)).all()
        stored = session.scalar(select(func.count()).select_from(ProcessedMessage))
    assert token_digest(token) in digests and token not in digests
    assert token not in json.dumps(body)  # the client's view of the task, its timeline included

    # the task is final: the vendor's own URL moves it no more, and nothing is stored
    late = json.dumps({"type": "job.completed", "job_id": job["job_id"], "status": "failed"}).encode()
    url = callback_url.replace(stack.settings.public_url, stack.web.url)
    response = requests.post(url, data=late, headers={"Content-Type": "application/json"}, timeout=5)
    assert response.status_code == 401 and token not in response.text
    with stack.db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(ProcessedMessage)) == stored
    assert stack.get(api_key, cid)["state"] == "succeeded"
