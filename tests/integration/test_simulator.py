"""The vendor simulator over real HTTP on loopback: provider contract, knobs, signed webhooks."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
import requests

from simulator import SettingsError, create_app
from simulator.behaviour import (
    Behaviour,
    BehaviourError,
    parse_global_config,
    resolve_behaviour,
)
from tests.support.listeners import LineRecorder
from tests.support.servers import CallbackRecorder, RecordedRequest, ServerThread
from webhooks.signing import generate_secret, verify

pytestmark = pytest.mark.timeout(30)

SECRET = generate_secret()
HOOK_PATH = "/hooks/vendor"


class Vendor:
    """A running simulator plus the recorder its webhooks go to."""

    def __init__(self, url: str, recorder: CallbackRecorder, callback_url: str) -> None:
        self.url = url
        self.recorder = recorder
        self.callback_url = callback_url

    def submit(
        self,
        simulate: dict[str, Any] | None = None,
        key: str | None = None,
        reference: str | None = None,
        timeout: float = 5,
    ) -> requests.Response:
        job_input: dict[str, Any] = {"n": 1}
        if simulate is not None:
            job_input["simulate"] = simulate
        return requests.post(
            self.url + "/jobs",
            json={
                "reference": reference or f"ref-{uuid.uuid4().hex[:8]}",
                "input": job_input,
                "callback_url": self.callback_url,
            },
            headers={"Idempotency-Key": key or uuid.uuid4().hex},
            timeout=timeout,
        )

    def sim_state(self) -> dict[str, Any]:
        return requests.get(self.url + "/_sim/jobs", timeout=5).json()

    def webhooks(self, job_id: str | None = None) -> list[RecordedRequest]:
        hooks = self.recorder.posts_to(HOOK_PATH)
        return [h for h in hooks if job_id is None or h.json()["job_id"] == job_id]

    def wait_webhooks(self, job_id: str, count: int, timeout: float = 5) -> list[RecordedRequest]:
        self.recorder.wait_for(
            lambda _: len(self.webhooks(job_id)) >= count,
            timeout=timeout,
            message=f"{count} webhook(s) for {job_id}",
        )
        return self.webhooks(job_id)


@pytest.fixture
def vendor() -> Any:
    recorder = CallbackRecorder()
    config = {
        "SIMULATOR_WEBHOOK_SECRET": SECRET,
        "SIMULATOR_ACCEPT_DELAY_S": 0.05,
        "SIMULATOR_COMPLETE_DELAY_S": 0.1,
        "SIMULATOR_WEBHOOK_TIMEOUT_S": 2,
        "SIMULATOR_RETRY_BACKOFF_S": [0.05, 0.05, 0.05, 0.05],
    }
    with ServerThread(recorder) as hooks, ServerThread(create_app(config)) as sim:
        yield Vendor(sim.url, recorder, hooks.url + HOOK_PATH)
        # pending timers of this simulator then find no job and send nothing to a reused port
        requests.post(sim.url + "/_sim/reset", timeout=5)


def types(hooks: list[RecordedRequest]) -> list[str]:
    return [h.json()["type"] for h in hooks]


# --- settings and pure parsing ------------------------------------------------------------------


@pytest.mark.parametrize("secret", [None, "", "not-a-secret", "whsec_!!!", "whsec_c2hvcnQ="])
def test_create_app_needs_a_valid_secret(secret: str | None, monkeypatch: Any) -> None:
    monkeypatch.delenv("SIMULATOR_WEBHOOK_SECRET", raising=False)
    with pytest.raises(SettingsError, match="SIMULATOR_WEBHOOK_SECRET"):
        create_app({"SIMULATOR_WEBHOOK_SECRET": secret})


def test_create_app_reads_the_environment(monkeypatch: Any) -> None:
    monkeypatch.setenv("SIMULATOR_WEBHOOK_SECRET", SECRET)
    monkeypatch.setenv("SIMULATOR_ACCEPT_DELAY_S", "nope")
    with pytest.raises(SettingsError, match="SIMULATOR_ACCEPT_DELAY_S"):
        create_app()
    monkeypatch.setenv("SIMULATOR_ACCEPT_DELAY_S", "0.1")
    assert create_app().test_client().get("/healthz").status_code == 200


def test_behaviour_merges_job_knobs_over_global() -> None:
    config = parse_global_config({"outcome": "failed", "duplicate": 2, "down": False})
    behaviour = resolve_behaviour(config, {"simulate": {"duplicate": 3, "drop": ["job.accepted"]}})
    assert behaviour == Behaviour(outcome="failed", duplicate=3, drop=frozenset({"job.accepted"}))
    assert resolve_behaviour(config, "plain string input").duplicate == 2


@pytest.mark.parametrize(
    "simulate",
    [
        {"bogus": 1},
        {"down": True},  # global-only
        {"status_down": True},  # global-only
        {"duplicate": 0},
        {"reject": 1},
        {"transient_status": 404},
        {"drop": ["job.started"]},
        {"outcome": "canceled"},
        {"progress": [10, 101]},
        {"progress": "50"},
        {"progress": [True]},
        "not an object",
    ],
)
def test_behaviour_parsing_is_strict(simulate: Any) -> None:
    with pytest.raises(BehaviourError):
        resolve_behaviour(parse_global_config({}), {"simulate": simulate})


# --- provider contract ------------------------------------------------------------------------


def test_new_job_then_idempotent_replay(vendor: Vendor) -> None:
    first = vendor.submit(key="key-1", reference="ref-1", simulate={"accept_delay_s": 5})
    assert first.status_code == 201
    job = first.json()
    assert job["status"] == "queued" and job["job_id"].startswith("job_")

    again = vendor.submit(key="key-1", reference="ref-1", simulate={"accept_delay_s": 5})
    assert again.status_code == 200
    assert again.json()["job_id"] == job["job_id"]

    state = vendor.sim_state()
    assert len(state["jobs"]) == 1
    assert state["jobs"][0]["submit_attempts"] == 2
    fetched = requests.get(f"{vendor.url}/jobs/{job['job_id']}", timeout=5).json()
    assert fetched == {"job_id": job["job_id"], "reference": "ref-1", "status": "queued", "outcome": None}


def test_bad_requests(vendor: Vendor) -> None:
    url = vendor.url + "/jobs"
    body: dict[str, Any] = {"reference": "r", "input": {}, "callback_url": vendor.callback_url}
    missing_key = requests.post(url, json=body, timeout=5)
    assert missing_key.status_code == 400
    assert missing_key.headers["Content-Type"] == "application/problem+json"
    bad: Any
    for bad in ({"reference": "r", "input": {}}, [1], {"reference": 3, "input": 1, "callback_url": "x"}):
        response = requests.post(url, json=bad, headers={"Idempotency-Key": "k"}, timeout=5)
        assert response.status_code == 400, bad
    not_json = requests.post(url, data=b"{nope", headers={"Idempotency-Key": "k"}, timeout=5)
    assert not_json.status_code == 400
    assert requests.get(vendor.url + "/jobs/job_unknown", timeout=5).status_code == 404
    assert requests.get(vendor.url + "/jobs", timeout=5).status_code == 400
    assert vendor.sim_state()["jobs"] == []


def test_signed_webhooks_arrive_and_verify(vendor: Vendor) -> None:
    job_id = vendor.submit(reference="ref-ok").json()["job_id"]
    hooks = vendor.wait_webhooks(job_id, 2)

    assert types(hooks) == ["job.accepted", "job.completed"]
    for hook in hooks:
        assert hook.headers["content-type"] == "application/json"
        assert verify([SECRET], hook.headers, hook.body, now=time.time()) == hook.headers["webhook-id"]
        assert hook.headers["webhook-id"].startswith("msg_")
    assert hooks[0].headers["webhook-id"] != hooks[1].headers["webhook-id"]
    assert hooks[0].json() == {"type": "job.accepted", "job_id": job_id}
    assert hooks[1].json() == {
        "type": "job.completed",
        "job_id": job_id,
        "status": "succeeded",
        "outcome": {"result": "ok", "reference": "ref-ok"},
    }
    job = requests.get(f"{vendor.url}/jobs/{job_id}", timeout=5).json()
    assert job["status"] == "succeeded"


def test_failed_outcome(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"outcome": "failed"}).json()["job_id"]
    completed = vendor.wait_webhooks(job_id, 2)[-1].json()
    assert completed["status"] == "failed"
    assert completed["outcome"] == {"error": "simulated failure"}

    custom = vendor.submit(simulate={"outcome": "failed", "outcome_payload": {"code": "E42"}})
    job_id = custom.json()["job_id"]
    assert vendor.wait_webhooks(job_id, 2)[-1].json()["outcome"] == {"code": "E42"}


def test_reject_is_permanent_422(vendor: Vendor) -> None:
    for _ in range(2):
        response = vendor.submit(key="k-reject", reference="ref-r", simulate={"reject": True})
        assert response.status_code == 422
        assert response.json()["status"] == 422
    assert requests.get(vendor.url + "/jobs?reference=ref-r", timeout=5).json() == {"jobs": []}


def test_transient_failures_then_success(vendor: Vendor) -> None:
    knobs = {"transient_failures": 2, "retry_after": 1}
    first, second, third = (vendor.submit(key="k-flap", simulate=knobs) for _ in range(3))
    assert [first.status_code, second.status_code, third.status_code] == [503, 503, 201]
    assert first.headers["Retry-After"] == "1"
    assert vendor.sim_state()["submit_attempts"]["k-flap"] == 3

    other = vendor.submit(simulate={"transient_failures": 1, "transient_status": 429})
    assert other.status_code == 429 and "Retry-After" not in other.headers


def test_slow_answer_still_creates_the_job(vendor: Vendor) -> None:
    with pytest.raises(requests.Timeout):
        vendor.submit(reference="ref-slow", simulate={"slow_s": 0.3}, timeout=0.1)
    found = requests.get(vendor.url + "/jobs?reference=ref-slow", timeout=5).json()["jobs"]
    assert len(found) == 1 and found[0]["reference"] == "ref-slow"


def test_drop(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"drop": ["job.accepted"]}).json()["job_id"]
    hooks = vendor.wait_webhooks(job_id, 1)
    time.sleep(0.1)
    assert types(vendor.webhooks(job_id)) == ["job.completed"] == types(hooks)
    dropped = [d for d in vendor.sim_state()["deliveries"] if d["result"] == "dropped"]
    assert [d["type"] for d in dropped] == ["job.accepted"]


def test_silent_accepts_then_sends_nothing_but_still_answers_status(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"silent": True, "complete_delay_s": 0}).json()["job_id"]
    deadline = time.monotonic() + 5
    while requests.get(f"{vendor.url}/jobs/{job_id}", timeout=5).json()["status"] != "succeeded":
        assert time.monotonic() < deadline, "the silent job never completed"
        time.sleep(0.02)
    time.sleep(0.2)  # time enough for a webhook to have gone out
    assert vendor.webhooks(job_id) == []
    silenced = [d for d in vendor.sim_state()["deliveries"] if d["result"] == "silenced"]
    assert sorted(d["type"] for d in silenced) == ["job.accepted", "job.completed"]


def test_duplicate_sends_same_webhook_id(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"duplicate": 3}).json()["job_id"]
    hooks = vendor.wait_webhooks(job_id, 6)
    for event in ("job.accepted", "job.completed"):
        copies = [h for h in hooks if h.json()["type"] == event]
        assert len(copies) == 3
        assert len({h.headers["webhook-id"] for h in copies}) == 1
        assert len({h.body for h in copies}) == 1


def test_webhooks_ignore_the_proxy_environment_of_the_process_that_runs_the_simulator(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A vendor's egress is its own. In the suite the simulator shares a process with tests that
    set ``HTTP_PROXY`` for Liaison's provider calls; its webhooks must not wander into their proxy.
    The simulator listens on 127.0.0.2, which ``NO_PROXY`` names, so this test's own calls go direct."""
    recorder, proxy = CallbackRecorder(), LineRecorder("127.0.0.1")
    config = {"SIMULATOR_WEBHOOK_SECRET": SECRET, "SIMULATOR_ACCEPT_DELAY_S": 0.05, "SIMULATOR_COMPLETE_DELAY_S": 0.1}
    monkeypatch.setenv("HTTP_PROXY", proxy.url)
    monkeypatch.setenv("NO_PROXY", "127.0.0.2")
    try:
        with ServerThread(recorder) as hooks, ServerThread(create_app(config), host="127.0.0.2") as sim:
            vendor = Vendor(sim.url, recorder, hooks.url + HOOK_PATH)
            job_id = vendor.submit().json()["job_id"]
            assert types(vendor.wait_webhooks(job_id, 2)) == ["job.accepted", "job.completed"]
            assert proxy.lines == []
    finally:
        proxy.close()


