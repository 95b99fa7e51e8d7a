"""Every operator command against a real database (and, where it acts, the real worker and vendor)."""

from __future__ import annotations

import json
import re
import time
import uuid

import requests
from click.testing import Result

from service import credentials
from tests.integration import due_work
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event
from webhooks.signing import verify


def run(stack: Stack, *args: str) -> Result:
    result = stack.app.test_cli_runner().invoke(args=["liaison", *args])
    assert result.exit_code == 0, f"{args}: {result.output}"
    return result


def fails(stack: Stack, *args: str) -> str:
    result = stack.app.test_cli_runner().invoke(args=["liaison", *args])
    assert result.exit_code != 0, f"{args} should fail: {result.output}"
    return result.output


def test_clients_commands(pair_stack: Stack) -> None:
    name = f"cli-{uuid.uuid4().hex[:8]}"
    created = json.loads(
        run(pair_stack, "clients", "create", name, "--callback-url", "https://shop.example/cb", "--json").output
    )
    listed = run(pair_stack, "clients", "list").output
    assert name in listed and "CALLBACK_URL" in listed and created["callback_secret"] not in listed
    assert "exists already" in fails(pair_stack, "clients", "create", name)
    for internal in (
        "http://127.0.0.1:9/cb",
        "http://0x7f.1:9/cb",
        "http://localhost:9/cb",
        "http://u:p@shop.example/cb",
    ):
        assert "refused by the outbound guard" in fails(
            pair_stack, "clients", "create", name + "-x", "--callback-url", internal
        )
    assert "no client named" in fails(pair_stack, "clients", "add-secret", "nobody-" + name)
    assert "no such command" in fails(pair_stack, "clients", "rotate-secret", name).lower()


def test_clients_secret_commands_keep_the_newest(pair_stack: Stack) -> None:
    """add-secret, then retire-secrets keeps the one just added (rotate-secret --drop-old made a
    third secret and dropped it)."""
    api_key, first, path = pair_stack.new_client()
    name = pair_stack.client_name(api_key)
    added = json.loads(run(pair_stack, "clients", "add-secret", name, "--json").output)
    assert added["secrets"] == 2 and added["callback_secret"] != first
    assert json.loads(run(pair_stack, "clients", "retire-secrets", name, "--json").output) == {
        "name": name,
        "retired": 1,
        "secrets": 1,
    }
    with pair_stack.db.transaction() as session:
        assert credentials.find_client(session, name).callback_secrets == [added["callback_secret"]]
    cid = f"cli-secret-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    reqs = pair_stack.callbacks.wait_for(
        lambda rs: any(r.path == path and r.json()["correlation_id"] == cid for r in rs), timeout=20
    )
    callback = next(r for r in reqs if r.path == path and r.json()["correlation_id"] == cid)
    verify([added["callback_secret"]], callback.headers, callback.body, time.time())
    assert "secret(s)" in run(pair_stack, "clients", "add-secret", name).output
    assert "retired 1" in run(pair_stack, "clients", "retire-secrets", name).output


def test_clients_key_commands(pair_stack: Stack) -> None:
    old, _, _ = pair_stack.new_client()
    name = pair_stack.client_name(old)
    rotated = json.loads(run(pair_stack, "clients", "rotate-key", name, "--json").output)
    new = rotated["api_key"]
    assert rotated["live_keys"] == 2 and new.startswith(rotated["key"]["prefix"])
    assert _status(pair_stack, old) == _status(pair_stack, new) == 200  # the overlap
    keys = run(pair_stack, "clients", "keys", name).output
    assert rotated["key"]["prefix"] in keys and new not in keys and old not in keys

    retired = json.loads(run(pair_stack, "clients", "retire-keys", name, "--json").output)["retired"]
    assert [k["state"] for k in retired] == ["retired"]
    assert (_status(pair_stack, old), _status(pair_stack, new)) == (401, 200)

    newer = json.loads(run(pair_stack, "clients", "rotate-key", name, "--json").output)
    assert "revoked key" in run(pair_stack, "clients", "revoke-key", name, newer["key"]["prefix"]).output
    assert _status(pair_stack, newer["api_key"]) == 401 and _status(pair_stack, new) == 200
    revoked = json.loads(run(pair_stack, "clients", "revoke-key", name, str(rotated["key"]["id"]), "--json").output)
    assert revoked["key"]["state"] == "revoked" and revoked["live_keys"] == 0
    assert _status(pair_stack, new) == 401
    assert "has no key" in fails(pair_stack, "clients", "revoke-key", name, "lk_zzzzzzz")
    states = [k["state"] for k in json.loads(run(pair_stack, "clients", "keys", name, "--json").output)]
    assert sorted(states) == ["retired", "revoked", "revoked"]


