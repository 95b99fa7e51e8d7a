"""The domain apps' API over real HTTP: auth, validation, idempotency, visibility, pagination."""

from __future__ import annotations

import uuid

import requests

from tests.integration.stack import Stack

PROBLEM = "application/problem+json"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


def test_missing_or_unknown_api_key_is_401_problem(pair_stack: Stack) -> None:
    url = f"{pair_stack.web.url}/api/v1/tasks"
    for headers in ({}, {"Authorization": "Basic abc"}, _auth("lk_nope")):
        response = requests.post(url, json={"input": "x"}, headers=headers, timeout=5)
        assert response.status_code == 401
        assert response.headers["Content-Type"] == PROBLEM
        assert response.json()["status"] == 401


def test_bad_input_gets_field_errors(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    response = pair_stack.submit(api_key, {"input": [1], "on_deadline": "panic", "acceptance_timeout_s": -5, "nope": 1})
    assert response.status_code == 422
    assert response.headers["Content-Type"] == PROBLEM
    fields = {e["field"] for e in response.json()["errors"]}
    assert fields == {"input", "on_deadline", "acceptance_timeout_s", "nope"}


def test_not_json_is_415_and_broken_json_is_400_and_too_large_is_413(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    url = f"{pair_stack.web.url}/api/v1/tasks"
    r = requests.post(url, data="input=1", headers={**_auth(api_key), "Content-Type": "text/plain"}, timeout=5)
    assert r.status_code == 415 and r.headers["Content-Type"] == PROBLEM
    r = requests.post(url, data="{nope", headers={**_auth(api_key), "Content-Type": "application/json"}, timeout=5)
    assert r.status_code == 400 and r.headers["Content-Type"] == PROBLEM
    big = {"input": "x" * (pair_stack.settings.max_body_bytes + 1)}
    r = requests.post(url, json=big, headers=_auth(api_key), timeout=5)
    assert r.status_code == 413 and r.headers["Content-Type"] == PROBLEM


def test_idempotency_key_same_body_same_task_different_body_409(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    key = f"key-{uuid.uuid4().hex}"
    first = pair_stack.submit(api_key, {"input": {"a": 1}}, key=key)
    assert first.status_code == 202
    again = pair_stack.submit(api_key, {"input": {"a": 1}}, key=key)
    assert again.status_code == 200
    assert again.json()["correlation_id"] == first.json()["correlation_id"]
    other = pair_stack.submit(api_key, {"input": {"a": 2}}, key=key)
    assert other.status_code == 409 and other.headers["Content-Type"] == PROBLEM
    cid = first.json()["correlation_id"]
    pair_stack.wait_for_task(api_key, cid)
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][cid] == 1


def test_existing_correlation_id_returns_the_task_and_never_submits_twice(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"same-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": "one"}).status_code == 202
    second = pair_stack.submit(api_key, {"correlation_id": cid, "input": "two"})
    assert second.status_code == 200 and second.json()["input"] == "one"
    pair_stack.wait_for_task(api_key, cid)
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][cid] == 1
    # Another client may not take (or see) that correlation id.
    other_key, _, _ = pair_stack.new_client()
    assert pair_stack.submit(other_key, {"correlation_id": cid, "input": "x"}).status_code == 409


def test_a_client_sees_only_its_own_tasks(pair_stack: Stack) -> None:
    mine, _, _ = pair_stack.new_client()
    theirs, _, _ = pair_stack.new_client()
    cid = f"private-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(mine, {"correlation_id": cid, "input": "x"}).status_code == 202
    r = requests.get(f"{pair_stack.web.url}/api/v1/tasks/{cid}", headers=_auth(theirs), timeout=5)
    assert r.status_code == 404 and r.headers["Content-Type"] == PROBLEM
    listed = requests.get(f"{pair_stack.web.url}/api/v1/tasks", headers=_auth(theirs), timeout=5).json()
    assert listed["tasks"] == []


def test_generated_correlation_id_and_paginated_list(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    made = [pair_stack.submit(api_key, {"input": {"i": i}}).json()["correlation_id"] for i in range(5)]
    assert all(uuid.UUID(cid) for cid in made)
    seen, cursor = [], None
    while True:
        params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
        page = requests.get(f"{pair_stack.web.url}/api/v1/tasks", params=params, headers=_auth(api_key), timeout=5).json()
        seen += [t["correlation_id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(made))
    bad = requests.get(f"{pair_stack.web.url}/api/v1/tasks", params={"cursor": "!!"}, headers=_auth(api_key), timeout=5)
    assert bad.status_code == 400
    bad = requests.get(f"{pair_stack.web.url}/api/v1/tasks", params={"state": "sleeping"}, headers=_auth(api_key), timeout=5)
    assert bad.status_code == 422


def test_deadlines_are_stored_in_utc(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    body = {"input": "x", "acceptance_timeout_s": 60, "execution_deadline": "2099-01-01T12:00:00+02:00",
            "on_deadline": "cancel"}
    task = pair_stack.submit(api_key, body).json()
    assert task["execution_deadline"] == "2099-01-01T10:00:00Z"
    assert task["acceptance_deadline"].endswith("Z") and task["on_deadline"] == "cancel"


def test_health_and_readiness(pair_stack: Stack) -> None:
    assert requests.get(f"{pair_stack.web.url}/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{pair_stack.web.url}/readyz", timeout=5).status_code == 200
