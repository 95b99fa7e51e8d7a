"""One trace across systems (issue 22): a task submitted with a W3C ``traceparent`` is one trace in
every Liaison process that works on it, and the vendor and the domain app receive that trace.

The platform is the Procfile's ``web`` (gunicorn, forked workers), ``calls`` and ``relay`` (Celery,
``--pool threads``) lines as processes of their own, on a fresh PostgreSQL database and Redis, with
``OTEL_EXPORTER_OTLP_ENDPOINT`` naming a real OTLP/HTTP receiver on loopback started here (it
decodes the protobuf export requests). The vendor is the session's simulator, which records the
traceparent each job was created with; the domain app is a ``CallbackRecorder``.

Run with ``-s`` to see the trace's span list (service, name, trace id, span id, parent).

Issue 44 (the tests after the first): one tenant's trace context reaches no other tenant, no vendor
and no span -- baggage is neither read nor sent, a task released in another tenant's request is its
own trace, spans hold no query string or token, and a caller's sampled flag decides nothing.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import requests
from kombu import Connection, Exchange, Queue

from bench.procs import Proc
from bench.stacks import PROCFILE, base_env
from core.states import TERMINAL
from core.trace_context import parse_traceparent
from models.db import Database
from service.credentials import create_client
from tests.integration import services
from tests.integration.processes import poll, poll_while_moving
from tests.integration.stack import liaison_env, migrate
from tests.support.otlp import OtlpReceiver, Span
from tests.support.servers import CallbackRecorder, ServerThread

pytestmark = pytest.mark.integration
BOOT_TIMEOUT_S = 60  # three process trees boot side by side on a shared 2-core machine
SERVICES = ("liaison-web", "liaison-calls", "liaison-relay")


@dataclass
class Platform:
    web_url: str
    api_key: str
    receiver: OtlpReceiver
    callbacks: CallbackRecorder
    procs: list[Proc]
    log_dir: Path
    database_url: str
    callback_base: str  # the CallbackRecorder's http://127.0.0.1:<port>

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.tail(30)}" for p in self.procs)


def _delete_queues(broker_url: str, names: list[str]) -> None:
    with Connection(broker_url) as conn:
        channel = conn.default_channel
        for name in names:
            Queue(name, Exchange(name), routing_key=name).bind(channel).declare()
            channel.queue_delete(name)


def _answers(url: str) -> bool:
    try:
        return requests.get(url, timeout=2).status_code == 200
    except requests.RequestException:
        return False


@pytest.fixture
def platform(tmp_path: Path, vendor: ServerThread, vendor_secret: str) -> Iterator[Platform]:
    yield from _boot(tmp_path, vendor, vendor_secret, {})


def _boot(tmp_path: Path, vendor: ServerThread, vendor_secret: str, extra_env: dict[str, str]) -> Iterator[Platform]:
    services.require(services.REDIS_URL, "Redis")
    with ExitStack() as cleanup:
        database_url, db_name = services.create_postgres_database()
        cleanup.callback(services.drop_postgres_database, db_name)
        migrate(database_url)
        receiver = cleanup.enter_context(OtlpReceiver())
        callbacks = CallbackRecorder()
        callback_server = cleanup.enter_context(ServerThread(callbacks))
        db = Database(database_url)
        with db.transaction() as session:
            _, key, _ = create_client(session, f"traced-{uuid.uuid4().hex[:8]}", callback_server.url + "/cb")
        db.dispose()

        port = services.free_port()
        queue = f"liaison-trace-{uuid.uuid4().hex[:8]}"
        env = base_env()
        env.update(
            liaison_env(
                database_url=database_url,
                broker_url=services.REDIS_URL,
                vendor_url=vendor.url,
                vendor_secret=vendor_secret,
                public_url=f"http://127.0.0.1:{port}",
            )
        )
        env.update(
            LIAISON_QUEUE=queue,
            LIAISON_VAR_DIR=str(tmp_path),
            LIAISON_OUTBOUND_ALLOW=callback_server.url.removeprefix("http://"),
            LIAISON_LOG_LEVEL="info",
            LIAISON_LOG_FORMAT="json",
            WEB_ADDRESS="127.0.0.1",
            PORT=str(port),
            OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
            OTEL_BSP_SCHEDULE_DELAY="200",  # the SDK's own setting: export every 200 ms, not 5 s
        )
        env.update(extra_env)
        env.pop("OTEL_SERVICE_NAME", None)
        cleanup.callback(_delete_queues, services.REDIS_URL, [queue, f"{queue}.relay", f"{queue}.calls"])
        procs: list[Proc] = []
        for name in ("web", "calls", "relay"):
            proc = Proc(name, PROCFILE[name], env, tmp_path)
            procs.append(proc)
            cleanup.callback(proc.stop, 40)
        web_url = f"http://127.0.0.1:{port}"
        built = Platform(web_url, key.api_key, receiver, callbacks, procs, tmp_path, database_url, callback_server.url)
        poll("the web process to answer", lambda: _answers(web_url + "/healthz"), BOOT_TIMEOUT_S, built.logs)
        yield built


def _task(platform: Platform, correlation_id: str) -> dict:
    response = requests.get(
        f"{platform.web_url}/api/v1/tasks/{correlation_id}",
        headers={"Authorization": f"Bearer {platform.api_key}"},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


def _print_spans(spans: list[Span]) -> None:
    print(f"\n{'service':<15} {'name':<45} {'trace id':<32} {'span id':<16} parent")
    for span in spans:
        print(span.line())


def test_one_submitted_task_is_one_trace_across_web_calls_relay_vendor_and_domain_app(
    platform: Platform, vendor: ServerThread
) -> None:
    trace_id = secrets.token_hex(16)
    caller_span = secrets.token_hex(8)
    traceparent = f"00-{trace_id}-{caller_span}-01"
    correlation_id = f"traced-{uuid.uuid4().hex[:8]}"
    response = requests.post(
        f"{platform.web_url}/api/v1/tasks",
        json={"correlation_id": correlation_id, "input": {"n": 1}},
        headers={"Authorization": f"Bearer {platform.api_key}", "traceparent": traceparent},
        timeout=10,
    )
    assert response.status_code == 202, response.text

    def final() -> bool:
        return _task(platform, correlation_id)["state"] in TERMINAL

    poll_while_moving(
        "the task to be final", final, lambda: _task(platform, correlation_id)["state"], 60, platform.logs
    )
    assert _task(platform, correlation_id)["state"] == "succeeded"

    def in_trace() -> list[Span]:
        return [s for s in platform.receiver.spans() if s.trace_id == trace_id]

    def orphans_of(spans: list[Span]) -> list[Span]:
        ids = {s.span_id for s in spans}
        return [s for s in spans if s.parent_id and s.parent_id not in ids and s.parent_id != caller_span]

    def every_service_reported() -> bool:
        spans = in_trace()
        seen = {s.service for s in spans}
        relayed = any(s.service == "liaison-relay" and s.name.startswith("liaison.relay") for s in spans)
        # each process exports in batches: a child can arrive a batch before its parent (the second
        # relay's spans, say), so the trace is complete once every parent has arrived too
        whole = not orphans_of(spans)
        return set(SERVICES) <= seen and relayed and whole and bool(platform.callbacks.posts_to("/cb"))

    poll_while_moving(
        "spans from web, calls and relay",
        every_service_reported,
        lambda: len(platform.receiver.spans()),
        30,
        lambda: platform.logs() + "\n" + "\n".join(s.line() for s in platform.receiver.spans()),
    )
    spans = in_trace()
    _print_spans(spans)

    # web: the submit's server span is a child of the caller's span
    submit = [s for s in spans if s.service == "liaison-web" and s.parent_id == caller_span]
    assert submit, "the submit's server span continues the caller's"
    # the vendor call and the callback: spans of the calls and relay processes, in the same trace
    assert any(s.service == "liaison-calls" and s.name.startswith("liaison.submit") for s in spans)
    assert any(s.service == "liaison-relay" and s.name.startswith("liaison.relay") for s in spans)
    # every parent in the trace arrived: the task's spans hang together (Celery's own publish and
    # run spans are a trace per message since issue 44, linked from the task's attempt spans)
    ids = {s.span_id for s in spans}
    assert not orphans_of(spans), f"spans whose parent never arrived: {orphans_of(spans)}"

    # the vendor received the trace (the simulator records the header each job was created with)
    jobs = requests.get(f"{vendor.url}/_sim/jobs", timeout=10).json()["jobs"]
    job = next(j for j in jobs if j["input"] == {"n": 1} and j["traceparent"] and trace_id in j["traceparent"])
    vendor_parent = parse_traceparent(job["traceparent"])
    assert vendor_parent is not None and vendor_parent.trace_id == trace_id
    assert vendor_parent.parent_id in ids, "the vendor's parent is a span Liaison exported"
    # the domain app received it on every callback
    posts = platform.callbacks.posts_to("/cb")
    assert posts
    for post in posts:
        received = parse_traceparent(post.headers.get("traceparent"))
        assert received is not None and received.trace_id == trace_id, post.headers

    # logs carry trace_id beside correlation_id
    lines = [
        json.loads(line)
        for proc in platform.procs
        for line in proc.log.read_text(errors="replace").splitlines()
        if line.startswith("{")
    ]
    assert any(line.get("trace_id") == trace_id and line.get("correlation_id") == correlation_id for line in lines), (
        "a log line with trace_id beside correlation_id"
    )


def test_without_an_endpoint_no_provider_or_instrumentation_is_installed(tmp_path: Path) -> None:
    """Unset, ``create_app`` installs nothing: the global tracer provider stays the API's proxy, no
    library is patched, and the seams make no span."""
    import subprocess
    import sys

    script = """
