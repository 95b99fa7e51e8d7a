"""The simulator playing other vendors, over real HTTP on loopback: each personality's API answers in
its documented shape, and its webhooks arrive signed, enveloped and addressed as that vendor's do,
checked with the vendor's own library (Stripe) and with Liaison's verifiers (``webhooks.schemes``)."""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import requests
import stripe

from simulator import create_app
from tests.support.listeners import CountingListener, LineRecorder
from tests.support.servers import CallbackRecorder, RecordedRequest, ServerThread
from webhooks import schemes
from webhooks.signing import generate_secret

pytestmark = pytest.mark.timeout(30)

STRIPE_SECRET = "whsec_" + "q7Rz2Lm9" * 4
GITHUB_SECRET = "It's a Secret to Everybody"
HOOK_PATH = "/webhooks/vendor"
FAST = {
    "SIMULATOR_ACCEPT_DELAY_S": 0.05,
    "SIMULATOR_COMPLETE_DELAY_S": 0.1,
    "SIMULATOR_WEBHOOK_TIMEOUT_S": 2,
    "SIMULATOR_RETRY_BACKOFF_S": "0.05,0.05",
}


class Sim:
    def __init__(self, url: str, recorder: CallbackRecorder, hooks_url: str) -> None:
        self.url, self.recorder, self.hooks_url = url, recorder, hooks_url

    def state(self) -> dict[str, Any]:
        return requests.get(self.url + "/_sim/jobs", timeout=5).json()

    def wait_hooks(self, count: int, path: str = HOOK_PATH) -> list[RecordedRequest]:
        self.recorder.wait_for(
            lambda _: len(self.recorder.posts_to(path)) >= count, timeout=5, message=f"{count} hooks"
        )
        return self.recorder.posts_to(path)

    def wait_deliveries(self, result: str, count: int) -> list[dict[str, Any]]:
        def found() -> list[dict[str, Any]]:
            return [d for d in self.state()["deliveries"] if d["result"] == result]

        self.recorder.wait_for(lambda _: len(found()) >= count, timeout=5, message=f"{count} {result}")
        return found()


@contextmanager
def simulator(personality: str, secret: str = "", **extra: Any) -> Iterator[Sim]:
    recorder = CallbackRecorder()
    with ServerThread(recorder) as hooks:
        config = {
            **FAST,
            "SIMULATOR_PERSONALITY": personality,
            "SIMULATOR_WEBHOOK_SECRET": secret,
            "SIMULATOR_WEBHOOK_URL": hooks.url + HOOK_PATH,
            **extra,
        }
        with ServerThread(create_app(config)) as sim:
            yield Sim(sim.url, recorder, hooks.url)
            requests.post(sim.url + "/_sim/reset", timeout=5)


# --- stripe --------------------------------------------------------------------------------------


def test_stripe_api_answers_as_stripe_does() -> None:
    with simulator("stripe", STRIPE_SECRET, SIMULATOR_ACCEPT_DELAY_S=5) as sim:
        body: dict[str, Any] = {"reference": "ref-s1", "input": {"n": 1}}
        created = requests.post(sim.url + "/v1/jobs", json=body, headers={"Idempotency-Key": "k1"}, timeout=5)
        assert created.status_code == 200 and created.headers["Request-Id"].startswith("req_")
        job = created.json()
        assert set(job) == {"id", "object", "created", "livemode", "status", "reference", "progress", "outcome"}
        assert job["id"].startswith("job_") and job["object"] == "job" and job["status"] == "queued"
        assert job["livemode"] is False and isinstance(job["created"], int) and job["reference"] == "ref-s1"

        replay = requests.post(sim.url + "/v1/jobs", json=body, headers={"Idempotency-Key": "k1"}, timeout=5)
        assert replay.status_code == 200 and replay.json() == job and replay.headers["Idempotent-Replayed"] == "true"
        assert "Idempotent-Replayed" not in created.headers
        unkeyed = requests.post(sim.url + "/v1/jobs", json=body, timeout=5).json()  # no key: a new job
        assert unkeyed["id"] != job["id"]

        assert requests.get(f"{sim.url}/v1/jobs/{job['id']}", timeout=5).json() == job
        listed = requests.get(sim.url + "/v1/jobs", params={"reference": "ref-s1"}, timeout=5).json()
        assert listed["object"] == "list" and listed["url"] == "/v1/jobs" and listed["has_more"] is False
        assert sorted(j["id"] for j in listed["data"]) == sorted([job["id"], unkeyed["id"]])

        canceled = requests.post(f"{sim.url}/v1/jobs/{job['id']}/cancel", timeout=5)
        assert canceled.status_code == 200 and canceled.json()["status"] == "canceled"
        again = requests.post(f"{sim.url}/v1/jobs/{job['id']}/cancel", timeout=5)
        assert again.status_code == 400 and again.json()["error"]["code"] == "job_unexpected_state"

        missing = requests.get(sim.url + "/v1/jobs/job_nope", timeout=5)
        assert missing.status_code == 404
        assert missing.json() == {
            "error": {
                "type": "invalid_request_error",
                "code": "resource_missing",
                "message": "No such job: 'job_nope'",
                "param": "id",
            }
        }
        bad = requests.post(sim.url + "/v1/jobs", json={"input": {}}, timeout=5).json()["error"]
        assert bad["code"] == "parameter_missing" and bad["param"] == "reference"
        flap: dict[str, Any] = {
            "reference": "r",
            "input": {"simulate": {"transient_failures": 1, "transient_status": 429}},
        }
        limited = requests.post(sim.url + "/v1/jobs", json=flap, headers={"Idempotency-Key": "k2"}, timeout=5)
        assert limited.status_code == 429 and limited.json()["error"]["type"] == "rate_limit_error"
        assert requests.get(sim.url + "/jobs/" + job["id"], timeout=5).status_code == 404  # not the liaison API


