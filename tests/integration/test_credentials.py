"""Credential lifecycle on the real stack: API keys rotate with an overlap, are retired and revoked;
a disabled client is refused but its work in flight finishes; callback secrets rotate; callback
origins restrict where callbacks may go. Operated through the admin API (the CLI: test_cli.py)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import requests

from tests.integration.stack import Stack
from webhooks.signing import SignatureError, verify


def _status(stack: Stack, api_key: str, correlation_id: str = "no-such-task") -> int:
    return requests.get(
        f"{stack.web.url}/api/v1/tasks/{correlation_id}", headers={"Authorization": f"Bearer {api_key}"}, timeout=10
    ).status_code


def _job_id(stack: Stack, correlation_id: str) -> str:
    return stack.vendor("GET", f"/jobs?reference={stack.reference(correlation_id)}").json()["jobs"][0]["job_id"]


def _completed(stack: Stack, path: str, correlation_id: str) -> Any:
    """The task.completed callback for ``correlation_id`` on ``path``, once it has arrived."""
    reqs = stack.callbacks.wait_for(
        lambda rs: any(
            r.path == path and r.json()["type"] == "task.completed" and r.json()["correlation_id"] == correlation_id
            for r in rs
        ),
        timeout=20,
        message=f"task.completed for {correlation_id}",
    )
    return next(
        r
        for r in reqs
        if r.path == path and r.json()["type"] == "task.completed" and r.json()["correlation_id"] == correlation_id
    )


def test_api_keys_rotate_with_an_overlap_then_the_old_one_is_retired(pair_stack: Stack) -> None:
    old, _, _ = pair_stack.new_client()
    name = pair_stack.client_name(old)
    rotated = pair_stack.admin("POST", f"/clients/{name}/keys")
    assert rotated.status_code == 201 and rotated.headers["Cache-Control"] == "no-store"
    new = rotated.json()["api_key"]
    assert new != old and new.startswith(rotated.json()["key"]["prefix"])

    # the overlap: both keys act for the same client
    cid = f"rotate-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(old, {"correlation_id": cid, "input": "by the old key"}).status_code == 202
    assert pair_stack.get(new, cid)["correlation_id"] == cid
    shown = pair_stack.admin("GET", f"/clients/{name}").json()
    assert [k["state"] for k in shown["keys"]] == ["active", "active"]
    assert old not in str(shown) and new not in str(shown)  # never a key, only prefixes

    retired = pair_stack.admin("POST", f"/clients/{name}/keys/retire").json()["retired"]
    assert len(retired) == 1 and retired[0]["state"] == "retired"
    assert _status(pair_stack, old, cid) == 401
    assert _status(pair_stack, new, cid) == 200
    assert pair_stack.admin("POST", f"/clients/{name}/keys/retire").json()["retired"] == []  # the newest stays


def test_a_revoked_key_is_refused_at_once(pair_stack: Stack) -> None:
    first, _, _ = pair_stack.new_client()
    name = pair_stack.client_name(first)
    second = pair_stack.admin("POST", f"/clients/{name}/keys").json()
    assert _status(pair_stack, second["api_key"]) == 404  # authenticated: the task is what is missing
    revoked = pair_stack.admin("POST", f"/clients/{name}/keys/{second['key']['prefix']}/revoke")
    assert revoked.status_code == 200 and revoked.json()["state"] == "revoked"
    refused = requests.get(
        f"{pair_stack.web.url}/api/v1/tasks", headers={"Authorization": f"Bearer {second['api_key']}"}, timeout=10
    )
    assert refused.status_code == 401 and refused.headers["Content-Type"] == "application/problem+json"
    assert _status(pair_stack, first) == 404  # the other key is untouched
    by_id = pair_stack.admin("GET", f"/clients/{name}").json()["keys"][-1]["id"]
    assert pair_stack.admin("POST", f"/clients/{name}/keys/{by_id}/revoke").json()["state"] == "revoked"
    assert _status(pair_stack, first) == 401
    assert pair_stack.admin("POST", f"/clients/{name}/keys/lk_nope/revoke").status_code == 404
    assert pair_stack.admin("POST", f"/clients/nobody-{uuid.uuid4().hex[:6]}/keys").status_code == 404


def test_a_disabled_client_is_refused_but_its_tasks_in_flight_finish_and_relay(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    name = pair_stack.client_name(api_key)
    cid = f"disabled-{uuid.uuid4().hex[:8]}"
    # it would finish by itself in 60 s: the test finishes it at the vendor once the client is disabled
    assert (
        pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 60}}}).status_code
        == 202
    )
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted")

    assert pair_stack.admin("POST", f"/clients/{name}/disable").json()["disabled"] is True
    auth = {"Authorization": f"Bearer {api_key}"}
    refused = [
        pair_stack.submit(api_key, {"correlation_id": cid + "-2", "input": "refused"}),
        requests.get(f"{pair_stack.web.url}/api/v1/tasks/{cid}", headers=auth, timeout=10),
        requests.get(f"{pair_stack.web.url}/api/v1/tasks", headers=auth, timeout=10),
        requests.post(f"{pair_stack.web.url}/api/v1/tasks/{cid}/cancel", headers=auth, json={}, timeout=10),
    ]
    for response in refused:
        assert response.status_code == 403, response.text
        assert response.headers["Content-Type"] == "application/problem+json"
        assert "disabled" in response.json()["detail"]

    pair_stack.vendor(
        "POST",
        f"/_sim/jobs/{_job_id(pair_stack, cid)}/complete",
        json={"status": "succeeded", "outcome": {"while": "disabled"}},
    )
    callback = _completed(pair_stack, path, cid).json()
    assert callback["state"] == "succeeded" and callback["outcome"] == {"while": "disabled"}

    assert pair_stack.admin("POST", f"/clients/{name}/enable").json()["disabled"] is False
    assert pair_stack.get(api_key, cid)["state"] == "succeeded"
    assert pair_stack.submit(api_key, {"correlation_id": cid + "-2", "input": "accepted again"}).status_code == 202


def test_a_callback_verifies_with_the_new_secret_after_the_old_ones_are_retired(pair_stack: Stack) -> None:
    api_key, first_secret, path = pair_stack.new_client()
    name = pair_stack.client_name(api_key)
    added = pair_stack.admin("POST", f"/clients/{name}/secrets")
    assert added.status_code == 201 and added.json()["secrets"] == 2
    new_secret = added.json()["callback_secret"]
    assert added.headers["Cache-Control"] == "no-store"

    during = f"secret-overlap-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": during, "input": "while both sign"})
    callback = _completed(pair_stack, path, during)
    for secret in (first_secret, new_secret):  # the domain app may verify with either while it switches
        verify([secret], callback.headers, callback.body, time.time())

    assert pair_stack.admin("POST", f"/clients/{name}/secrets/retire").json() == {"retired": 1, "secrets": 1}
    after = f"secret-retired-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": after, "input": "after the old ones are retired"})
    callback = _completed(pair_stack, path, after)
    verify([new_secret], callback.headers, callback.body, time.time())
    with pytest.raises(SignatureError):
        verify([first_secret], callback.headers, callback.body, time.time())
    assert callback.headers["webhook-signature"].count("v1,") == 1


def test_callback_urls_outside_the_clients_origins_are_refused(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    name = pair_stack.client_name(api_key)
    ours = pair_stack.callback_server.url  # http://127.0.0.1:PORT, where the default callback_url is
    elsewhere = f"http://127.0.0.1:{pair_stack.spare_port}"  # another port the outbound guard allows

    # no origins: no restriction
    assert pair_stack.submit(api_key, {"input": "x", "callback_url": elsewhere + "/cb"}).status_code == 202

    # the default callback_url must stay within the origins
    refused = pair_stack.admin("POST", f"/clients/{name}/origins", json={"add": [elsewhere]})
    assert refused.status_code == 409 and "default callback_url" in refused.json()["detail"]
    assert pair_stack.admin("POST", f"/clients/{name}/origins", json={"add": ["ftp://x"]}).status_code == 422
    changed = pair_stack.admin("POST", f"/clients/{name}/origins", json={"add": [ours + "/"]})
    assert changed.status_code == 200 and changed.json() == {"origins": [ours]}
    assert pair_stack.admin("GET", f"/clients/{name}/origins").json() == {"origins": [ours]}

    for url in (elsewhere + "/cb", ours.replace("http:", "https:") + "/cb", f"http://user@{ours[7:]}/cb"):
        outside = pair_stack.submit(api_key, {"input": "x", "callback_url": url})
        assert outside.status_code == 422, url
        assert outside.headers["Content-Type"] == "application/problem+json"
        assert [e["field"] for e in outside.json()["errors"]] == ["callback_url"]

    cid = f"origin-in-{uuid.uuid4().hex[:8]}"
    inside = pair_stack.submit(api_key, {"correlation_id": cid, "input": "x", "callback_url": ours + path})
    assert inside.status_code == 202
    assert pair_stack.submit(api_key, {"input": "to the default callback_url"}).status_code == 202
    _completed(pair_stack, path, cid)

    both = pair_stack.admin("POST", f"/clients/{name}/origins", json={"add": [elsewhere]}).json()["origins"]
    assert both == [ours, elsewhere]
    removed = pair_stack.admin("POST", f"/clients/{name}/origins", json={"remove": [ours]})
    assert removed.status_code == 409  # the default callback_url would fall outside the rest
    # removing every origin lifts the restriction
    assert pair_stack.admin("POST", f"/clients/{name}/origins", json={"remove": [ours, elsewhere]}).json() == {
        "origins": []
    }