def test_reorder(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"reorder": True}).json()["job_id"]
    assert types(vendor.wait_webhooks(job_id, 2)) == ["job.completed", "job.accepted"]


def test_progress_reports_each_with_its_own_webhook_id_before_completion(vendor: Vendor) -> None:
    knobs = {"progress": [25, 50, 75], "progress_interval_s": 0.05, "complete_delay_s": 1}
    job_id = vendor.submit(simulate=knobs).json()["job_id"]
    hooks = vendor.wait_webhooks(job_id, 5)
    assert types(hooks) == ["job.accepted", "job.progress", "job.progress", "job.progress", "job.completed"]
    reports = [h for h in hooks if h.json()["type"] == "job.progress"]
    assert [h.json()["percent"] for h in reports] == [25, 50, 75]
    assert reports[0].json() == {"type": "job.progress", "job_id": job_id, "percent": 25, "message": "25% done"}
    assert len({h.headers["webhook-id"] for h in hooks}) == 5  # a report is not a re-send of another


def test_cancel(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"accept_delay_s": 5}).json()["job_id"]
    response = requests.post(f"{vendor.url}/jobs/{job_id}/cancel", timeout=5)
    assert response.status_code == 202
    assert response.json() == {"job_id": job_id, "status": "canceled"}

    (hook,) = vendor.wait_webhooks(job_id, 1)
    assert hook.json()["type"] == "job.completed" and hook.json()["status"] == "canceled"
    again = requests.post(f"{vendor.url}/jobs/{job_id}/cancel", timeout=5)
    assert again.status_code == 409
    assert requests.post(f"{vendor.url}/jobs/job_nope/cancel", timeout=5).status_code == 404