def test_stripe_webhooks_go_to_the_registered_endpoint_and_verify_with_stripes_library() -> None:
    with simulator("stripe", STRIPE_SECRET) as sim:
        knobs: dict[str, Any] = {"simulate": {"duplicate": 2, "progress": [50], "progress_interval_s": 0.01}}
        body: dict[str, Any] = {"reference": "ref-s2", "input": knobs, "callback_url": "http://127.0.0.1:9/ignored"}
        job_id = requests.post(sim.url + "/v1/jobs", json=body, timeout=5).json()["id"]
        hooks = sim.wait_hooks(6)  # processing, updated, succeeded: each twice

        events = []
        for hook in hooks:
            event = stripe.Webhook.construct_event(hook.body, hook.headers["stripe-signature"], STRIPE_SECRET)
            profile = schemes.Profile(scheme=schemes.STRIPE, secrets=(STRIPE_SECRET,))
            assert schemes.verify(profile, hook.headers, hook.body, time.time()).event_id == event.id
            assert "webhook-signature" not in hook.headers
            events.append(event)
        assert sorted({e.type for e in events}) == ["job.processing", "job.succeeded", "job.updated"]
        for kind in ("job.processing", "job.updated", "job.succeeded"):
            copies = [h for h, e in zip(hooks, events, strict=True) if e.type == kind]
            assert len(copies) == 2 and copies[0].body == copies[1].body  # one event, one id, sent twice
        done = next(e for e in events if e.type == "job.succeeded").to_dict()
        assert set(done) == {
            "id",
            "object",
            "api_version",
            "created",
            "livemode",
            "pending_webhooks",
            "request",
            "type",
            "data",
        }
        assert done["id"].startswith("evt_") and done["object"] == "event"
        assert done["data"]["object"]["id"] == job_id and done["data"]["object"]["status"] == "succeeded"
        assert done["data"]["object"]["outcome"] == {"result": "ok", "reference": "ref-s2"}
        assert next(e for e in events if e.type == "job.updated").data.object["progress"] == 50
        assert sim.recorder.posts_to("/ignored") == []


# --- github --------------------------------------------------------------------------------------


