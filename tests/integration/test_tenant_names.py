"""Per-tenant names and state (issue 8, point 4), over the real stack: correlation ids are each
client's own, the vendor sees a globally unique reference, a 410 pauses only its own client's
callbacks, a cancel's Idempotency-Key is bound to its task; URLs stored beside a task are stripped."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
import requests
from sqlalchemy import select

from models.attention import CallbackEndpoint, Incident
from models.messages import OutboxMessage
from tests.integration.stack import Stack
from webhooks.signing import SignatureError, verify

PROBLEM = "application/problem+json"


def _client_name(stack: Stack, api_key: str) -> str:
    return stack.client_name(api_key)


def _kinds(body: dict[str, Any]) -> list[str]:
    return [e["kind"] for e in body["timeline"]]


def _cli(stack: Stack, *args: str) -> Any:
    return stack.app.test_cli_runner().invoke(args=["liaison", *args])


def _signed_by(secret: str, request: Any) -> bool:
    try:
        verify([secret], request.headers, request.body, time.time())
    except SignatureError:
        return False
    return True


def test_two_clients_use_the_same_correlation_id_independently(pair_stack: Stack) -> None:
    key_a, secret_a, path_a = pair_stack.new_client()
    key_b, secret_b, path_b = pair_stack.new_client()
    cid = f"order-42-{uuid.uuid4().hex[:8]}"
    first = pair_stack.submit(key_a, {"correlation_id": cid, "input": {"who": "a"}})
    second = pair_stack.submit(key_b, {"correlation_id": cid, "input": {"who": "b"}})
    assert (first.status_code, second.status_code) == (202, 202), second.text
    assert first.headers["Location"] == second.headers["Location"] == f"/api/v1/tasks/{cid}"

    # Each sees only its own task under that name.
    done_a, done_b = pair_stack.wait_for_task(key_a, cid), pair_stack.wait_for_task(key_b, cid)
    assert (done_a["state"], done_b["state"]) == ("succeeded", "succeeded")
    assert (done_a["input"], done_b["input"]) == ({"who": "a"}, {"who": "b"})
    for key, who in ((key_a, "a"), (key_b, "b")):
        listed = requests.get(
            f"{pair_stack.web.url}/api/v1/tasks", headers={"Authorization": f"Bearer {key}"}, timeout=10
        ).json()["tasks"]
        assert [(t["correlation_id"], t["input"]) for t in listed] == [(cid, {"who": who})]

    # Two separate jobs at the vendor, each under its own globally unique reference (and key).
    ref_a, ref_b = pair_stack.reference(cid, key_a), pair_stack.reference(cid, key_b)
    assert ref_a != ref_b and cid not in (ref_a, ref_b)
    sim = pair_stack.vendor("GET", "/_sim/jobs").json()
    jobs = {j["reference"]: j for j in sim["jobs"] if j["reference"] in (ref_a, ref_b)}
    assert {r: (j["input"], j["idempotency_key"]) for r, j in jobs.items()} == {
        ref_a: ({"who": "a"}, ref_a),
        ref_b: ({"who": "b"}, ref_b),
    }
    assert jobs[ref_a]["job_id"] != jobs[ref_b]["job_id"]
    assert (sim["submit_attempts"][ref_a], sim["submit_attempts"][ref_b]) == (1, 1)
    assert (done_a["outcome"]["reference"], done_b["outcome"]["reference"]) == (ref_a, ref_b)

    # Each client's callbacks went to its own endpoint, signed with its own secret, about its own job.
    pair_stack.callbacks.wait_for(
        lambda reqs: all(sum(r.path == p for r in reqs) >= 2 for p in (path_a, path_b)), timeout=15
    )
    for path, secret, other, ref in ((path_a, secret_a, secret_b, ref_a), (path_b, secret_b, secret_a, ref_b)):
        posts = pair_stack.callbacks.posts_to(path)
        assert [r.json()["type"] for r in posts] == ["task.accepted", "task.completed"]
        assert all(r.json()["correlation_id"] == cid for r in posts)
        assert all(_signed_by(secret, r) and not _signed_by(other, r) for r in posts)
        assert posts[-1].json()["outcome"]["reference"] == ref

    # Operators name the client when the id is ambiguous.
    name_a = _client_name(pair_stack, key_a)
    ambiguous = _cli(pair_stack, "tasks", "show", cid)
    assert ambiguous.exit_code != 0 and "2 clients" in ambiguous.output and "client" in ambiguous.output
    shown = _cli(pair_stack, "tasks", "show", cid, "--client", name_a, "--json")
    assert shown.exit_code == 0, shown.output
    assert (json.loads(shown.output)["client"], json.loads(shown.output)["reference"]) == (name_a, ref_a)
    unknown = _cli(pair_stack, "tasks", "show", cid, "--client", "nobody-" + name_a)
    assert unknown.exit_code != 0 and "no client named" in unknown.output


def test_a_410_from_one_clients_endpoint_does_not_park_another_clients_callbacks(pair_stack: Stack) -> None:
    # Both clients call back the very same URL, credentials in its query.
    path = f"/shared/{uuid.uuid4().hex[:8]}"
    secret_query = f"token=s3cret-{uuid.uuid4().hex[:8]}"
    key_a, _, _ = pair_stack.new_client(f"{path}?{secret_query}")
    key_b, _, _ = pair_stack.new_client(f"{path}?{secret_query}")
    name_a, name_b = _client_name(pair_stack, key_a), _client_name(pair_stack, key_b)
    shown_url = pair_stack.callback_server.url + path

    pair_stack.callbacks.set_status(path, 410)  # A's callbacks get 410: A's endpoint is disabled
    cid_a = f"gone-a-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(key_a, {"correlation_id": cid_a, "input": "a"}).status_code == 202
    pair_stack.wait_for_task(key_a, cid_a, until=lambda b: _kinds(b).count("relay.parked") == 2)
    assert len(pair_stack.callbacks.posts_to(path)) == 1

    pair_stack.callbacks.set_status(path, 204)  # the same URL answers B
    cid_b = f"fine-b-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(key_b, {"correlation_id": cid_b, "input": "b"}).status_code == 202
    done_b = pair_stack.wait_for_task(key_b, cid_b, until=lambda b: _kinds(b).count("relay.delivered") == 2)
    assert "relay.parked" not in _kinds(done_b)
    delivered = [r.json() for r in pair_stack.callbacks.posts_to(path) if r.status == 204]
    assert [(c["correlation_id"], c["type"]) for c in delivered] == [
        (cid_b, "task.accepted"),
        (cid_b, "task.completed"),
    ]

    # The endpoint list says whose endpoint it is, and shows no secret.
    listed = [e for e in pair_stack.admin("GET", "/callback-endpoints").json()["items"] if e["url"] == shown_url]
    assert [e["client"] for e in listed] == [name_a]
    cli_list = _cli(pair_stack, "endpoints", "list")
    assert name_a in cli_list.output and shown_url in cli_list.output and "s3cret" not in cli_list.output
    with pair_stack.db.transaction() as session:
        endpoints = session.scalars(select(CallbackEndpoint).where(CallbackEndpoint.url == shown_url)).all()
        targets = session.scalars(
            select(OutboxMessage.target).where(
                OutboxMessage.correlation_id.in_([cid_a, cid_b]), OutboxMessage.kind == "relay"
            )
        ).all()
        details = [
            (i.subject, i.detail) for i in session.scalars(select(Incident).where(Incident.detail.contains(shown_url)))
        ]
    assert len(endpoints) == 1 and all("s3cret" not in e.url for e in endpoints)
    assert targets and set(targets) == {shown_url}
    assert details and not any("s3cret" in subject + detail for subject, detail in details)
    assert any(name_a in detail for _, detail in details)

    # B's endpoint answers 410 too: now two clients have it disabled, each with its own parked relays.
    pair_stack.callbacks.set_status(path, 410)
    cid_b2 = f"gone-b-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(key_b, {"correlation_id": cid_b2, "input": "b2"}).status_code == 202
    pair_stack.wait_for_task(key_b, cid_b2, until=lambda b: _kinds(b).count("relay.parked") == 2)
    pair_stack.callbacks.set_status(path, 204)
    ambiguous = pair_stack.admin("POST", "/callback-endpoints/enable", json={"url": shown_url})
    assert ambiguous.status_code == 422 and ambiguous.headers["Content-Type"] == PROBLEM
    assert [e["field"] for e in ambiguous.json()["errors"]] == ["client"]
    assert "client" in _cli_fails(pair_stack, "endpoints", "enable", shown_url)

    released = pair_stack.admin("POST", "/callback-endpoints/enable", json={"url": shown_url, "client": name_a})
    assert released.status_code == 202 and released.json()["released"] == 2
    pair_stack.wait_for_task(key_a, cid_a, until=lambda b: _kinds(b).count("relay.delivered") == 2, timeout=15)
    assert _kinds(pair_stack.get(key_b, cid_b2)).count("relay.delivered") == 0  # B's still wait for B's operator
    # The full URL (as the client configured it) names the same endpoint as its stripped form.
    assert "2 waiting relays released" in _cli_ok(
        pair_stack, "endpoints", "enable", f"{shown_url}?{secret_query}", "--client", name_b
    )
    pair_stack.wait_for_task(key_b, cid_b2, until=lambda b: _kinds(b).count("relay.delivered") == 2, timeout=15)


def _cli_ok(stack: Stack, *args: str) -> str:
    result = _cli(stack, *args)
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result.output


def _cli_fails(stack: Stack, *args: str) -> str:
    result = _cli(stack, *args)
    assert result.exit_code != 0, f"{args} should fail: {result.output}"
    return result.output


def _cancel(stack: Stack, api_key: str, cid: str, key: str | None) -> requests.Response:
    headers = {"Authorization": f"Bearer {api_key}", **({"Idempotency-Key": key} if key else {})}
    return requests.post(f"{stack.web.url}/api/v1/tasks/{cid}/cancel", headers=headers, timeout=10)


def test_a_cancel_key_reused_on_another_task_is_409_and_that_task_is_untouched(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    stays = {"input": {"simulate": {"complete_delay_s": 60}}}  # accepted, and stays so while we look
    first, second = (f"cancel-{n}-{uuid.uuid4().hex[:8]}" for n in ("one", "two"))
    for cid in (first, second):
        assert pair_stack.submit(api_key, {"correlation_id": cid, **stays}).status_code == 202
        pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")
    key = f"cancel-key-{uuid.uuid4().hex}"

    assert _cancel(pair_stack, api_key, first, key).status_code == 202
    reused = _cancel(pair_stack, api_key, second, key)
    assert reused.status_code == 409 and reused.headers["Content-Type"] == PROBLEM
    assert [e["field"] for e in reused.json()["errors"]] == ["Idempotency-Key"]
    assert second not in reused.text and first not in reused.text

    untouched = pair_stack.get(api_key, second)
    assert untouched["state"] == "accepted"
    assert not any("cancel" in k for k in _kinds(untouched))
    # The same key on its own task is still the same request: 202, nothing more done.
    assert _cancel(pair_stack, api_key, first, key).status_code == 202
    assert pair_stack.wait_for_task(api_key, first)["state"] == "canceled"
    assert _kinds(pair_stack.get(api_key, first)).count("state.cancel_requested") == 1
    # Keys are each client's own: another client may use the same one on its own task.
    other_key, _, _ = pair_stack.new_client()
    other = f"cancel-other-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(other_key, {"correlation_id": other, **stays}).status_code == 202
    assert _cancel(pair_stack, other_key, other, key).status_code == 202
    # And the second task can still be canceled, with a key of its own.
    assert _cancel(pair_stack, api_key, second, f"cancel-key-{uuid.uuid4().hex}").status_code == 202
    assert pair_stack.wait_for_task(api_key, second)["state"] == "canceled"


@pytest.mark.parametrize(
    "body", [{"url": "http://127.0.0.1:9/x", "client": 7}, {"url": "http://127.0.0.1:9/x", "client": ""}]
)
def test_enable_endpoint_client_must_be_a_name(pair_stack: Stack, body: dict[str, Any]) -> None:
    response = pair_stack.admin("POST", "/callback-endpoints/enable", json=body)
    assert response.status_code == 422 and [e["field"] for e in response.json()["errors"]] == ["client"]