def test_global_config_down(vendor: Vendor) -> None:
    config = requests.post(vendor.url + "/_sim/config", json={"down": True}, timeout=5)
    assert config.status_code == 200 and config.json()["down"] is True
    assert vendor.submit().status_code == 503

    requests.post(vendor.url + "/_sim/config", json={"down": True, "down_status": 502}, timeout=5)
    assert vendor.submit().status_code == 502

    requests.post(vendor.url + "/_sim/config", json={}, timeout=5)
    job_id = vendor.submit().json()["job_id"]
    assert requests.get(f"{vendor.url}/jobs/{job_id}", timeout=5).status_code == 200  # down spares status
    requests.post(vendor.url + "/_sim/config", json={"status_down": True}, timeout=5)
    assert requests.get(f"{vendor.url}/jobs/{job_id}", timeout=5).status_code == 503
    assert requests.get(f"{vendor.url}/jobs", params={"reference": "any"}, timeout=5).status_code == 503  # find too
    requests.post(vendor.url + "/_sim/config", json={}, timeout=5)


def test_unknown_behaviour_key_is_400(vendor: Vendor) -> None:
    response = vendor.submit(simulate={"explode": True})
    assert response.status_code == 400
    assert "explode" in response.json()["detail"]
    config = requests.post(vendor.url + "/_sim/config", json={"explode": True}, timeout=5)
    assert config.status_code == 400
    assert vendor.sim_state()["jobs"] == []


