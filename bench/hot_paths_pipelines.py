"""The two pipelines bench/hot_paths.py runs one job at a time, in this process: Liaison (its Flask
app through a test client, its Celery task bodies called directly) and the naive pipeline of
bench/naive/, each driving every step of a job through a ``Meter``, against one stub that is both
the vendor and the domain app. Apart from the entry point, which starts the servers and prints."""

from __future__ import annotations

import argparse
import functools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sqlalchemy import event, select

from bench.hot_paths_meter import Meter
from foundation.settings import Settings
from models.messages import OutboxKind, OutboxMessage
from webhooks.signing import generate_secret, sign

PROVIDER = "bench"


class _Stub(BaseHTTPRequestHandler):
    """The vendor's ``POST /jobs`` (a job id) and the domain app's callbacks (204), on one port."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.startswith("/jobs"):
            body = json.dumps({"job_id": "job_" + uuid.uuid4().hex, "status": "queued"}).encode()
            self.send_response(202)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        self.send_response(204)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@contextmanager
def stub_server() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()


def jobs(args: argparse.Namespace, meter: Meter, one_job: Callable[[int], None]) -> None:
    """Warm up, then the timed jobs, then the counted ones."""
    warm = min(50, args.jobs // 10)
    for n in range(warm + args.jobs + args.count_jobs):
        meter.counting = n >= warm + args.jobs
        if n == warm:
            meter.reset()  # the warm-up is not counted
        one_job(n)


def run_liaison(
    args: argparse.Namespace, database_url: str, broker_url: str, stub: str, server_cpu: Callable[[], float]
) -> Meter:
    from alembic import command

    from app import create_app
    from app.cli import alembic_config
    from models.task import ExternalTask
    from service.credentials import create_client

    command.upgrade(alembic_config(database_url), "head")
    vendor_secret = generate_secret()
    env = {
        "DATABASE_URL": database_url,
        "CELERY_BROKER_URL": broker_url,
        "LIAISON_PROVIDERS": PROVIDER,
        f"LIAISON_PROVIDER_{PROVIDER.upper()}_BASE_URL": f"http://{stub}",
        f"LIAISON_PROVIDER_{PROVIDER.upper()}_WEBHOOK_SECRETS": vendor_secret,
        # a benchmark of the code lifts the limits (bench/stacks.py says why)
        f"LIAISON_PROVIDER_{PROVIDER.upper()}_RATE_LIMIT_PER_S": "1000000",
        f"LIAISON_PROVIDER_{PROVIDER.upper()}_RATE_LIMIT_BURST": "1000000",
        "LIAISON_CLIENT_SUBMIT_RATE_PER_S": "1000000",
        "LIAISON_CLIENT_SUBMIT_BURST": "1000000",
        "LIAISON_CLIENT_MAX_OPEN_TASKS": "100000000",
        "LIAISON_OUTBOUND_ALLOW": stub,
        "LIAISON_LOG_LEVEL": "warning",
        "LIAISON_QUEUE": "hot-liaison",
    }
    app = create_app(Settings.from_env(env))
    ctx, celery = app.extensions["liaison"], app.extensions["celery"]
    celery.loader.import_default_modules()  # the task modules celeryconfig lists, as a worker loads them
    submit_task, relay_task = celery.tasks["liaison.submit"], celery.tasks["liaison.relay"]
    with ctx.db.transaction() as session:
        _, key, _ = create_client(session, "bench", f"http://{stub}/cb")
    headers = {"Authorization": f"Bearer {key.api_key}", "Content-Type": "application/json"}
    client = app.test_client()
    meter = Meter(args.profile, server_cpu)
    event.listen(ctx.db.engine, "before_cursor_execute", meter.on_statement)

    def pending(kind: str, cid: str) -> list[int]:
        with ctx.db.transaction() as session:
            return list(
                session.scalars(
                    select(OutboxMessage.id)
                    .where(
                        OutboxMessage.correlation_id == cid, OutboxMessage.kind == kind, OutboxMessage.done_at.is_(None)
                    )
                    .order_by(OutboxMessage.id)
                )
            )

    def webhook(body: dict[str, Any]) -> None:
        raw, signed = signed_event(vendor_secret, body)
        answer = client.post(f"/webhooks/{PROVIDER}", data=raw, headers=signed)
        assert answer.status_code == 200 and (answer.json or {}).get("status") == "applied", answer.json

    def one_job(n: int) -> None:
        cid = f"hot-{n}-{uuid.uuid4().hex[:6]}"
        body = json.dumps({"correlation_id": cid, "input": {"n": n, "sku": "A1"}})
        submit_headers = {**headers, "Idempotency-Key": cid}
        answer = meter.run("submit", lambda: client.post("/api/v1/tasks", data=body, headers=submit_headers))
        assert answer.status_code == 202, answer.json
        [submit_row] = pending(OutboxKind.SUBMIT, cid)
        assert meter.run("submission", lambda: submit_task(submit_row)) == "submitted"
        with ctx.db.transaction() as session:
            job = session.scalar(select(ExternalTask.vendor_job_id).where(ExternalTask.correlation_id == cid))
        meter.run("accepted", lambda: webhook({"type": "job.accepted", "job_id": job, "status": "accepted"}))
        completed = {"type": "job.completed", "job_id": job, "status": "succeeded", "outcome": {"ok": n}}
        meter.run("completed", lambda: webhook(completed))
        for relay_row in pending(OutboxKind.RELAY, cid):
            assert meter.run("relay", functools.partial(relay_task, relay_row)) == "delivered"

    jobs(args, meter, one_job)
    with celery.connection_for_write() as conn:  # what the broker received; no worker reads it
        for queue in (ctx.settings.queue, ctx.settings.calls_queue, ctx.settings.relay_queue):
            conn.default_channel.queue_purge(queue)
    ctx.db.dispose()
    return meter


def run_naive(
    args: argparse.Namespace, database_url: str, broker_url: str, stub: str, server_cpu: Callable[[], float]
) -> Meter:
    """The naive pipeline of bench/naive/, its views and task bodies called the same way."""
    import os

    vendor_secret, callback_secret = generate_secret(), generate_secret()
    os.environ.update(
        NAIVE_DATABASE_URL=database_url,
        NAIVE_BROKER_URL=broker_url,
        NAIVE_QUEUE="hot-naive",
        NAIVE_API_KEY="naive-key",
        NAIVE_VENDOR_SECRET=vendor_secret,
        NAIVE_CALLBACK_SECRET=callback_secret,
        NAIVE_VENDOR_URL=f"http://{stub}",
        NAIVE_PUBLIC_URL="http://127.0.0.1:9",
        NAIVE_CALLBACK_URL=f"http://{stub}/cb",
    )
    from bench.naive import tasks
    from bench.naive.schema import engine, metadata
    from bench.naive.schema import jobs as naive_jobs
    from bench.naive.web import create_app

    metadata.create_all(engine())
    client = create_app().test_client()
    headers = {"Authorization": "Bearer naive-key", "Content-Type": "application/json"}
    meter = Meter(None, server_cpu)
    event.listen(engine(), "before_cursor_execute", meter.on_statement)

    def webhook(body: dict[str, Any]) -> None:
        raw, signed = signed_event(vendor_secret, body)
        answer = client.post(f"/webhooks/{PROVIDER}", data=raw, headers=signed)
        assert answer.status_code == 200, answer.json

    def one_job(n: int) -> None:
        cid = f"hot-{n}-{uuid.uuid4().hex[:6]}"
        body = json.dumps({"correlation_id": cid, "input": {"n": n, "sku": "A1"}})
        answer = meter.run("submit", lambda: client.post("/tasks", data=body, headers=headers))
        assert answer.status_code == 202, answer.json
        with engine().connect() as conn:
            job_row = conn.execute(select(naive_jobs.c.id).where(naive_jobs.c.correlation_id == cid)).scalar_one()
        meter.run("submission", lambda: tasks.submit(job_row))
        with engine().connect() as conn:
            job = conn.execute(select(naive_jobs.c.vendor_job_id).where(naive_jobs.c.id == job_row)).scalar_one()
        meter.run("accepted", lambda: webhook({"type": "job.accepted", "job_id": job, "status": "accepted"}))
        completed = {"type": "job.completed", "job_id": job, "status": "succeeded", "outcome": {"ok": n}}
        meter.run("completed", lambda: webhook(completed))
        for kind, state, outcome in (("task.accepted", "accepted", None), ("task.completed", "succeeded", {"ok": n})):
            callback = {"type": kind, "correlation_id": cid, "state": state, "outcome": outcome, "occurred_at": "now"}
            meter.run("relay", functools.partial(tasks.relay, callback))

    jobs(args, meter, one_job)
    with tasks.celery.connection_for_write() as conn:
        for queue in (tasks.QUEUE, tasks.QUEUE + ".relay"):
            conn.default_channel.queue_purge(queue)
    engine().dispose()
    return meter


def signed_event(secret: str, body: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    headers = sign(secret, "msg_" + uuid.uuid4().hex, int(time.time()), raw).as_dict()
    return raw, {**headers, "Content-Type": "application/json"}