def test_clients_disable_enable_and_origins(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    name = pair_stack.client_name(api_key)
    assert "disabled" in run(pair_stack, "clients", "disable", name).output
    assert _status(pair_stack, api_key) == 403
    assert json.loads(run(pair_stack, "clients", "enable", name, "--json").output) == {"name": name, "disabled": False}
    assert _status(pair_stack, api_key) == 200

    ours = pair_stack.callback_server.url
    assert "not restricted" in run(pair_stack, "clients", "origins", name).output
    assert "default callback_url" in fails(pair_stack, "clients", "origins", name, "--add", "https://elsewhere.example")
    assert json.loads(
        run(pair_stack, "clients", "origins", name, "--add", ours.upper().replace("HTTP:", "http:"), "--json").output
    )["origins"] == [ours]
    assert run(pair_stack, "clients", "origins", name).output.strip() == ours
    assert pair_stack.submit(api_key, {"input": "x", "callback_url": "http://127.0.0.2:9/cb"}).status_code == 422
    assert pair_stack.submit(api_key, {"input": "x", "callback_url": ours + path}).status_code == 202
    assert "http(s)://host" in fails(pair_stack, "clients", "origins", name, "--add", "https://x.example/path")
    created = f"cli-origins-{uuid.uuid4().hex[:8]}"
    assert "default callback_url" in fails(
        pair_stack,
        "clients",
        "create",
        created,
        "--callback-url",
        "https://shop.example/cb",
        "--origin",
        "https://other.example",
    )
    run(
        pair_stack,
        "clients",
        "create",
        created,
        "--callback-url",
        "https://shop.example/cb",
        "--origin",
        "https://shop.example",
    )
    assert "https://shop.example" in run(pair_stack, "clients", "origins", created).output


def _status(stack: Stack, api_key: str) -> int:
    return requests.get(
        f"{stack.web.url}/api/v1/tasks", headers={"Authorization": f"Bearer {api_key}"}, timeout=10
    ).status_code


def test_task_commands(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"cli-task-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(
        api_key, {"correlation_id": cid, "input": {"simulate": {"transient_failures": 1, "retry_after": 2}}}
    )
    pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    assert cid in run(pair_stack, "tasks", "retrying").output
    pair_stack.wait_for_task(api_key, cid)
    shown = run(pair_stack, "tasks", "show", cid).output
    assert "submit.attempt_failed" in shown and "state.succeeded" in shown
    assert json.loads(run(pair_stack, "tasks", "show", cid, "--json").output)["state"] == "succeeded"
    assert cid in run(pair_stack, "tasks", "list", "--state", "succeeded", "--limit", "500").output
    assert "no task" in fails(pair_stack, "tasks", "show", "nope-" + cid)


def test_dead_letter_and_incident_commands(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    letters = []
    for _ in range(3):
        cid = f"cli-dl-{uuid.uuid4().hex[:8]}"
        pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"reject": True}}})
        letters.append(pair_stack.wait_for_task(api_key, cid)["outcome"]["dead_letter_id"])
    first, second, third = letters
    listed = json.loads(
        run(
            pair_stack, "dead-letters", "list", "--kind", "submit", "--fault", "caller", "--limit", "10000", "--json"
        ).output
    )
    assert set(letters) <= {d["id"] for d in listed}
    assert "caller" in run(pair_stack, "dead-letters", "show", str(first)).output
    assert "replayed" in run(pair_stack, "dead-letters", "replay", str(first)).output
    assert "is replayed" in fails(pair_stack, "dead-letters", "replay", str(first))
    run(pair_stack, "dead-letters", "discard", str(second))
    broad = run(pair_stack, "dead-letters", "replay-many", "--kind", "submit", "--provider", "nobody", "--yes")
    assert "replayed 0 dead letters" in broad.output
    many = run(pair_stack, "dead-letters", "replay-many", "--kind", "submit", "--fault", "caller", "--yes")
    assert "replayed" in many.output and "so far" in many.output  # progress, then the total
    assert re.search(r"warning: \d+ matching dead letters are the caller's fault", many.output)
    assert json.loads(run(pair_stack, "dead-letters", "show", str(third), "--json").output)["state"] == "replayed"
    assert json.loads(run(pair_stack, "dead-letters", "show", str(second), "--json").output)["state"] == "discarded"

    # an incident: the system's fault (the vendor down for good), as a caller's opens none
    cid = f"cli-inc-{uuid.uuid4().hex[:8]}"
    assert pair_stack.vendor("POST", "/_sim/config", json={"down": True}).status_code == 200
    try:
        pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
        assert pair_stack.wait_for_task(api_key, cid)["outcome"]["fault"] == "system"
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})
    incidents = json.loads(
        run(pair_stack, "incidents", "list", "--kind", "submit_failed", "--limit", "10000", "--json").output
    )
    incident = next(i["id"] for i in incidents if i["correlation_id"] == cid)
    assert "assigned to ops-anna" in run(pair_stack, "incidents", "assign", str(incident), "ops-anna").output
    run(pair_stack, "incidents", "resolve", str(incident), "--note", "vendor fixed their validation")
    resolved = json.loads(
        run(pair_stack, "incidents", "list", "--state", "resolved", "--limit", "10000", "--json").output
    )
    mine = next(i for i in resolved if i["id"] == incident)
    assert mine["owner"] == "ops-anna" and "vendor fixed" in mine["detail"]


