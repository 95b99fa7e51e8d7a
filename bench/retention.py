"""Benchmark: retention (service/retention.py) on PostgreSQL with 1,000,000 finished tasks. Prints
figures; asserts nothing (targets live here, not in tests).

    .venv/bin/python bench/retention.py                   # 1,000,000 finished tasks, fresh scratch database
    .venv/bin/python bench/retention.py --tasks 100000 --batch 500

It creates a scratch database (dropped at the end), builds the schema with the real migrations and
fills it with ``generate_series``: ``--tasks`` finished tasks, each with ``--events`` events and two
done outbox rows (submit, relay), as a real task leaves them, plus ``--blocked`` finished tasks whose
callback is still undelivered (kept: nothing open is removed). Then:

1. steady state: every task is newer than its retention; ``--runs`` runs of the whole job (all six
   kinds) find nothing to remove. Median and worst time, statements per run, and the plan (EXPLAIN
   ANALYZE, BUFFERS) of the tasks query;
2. export: the oldest ``--export`` tasks become due and are removed with the JSON-lines export on;
3. purge: every task becomes due and is removed without export: tasks per second, rows per second
   (tasks + events + outbox rows), and what was left (the blocked tasks); then the steady state
   again, now with the blocked tasks past their retention (each run looks at them again).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from sqlalchemy import event, text

from models.base import utcnow
from models.db import Database
from models.store.retention import due_query
from service.retention import KINDS, Retention, prune
from tests.integration.stack import migrate

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
TABLES = ("external_tasks", "task_events", "outbox_messages")

FILL = [
    "INSERT INTO clients (name, callback_secrets, created_at) VALUES ('bench', '[]', now())",
    # task g finished g seconds after :t0 (so g = 1 is the oldest); the blocked ones are the last ids
    """INSERT INTO external_tasks (correlation_id, reference, client_id, provider, state, input, outcome,
           vendor_job_id, on_deadline, attempts, checked_at, created_at, updated_at)
       SELECT 'bench-' || g, 'ref_' || md5(g::text), (SELECT id FROM clients WHERE name = 'bench'), 'sim',
              'succeeded', jsonb_build_object('i', g, 'note', 'a small input'),
              jsonb_build_object('ok', true, 'result', md5(g::text)), 'job-' || g, 'escalate', 1,
              :t0 + g * interval '1 second', :t0 + g * interval '1 second', :t0 + g * interval '1 second'
       FROM generate_series(1, :n) g""",
    """INSERT INTO task_events (task_id, at, kind, detail)
       SELECT t.id, t.updated_at, 'state.step' || k, jsonb_build_object('k', k)
       FROM external_tasks t, generate_series(1, :events) k""",
    """INSERT INTO outbox_messages (message_id, kind, task_id, correlation_id, payload, attempts, deliveries,
           created_at, dispatched_at, done_at)
       SELECT md5(t.id || k), k, t.id, t.correlation_id, jsonb_build_object('type', 'task.completed'), 1, 0,
              t.updated_at, t.updated_at, t.updated_at
       FROM external_tasks t, unnest(array['submit', 'relay']) k""",
    # the blocked ones: their relay is not done (an undelivered callback)
    "UPDATE outbox_messages SET done_at = NULL WHERE kind = 'relay' AND task_id > :n - :blocked",
]


def fill(db: Database, args: argparse.Namespace, t0: Any) -> None:
    started = time.perf_counter()
    params = {"n": args.tasks, "events": args.events, "blocked": args.blocked, "t0": t0}
    with db.engine.begin() as conn:
        for sql in FILL:
            statement = text(sql)
            conn.execute(statement, {k: v for k, v in params.items() if f":{k}" in sql})
    with db.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    rows = args.tasks * (1 + args.events + 2)
    print(f"filled {args.tasks:,} tasks, {rows:,} rows in all, in {time.perf_counter() - started:.0f}s", flush=True)


class Counter:
    def __init__(self, db: Database) -> None:
        self.n = 0
        event.listen(db.engine, "before_cursor_execute", self._count)

    def _count(self, *_: Any) -> None:
        self.n += 1


def explain(db: Database, kind: str, now: Any, retention_s: int) -> str:
    statement = due_query(kind, now - timedelta(seconds=retention_s), 1000)
    with db.engine.connect() as conn:
        compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        rows = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {compiled}").fetchall()
        conn.rollback()
    return "\n".join("    " + r[0] for r in rows)


def table_sizes(db: Database) -> str:
    with db.engine.connect() as conn:
        counts = {t: conn.scalar(text(f"SELECT count(*) FROM {t}")) for t in TABLES}
    return ", ".join(f"{name} {n:,}" for name, n in counts.items())


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=1_000_000, help="finished tasks")
    parser.add_argument("--events", type=int, default=3, help="events per task")
    parser.add_argument("--blocked", type=int, default=1000, help="finished tasks with an undelivered callback")
    parser.add_argument("--export", type=int, default=50_000, help="oldest tasks removed with the export on")
    parser.add_argument("--runs", type=int, default=20, help="steady-state runs")
    parser.add_argument("--batch", type=int, default=1000, help="rows per transaction")
    args = parser.parse_args()

    name = f"liaison_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    try:
        migrate(url)
        db = Database(url)
        now = utcnow()
        t0 = now - timedelta(days=1) - timedelta(seconds=args.tasks)  # every task finished 1 to 13 days ago
        fill(db, args, t0)
        retention = Retention(batch=args.batch)
        counter = Counter(db)

        print(f"\n== steady state: nothing due among {args.tasks:,} finished tasks ({args.runs} runs, all kinds)")
        times, statements = [], []
        for _ in range(args.runs):
            counter.n = 0
            started = time.perf_counter()
            removed = prune(db, now, retention)
            times.append((time.perf_counter() - started) * 1000)
            statements.append(counter.n)
            assert not any(removed.values()), removed
        print(
            f"  one run: median {statistics.median(times):.1f} ms, worst {max(times):.1f} ms, "
            f"{statements[-1]} statements ({len(KINDS)} kinds: one query each, in a transaction of its own)"
        )
        print(f"  the tasks query (EXPLAIN ANALYZE):\n{explain(db, 'tasks', now, retention.tasks_s)}")

        export_now = t0 + timedelta(seconds=args.export + 1) + timedelta(seconds=retention.tasks_s)
        with tempfile.TemporaryDirectory() as export_dir:
            print(f"\n== export: the oldest {args.export:,} tasks removed with the JSON-lines export on")
            started = time.perf_counter()
            removed = prune(db, export_now, Retention(batch=args.batch, export_dir=Path(export_dir)), ["tasks"])
            took = time.perf_counter() - started
            size = sum(f.stat().st_size for f in Path(export_dir).iterdir())
            print(
                f"  removed {removed['tasks']:,} tasks in {took:.1f}s: {removed['tasks'] / took:,.0f} tasks/s, "
                f"{removed['tasks'] * (1 + args.events + 2) / took:,.0f} rows/s; exported {size / 1e6:.1f} MB"
            )

        purge_now = now + timedelta(seconds=retention.tasks_s + 86400)
        print(f"\n== purge: every task due ({table_sizes(db)})")
        batches = [0]
        started = time.perf_counter()
        removed = prune(
            db, purge_now, retention, ["tasks"], progress=lambda kind, n: batches.__setitem__(0, batches[0] + 1)
        )
        took = time.perf_counter() - started
        rows = removed["tasks"] * (1 + args.events + 2)
        print(
            f"  removed {removed['tasks']:,} tasks ({rows:,} rows with their events and outbox rows) in {took:.1f}s "
            f"in {batches[0]:,} batches of {args.batch}: "
            f"{removed['tasks'] / took:,.0f} tasks/s, {rows / took:,.0f} rows/s"
        )
        with db.engine.connect() as conn:
            left = conn.scalar(text("SELECT count(*) FROM external_tasks"))
        print(f"  left: {left:,} tasks (the {args.blocked:,} with an undelivered callback are kept)")
        counter.n = 0
        started = time.perf_counter()
        after = prune(db, purge_now, retention)
        print(
            f"  the whole job right after: {(time.perf_counter() - started) * 1000:.1f} ms, {counter.n} statements, "
            f"removed {after} (the kept tasks' done rows stay with them)"
        )
        with db.engine.connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
        times = []
        for _ in range(args.runs):
            counter.n = 0
            started = time.perf_counter()
            prune(db, purge_now, retention)
            times.append((time.perf_counter() - started) * 1000)
        print(
            f"  steady state after VACUUM, the {args.blocked:,} kept tasks past their retention and re-checked "
            f"every run: median {statistics.median(times):.1f} ms, worst {max(times):.1f} ms, {counter.n} statements"
        )
        db.dispose()
    finally:
        with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
