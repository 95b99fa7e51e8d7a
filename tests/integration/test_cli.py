"""Every operator command against a real database (and, where it acts, the real worker and vendor)."""

from __future__ import annotations

import json
import uuid

from click.testing import Result

from tests.integration import due_work
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event


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
    created = json.loads(run(pair_stack, "clients", "create", name, "--callback-url", "http://127.0.0.1:9/cb", "--json").output)
    rotated = json.loads(run(pair_stack, "clients", "rotate-secret", name, "--json").output)
    assert rotated["secrets"] == 2 and rotated["callback_secret"] != created["callback_secret"]
    assert json.loads(run(pair_stack, "clients", "rotate-secret", name, "--drop-old", "--json").output)["secrets"] == 1
    listed = run(pair_stack, "clients", "list").output
    assert name in listed and "CALLBACK_URL" in listed and created["callback_secret"] not in listed
    assert "no client named" in fails(pair_stack, "clients", "rotate-secret", "nobody-" + name)


def test_task_commands(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"cli-task-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"transient_failures": 1, "retry_after": 2}}})
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
    listed = json.loads(run(pair_stack, "dead-letters", "list", "--kind", "submit", "--fault", "caller",
                            "--limit", "10000", "--json").output)
    assert set(letters) <= {d["id"] for d in listed}
    assert "caller" in run(pair_stack, "dead-letters", "show", str(first)).output
    assert "replayed" in run(pair_stack, "dead-letters", "replay", str(first)).output
    assert "is replayed" in fails(pair_stack, "dead-letters", "replay", str(first))
    run(pair_stack, "dead-letters", "discard", str(second))
    many = run(pair_stack, "dead-letters", "replay-many", "--kind", "submit", "--fault", "caller", "--yes")
    assert "replayed" in many.output and "so far" in many.output  # progress, then the total
    assert json.loads(run(pair_stack, "dead-letters", "show", str(third), "--json").output)["state"] == "replayed"
    assert json.loads(run(pair_stack, "dead-letters", "show", str(second), "--json").output)["state"] == "discarded"

    cid = f"cli-inc-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"reject": True}}})
    pair_stack.wait_for_task(api_key, cid)
    incidents = json.loads(run(pair_stack, "incidents", "list", "--kind", "submit_failed", "--limit", "10000", "--json").output)
    incident = next(i["id"] for i in incidents if i["correlation_id"] == cid)
    assert "assigned to ops-anna" in run(pair_stack, "incidents", "assign", str(incident), "ops-anna").output
    run(pair_stack, "incidents", "resolve", str(incident), "--note", "vendor fixed their validation")
    resolved = json.loads(run(pair_stack, "incidents", "list", "--state", "resolved", "--limit", "10000", "--json").output)
    mine = next(i for i in resolved if i["id"] == incident)
    assert mine["owner"] == "ops-anna" and "vendor fixed" in mine["detail"]


def test_endpoint_commands(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    url = pair_stack.callback_server.url + path
    pair_stack.callbacks.set_status(path, 410)
    cid = f"cli-gone-{uuid.uuid4().hex[:8]}"
    pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"})
    pair_stack.wait_for_task(api_key, cid, until=lambda b: [e["kind"] for e in b["timeline"]].count("relay.parked") == 2)
    assert url in run(pair_stack, "endpoints", "list").output
    pair_stack.callbacks.set_status(path, 204)
    assert "2 waiting relays released" in run(pair_stack, "endpoints", "enable", url).output
    pair_stack.callbacks.wait_for(lambda reqs: len([r for r in reqs if r.path == path and r.status == 204]) == 2, timeout=10)
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
    overdue, lost, quiet = (due_work.overdue_task(pair_stack, api_key), due_work.lost_submit(pair_stack, api_key),
                            due_work.quiet_finished_task(pair_stack, api_key))
    old = due_work.old_processed_message(pair_stack)
    assert "latest migration" in run(pair_stack, "db", "upgrade").output

    assert json.loads(run(pair_stack, "sweep-outbox", "--json").output)["published"] >= 1
    assert pair_stack.wait_for_task(api_key, lost)["state"] == "succeeded"
    assert json.loads(run(pair_stack, "prune", "--now", "--json").stdout)["removed"] >= 1
    assert not due_work.processed_message_exists(pair_stack, *old)
    assert json.loads(run(pair_stack, "check-deadlines", "--now", "--json").stdout)["escalated"] >= 1
    assert "deadline.exceeded" in [e["kind"] for e in pair_stack.get(api_key, overdue)["timeline"]]
    report = json.loads(run(pair_stack, "reconcile", "--now", "--json").output)
    assert report["checked"] >= 1 and report["skipped"] == []
    assert pair_stack.wait_for_task(api_key, quiet)["outcome"] == {"quiet": True}
    assert "checked" in run(pair_stack, "reconcile", "--now").output  # the table form
    fails(pair_stack, "prune")  # --now is required: nothing destructive by accident


def test_demo_command(pair_stack: Stack) -> None:
    result = run(pair_stack, "demo", "--web-url", pair_stack.web.url, "--vendor-url", pair_stack.vendor_url, "--timeout", "60",
                 "--callback-port", str(pair_stack.spare_port))
    assert "demo finished: 7/7 tasks final" in result.output
