"""Each inbound scheme end to end on the real stack, and its refusals on the real web.

Per stack pair (SQLite + Redis, PostgreSQL + RabbitMQ) one Liaison with five providers, each with a
simulator of its own playing the vendor, and the Procfile's ``web`` line (gunicorn, as a deploy runs
it) as ``LIAISON_PUBLIC_URL``: every vendor webhook and every refused request below goes through it.

============  ===================================  ===========================================
provider      Liaison: kind, scheme                the simulator
============  ===================================  ===========================================
``sim``       rest, standard-webhooks              ``liaison`` personality
``stripe``    http (``SIM_STRIPE`` profile),       ``stripe`` personality
              stripe
``github``    http (``SIM_GITHUB`` profile),       ``github`` personality
              github
``hmac``      http (``SIM_GITHUB``), hmac:         ``github``: its ``X-Hub-Signature-256`` is
              X-Hub-Signature-256, ``sha256=``     a generic HMAC-SHA256, hex, prefixed
``basic``     rest, basic                          ``liaison`` + ``SIMULATOR_WEBHOOK_BASIC_AUTH``
============  ===================================  ===========================================

- end to end: submit through the API → the simulator's job → its own webhooks → the task's final
  state and outcome → the domain app's callback, whose signature is verified.
- refusals, on an open task whose vendor is silent: forged (wrong secret) and stale (where the scheme
  has a timestamp) are 401, oversized 413 (gunicorn's read-ahead worker, before the app), signed but
  not JSON or of the wrong shape 400: nothing stored (inbox, orphans), the task unchanged. An event
  type a mapped profile does not know is 200 and stored, and changes nothing; the same event twice
  is applied once (the second is a duplicate, no second state change). Never a 5xx.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import func, select

import simulator
from bench.procs import ROOT
from models import ExternalTask, OrphanEvent, ProcessedMessage, TaskEvent
from simulator.signers import github_signature_256, stripe_signature
from tests.integration import services
from tests.integration.conftest import PAIRS
from tests.integration.processes import poll
from tests.integration.procfile_worker import procfile_web
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread
from webhooks.signing import generate_secret, sign, verify

pytestmark = pytest.mark.timeout(120)

STANDARD_SECRET = generate_secret()
STRIPE_SECRET = "whsec_" + "s1mStr1pe" * 4
GITHUB_SECRET = "octo-" + "g1tHubSecret" * 3
HMAC_SECRET = "hmac-" + "generic-secret" * 3
BASIC_PAIR = "acme-vendor:" + "b4sic-pass" * 3
FAST = {"SIMULATOR_ACCEPT_DELAY_S": 0.1, "SIMULATOR_COMPLETE_DELAY_S": 0.3, "SIMULATOR_RETRY_BACKOFF_S": "0.2,0.4,0.8"}

#: The simulator's ``stripe`` API and events: the profile Liaison ships for it (bin/demo's ``stripe``),
#: so this module also proves the shipped file end to end.
SIM_STRIPE = (ROOT / "docs" / "profiles" / "simulator-stripe.toml").read_text()

#: The simulator's ``github`` API and events. A GitHub job's state is two fields (``status`` and,
#: once ``completed``, ``conclusion``); a profile's ``[status]`` reads one, so ``status`` answers
#: ``completed`` that [statuses] does not map (a status call then fails as the vendor's fault). The
#: events read ``conclusion``, which is all this module exercises.
SIM_GITHUB = """
[headers]
Accept = "application/vnd.github+json"
Authorization = "Bearer {api_key}"

[statuses]
queued = "queued"
in_progress = "running"
success = "succeeded"
failure = "failed"
cancelled = "canceled"

[submit]
method = "POST"
path = "/api/v3/jobs"
headers = { "Idempotency-Key" = "{idempotency_key}" }
body = { external_id = "{reference}", input = "{input}" }
job_id = "/id"

