"""One trace across systems (issue 22): a task submitted with a W3C ``traceparent`` is one trace in
every Liaison process that works on it, and the vendor and the domain app receive that trace.

The platform is the Procfile's ``web`` (gunicorn, forked workers), ``calls`` and ``relay`` (Celery,
``--pool threads``) lines as processes of their own, on a fresh PostgreSQL database and Redis, with
``OTEL_EXPORTER_OTLP_ENDPOINT`` naming a real OTLP/HTTP receiver on loopback started here (it
decodes the protobuf export requests). The vendor is the session's simulator, which records the
traceparent each job was created with; the domain app is a ``CallbackRecorder``.

Run with ``-s`` to see the trace's span list (service, name, trace id, span id, parent).
"""

from __future__ import annotations

import json
import os
import secrets
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

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
        env.pop("OTEL_SERVICE_NAME", None)
        cleanup.callback(_delete_queues, services.REDIS_URL, [queue, f"{queue}.relay", f"{queue}.calls"])
        procs: list[Proc] = []
        for name in ("web", "calls", "relay"):
            proc = Proc(name, PROCFILE[name], env, tmp_path)
            procs.append(proc)
            cleanup.callback(proc.stop, 40)
        web_url = f"http://127.0.0.1:{port}"
        built = Platform(web_url, key.api_key, receiver, callbacks, procs, tmp_path)
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
    # no span of the task in another trace: everything Liaison did for it is this trace
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