def test_get_by_reference(vendor: Vendor) -> None:
    slow = {"accept_delay_s": 5}
    a1 = vendor.submit(reference="A", simulate=slow).json()["job_id"]
    a2 = vendor.submit(reference="A", simulate=slow).json()["job_id"]
    vendor.submit(reference="B", simulate=slow)
    found = requests.get(vendor.url + "/jobs", params={"reference": "A"}, timeout=5).json()
    assert sorted(j["job_id"] for j in found["jobs"]) == sorted([a1, a2])
    assert all(j["status"] == "queued" and j["reference"] == "A" for j in found["jobs"])


# --- sender and control endpoints ---------------------------------------------------------------


def test_sender_resends_on_non_2xx_with_the_same_id(vendor: Vendor) -> None:
    vendor.recorder.set_status(HOOK_PATH, [500, 502, 204])
    job_id = vendor.submit(simulate={"drop": ["job.completed"]}).json()["job_id"]
    hooks = vendor.wait_webhooks(job_id, 3)
    assert [h.status for h in hooks] == [500, 502, 204]
    assert len({h.headers["webhook-id"] for h in hooks}) == 1
    # The receiver has answered; the sender records that answer a moment later.
    vendor.recorder.wait_for(
        lambda _: any(d["result"] == "delivered" for d in vendor.sim_state()["deliveries"]),
        message="delivered recorded",
    )
    attempts = [
        (d["attempt"], d["status"], d["result"])
        for d in vendor.sim_state()["deliveries"]
        if d["type"] == "job.accepted"
    ]
    assert attempts == [(1, 500, "retrying"), (2, 502, "retrying"), (3, 204, "delivered")]


