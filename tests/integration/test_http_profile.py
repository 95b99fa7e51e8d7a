"""An ``http``-kind provider on the real stack (web thread, a real worker and broker, PostgreSQL):
Liaison submits to a loopback vendor that speaks its own shape (docs/profiles/stripe-like.toml:
``POST /v1/jobs`` answering ``{"data": {"id": …, "state": "PENDING"}}``), the vendor's Stripe-signed
event in its own envelope completes the task, and the domain app gets its signed callback. An event
type the profile does not know is answered 200 and changes nothing."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import stripe
from sqlalchemy import select

from models import ExternalTask, ProcessedMessage
from tests.integration import services
from tests.integration.stack import Stack, build_stack
from tests.support.profile_vendor import ProfileVendor
from tests.support.servers import ServerThread
from webhooks.signing import verify

ROOT = Path(__file__).resolve().parents[2]
SECRET = "whsec_stripe_like_vendor"


@pytest.fixture(scope="module")
def profile_stack(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[tuple[Stack, ProfileVendor]]:
    broker_url = services.BROKERS["rabbitmq"]
    services.require(broker_url, "rabbitmq")
    vendor = ProfileVendor()
    with ServerThread(vendor) as server:
        stack = build_stack(
            "postgres-rabbitmq",
            database_url=request.getfixturevalue("postgres_url"),
            broker_url=broker_url,
            vendor_url=server.url,
            vendor_secret=SECRET,
            tmp=tmp_path_factory.mktemp("http-profile"),
            extra_env={
                "LIAISON_PROVIDER_SIM_KIND": "http",
                "LIAISON_PROVIDER_SIM_PROFILE": str(ROOT / "docs" / "profiles" / "stripe-like.toml"),
                "LIAISON_PROVIDER_SIM_API_KEY": "sk_live_not_in_the_file",
                "LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME": "stripe",
                "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": SECRET,
            },
        )
        yield stack, vendor
        stack.close()


def _send(stack: Stack, url: str, event: dict) -> requests.Response:
    """What the vendor does: POST its event, Stripe-signed, to the callback URL it was given."""
    body = json.dumps(event)
    signature = stripe.WebhookSignature.generate_signature_header(body, SECRET, int(time.time()))
    target = url.replace(stack.settings.public_url, stack.web.url)
    headers = {"Stripe-Signature": signature, "Content-Type": "application/json"}
    return requests.post(target, data=body.encode(), headers=headers, timeout=10)


def test_submit_vendor_event_state_and_signed_callback(profile_stack: tuple[Stack, ProfileVendor]) -> None:
    stack, vendor = profile_stack
    api_key, secret, path = stack.new_client()
    cid = f"prof-{uuid.uuid4().hex[:8]}"
    response = stack.submit(api_key, {"correlation_id": cid, "input": {"prompt": "a cat"}}, key=cid)
    assert response.status_code == 202, response.text
    stack.wait_for_task(api_key, cid, until=lambda body: body["state"] == "submitted")

    reference = stack.reference(cid)
    [submitted] = [s for s in vendor.seen if s.method == "POST" and s.path == "/v1/jobs"]
    assert submitted.headers["Authorization"] == "Bearer sk_live_not_in_the_file"
    assert submitted.headers["Idempotency-Key"] == reference
    assert submitted.body["params"] == {"prompt": "a cat"} and submitted.body["metadata"] == {"reference": reference}
    job_id, hook = vendor.jobs[reference], submitted.body["webhook_url"]
    assert hook == f"{stack.settings.public_url}/webhooks/sim"

    unknown = _send(stack, hook, {"id": f"evt_{cid}_0", "type": "invoice.paid", "data": {"object": {"id": job_id}}})
    assert (unknown.status_code, unknown.json()["status"]) == (200, "ignored")
    assert stack.get(api_key, cid)["state"] == "submitted"

    finished = {
        "id": f"evt_{cid}_1",
        "type": "job.finished",
        "data": {"object": {"id": job_id, "state": "DONE", "result": {"image": "cat.png"}}},
    }
    assert _send(stack, hook, finished).json()["status"] == "applied"
    body = stack.wait_for_task(api_key, cid)
    assert (body["state"], body["outcome"]) == ("succeeded", {"image": "cat.png"})

    hits = stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10, message="callback")
    [callback] = [r for r in hits if r.path == path]
    assert verify([secret], callback.headers, callback.body, time.time()) == callback.json()["message_id"]
    assert (callback.json()["type"], callback.json()["state"]) == ("task.completed", "succeeded")
    with stack.db.transaction() as session:
        task_id = session.scalar(select(ExternalTask.id).where(ExternalTask.reference == reference))
        assert task_id is not None
        types = set(session.scalars(select(ProcessedMessage.message_type).where(ProcessedMessage.source == "sim")))
    assert {"ignored:invoice.paid", "job.completed"} <= types