def test_github_api_answers_as_github_does() -> None:
    with simulator("github", GITHUB_SECRET, SIMULATOR_ACCEPT_DELAY_S=5) as sim:
        body: dict[str, Any] = {"external_id": "ref-g1", "input": {}}
        created = requests.post(sim.url + "/api/v3/jobs", json=body, timeout=5)
        assert created.status_code == 201
        job = created.json()
        assert isinstance(job["id"], int) and created.headers["Location"] == f"/api/v3/jobs/{job['id']}"
        assert job["node_id"].startswith("SJ_") and job["external_id"] == "ref-g1"
        assert (job["status"], job["conclusion"], job["started_at"], job["completed_at"]) == (
            "queued",
            None,
            None,
            None,
        )
        assert job["created_at"].endswith("Z")
        assert requests.get(f"{sim.url}/api/v3/jobs/{job['id']}", timeout=5).json() == job
        found = requests.get(sim.url + "/api/v3/jobs", params={"external_id": "ref-g1"}, timeout=5).json()
        assert found == {"total_count": 1, "jobs": [job]}

        cancel = requests.post(f"{sim.url}/api/v3/jobs/{job['id']}/cancel", timeout=5)
        assert cancel.status_code == 202 and cancel.json() == {}
        after = requests.get(f"{sim.url}/api/v3/jobs/{job['id']}", timeout=5).json()
        assert (after["status"], after["conclusion"]) == ("completed", "cancelled")
        conflict = requests.post(f"{sim.url}/api/v3/jobs/{job['id']}/cancel", timeout=5)
        assert conflict.status_code == 409 and conflict.json()["documentation_url"].startswith(
            "https://docs.github.com"
        )

        invalid = requests.post(sim.url + "/api/v3/jobs", json={"input": {}}, timeout=5)
        assert invalid.status_code == 422
        assert invalid.json()["errors"] == [{"resource": "Job", "field": "external_id", "code": "missing_field"}]
        assert requests.get(sim.url + "/api/v3/jobs/job_1", timeout=5).json()["message"] == "Not Found"


def test_github_webhooks_carry_githubs_headers_and_verify() -> None:
    with simulator("github", GITHUB_SECRET) as sim:
        body: dict[str, Any] = {"external_id": "ref-g2", "input": {"simulate": {"outcome": "failed"}}}
        job_id = requests.post(sim.url + "/api/v3/jobs", json=body, timeout=5).json()["id"]
        hooks = sim.wait_hooks(2)
        assert [h.json()["action"] for h in hooks] == ["in_progress", "completed"]
        for hook in hooks:
            expected = "sha256=" + hmac.new(GITHUB_SECRET.encode(), hook.body, hashlib.sha256).hexdigest()
            assert hook.headers["x-hub-signature-256"] == expected
            assert hook.headers["x-github-event"] == "job" and hook.headers["user-agent"].startswith("GitHub-Hookshot/")
            delivery = hook.headers["x-github-delivery"]
            assert str(uuid.UUID(delivery)) == delivery
            profile = schemes.Profile(scheme=schemes.GITHUB, secrets=(GITHUB_SECRET,))
            assert schemes.verify(profile, hook.headers, hook.body, time.time()).event_id == delivery
        assert hooks[0].headers["x-github-delivery"] != hooks[1].headers["x-github-delivery"]
        completed = hooks[1].json()["job"]
        assert (completed["id"], completed["status"], completed["conclusion"]) == (job_id, "completed", "failure")
        assert completed["external_id"] == "ref-g2" and completed["completed_at"] is not None


# --- poll-only -----------------------------------------------------------------------------------


def test_poll_only_sends_no_webhook_and_answers_status() -> None:
    with simulator("poll-only") as sim, CountingListener() as listener:
        body: dict[str, Any] = {"reference": "ref-p", "input": {}, "callback_url": listener.url + "/hooks"}
        submitted = requests.post(sim.url + "/jobs", json=body, headers={"Idempotency-Key": "p1"}, timeout=5)
        assert submitted.status_code == 201
        job_id = submitted.json()["job_id"]
        no_callback: dict[str, Any] = {"reference": "ref-p2", "input": {}}  # a poll-only vendor asks for none
        assert requests.post(sim.url + "/jobs", json=no_callback, headers={"Idempotency-Key": "p2"}, timeout=5).ok
        not_sent = sim.wait_deliveries("not_sent", 4)  # accepted and completed, of both jobs
        assert sorted(d["type"] for d in not_sent if d["job_id"] == job_id) == ["job.accepted", "job.completed"]
        job = requests.get(f"{sim.url}/jobs/{job_id}", timeout=5).json()
        assert job == {"job_id": job_id, "reference": "ref-p", "status": "succeeded", "outcome": job["outcome"]}
        assert listener.count == 0 and sim.recorder.requests == []  # neither the handed URL nor any other
        assert {d["result"] for d in sim.state()["deliveries"]} == {"not_sent"}


# --- token-url -----------------------------------------------------------------------------------