def test_sender_gives_up_after_five_attempts(vendor: Vendor) -> None:
    vendor.recorder.set_status(HOOK_PATH, 500)
    job_id = vendor.submit(simulate={"drop": ["job.completed"]}).json()["job_id"]
    vendor.wait_webhooks(job_id, 5)
    vendor.recorder.wait_for(
        lambda _: any(d["result"] == "gave_up" for d in vendor.sim_state()["deliveries"]),
        message="gave_up recorded",
    )
    time.sleep(0.2)
    assert len(vendor.webhooks(job_id)) == 5


def test_complete_now_and_reset(vendor: Vendor) -> None:
    job_id = vendor.submit(simulate={"accept_delay_s": 5}).json()["job_id"]
    response = requests.post(
        f"{vendor.url}/_sim/jobs/{job_id}/complete",
        json={"status": "failed", "outcome": {"why": "forced"}},
        timeout=5,
    )
    assert response.status_code == 200 and response.json()["status"] == "failed"
    (hook,) = vendor.wait_webhooks(job_id, 1)
    assert hook.json()["outcome"] == {"why": "forced"}
    again = requests.post(f"{vendor.url}/_sim/jobs/{job_id}/complete", timeout=5)
    assert again.status_code == 409

    assert requests.post(vendor.url + "/_sim/reset", timeout=5).status_code == 200
    assert vendor.sim_state()["jobs"] == [] and vendor.sim_state()["deliveries"] == []
    assert requests.get(f"{vendor.url}/jobs/{job_id}", timeout=5).status_code == 404
