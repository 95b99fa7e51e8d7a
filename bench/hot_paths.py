"""Benchmark: what each step of one job costs, alone, in one process, for Liaison and the naive pipeline.

    .venv/bin/python bench/hot_paths.py                        # 500 jobs each, its own PostgreSQL cluster and Redis
    .venv/bin/python bench/hot_paths.py --only liaison --profile relay     # and the relay's cProfile top 30

Where ``bench/e2e.py`` measures the whole platform under load (every process sharing two cores),
this runs each hot path alone, one call after another on one thread. For each job, in order:

- ``submit``: ``POST /api/v1/tasks`` through the Flask app (a test client, no HTTP server: the
  view, authentication, the submit limits, the transaction, the publish to the broker);
- ``submission``: the ``liaison.submit`` task body against a stub vendor that answers a job id;
- ``accepted`` and ``completed``: the vendor's two signed webhooks, ``POST /webhooks/<provider>``;
- ``relay``: the ``liaison.relay`` task body, twice (each callback to a stub domain app);

and the same steps of the naive pipeline (bench/naive/: its views and its task bodies).

Per call it prints the CPU time of this process (ms; the stub vendor and domain app run in it too,
and count), the SQL statements sent, and the Python function calls made on the calling thread
(the stubs' threads are not counted), with the calls of every step by package. CPU time on a shared
host drifts by a fifth within minutes; the call counts repeat exactly, so they are what tells a
change in the code's own work from the machine's. The PostgreSQL server's CPU is not in any figure
(``bench/e2e.py`` has it). Celery task bodies are called in this process, not through a worker:
the task's code, not Celery's, is measured (the broker still receives every publish). Nothing here
is a test; nothing asserts a figure (docs/benchmarks.md, "Step 3", reads them).
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import pstats
import sys
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sqlalchemy import event, select

from bench.environment import PG_SETTINGS
from bench.postgres_cluster import PostgresCluster
from bench.services import RedisServer
from foundation.settings import Settings
from models.messages import OutboxKind, OutboxMessage
from webhooks.signing import generate_secret, sign

PROVIDER = "bench"
STEPS = ("submit", "submission", "accepted", "completed", "relay")


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


def _module(path: str) -> str:
    """The package a file belongs to: ``sqlalchemy``, ``models``, ``<stdlib>``."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    root = str(Path(__file__).resolve().parents[1]) + "/"
    if path.startswith(root):
        return path[len(root) :].split("/", 1)[0]
    return "<stdlib>"