[status]
method = "GET"
path = "/api/v3/jobs/{job_id}"
status = "/status"
outcome = "/output"

[cancel]
method = "POST"
path = "/api/v3/jobs/{job_id}/cancel"

[find]
method = "GET"
path = "/api/v3/jobs"
query = { external_id = "{reference}" }
job_id = "/jobs/0/id"

[events]
type = "/action"
job_id = "/job/id"
status = "/job/conclusion"
outcome = "/job/output"
percent = "/job/progress"

[events.types]
in_progress = "accepted"
progress = "progress"
completed = "completed"
"""

Headers = dict[str, str]
Event = dict[str, Any]


@dataclass(frozen=True)
class Scheme:
    """One provider: how its vendor signs (``sign(secret, body, unix time, event id)``), the secret
    Liaison knows it by and a wrong one, and its events (``event(kind, job id, event id)``, kind
    ``accepted`` | ``completed`` | ``unknown`` | ``shapeless``)."""

    provider: str
    secret: str
    wrong: str
    timestamped: bool
    mapped: bool
    sign: Callable[[str, bytes, int, str], Headers]
    event: Callable[[str, str, str], Event]


def _standard_headers(secret: str, body: bytes, at: int, event_id: str) -> Headers:
    return sign(secret, event_id, at, body).as_dict()


def _stripe_headers(secret: str, body: bytes, at: int, event_id: str) -> Headers:
    return {"Stripe-Signature": stripe_signature(secret, body, at)}


def _github_headers(secret: str, body: bytes, at: int, event_id: str) -> Headers:
    return {
        "X-GitHub-Event": "job",
        "X-GitHub-Delivery": event_id,
        "X-Hub-Signature-256": github_signature_256(secret, body),
    }


def _basic_headers(secret: str, body: bytes, at: int, event_id: str) -> Headers:
    return {"Authorization": "Basic " + base64.b64encode(secret.encode()).decode()}


def _liaison_event(kind: str, job_id: str, event_id: str) -> Event:
    if kind == "accepted":
        return {"type": "job.accepted", "job_id": job_id}
    if kind == "completed":
        return {"type": "job.completed", "job_id": job_id, "status": "succeeded", "outcome": {"by": "hand"}}
    return {"type": "job.completed", "status": "succeeded"}  # shapeless: no job id


def _stripe_event(kind: str, job_id: str, event_id: str) -> Event:
    types = {"accepted": "job.processing", "completed": "job.succeeded", "unknown": "customer.created"}
    obj: dict[str, Any] = {"id": job_id, "object": "job", "status": "processing"}
    if kind == "completed":
        obj.update(status="succeeded", outcome={"by": "hand"})
    if kind == "shapeless":
        return {"id": event_id, "object": "event", "type": "job.succeeded", "data": {}}
    return {"id": event_id, "object": "event", "type": types[kind], "data": {"object": obj}}


def _github_event(kind: str, job_id: str, event_id: str) -> Event:
    actions = {"accepted": "in_progress", "completed": "completed", "unknown": "requested_action"}
    job: dict[str, Any] = {"id": int(job_id), "status": "in_progress", "conclusion": None}
    if kind == "completed":
        job.update(status="completed", conclusion="success", output={"by": "hand"})
    if kind == "shapeless":
        return {"action": "completed", "job": {"id": int(job_id), "status": "completed", "conclusion": "neutral"}}
    return {"action": actions[kind], "job": job, "sender": {"login": "simulator[bot]"}}


SCHEMES = {
    "sim": Scheme("sim", STANDARD_SECRET, generate_secret(), True, False, _standard_headers, _liaison_event),
    "stripe": Scheme("stripe", STRIPE_SECRET, "whsec_not_the_one", True, True, _stripe_headers, _stripe_event),
    "github": Scheme("github", GITHUB_SECRET, "not-the-one", False, True, _github_headers, _github_event),
    "hmac": Scheme("hmac", HMAC_SECRET, "not-the-one", False, True, _github_headers, _github_event),
    "basic": Scheme("basic", BASIC_PAIR, "acme-vendor:not-the-one", False, False, _basic_headers, _liaison_event),
}
#: provider → (personality, its webhook secret, more of its settings)
SIMULATORS: dict[str, tuple[str, str, dict[str, str]]] = {
    "sim": ("liaison", STANDARD_SECRET, {}),
    "stripe": ("stripe", STRIPE_SECRET, {}),
    "github": ("github", GITHUB_SECRET, {}),
    "hmac": ("github", HMAC_SECRET, {}),
    "basic": ("liaison", generate_secret(), {"SIMULATOR_WEBHOOK_BASIC_AUTH": BASIC_PAIR}),
}


def _provider_env(name: str, tmp: Path, vendor_url: str) -> dict[str, str]:
    prefix = f"LIAISON_PROVIDER_{name.upper()}_"
    env = {f"{prefix}BASE_URL": vendor_url, f"{prefix}READ_TIMEOUT_S": "2"}
    if name in ("stripe", "github", "hmac"):
        profile = tmp / f"{'stripe' if name == 'stripe' else 'github'}.toml"
        profile.write_text(SIM_STRIPE if name == "stripe" else SIM_GITHUB)
        env |= {f"{prefix}KIND": "http", f"{prefix}PROFILE": str(profile), f"{prefix}API_KEY": f"key-{name}-123"}
    scheme = {"sim": "standard-webhooks", "hmac": "hmac"}.get(name, name)
    env |= {f"{prefix}WEBHOOK_SCHEME": scheme, f"{prefix}WEBHOOK_SECRETS": SCHEMES[name].secret}
    if name == "hmac":
        env |= {f"{prefix}WEBHOOK_HMAC_HEADER": "X-Hub-Signature-256", f"{prefix}WEBHOOK_HMAC_PREFIX": "sha256="}
        env |= {f"{prefix}WEBHOOK_HMAC_ALGORITHM": "sha256", f"{prefix}WEBHOOK_HMAC_ENCODING": "hex"}
    return env


@dataclass
class Vendors:
    stack: Stack
    web: str  # the Procfile's web: LIAISON_PUBLIC_URL
    sims: dict[str, ServerThread]


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def vendors(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Vendors]:
    db, broker = request.param
    broker_url = services.BROKERS[broker]
    services.require(broker_url, broker)
    tmp = tmp_path_factory.mktemp(f"schemes-{db}-{broker}")
    database_url = request.getfixturevalue("postgres_url") if db == "postgres" else f"sqlite:///{tmp / 'liaison.db'}"
    web_port = services.free_port()
    web = f"http://127.0.0.1:{web_port}"
    with ExitStack() as cleanup:
        sims: dict[str, ServerThread] = {}
        for name, (personality, secret, extra) in SIMULATORS.items():
            config: dict[str, Any] = {
                **FAST,
                "SIMULATOR_PERSONALITY": personality,
                "SIMULATOR_WEBHOOK_SECRET": secret,
                "SIMULATOR_WEBHOOK_URL": f"{web}/webhooks/{name}",  # stripe, github: the registered endpoint
                **extra,
            }
            sims[name] = cleanup.enter_context(ServerThread(simulator.create_app(config)))
        env = {"LIAISON_PROVIDERS": ",".join(SCHEMES), "LIAISON_PUBLIC_URL": web}
        for name, sim in sims.items():
            env |= _provider_env(name, tmp, sim.url)
        stack = build_stack(
            f"schemes-{db}-{broker}",
            database_url=database_url,
            broker_url=broker_url,
            vendor_url=sims["sim"].url,
            vendor_secret=STANDARD_SECRET,
            tmp=tmp,
            extra_env=env,
        )
        cleanup.callback(stack.close)
        cleanup.enter_context(procfile_web(stack, tmp, web_port))
        yield Vendors(stack, web, sims)


# --- end to end ----------------------------------------------------------------------------------


@pytest.mark.parametrize("provider", list(SCHEMES))
def test_submit_vendor_webhooks_final_state_and_signed_callback(vendors: Vendors, provider: str) -> None:
    stack = vendors.stack
    api_key, secret, path = stack.new_client()
    cid = f"e2e-{provider}-{uuid.uuid4().hex[:8]}"
    made = {"made_by": provider, "n": 7}
    body = {"correlation_id": cid, "provider": provider, "input": {"simulate": {"outcome_payload": made}}}
    response = stack.submit(api_key, body, key=cid, url=vendors.web)
    assert response.status_code == 202, response.text

    done = stack.wait_for_task(api_key, cid, timeout=30)
    assert (done["state"], done["outcome"]) == ("succeeded", made), done
    kinds = [e["kind"] for e in done["timeline"]]
    assert "state.accepted" in kinds  # the vendor's acceptance webhook was applied too

    sim = vendors.sims[provider]
    reference = stack.reference(cid)

    def delivered() -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
        """The job and its deliveries, once it has recorded two (it records after the answer)."""
        state = requests.get(sim.url + "/_sim/jobs", timeout=5).json()
        [job] = [j for j in state["jobs"] if j["reference"] == reference]
        sent = [d for d in state["deliveries"] if d["job_id"] == job["job_id"]]
        return (job, sent) if len({d["webhook_id"] for d in sent}) >= 2 else None

    job, sent = poll("the simulator to record its acceptance and completion webhooks", delivered, 10)
    assert all(d["status"] == 200 for d in sent), sent  # each taken (stored, 200) by the web at the first try
    with stack.db.transaction() as session:
        vendor_job = session.scalar(select(ExternalTask.vendor_job_id).where(ExternalTask.reference == reference))
    assert vendor_job == str(job["job_id"])

    hits = stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json()["state"] == "succeeded" for r in reqs), timeout=15, message=cid
    )
    [callback] = [r for r in hits if r.path == path and r.json()["state"] == "succeeded"]
    assert verify([secret], callback.headers, callback.body, time.time()) == callback.json()["message_id"]
    assert callback.json()["type"] == "task.completed" and callback.json()["outcome"] == made


# --- refusals on the real web --------------------------------------------------------------------


@dataclass(frozen=True)
class Stored:
    """What a vendor event can leave behind: the provider's inbox rows and orphans, the task's state
    changes (``state.*`` events of its timeline; relays add others meanwhile) and its state."""

    inbox: int
    orphans: int
    changes: int
    state: str


def _stored(stack: Stack, provider: str, reference: str) -> Stored:
    with stack.db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.reference == reference)).one()
        count = select(func.count())
        return Stored(
            session.scalar(count.select_from(ProcessedMessage).where(ProcessedMessage.source == provider)) or 0,
            session.scalar(count.select_from(OrphanEvent).where(OrphanEvent.source == provider)) or 0,
            session.scalar(
                count.select_from(TaskEvent).where(TaskEvent.task_id == task.id, TaskEvent.kind.startswith("state."))
            )
            or 0,
            task.state,
        )


def _post(vendors: Vendors, scheme: Scheme, body: bytes, headers: Headers) -> requests.Response:
    headers = {"Content-Type": "application/json", **headers}
    response = requests.post(f"{vendors.web}/webhooks/{scheme.provider}", data=body, headers=headers, timeout=15)
    assert response.status_code < 500, (response.status_code, response.text)
    return response


def _signed(
    vendors: Vendors, scheme: Scheme, body: bytes, event_id: str, *, secret: str | None = None, age_s: int = 0
) -> requests.Response:
    headers = scheme.sign(secret or scheme.secret, body, int(time.time()) - age_s, event_id)
    return _post(vendors, scheme, body, headers)


def _event_id(scheme: Scheme) -> str:
    """A fresh event id in the scheme's form (the simulator's, for those that carry one)."""
    return {"sim": f"msg_{uuid.uuid4().hex}", "stripe": f"evt_{uuid.uuid4().hex}"}.get(
        scheme.provider, str(uuid.uuid4())
    )


@pytest.mark.parametrize("provider", list(SCHEMES))
def test_refusals_on_the_real_web_store_nothing_and_a_replay_changes_nothing(vendors: Vendors, provider: str) -> None:
    stack, scheme = vendors.stack, SCHEMES[provider]
    api_key, secret, path = stack.new_client()
    cid = f"refuse-{provider}-{uuid.uuid4().hex[:8]}"
    body = {"correlation_id": cid, "provider": provider, "input": {"simulate": {"silent": True}}}
    assert stack.submit(api_key, body, key=cid, url=vendors.web).status_code == 202
    stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "submitted")
    reference = stack.reference(cid)
    with stack.db.transaction() as session:
        job_id = session.scalar(select(ExternalTask.vendor_job_id).where(ExternalTask.reference == reference))
    assert job_id
    before = _stored(stack, provider, reference)

    def encoded(kind: str, event_id: str) -> bytes:
        return json.dumps(scheme.event(kind, job_id, event_id)).encode()

    forged_id = _event_id(scheme)
    forged = _signed(vendors, scheme, encoded("completed", forged_id), forged_id, secret=scheme.wrong)
    assert forged.status_code == 401, forged.text
    if scheme.timestamped:
        stale_id = _event_id(scheme)
        stale = _signed(vendors, scheme, encoded("completed", stale_id), stale_id, age_s=3600)
        assert stale.status_code == 401, stale.text
    big_id = _event_id(scheme)
    event = scheme.event("completed", job_id, big_id)
    pad = "x" * (stack.settings.max_body_bytes + 1)
    big = json.dumps({**event, "pad": pad}).encode()
    assert _signed(vendors, scheme, big, big_id).status_code == 413
    not_json_id, shapeless_id = _event_id(scheme), _event_id(scheme)
    for raw, event_id in (
        (b'{"type": "job.completed", ', not_json_id),
        (encoded("shapeless", shapeless_id), shapeless_id),
    ):
        malformed = _signed(vendors, scheme, raw, event_id)
        assert malformed.status_code == 400, (raw, malformed.text)
    assert _stored(stack, provider, reference) == before  # nothing of any refused request

    if scheme.mapped:
        unknown_id = _event_id(scheme)
        unknown = _signed(vendors, scheme, encoded("unknown", unknown_id), unknown_id)
        assert (unknown.status_code, unknown.json()["status"]) == (200, "ignored")
        after = _stored(stack, provider, reference)
        assert after == Stored(before.inbox + 1, before.orphans, before.changes, before.state)
        before = after

    accepted_id = _event_id(scheme)
    accepted = encoded("accepted", accepted_id)
    first = _signed(vendors, scheme, accepted, accepted_id)
    assert (first.status_code, first.json()["status"]) == (200, "applied"), first.text
    applied = _stored(stack, provider, reference)
    assert applied.state == "accepted" and applied.inbox == before.inbox + 1 and applied.changes == before.changes + 1
    again = _signed(vendors, scheme, accepted, accepted_id)  # re-signed now, as a vendor's re-send is
    assert (again.status_code, again.json()["status"]) == (200, "duplicate"), again.text
    assert _stored(stack, provider, reference) == applied

    done_id = _event_id(scheme)
    assert _signed(vendors, scheme, encoded("completed", done_id), done_id).json()["status"] == "applied"
    final = stack.wait_for_task(api_key, cid)
    assert (final["state"], final["outcome"]) == ("succeeded", {"by": "hand"})
    hits = stack.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json()["state"] == "succeeded" for r in reqs), timeout=15, message=cid
    )
    [callback] = [r for r in hits if r.path == path and r.json()["state"] == "succeeded"]
    assert verify([secret], callback.headers, callback.body, time.time()) == callback.json()["message_id"]