import os
os.environ.pop("OTEL_EXPORTER_OTLP_ENDPOINT", None)
from opentelemetry import trace
from app import create_app
from foundation import tracing
from foundation.settings import Settings
app = create_app(Settings.from_env({"LIAISON_VAR_DIR": os.environ["VAR"]}))
import requests, flask
from opentelemetry.instrumentation.requests import RequestsInstrumentor
from opentelemetry.instrumentation.celery import CeleryInstrumentor
with tracing.continued("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "x"):
    headers = tracing.outbound_headers()
    current = trace.get_current_span().get_span_context().is_valid
print(type(trace.get_tracer_provider()).__name__, tracing.enabled(),
      RequestsInstrumentor().is_instrumented_by_opentelemetry, CeleryInstrumentor().is_instrumented_by_opentelemetry,
      getattr(app, "_is_instrumented_by_opentelemetry", False), current, headers["traceparent"][:3])
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "OTEL_", "DATABASE_", "CELERY_"))}
    env["VAR"] = str(tmp_path)
    out = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    ).stdout.split()
    assert out == ["ProxyTracerProvider", "False", "False", "False", "False", "False", "00-"]


# --- issue 44: what a tenant's trace context may reach, and what spans may say ------------------

CAP_ENV = {
    # one task of the vendor's open at a time: a task that frees it releases the next, whoever's
    "LIAISON_PROVIDER_SIM_MAX_IN_FLIGHT": "1",
    # a held submit retry (Retry-After 120) stays within the cap: the task waits, it is not dead-lettered
    "LIAISON_PROVIDER_SIM_SUBMIT_BACKOFF_CAP_S": "300",
}
HELD = {"transient_failures": 1000, "retry_after": 120}
#: a query-string parameter shape: ``?key=`` / ``&key=`` (SQL placeholders are ``%(name)s`` on PostgreSQL)
QUERY = re.compile(r"[?&][A-Za-z0-9_.~%-]+=")
URL_KEYS = ("http.url", "url.full", "http.target", "url.query")
SERVER, CLIENT = 2, 3  # OTLP's span kinds


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory, vendor: ServerThread, vendor_secret: str) -> Iterator[Platform]:
    """One platform for the module's issue-44 tests (each works in traces and clients of its own)."""
    yield from _boot(tmp_path_factory.mktemp("capped-trace"), vendor, vendor_secret, CAP_ENV)


