"""Failure handling on real services: classified retries with backoff, dead letters with fault,
incidents, replay with the original idempotency key, relay retries and 410 Gone."""

from __future__ import annotations

import time
import uuid
from datetime import datetime

from tests.integration.stack import Stack


def _at(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_vendor_down_then_up_retries_with_growing_delays(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"backoff-{uuid.uuid4().hex[:8]}"
    assert (
        pair_stack.submit(
            api_key, {"correlation_id": cid, "input": {"simulate": {"transient_failures": 3}}}
        ).status_code
        == 202
    )
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "succeeded" and body["retrying"] is False
    failures = [e for e in body["timeline"] if e["kind"] == "submit.attempt_failed"]
    assert [e["detail"]["attempt"] for e in failures] == [1, 2, 3]
    # Test policy: base 0.2 s, factor 2, ±20 % jitter → nominal 0.2, 0.4, 0.8: each wait longer than the last.
    waits = [(_at(e["detail"]["next_attempt_at"]) - _at(e["at"])).total_seconds() for e in failures]
    assert 0.16 <= waits[0] <= 0.24 and waits[0] < waits[1] < waits[2] <= 1.0, waits


def test_retry_after_is_honoured(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"retry-after-{uuid.uuid4().hex[:8]}"
    simulate = {"transient_failures": 1, "transient_status": 429, "retry_after": 1}
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}}).status_code == 202
    body = pair_stack.wait_for_task(api_key, cid)
    failure = next(e for e in body["timeline"] if e["kind"] == "submit.attempt_failed")
    assert "429" in failure["detail"]["error"]
    assert (_at(failure["detail"]["next_attempt_at"]) - _at(failure["at"])).total_seconds() >= 1.0


def test_a_retry_after_past_the_cap_is_not_retried_but_dead_lettered(pair_stack: Stack) -> None:
    """Waiting less would ignore the vendor, waiting longer would break the cap (2 s in tests)."""
    api_key, _, _ = pair_stack.new_client()
    cid = f"retry-after-cap-{uuid.uuid4().hex[:8]}"
    simulate = {"transient_failures": 1, "transient_status": 429, "retry_after": 30}
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}}).status_code == 202
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "failed" and body["outcome"]["fault"] == "system"
    assert "Retry-After (30s) is past the retry cap (2s)" in body["outcome"]["error"]
    assert "submit.attempt_failed" not in [e["kind"] for e in body["timeline"]]


def test_permanent_rejection_is_a_caller_dead_letter_at_once(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"caller-{uuid.uuid4().hex[:8]}"
    assert (
        pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"reject": True}}}).status_code == 202
    )
    body = pair_stack.wait_for_task(api_key, cid)
    assert body["state"] == "failed" and body["attempts"] == 1
    letters = pair_stack.admin(
        "GET", "/dead-letters", params={"kind": "submit", "fault": "caller", "limit": 500}
    ).json()["items"]
    letter = next(d for d in letters if d["correlation_id"] == cid)
    assert letter["attempts"] == 1 and "422" in letter["error"] and letter["provider"] == "sim"
    assert body["outcome"]["dead_letter_id"] == letter["id"]
    # the vendor's answer is kept with the letter for the operator, not put in what the client reads
    assert "simulated permanent rejection (reject)" in letter["answer"]
    assert "simulated permanent rejection" not in body["outcome"]["error"]
    # the caller's fault opens no incident: the dead-letter list is where it is seen
    incidents = pair_stack.admin("GET", "/incidents", params={"kind": "submit_failed", "limit": 500}).json()["items"]
    assert not any(i["correlation_id"] == cid for i in incidents)
    completed = pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)
    assert [r.json()["state"] for r in completed if r.path == path] == ["failed"]