def test_token_url_posts_its_events_unsigned_to_the_url_it_was_handed() -> None:
    token = "T" * 43
    with simulator("token-url") as sim:
        handed = f"{sim.hooks_url}/webhooks/sim/t/{token}"
        body: dict[str, Any] = {"reference": "ref-t", "input": {}, "callback_url": handed}
        job_id = requests.post(sim.url + "/jobs", json=body, headers={"Idempotency-Key": "t1"}, timeout=5).json()[
            "job_id"
        ]
        hooks = sim.wait_hooks(2, f"/webhooks/sim/t/{token}")
        assert [h.json()["type"] for h in hooks] == ["job.accepted", "job.completed"]
        assert hooks[1].json()["job_id"] == job_id
        for hook in hooks:
            assert not {"webhook-signature", "stripe-signature", "x-hub-signature-256"} & set(hook.headers)
            verified = schemes.verify(schemes.Profile(scheme=schemes.TOKEN_URL), hook.headers, hook.body, 0, token)
            assert verified.token_digest == schemes.token_digest(token)
        assert sim.recorder.posts_to(HOOK_PATH) == []  # not the configured endpoint: the handed URL


def test_token_url_calls_back_loopback_by_default_and_nothing_else() -> None:
    with simulator("token-url") as sim, LineRecorder() as line:
        handed: dict[str, Any] = {"reference": "r", "input": {}, "callback_url": line.url + "/t/abc"}
        assert requests.post(sim.url + "/jobs", json=handed, headers={"Idempotency-Key": "a"}, timeout=5).ok
        sim.recorder.wait_for(lambda _: len(line.lines) >= 2, timeout=5, message="two events at the recorder")
        assert line.lines == ["POST /t/abc HTTP/1.1"] * 2
        for url in ("http://10.0.0.1/hooks", "http://169.254.169.254/latest", "http://127.0.0.1@hooks.example/"):
            body: dict[str, Any] = {"reference": "r", "input": {}, "callback_url": url}
            refused = requests.post(sim.url + "/jobs", json=body, headers={"Idempotency-Key": url}, timeout=5)
            assert refused.status_code == 400, url
            assert "SIMULATOR_CALLBACK_ORIGINS" in refused.json()["errors"][0]
        assert len(sim.state()["jobs"]) == 1


def test_token_url_with_origins_configured_calls_back_those_only() -> None:
    recorder = CallbackRecorder()
    with CountingListener() as elsewhere, ServerThread(recorder) as allowed:  # noqa: SIM117 (allowed.url is needed)
        with simulator("token-url", SIMULATOR_CALLBACK_ORIGINS=allowed.url) as sim:
            body: dict[str, Any] = {
                "reference": "r",
                "input": {},
                "callback_url": elsewhere.url + "/t/abc",
            }  # loopback, not allowed
            refused = requests.post(sim.url + "/jobs", json=body, headers={"Idempotency-Key": "x"}, timeout=5)
            assert refused.status_code == 400
            ok: dict[str, Any] = {"reference": "r", "input": {}, "callback_url": allowed.url + "/t/abc"}
            assert requests.post(sim.url + "/jobs", json=ok, headers={"Idempotency-Key": "y"}, timeout=5).ok
            recorder.wait_for(lambda hooks: len(hooks) >= 2, timeout=5, message="two events at the allowed origin")
            assert len(sim.state()["jobs"]) == 1 and elsewhere.count == 0


# --- liaison (the default) -----------------------------------------------------------------------


def test_liaisons_standard_webhooks_verifier_accepts_the_default_personality() -> None:
    secret = generate_secret()
    with simulator("liaison", secret) as sim:
        body: dict[str, Any] = {"reference": "ref-l", "input": {}, "callback_url": sim.hooks_url + "/cb"}
        requests.post(sim.url + "/jobs", json=body, headers={"Idempotency-Key": "l1"}, timeout=5)
        hooks = sim.wait_hooks(2, "/cb")
        profile = schemes.Profile(scheme=schemes.STANDARD, secrets=(secret,))
        for hook in hooks:
            assert schemes.verify(profile, hook.headers, hook.body, time.time()).event_id == hook.headers["webhook-id"]
        assert sim.recorder.posts_to(HOOK_PATH) == []  # SIMULATOR_WEBHOOK_URL is not liaison's: the callback is
        assert sim.state()["personality"] == "liaison"