def _new_client(platform: Platform, callback_url: str) -> str:
    db = Database(platform.database_url)
    try:
        with db.transaction() as session:
            _, key, _ = create_client(session, f"tenant-{uuid.uuid4().hex[:8]}", callback_url)
    finally:
        db.dispose()
    return key.api_key


def _traceparent(flags: str = "01") -> tuple[str, str]:
    trace_id = secrets.token_hex(16)
    return trace_id, f"00-{trace_id}-{secrets.token_hex(8)}-{flags}"


def _submit(platform: Platform, api_key: str, correlation_id: str, headers: dict[str, str], **body: Any) -> None:
    response = requests.post(
        f"{platform.web_url}/api/v1/tasks",
        json={"correlation_id": correlation_id, **body},
        headers={"Authorization": f"Bearer {api_key}", **headers},
        timeout=10,
    )
    assert response.status_code == 202, response.text


def _get(platform: Platform, api_key: str, correlation_id: str, headers: dict[str, str] | None = None) -> dict:
    response = requests.get(
        f"{platform.web_url}/api/v1/tasks/{correlation_id}",
        headers={"Authorization": f"Bearer {api_key}", **(headers or {})},
        timeout=10,
    )
    response.raise_for_status()
    return response.json()


def _final(platform: Platform, api_key: str, correlation_id: str) -> str:
    def state() -> str:
        return str(_get(platform, api_key, correlation_id)["state"])

    poll_while_moving(f"{correlation_id} to be final", lambda: state() in TERMINAL, state, 60, platform.logs)
    return state()