def test_vendor_down_for_good_then_replay_completes_with_the_same_idempotency_key(
    pair_stack: Stack, vendor_down: None
) -> None:
    api_key, _, path = pair_stack.new_client()
    cid = f"down-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"}).status_code == 202
    failed = pair_stack.wait_for_task(api_key, cid)
    assert failed["state"] == "failed" and failed["outcome"]["fault"] == "system"
    assert failed["attempts"] == 6  # the test policy's max_attempts (5 Celery retries: past its default of 3)
    letter_id = failed["outcome"]["dead_letter_id"]
    letter = pair_stack.admin("GET", f"/dead-letters/{letter_id}").json()
    assert letter["fault"] == "system" and letter["kind"] == "submit" and letter["attempts"] == 6
    incidents = pair_stack.admin("GET", "/incidents", params={"kind": "submit_failed", "limit": 500}).json()["items"]
    assert any(i["correlation_id"] == cid for i in incidents)
    pair_stack.callbacks.wait_for(lambda reqs: any(r.path == path for r in reqs), timeout=10)

    pair_stack.vendor("POST", "/_sim/config", json={})  # the vendor is back
    assert pair_stack.admin("POST", f"/dead-letters/{letter_id}/replay").status_code == 202
    assert pair_stack.admin("POST", f"/dead-letters/{letter_id}/replay").status_code == 409  # once
    done = pair_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "succeeded")
    assert "submit.replayed" in [e["kind"] for e in done["timeline"]]
    ref = pair_stack.reference(cid)
    job = next(j for j in pair_stack.vendor("GET", "/_sim/jobs").json()["jobs"] if j["reference"] == ref)
    assert job["idempotency_key"] == ref  # the vendor reference, globally unique, stable across the replay
    assert pair_stack.vendor("GET", "/_sim/jobs").json()["submit_attempts"][ref] == 7
    open_now = pair_stack.admin("GET", "/incidents", params={"kind": "submit_failed", "limit": 500}).json()["items"]
    assert not any(i["correlation_id"] == cid for i in open_now)  # resolved by the replay, kept in history
    history = pair_stack.admin(
        "GET", "/incidents", params={"kind": "submit_failed", "state": "resolved", "limit": 500}
    ).json()
    assert any(i["correlation_id"] == cid for i in history["items"])
    types = lambda: [(r.json()["type"], r.json()["state"]) for r in pair_stack.callbacks.posts_to(path)]  # noqa: E731
    pair_stack.callbacks.wait_for(lambda _: ("task.completed", "succeeded") in types(), timeout=10)
    assert types()[0] == ("task.completed", "failed")


def test_an_uncertain_submit_is_settled_by_find_and_never_sent_twice(pair_stack: Stack) -> None:
    """The vendor creates the job, then answers after our read timeout (2 s here): we cannot know
    whether it has the job, so we ask ``find(correlation_id)`` before anything else."""
    api_key, _, _ = pair_stack.new_client()
    cid = f"uncertain-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": {"slow_s": 3}}}).status_code == 202
    done = pair_stack.wait_for_task(api_key, cid)
    assert done["state"] == "succeeded"
    assert "submit.attempt_failed" not in [e["kind"] for e in done["timeline"]]
    ref = pair_stack.reference(cid)
    jobs = [j for j in pair_stack.vendor("GET", "/_sim/jobs").json()["jobs"] if j["reference"] == ref]
    assert [j["submit_attempts"] for j in jobs] == [1]  # one POST /jobs, settled by a GET /jobs?reference=