class Meter:
    """CPU seconds, statements and Python function calls per step, and an optional profile of one
    step. CPU time drifts with the machine (a shared host's speed moves by a fifth within minutes);
    the count of Python function calls does not, so it is the figure that tells a change to the
    code's own work from the machine's mood. It is counted on jobs of its own (``--count-jobs``):
    counting every call slows the process down several times over."""

    def __init__(self, profile: str | None) -> None:
        self.profile = profile
        self.profiler = cProfile.Profile() if profile else None
        self.counting = False
        self.reset()

    def reset(self) -> None:
        self.cpu = dict.fromkeys(STEPS, 0.0)
        self.timed = dict.fromkeys(STEPS, 0)
        self.counted = dict.fromkeys(STEPS, 0)
        self.statements = dict.fromkeys(STEPS, 0)
        self.python_calls = dict.fromkeys(STEPS, 0)
        #: Python calls of the counted jobs by the package whose code ran
        self.by_module: Counter[str] = Counter()
        self.step: str | None = None

    def on_statement(self, *_: Any) -> None:
        if self.step is not None and not self.counting:
            self.statements[self.step] += 1

    def _count(self, frame: Any, what: str, _arg: Any) -> None:
        if what == "call" and self.step is not None:  # a Python function entered (C calls left out)
            self.python_calls[self.step] += 1
            self.by_module[_module(frame.f_code.co_filename)] += 1

    def run(self, step: str, call: Callable[[], Any]) -> Any:
        self.step = step
        try:
            if self.counting:
                self.counted[step] += 1
                sys.setprofile(self._count)
                try:
                    return call()
                finally:
                    sys.setprofile(None)
            profiling = self.profiler is not None and step == self.profile
            started = time.process_time()
            if profiling:
                self.profiler.enable()  # type: ignore[union-attr]
            try:
                return call()
            finally:
                if profiling:
                    self.profiler.disable()  # type: ignore[union-attr]
                self.cpu[step] += time.process_time() - started
                self.timed[step] += 1
        finally:
            self.step = None

    def per_call(self, step: str) -> tuple[float, float, float]:
        """(CPU ms, statements, Python calls) per call of ``step``."""
        timed, counted = self.timed[step] or 1, self.counted[step] or 1
        return 1000 * self.cpu[step] / timed, self.statements[step] / timed, self.python_calls[step] / counted

    def per_job(self, args: argparse.Namespace) -> tuple[float, float, float]:
        jobs = max(1, args.jobs)
        return (
            1000 * sum(self.cpu.values()) / jobs,
            sum(self.statements.values()) / jobs,
            sum(self.python_calls.values()) / max(1, args.count_jobs),
        )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], epilog=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--jobs", type=int, default=500, help="timed jobs (default 500; a tenth, at most 50, warm up first)"
    )
    parser.add_argument("--count-jobs", type=int, default=20, help="more jobs, to count Python calls (default 20)")
    parser.add_argument("--only", choices=("liaison", "naive"), help="one pipeline only")
    parser.add_argument("--profile", choices=STEPS, help="print Liaison's cProfile of this step (top 30)")
    args = parser.parse_args()

    with PostgresCluster(PG_SETTINGS) as pg, RedisServer() as redis, stub_server() as stub:
        meters = {}
        if args.only != "naive":
            meters["liaison"] = run_liaison(args, pg.create_database("hot_liaison"), redis.url, stub)
        if args.only != "liaison":
            meters["naive"] = run_naive(args, pg.create_database("hot_naive"), redis.url, stub)
    report(args, meters)


def jobs(args: argparse.Namespace, meter: Meter, one_job: Callable[[int], None]) -> None:
    """Warm up, then the timed jobs, then the counted ones."""
    warm = min(50, args.jobs // 10)
    for n in range(warm + args.jobs + args.count_jobs):
        meter.counting = n >= warm + args.jobs
        if n == warm:
            meter.reset()  # the warm-up is not counted
        one_job(n)


def run_liaison(args: argparse.Namespace, database_url: str, broker_url: str, stub: str) -> Meter:
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
    meter = Meter(args.profile)
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


def run_naive(args: argparse.Namespace, database_url: str, broker_url: str, stub: str) -> Meter:
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
    meter = Meter(None)
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


def report(args: argparse.Namespace, meters: dict[str, Meter]) -> None:
    print(f"{args.jobs} jobs each, after a warm-up; CPU of this process per call (ms) and statements per call;")
    print(f"Python function calls per call, counted over {args.count_jobs} more jobs")
    names = list(meters)
    print("  " + f"{'step':12}" + "".join(f" | {name:>8} CPU ms  stmts  py calls" for name in names))
    for step in (*STEPS, "per job"):
        line = f"  {step:12}"
        for name in names:
            meter = meters[name]
            if step == "per job":
                cpu, stmts, calls = meter.per_job(args)
            else:
                cpu, stmts, calls = meter.per_call(step)
            line += f" | {cpu:15.3f} {stmts:6.1f} {calls:9.0f}"
        print(line)
    print("\nPython calls per job by the package whose code ran them (werkzeug: the test client and the views)")
    modules = Counter[str]()
    for meter in meters.values():
        modules.update(meter.by_module)
    print("  " + f"{'package':18}" + "".join(f" {name:>9}" for name in names))
    for module, _ in modules.most_common(16):
        print(
            "  "
            + f"{module:18}"
            + "".join(f" {meters[name].by_module[module] / args.count_jobs:9.0f}" for name in names)
        )
    liaison = meters.get("liaison")
    if liaison is not None and liaison.profiler is not None:
        print(f"\n== cProfile of Liaison's {args.profile}")
        stats = pstats.Stats(liaison.profiler)
        stats.sort_stats("cumulative").print_stats(30)
        stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