def _vendor_job(vendor: ServerThread, marker: str) -> dict:
    """The simulator's job whose input carries ``marker`` (it records the headers it was created with)."""
    jobs = requests.get(f"{vendor.url}/_sim/jobs", timeout=10).json()["jobs"]
    found = [j for j in jobs if isinstance(j["input"], dict) and j["input"].get("marker") == marker]
    assert len(found) == 1, found
    return found[0]


def _spans_until(platform: Platform, what: str, found: Callable[[list[Span]], object]) -> list[Span]:
    poll_while_moving(
        what,
        lambda: found(platform.receiver.spans()),
        lambda: len(platform.receiver.spans()),
        30,
        lambda: platform.logs() + "\n" + "\n".join(s.line() for s in platform.receiver.spans()),
    )
    return platform.receiver.spans()


def test_a_task_released_in_another_tenants_request_runs_in_its_own_trace_without_their_baggage(
    capped: Platform, vendor: ServerThread
) -> None:
    """Tenant A's request (its cancel) frees the vendor's one place, which releases tenant B's queued
    task in that request's commit. B's work -- the Celery message, its run, the vendor call -- is
    B's trace alone, and neither B's nor A's own vendor call carries A's ``baggage``."""
    secret = secrets.token_hex(8)
    baggage = {"baggage": f"tenantA-secret={secret},userId=alice"}
    key_a = _new_client(capped, capped.callback_base + "/a")
    key_b = _new_client(capped, capped.callback_base + "/b")
    run = uuid.uuid4().hex[:6]

    # A's own task, submitted with baggage: it goes to the vendor and succeeds
    _, tp_a0 = _traceparent()
    _submit(capped, key_a, f"a0-{run}", {"traceparent": tp_a0, **baggage}, input={"marker": f"a0-{run}"})
    assert _final(capped, key_a, f"a0-{run}") == "succeeded"
    # A's second task holds the vendor's one place: released, its submit answered 503 + Retry-After
    _submit(capped, key_a, f"a1-{run}", {**baggage}, input={"marker": f"a1-{run}", "simulate": HELD})
    # B's task waits in the database for that place
    trace_b, tp_b = _traceparent()
    _submit(capped, key_b, f"b1-{run}", {"traceparent": tp_b}, input={"marker": f"b1-{run}"})
    assert (_get(capped, key_b, f"b1-{run}")["waiting"] or {}).get("reason"), "B's task is queued"

    # A cancels its held task (never at the vendor: canceled at once), in a request with its baggage
    trace_cancel, tp_cancel = _traceparent()
    response = requests.post(
        f"{capped.web_url}/api/v1/tasks/a1-{run}/cancel",
        headers={"Authorization": f"Bearer {key_a}", "traceparent": tp_cancel, **baggage},
        timeout=10,
    )
    assert response.status_code == 202, response.text
    assert _final(capped, key_b, f"b1-{run}") == "succeeded"

    # the vendor saw B's trace on B's job, and nobody's baggage on any job
    job_b = _vendor_job(vendor, f"b1-{run}")
    parent_b = parse_traceparent(job_b["traceparent"])
    assert parent_b is not None and parent_b.trace_id == trace_b, job_b["traceparent"]
    assert job_b["baggage"] is None, f"B's vendor call carried {job_b['baggage']!r}"
    assert _vendor_job(vendor, f"a0-{run}")["baggage"] is None, "A's own vendor call carried its baggage"

    def b_attempt(spans: list[Span]) -> Span | None:
        return next((s for s in spans if s.trace_id == trace_b and s.name == "liaison.submit attempt"), None)

    def b_run(spans: list[Span]) -> Span | None:
        """The Celery run span of B's submit: in the cancel's trace (the bug), or the one B's attempt links to."""
        attempt = b_attempt(spans)
        linked = attempt.linked if attempt else ()
        runs = [s for s in spans if s.service == "liaison-calls" and s.name == "run/liaison.submit"]
        return next((s for s in runs if s.trace_id == trace_cancel or s.trace_id in linked), None)

    spans = _spans_until(capped, "B's submit: its attempt and its Celery run", lambda s: b_attempt(s) and b_run(s))
    attempt, run_span = b_attempt(spans), b_run(spans)
    assert attempt is not None and run_span is not None
    assert f"{parent_b.parent_id}" in {s.span_id for s in spans if s.trace_id == trace_b}
    in_cancel = [s for s in spans if s.trace_id == trace_cancel]
    _print_spans(in_cancel)
    assert run_span.trace_id != trace_cancel, "B's Celery run span landed in A's (the cancel's) trace"
    assert not [s for s in in_cancel if "liaison.submit" in s.name], "B's submit has spans in A's trace"
    assert not [s for s in in_cancel if s.service == "liaison-calls"], "the calls process did nothing for A's cancel"
    assert not [s for s in spans if any(secret in text for text in s.texts())], "A's baggage in a span"


