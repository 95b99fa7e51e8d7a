"""The domain apps' API over real HTTP: auth, validation, idempotency, visibility, pagination."""

from __future__ import annotations

import base64
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
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
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][pair_stack.reference(cid, api_key)] == 1


@pytest.mark.parametrize("by", ["idempotency key", "correlation id"])
def test_identical_submits_at_once_make_one_task_and_answer_each_with_it(pair_stack: Stack, by: str) -> None:
    """Eight identical requests let go together: one makes the task (202), the others get it (200),
    none fails. On PostgreSQL the losers' inserts do nothing and then find the winner's task
    (``service.intake``); on SQLite the writers are serialised and the look comes first."""
    api_key, _, _ = pair_stack.new_client()
    name = uuid.uuid4().hex[:12]
    body: dict[str, Any] = {"input": {"same": name}}
    key = None
    if by == "idempotency key":
        key = f"key-{name}"
    else:
        body["correlation_id"] = f"same-{name}"
    start = threading.Barrier(8)

    def submit(_: int) -> requests.Response:
        start.wait(timeout=10)
        return pair_stack.submit(api_key, body, key=key)

    with ThreadPoolExecutor(8) as pool:
        answers = list(pool.map(submit, range(8)))
    assert sorted(r.status_code for r in answers) == [200] * 7 + [202], [r.text for r in answers]
    [cid] = {r.json()["correlation_id"] for r in answers}
    pair_stack.wait_for_task(api_key, cid)
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][pair_stack.reference(cid, api_key)] == 1
    listed = requests.get(f"{pair_stack.web.url}/api/v1/tasks", headers=_auth(api_key), timeout=5).json()
    assert [t["correlation_id"] for t in listed["tasks"]] == [cid]


def test_existing_correlation_id_returns_the_task_and_never_submits_twice(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"same-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": "one"}).status_code == 202
    second = pair_stack.submit(api_key, {"correlation_id": cid, "input": "two"})
    assert second.status_code == 200 and second.json()["input"] == "one"
    pair_stack.wait_for_task(api_key, cid)
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][pair_stack.reference(cid, api_key)] == 1
    # Correlation ids are each client's own names: another client's task of that name is a new task.
    other_key, _, _ = pair_stack.new_client()
    theirs = pair_stack.submit(other_key, {"correlation_id": cid, "input": "x"})
    assert theirs.status_code == 202 and theirs.json()["input"] == "x"
    assert pair_stack.get(api_key, cid)["input"] == "one"


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
        page = requests.get(
            f"{pair_stack.web.url}/api/v1/tasks", params=params, headers=_auth(api_key), timeout=5
        ).json()
        seen += [t["correlation_id"] for t in page["tasks"]]
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert seen == list(reversed(made))
    bad = requests.get(f"{pair_stack.web.url}/api/v1/tasks", params={"cursor": "!!"}, headers=_auth(api_key), timeout=5)
    assert bad.status_code == 400
    bad = requests.get(
        f"{pair_stack.web.url}/api/v1/tasks", params={"state": "sleeping"}, headers=_auth(api_key), timeout=5
    )
    assert bad.status_code == 422


