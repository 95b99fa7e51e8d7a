"""Benchmark: beat jobs on a large table. Prints figures; asserts nothing (targets live here, not
in tests).

    .venv/bin/python bench/beat_jobs.py                      # 1,000,000 tasks on a fresh PostgreSQL database
    .venv/bin/python bench/beat_jobs.py --tasks 100000 --sqlite

It builds the schema with the real migrations, fills ``external_tasks`` with mostly finished tasks
plus a few due ones, then times check_deadlines (escalate_due, and the heartbeat claim), the
reconcile claim, a reconcile run against the real simulator over HTTP, and pruning; on PostgreSQL
it prints EXPLAIN ANALYZE.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
import requests
from sqlalchemy import Select, insert, text

import simulator
from app import create_app
from foundation.settings import Settings
from models import ExternalTask, ProcessedMessage
from models.base import utcnow
from models.db import Database
from service.lifecycle import DEADLINES, due_query, escalate_due
from service.probes import claim_silent, silent_query
from service.reconciliation import claim_quiet, quiet_query
from service.retention import prune_processed_messages
from tests.integration.stack import migrate
from tests.support.servers import ServerThread
from webhooks.signing import generate_secret
from workers.reconcile import reconcile

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"


def fill(db: Database, total: int, due: int) -> None:
    """``total`` tasks: all but ``due`` finished long ago; ``due`` overdue and quiet at the vendor."""
    t0 = time.perf_counter()
    with db.transaction() as s:
        s.execute(
            text("INSERT INTO clients (name, callback_secrets, created_at) VALUES ('bench', '[]', CURRENT_TIMESTAMP)")
        )
        client_id = s.scalar(text("SELECT id FROM clients WHERE name = 'bench'"))
    chunk = 100_000
    long_ago = utcnow() - timedelta(days=30)
    for start in range(0, total, chunk):
        rows = []
        for i in range(start, min(start + chunk, total)):
            is_due = i < due
            rows.append(
                {
                    "correlation_id": f"bench-{i}",
                    "client_id": client_id,
                    "provider": "sim",
                    "state": "accepted" if is_due else "succeeded",
                    "input": {"i": i},
                    "vendor_job_id": f"job-{i}",
                    "acceptance_deadline": long_ago,
                    "execution_deadline": long_ago,
                    "on_deadline": "escalate",
                    "attempts": 1,
                    "created_at": long_ago,
                    "updated_at": long_ago,
                    "checked_at": long_ago,
                    # silent since long ago too: the heartbeat check's claim is timed below
                    "heartbeat_timeout_s": 600,
                    "heartbeat_due_at": long_ago if is_due else None,
                }
            )
        with db.transaction() as s:
            s.execute(insert(ExternalTask), rows)
        print(f"  inserted {min(start + chunk, total):>9,} tasks", flush=True)
    with db.engine.connect() as c:  # fresh statistics, as autovacuum would have them by now
        c.exec_driver_sql("ANALYZE")
    print(f"filled {total:,} tasks ({due} due) in {time.perf_counter() - t0:.1f}s")


def explain(db: Database, statement: Select) -> str:
    with db.engine.connect() as conn:
        compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        prefix = "EXPLAIN ANALYZE" if db.engine.dialect.name == "postgresql" else "EXPLAIN QUERY PLAN"
        rows = conn.exec_driver_sql(f"{prefix} {compiled}").fetchall()
        conn.rollback()
    return "\n".join("    " + " ".join(str(c) for c in r) for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1_000_000, help="rows in external_tasks")
    parser.add_argument("--due", type=int, default=200, help="tasks due for escalation and reconciliation")
    parser.add_argument("--prune", type=int, default=100_000, help="old processed messages to prune")
    parser.add_argument("--sqlite", action="store_true", help="use a temporary SQLite file instead of PostgreSQL")
    args = parser.parse_args()

    name = None
    if args.sqlite:
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    else:
        name = f"liaison_bench_{uuid.uuid4().hex[:8]}"
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    secret = generate_secret()
    vendor = ServerThread(simulator.create_app({"SIMULATOR_WEBHOOK_SECRET": secret})).start()
    try:
        migrate(url)
        app = create_app(
            Settings.from_env(
                {
                    "DATABASE_URL": url,
                    "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
                    "LIAISON_PROVIDERS": "sim",
                    "LIAISON_PROVIDER_SIM_BASE_URL": vendor.url,
                    "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": secret,
                    "LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S": "1000",
                    "LIAISON_QUEUE": f"bench-{uuid.uuid4().hex[:6]}",
                    "LIAISON_LOG_LEVEL": "warning",
                    "LIAISON_VAR_DIR": tempfile.mkdtemp(),
                }
            )
        )
        ctx = app.extensions["liaison"]
        logging.getLogger("werkzeug").setLevel(logging.WARNING)  # the simulator's access log
        fill(ctx.db, args.tasks, args.due)
        now = utcnow()

        print("\n== plans")
        for rule in DEADLINES:
            print(f"  check_deadlines/{rule.name}:\n{explain(ctx.db, due_query(rule, now, 500))}")
        print(f"  reconcile claim:\n{explain(ctx.db, quiet_query('sim', 900, now, 500))}")
        print(f"  check_deadlines/heartbeat:\n{explain(ctx.db, silent_query(now, 500))}")

        print("\n== check_deadlines (one run; the publish to the broker is left out)")
        t0 = time.perf_counter()
        with ctx.db.transaction() as s:
            escalated, _ = escalate_due(s, now, 500)
        print(f"  escalated {escalated} of {args.tasks:,} tasks in {(time.perf_counter() - t0) * 1000:.0f} ms")
        t0 = time.perf_counter()
        with ctx.db.transaction() as s:
            again, _ = escalate_due(s, now, 500)
        print(f"  a second run found {again} due in {(time.perf_counter() - t0) * 1000:.1f} ms")
        for run in ("first", "second"):
            t0 = time.perf_counter()
            with ctx.db.transaction() as s:
                silent, _ = claim_silent(s, now, 500)
            took_ms = (time.perf_counter() - t0) * 1000
            print(
                f"  heartbeats, {run} run: {silent} silent of {args.tasks:,} claimed (a probe each) in {took_ms:.1f} ms"
            )

        print("\n== reconcile")
        t0 = time.perf_counter()
        with ctx.db.transaction() as s:
            claimed = claim_quiet(s, "sim", 900, now + timedelta(days=1), 500)
        print(f"  claim of {len(claimed)} quiet tasks among {args.tasks:,}: {(time.perf_counter() - t0) * 1000:.1f} ms")
        for q in claimed:  # the simulator must know the jobs: create them, then point the tasks at them
            job = requests.post(
                f"{vendor.url}/jobs",
                headers={"Idempotency-Key": q.correlation_id},
                json={
                    "reference": q.correlation_id,
                    "input": {"simulate": {"drop": ["job.accepted", "job.completed"]}},
                    "callback_url": "http://127.0.0.1:9/none",
                },
                timeout=5,
            ).json()
            requests.post(f"{vendor.url}/_sim/jobs/{job['job_id']}/complete", json={"status": "succeeded"}, timeout=5)
            with ctx.db.transaction() as s:
                s.execute(
                    text("UPDATE external_tasks SET vendor_job_id = :j, checked_at = :t WHERE id = :i").bindparams(
                        j=job["job_id"], t=now - timedelta(days=1), i=q.task_id
                    )
                )
        ctx.publisher.publish = lambda rows, now=None: len(list(rows))  # no broker traffic in the benchmark
        t0 = time.perf_counter()
        report = reconcile(ctx, now)
        took = time.perf_counter() - t0
        print(
            f"  reconcile asked the simulator about {report.checked} tasks over HTTP, applied {report.applied}: "
            f"{took:.2f}s, {report.checked / took:.0f} tasks/s (rate limit 1000/s)"
        )

        print("\n== prune_processed_messages")
        old = now - timedelta(days=10)
        with ctx.db.transaction() as s:
            for start in range(0, args.prune, 50_000):
                s.execute(
                    insert(ProcessedMessage),
                    [
                        {"source": "bench", "message_id": str(i), "message_type": "x", "processed_at": old}
                        for i in range(start, min(start + 50_000, args.prune))
                    ],
                )
        t0 = time.perf_counter()
        removed = prune_processed_messages(ctx.db, now, 96 * 3600)
        took = time.perf_counter() - t0
        print(f"  removed {removed:,} rows in batches of 1000: {took:.2f}s, {removed / took:,.0f} rows/s")
        ctx.db.dispose()
    finally:
        vendor.stop()
        if name:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