def test_no_exported_span_holds_a_query_string_or_a_callback_token(capped: Platform, vendor: ServerThread) -> None:
    """The callback URL's token (``?token=…``) reaches the domain app, and no span: the requests
    instrumentation's ``http.url``, Flask's ``http.target`` and ``http.url`` are stripped like the logs'."""
    token = secrets.token_urlsafe(16)
    asked = secrets.token_urlsafe(16)
    api_key = _new_client(capped, f"{capped.callback_base}/t?token={token}")
    correlation_id = f"url-{uuid.uuid4().hex[:6]}"
    trace_id, traceparent = _traceparent()
    _submit(capped, api_key, correlation_id, {"traceparent": traceparent}, input={"marker": correlation_id})
    assert _final(capped, api_key, correlation_id) == "succeeded"
    # a request of the caller's with a query string of its own
    trace_get, tp_get = _traceparent()
    response = requests.get(
        f"{capped.web_url}/api/v1/tasks/{correlation_id}?token={asked}",
        headers={"Authorization": f"Bearer {api_key}", "traceparent": tp_get},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    delivered = capped.callbacks.posts_to("/t")
    assert delivered, "the callback went out (with its token: the recorder's path has no query)"

    def seen(spans: list[Span]) -> bool:
        relayed = any(s.trace_id == trace_id and s.service == "liaison-relay" and s.kind == CLIENT for s in spans)
        served = any(s.trace_id == trace_get and s.service == "liaison-web" and s.kind == SERVER for s in spans)
        return relayed and served

    spans = _spans_until(capped, "the relay's client span and the GET's server span", seen)
    ours = [s for s in spans if s.trace_id in (trace_id, trace_get)]
    urls = [s.attributes[key] for s in ours for key in URL_KEYS if key in s.attributes]
    assert f"{capped.callback_base}/t" in urls, f"the callback's URL, stripped, is still named: {urls}"
    assert f"/api/v1/tasks/{correlation_id}" in urls, f"the GET's target, stripped, is still named: {urls}"
    leaks = [(s.service, s.name, text) for s in spans for text in s.texts() if token in text or asked in text]
    assert not leaks, f"a token in an exported span: {leaks}"
    queries = [(s.service, s.name, text) for s in spans for text in s.texts() if QUERY.search(text)]
    assert not queries, f"a query string in an exported span: {queries}"


def test_a_callers_unsampled_flag_does_not_hide_the_task_from_operators(capped: Platform) -> None:
    """A traceparent with sampled=0: our sampler (parentbased_always_on) records the task's trace anyway."""
    api_key = _new_client(capped, capped.callback_base + "/s")
    trace_id, traceparent = _traceparent(flags="00")
    correlation_id = f"unsampled-{uuid.uuid4().hex[:6]}"
    _submit(capped, api_key, correlation_id, {"traceparent": traceparent}, input={"marker": correlation_id})
    assert _final(capped, api_key, correlation_id) == "succeeded"

    def recorded(spans: list[Span]) -> bool:
        services_seen = {s.service for s in spans if s.trace_id == trace_id}
        return {"liaison-web", "liaison-calls"} <= services_seen

    _spans_until(capped, "spans of the unsampled caller's trace from web and calls", recorded)
