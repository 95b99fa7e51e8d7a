"""A ``plugin`` provider on the real stack (web thread, a real worker and broker, PostgreSQL): the
example adapter (examples/acme_adapter, installed into the test venv, named by its entry point) submits
to the fake Acme on loopback in XML, Acme's own signed callback completes the task, and the domain app
gets its signed callback. A forged callback is refused and changes nothing."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from liaison_acme.fake_vendor import FakeAcme
from models import ProcessedMessage
from tests.integration import services
from tests.integration.stack import Stack, build_stack
from webhooks.signing import verify


@pytest.fixture(scope="module")
def acme_stack(request: pytest.FixtureRequest, tmp_path_factory) -> Iterator[tuple[Stack, FakeAcme]]:
    broker_url = services.BROKERS["rabbitmq"]
    services.require(broker_url, "rabbitmq")
    vendor = FakeAcme().start()
    stack = build_stack(
        "postgres-rabbitmq",
        database_url=request.getfixturevalue("postgres_url"),
        broker_url=broker_url,
        vendor_url=vendor.base_url,
        vendor_secret=vendor.secrets[0],
        tmp=tmp_path_factory.mktemp("plugin"),
        extra_env={"LIAISON_PROVIDER_SIM_KIND": "plugin", "LIAISON_PROVIDER_SIM_ADAPTER": "acme"},
    )
    yield stack, vendor
    stack.close()
    vendor.stop()


def test_submit_signed_vendor_callback_state_and_signed_domain_callback(acme_stack: tuple[Stack, FakeAcme]) -> None:
    stack, vendor = acme_stack
    assert stack.settings.providers["sim"].adapter is not None
    api_key, secret, path = stack.new_client()
    cid = f"acme-{uuid.uuid4().hex[:8]}"
    response = stack.submit(api_key, {"correlation_id": cid, "input": {"prompt": "a cat"}}, key=cid)
    assert response.status_code == 202, response.text
    stack.wait_for_task(api_key, cid, until=lambda body: body["state"] == "submitted")

    reference = stack.reference(cid)
    [order] = [o for o in vendor.orders.values() if o.ref == reference]
    assert order.input == {"prompt": "a cat"} and order.notify == f"{stack.settings.public_url}/webhooks/sim"
    assert vendor.submits == 1

    real_secrets = vendor.secrets
    vendor.secrets = ("not-acme-" + uuid.uuid4().hex,)  # the same callback, signed with a secret Liaison does not hold
    assert vendor.finish(order.id, "DONE", {"image": "forged.png"}) == 401
    assert stack.get(api_key, cid)["state"] == "submitted"

    vendor.secrets = real_secrets
    assert vendor.finish(order.id, "DONE", {"image": "cat.png"}) == 200
    body = stack.wait_for_task(api_key, cid)
    assert (body["state"], body["outcome"]) == ("succeeded", {"image": "cat.png"})

    hits = stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10, message="callback")
    [callback] = [r for r in hits if r.path == path]
    assert verify([secret], callback.headers, callback.body, time.time()) == callback.json()["message_id"]
    assert (callback.json()["type"], callback.json()["state"]) == ("task.completed", "succeeded")
    with stack.db.transaction() as session:
        types = set(session.scalars(select(ProcessedMessage.message_type).where(ProcessedMessage.source == "sim")))
    assert "job.completed" in types