def test_callback_5xx_then_2xx_is_delivered_once(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    pair_stack.callbacks.set_status(path, [500, 503, 204])
    cid = f"relay-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"drop": ["job.accepted"]}}}
    assert pair_stack.submit(api_key, body).status_code == 202
    pair_stack.callbacks.wait_for(lambda reqs: len([r for r in reqs if r.path == path]) == 3, timeout=15)
    time.sleep(1.0)  # any further attempt (there must be none) would arrive by now
    posts = pair_stack.callbacks.posts_to(path)
    assert [r.status for r in posts] == [500, 503, 204]
    assert len({r.headers["webhook-id"] for r in posts}) == 1  # the same message every time
    kinds = [e["kind"] for e in pair_stack.get(api_key, cid)["timeline"]]
    assert kinds.count("relay.attempt_failed") == 2 and kinds.count("relay.delivered") == 1


def test_a_delivered_retry_no_longer_shows_the_task_as_retrying(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    pair_stack.callbacks.set_status(path, [500, 204])
    cid = f"relay-settled-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 60}}}  # stays accepted
    assert pair_stack.submit(api_key, body).status_code == 202
    retrying = pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"])
    assert retrying["state"] == "accepted" and "500" in retrying["last_error"]
    pair_stack.wait_for_task(
        api_key, cid, until=lambda b: "relay.delivered" in [e["kind"] for e in b["timeline"]], timeout=15
    )
    # Read again: one GET reads the task row before its timeline, each statement seeing what was
    # committed when it ran, so the answer that first shows the delivery may predate it in the row.
    done = pair_stack.get(api_key, cid)
    assert done["state"] == "accepted"
    assert (done["retrying"], done["last_error"], done["next_attempt_at"]) == (False, None, None)
    listed = pair_stack.admin("GET", "/tasks", params={"retrying": "true", "limit": 500}).json()["items"]
    assert cid not in [t["correlation_id"] for t in listed]


def test_410_disables_the_endpoint_nothing_is_lost_and_reenabling_delivers(pair_stack: Stack) -> None:
    api_key, _, path = pair_stack.new_client()
    url = pair_stack.callback_server.url + path
    pair_stack.callbacks.set_status(path, 410)
    cid = f"gone-{uuid.uuid4().hex[:8]}"
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": "x"}).status_code == 202
    body = pair_stack.wait_for_task(
        api_key, cid, until=lambda b: [e["kind"] for e in b["timeline"]].count("relay.parked") == 2
    )
    assert body["state"] == "succeeded"
    assert len(pair_stack.callbacks.posts_to(path)) == 1  # one 410, then no more calls
    endpoints = pair_stack.admin("GET", "/callback-endpoints").json()["items"]
    assert any(e["url"] == url for e in endpoints)
    incidents = pair_stack.admin(
        "GET", "/incidents", params={"kind": "callback_endpoint_disabled", "limit": 500}
    ).json()["items"]
    assert any(url in i["detail"] for i in incidents)

    pair_stack.callbacks.set_status(path, 204)
    released = pair_stack.admin("POST", "/callback-endpoints/enable", json={"url": url})
    assert released.status_code == 202 and released.json()["released"] == 2
    pair_stack.callbacks.wait_for(
        lambda reqs: len([r for r in reqs if r.path == path and r.status == 204]) == 2, timeout=10
    )
    delivered = sorted(r.json()["type"] for r in pair_stack.callbacks.posts_to(path) if r.status == 204)
    assert delivered == ["task.accepted", "task.completed"]
    assert not any(e["url"] == url for e in pair_stack.admin("GET", "/callback-endpoints").json()["items"])


def test_retrying_tasks_are_visible(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cid = f"visible-{uuid.uuid4().hex[:8]}"
    simulate = {"transient_failures": 1, "retry_after": 2}
    assert pair_stack.submit(api_key, {"correlation_id": cid, "input": {"simulate": simulate}}).status_code == 202
    body = pair_stack.wait_for_task(api_key, cid, until=lambda b: b["retrying"], timeout=10)
    assert body["state"] == "requested" and "503" in body["last_error"] and body["next_attempt_at"]
    listed = pair_stack.admin("GET", "/tasks", params={"retrying": "true", "limit": 500}).json()["items"]
    assert cid in [t["correlation_id"] for t in listed]
    assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"


def test_admin_api_needs_the_admin_token(pair_stack: Stack) -> None:
    import requests

    url = f"{pair_stack.web.url}/admin/v1/dead-letters"
    assert requests.get(url, timeout=5).status_code == 401
    assert requests.get(url, headers={"Authorization": "Bearer nope"}, timeout=5).status_code == 401
    assert pair_stack.admin("GET", "/dead-letters", params={"fault": "nobody"}).status_code == 422
    assert pair_stack.admin("POST", "/dead-letters/999999999/replay").status_code == 404