def test_deadlines_are_stored_in_utc(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    body = {
        "input": "x",
        "acceptance_timeout_s": 60,
        "execution_deadline": "2099-01-01T12:00:00+02:00",
        "on_deadline": "cancel",
    }
    task = pair_stack.submit(api_key, body).json()
    assert task["execution_deadline"] == "2099-01-01T10:00:00Z"
    assert task["acceptance_deadline"].endswith("Z") and task["on_deadline"] == "cancel"


def test_health_and_readiness(pair_stack: Stack) -> None:
    assert requests.get(f"{pair_stack.web.url}/healthz", timeout=5).json() == {"status": "ok"}
    assert pair_stack.internal("/readyz").status_code == 200


# --- malformed input is a 4xx problem, never a 500 ------------------------------------------

#: JSON that json.loads accepts or fails on oddly, and that the database could not store.
UNSTORABLE_BODIES = [
    pytest.param(b'{"input": {"n": ' + b"1" * 4301 + b"}}", id="int-past-4300-digits"),
    pytest.param(b'{"input": {"n": NaN}}', id="NaN"),
    pytest.param(b'{"input": {"n": Infinity}}', id="Infinity"),
    pytest.param(b'{"input": {"n": -Infinity}}', id="-Infinity"),
    pytest.param(b'{"input": {"n": 1e400}}', id="overflows-to-inf"),
    pytest.param(b'{"input": "\\ud800"}', id="lone-surrogate"),
    pytest.param(b'{"input": {"\\udfff": 1}}', id="lone-surrogate-key"),
    pytest.param(b'{"input": "a\\u0000b"}', id="nul"),
    pytest.param(b'{"input": "x", "callback_url": "http://cb/\\u0000"}', id="nul-in-callback-url"),
]


@pytest.mark.parametrize("path", ["", "/no-such-task/cancel"])
@pytest.mark.parametrize("body", UNSTORABLE_BODIES)
def test_unstorable_json_is_400_and_stores_nothing(pair_stack: Stack, body: bytes, path: str) -> None:
    api_key, _, _ = pair_stack.new_client()
    url = f"{pair_stack.web.url}/api/v1/tasks"
    r = requests.post(url + path, data=body, headers={**_auth(api_key), "Content-Type": "application/json"}, timeout=5)
    assert r.status_code == 400, r.text
    assert r.headers["Content-Type"] == PROBLEM and "not valid JSON" in r.json()["detail"]
    assert requests.get(url, headers=_auth(api_key), timeout=5).json()["tasks"] == []


@pytest.mark.parametrize("callback_url", ["http://[::1/x", "http://[::1", "https://::1]/x"])
def test_broken_ipv6_callback_url_is_a_field_error(pair_stack: Stack, callback_url: str) -> None:
    api_key, _, _ = pair_stack.new_client()
    response = pair_stack.submit(api_key, {"input": "x", "callback_url": callback_url})
    assert response.status_code == 422 and response.headers["Content-Type"] == PROBLEM
    assert [e["field"] for e in response.json()["errors"]] == ["callback_url"]


@pytest.mark.parametrize("last_id", [0, -5, 2**62, 2**63, 10**30], ids=["zero", "negative", "2**62", "2**63", "10**30"])
def test_cursor_outside_the_id_range_is_400(pair_stack: Stack, last_id: int) -> None:
    api_key, _, _ = pair_stack.new_client()
    cursor = base64.urlsafe_b64encode(f"t{last_id}".encode()).decode().rstrip("=")
    r = requests.get(f"{pair_stack.web.url}/api/v1/tasks", params={"cursor": cursor}, headers=_auth(api_key), timeout=5)
    assert r.status_code == 400 and r.headers["Content-Type"] == PROBLEM


@pytest.mark.parametrize("method, suffix", [("GET", ""), ("POST", "/cancel")])
def test_correlation_id_no_task_can_have_is_404(pair_stack: Stack, method: str, suffix: str) -> None:
    """A NUL byte in the path would make PostgreSQL refuse the lookup; such an id is simply unknown."""
    api_key, _, _ = pair_stack.new_client()
    r = requests.request(method, f"{pair_stack.web.url}/api/v1/tasks/a%00b{suffix}", headers=_auth(api_key), timeout=5)
    assert r.status_code == 404 and r.headers["Content-Type"] == PROBLEM


def _admin(
    stack: Stack,
    method: str,
    path: str,
    *,
    body: bytes | None = None,
    content_type: str = "application/json",
    params: dict[str, str] | None = None,
) -> requests.Response:
    headers = {"Authorization": f"Bearer {stack.settings.admin_token}", "Content-Type": content_type}
    return requests.request(
        method, f"{stack.web.url}/admin/v1{path}", data=body, params=params, headers=headers, timeout=10
    )


BEYOND_BIGINT = str(10**30)


@pytest.mark.parametrize(
    "method, path",
    [
        ("GET", "/dead-letters/{}"),
        ("POST", "/dead-letters/{}/replay"),
        ("POST", "/dead-letters/{}/discard"),
        ("POST", "/incidents/{}/assign"),
        ("POST", "/incidents/{}/resolve"),
        ("POST", "/orphans/{}/attach"),
        ("POST", "/orphans/{}/discard"),
    ],
)
def test_admin_ids_beyond_a_database_integer_are_404(pair_stack: Stack, method: str, path: str) -> None:
    body = b'{"owner": "me", "correlation_id": "c"}' if method == "POST" else None
    r = _admin(pair_stack, method, path.format(BEYOND_BIGINT), body=body)
    assert r.status_code == 404 and r.headers["Content-Type"] == PROBLEM


@pytest.mark.parametrize(
    "path",
    [
        "/dead-letters/replay",
        "/incidents/1/assign",
        "/incidents/1/resolve",
        "/callback-endpoints/enable",
        "/orphans/1/attach",
    ],
)
@pytest.mark.parametrize("body", [b"[]", b'["http://x"]', b'"text"', b"5", b"null"])
def test_admin_body_that_is_not_an_object_is_422(pair_stack: Stack, path: str, body: bytes) -> None:
    r = _admin(pair_stack, "POST", path, body=body)
    assert r.status_code == 422 and r.headers["Content-Type"] == PROBLEM
    assert r.json()["detail"] == "the body must be a JSON object"


@pytest.mark.parametrize(
    "method, path, kwargs, status, field",
    [
        pytest.param(
            "POST",
            "/dead-letters/replay",
            {"body": b'{"provider": ["sim"]}'},
            422,
            "provider",
            id="provider-not-a-string",
        ),
        pytest.param("GET", "/dead-letters", {"params": {"provider": "a\x00b"}}, 422, "provider", id="provider-nul"),
        pytest.param("GET", "/incidents", {"params": {"kind": "a\x00b"}}, 422, "kind", id="kind-nul"),
        pytest.param(
            "POST",
            "/callback-endpoints/enable",
            {"body": b'{"url": "http://[::1/x"}'},
            422,
            "url",
            id="broken-ipv6-url",
        ),
        pytest.param("POST", "/dead-letters/replay", {"body": b'{"limit": NaN}'}, 400, None, id="NaN"),
        pytest.param("POST", "/dead-letters/replay", {"body": b'{"limit": 1e400}'}, 400, None, id="overflows-to-inf"),
        pytest.param(
            "POST",
            "/dead-letters/replay",
            {"body": b'{"limit": ' + b"9" * 5000 + b"}"},
            400,
            None,
            id="int-past-4300-digits",
        ),
        pytest.param("POST", "/incidents/1/assign", {"body": b'{"owner": "\\ud800"}'}, 400, None, id="lone-surrogate"),
        pytest.param("POST", "/orphans/1/attach", {"body": b'{"correlation_id": "a\\u0000"}'}, 400, None, id="nul"),
        pytest.param("POST", "/dead-letters/replay", {"body": b"[" * 100_000}, 422, "body", id="nested-too-deeply"),
        pytest.param(
            "POST", "/incidents/1/resolve", {"body": b"note=x", "content_type": "text/plain"}, 415, None, id="not-json"
        ),
    ],
)
def test_admin_malformed_input_is_a_4xx_problem(
    pair_stack: Stack, method: str, path: str, kwargs: dict[str, Any], status: int, field: str | None
) -> None:
    r = _admin(pair_stack, method, path, **kwargs)
    assert r.status_code == status, r.text
    assert r.headers["Content-Type"] == PROBLEM
    if field:
        assert [e["field"] for e in r.json()["errors"]] == [field]