def test_endpoint_commands(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    url = pair_stack.callback_server.url + path
    pair_stack.callbacks.set_status(path, 410)
    cid = f"cli-gone-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(
        api_key, cid, until=lambda b: [e["kind"] for e in b["timeline"]].count("relay.parked") == 2
    )
    assert url in run(pair_stack, "endpoints", "list").output
    pair_stack.callbacks.set_status(path, 204)
    assert "2 waiting relays released" in run(pair_stack, "endpoints", "enable", url).output
    pair_stack.callbacks.wait_for(
        lambda reqs: len([r for r in reqs if r.path == path and r.status == 204]) == 2, timeout=10
    )
    assert "not disabled" in fails(pair_stack, "endpoints", "enable", url)


def test_orphan_commands(pair_stack: Stack, vendor_secret: str) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid, _ = pair_stack.unpublished_task(api_key, {"input": "adopt me"})
    job_id = f"job_{uuid.uuid4().hex}"
    post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id})
    post_event(pair_stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": f"job_{uuid.uuid4().hex}"})
    orphans = json.loads(run(pair_stack, "orphans", "list", "--limit", "10000", "--json").output)
    adopt = next(o["id"] for o in orphans if o["vendor_job_id"] == job_id)
    stray = next(o["id"] for o in orphans if o["vendor_job_id"] != job_id)
    assert "applied" in run(pair_stack, "orphans", "attach", str(adopt), cid).output
    assert pair_stack.get(api_key, cid)["state"] == "accepted"
    run(pair_stack, "orphans", "discard", str(stray))
    assert "is discarded" in fails(pair_stack, "orphans", "discard", str(stray))
    assert "job.accepted" in run(pair_stack, "orphans", "list", "--state", "all", "--limit", "10000").output


def test_maintenance_commands_do_their_work(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    overdue, lost, quiet = (
        due_work.overdue_task(pair_stack, api_key),
        due_work.lost_submit(pair_stack, api_key),
        due_work.quiet_finished_task(pair_stack, api_key),
    )
    old = due_work.old_processed_message(pair_stack)
    assert "latest migration" in run(pair_stack, "db", "upgrade").output

    assert json.loads(run(pair_stack, "sweep-outbox", "--json").output)["published"] >= 1
    assert pair_stack.wait_for_task(api_key, lost)["state"] == "succeeded"
    assert json.loads(run(pair_stack, "prune", "--json").stdout)["removed"]["processed_messages"] >= 1
    assert not due_work.processed_message_exists(pair_stack, *old)
    assert json.loads(run(pair_stack, "check-deadlines", "--json").stdout)["escalated"] >= 1
    assert "deadline.exceeded" in [e["kind"] for e in pair_stack.get(api_key, overdue)["timeline"]]
    report = json.loads(run(pair_stack, "reconcile", "--json").output)
    assert report["checked"] >= 1 and report["skipped"] == []
    assert pair_stack.wait_for_task(api_key, quiet)["outcome"] == {"quiet": True}
    assert "checked" in run(pair_stack, "reconcile").output  # the table form


def test_demo_command(pair_stack: Stack) -> None:
    result = run(
        pair_stack,
        "demo",
        "--web-url",
        pair_stack.web.url,
        "--vendor-url",
        pair_stack.vendor_url,
        "--timeout",
        "60",
        "--callback-port",
        str(pair_stack.spare_port),
    )
    assert "demo finished: 7/7 tasks final" in result.output
