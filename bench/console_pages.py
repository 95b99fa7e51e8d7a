"""Benchmark: the operator console's pages on a large PostgreSQL database. Prints figures and
plans; asserts nothing (the target — every page under 200 ms with 1,000,000 tasks — lives here,
not in a timed test).

    .venv/bin/python bench/console_pages.py                  # 1,000,000 tasks
    .venv/bin/python bench/console_pages.py --tasks 100000 --keep

It makes a scratch database, runs the real migrations, fills it in SQL (generate_series) with a
realistic spread — tasks over 30 days, 3 providers and 20 clients, mostly finished, some open and
retrying, about two timeline events per task, an outbox row per task, dead letters, incidents,
orphans, disabled endpoints — and ANALYZEs it, as autovacuum would have. Then it signs in to the
console through Flask's test client (the whole view: routing, queries, templates; no network but
the broker probe) and requests every page several times, printing p50 and max. Last it prints
EXPLAIN (ANALYZE, BUFFERS) for every statement the overview and the task list send.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import psycopg
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from app import create_app
from app.api.representation import encode_cursor
from foundation.settings import Settings
from models.db import Database
from models.read_models.overview import task_counts
from tests.integration.stack import migrate
from webhooks.signing import generate_secret

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"
TOKEN = "bench-console-token-" + "x" * 32
PROVIDERS = ("sim", "acme", "globex")

#: The fill, in SQL. States by id modulo 1000: 900 succeeded, 50 failed, 20 canceled, 30 open
#: (10 requested, 5 submitted, 13 accepted, 2 cancel_requested); 1 in 500 open tasks... all open
#: `requested` and `submitted` tasks that fall on an even id are retrying. The newest 3,000 tasks
#: finished within the last hour (the chart), the rest over 30 days.
FILL = [
    """INSERT INTO clients (name, callback_url, callback_secrets, callback_origins, created_at)
       SELECT 'client-' || g, 'https://shop' || g || '.example/liaison?token=hidden',
              '["whsec_a", "whsec_b"]', '[]', now() - interval '60 days'
       FROM generate_series(1, 20) g""",
    """INSERT INTO api_keys (client_id, key_hash, prefix, created_at)
       SELECT id, md5(name) || md5(name || 'k'), 'lk_' || id, now() FROM clients""",
    """INSERT INTO external_tasks (correlation_id, reference, client_id, provider, state, input, outcome,
           callback_url, vendor_job_id, on_deadline, checked_at, attempts, last_error, next_attempt_at,
           created_at, updated_at)
       SELECT 'order-' || g, 'ref_' || md5(g::text), 1 + (g * 7) % 20,
              (ARRAY['sim', 'acme', 'globex'])[1 + (g % 10 > 5)::int + (g % 10 > 8)::int],
              s.state,
              jsonb_build_object('sku', 'A' || g, 'qty', g % 7),
              CASE WHEN s.state IN ('succeeded', 'failed') THEN jsonb_build_object('result', g) END,
              NULL,
              CASE WHEN s.state <> 'requested' THEN 'job-' || g END,
              'escalate', t.at, 1 + (s.retrying)::int * 2,
              CASE WHEN s.retrying THEN 'POST vendor: HTTP 503' END,
              CASE WHEN s.retrying THEN now() + interval '30 seconds' END,
              t.at, t.at
       FROM generate_series(1, :tasks) g
       CROSS JOIN LATERAL (SELECT CASE
            WHEN g % 1000 < 900 THEN 'succeeded' WHEN g % 1000 < 950 THEN 'failed'
            WHEN g % 1000 < 970 THEN 'canceled' WHEN g % 1000 < 980 THEN 'requested'
            WHEN g % 1000 < 985 THEN 'submitted' WHEN g % 1000 < 998 THEN 'accepted'
            ELSE 'cancel_requested' END AS state) s0
       CROSS JOIN LATERAL (SELECT s0.state,
            s0.state IN ('requested', 'submitted') AND g % 2 = 0 AS retrying) s
       CROSS JOIN LATERAL (SELECT CASE WHEN g > :tasks - 3000
            THEN now() - (:tasks - g) * interval '1.2 seconds'
            ELSE now() - interval '30 days' + g * (interval '30 days' / :tasks) END AS at) t""",
    """INSERT INTO task_events (task_id, at, kind, detail)
       SELECT id, created_at, 'requested', jsonb_build_object('provider', provider) FROM external_tasks""",
    """INSERT INTO task_events (task_id, at, kind, detail)
       SELECT id, updated_at + interval '1 second', 'state.' || state, jsonb_build_object('previous', 'accepted')
       FROM external_tasks WHERE state IN ('succeeded', 'failed', 'canceled', 'accepted')""",
    """INSERT INTO outbox_messages (message_id, kind, task_id, correlation_id, payload, attempts, deliveries,
           created_at, dispatched_at, next_attempt_at, done_at)
       SELECT 'msg_' || md5('s' || id), 'submit', id, correlation_id, '{}', attempts, 0, created_at, created_at,
              next_attempt_at,
              CASE WHEN state IN ('requested') THEN NULL ELSE created_at + interval '1 second' END
       FROM external_tasks""",
    """INSERT INTO dead_letters (kind, message_id, outbox_id, provider, correlation_id, payload, error, fault,
           attempts, first_failed_at, last_failed_at, state, replay_count, closed_at)
       SELECT (ARRAY['submit', 'relay', 'cancel', 'poison'])[1 + g % 4], o.message_id, o.id, t.provider,
              t.correlation_id, '{"outbox_kind": "submit"}', 'POST vendor: HTTP 503',
              (ARRAY['system', 'caller'])[1 + (g % 3 = 0)::int], 6, t.created_at, t.updated_at,
              CASE WHEN g % 2 = 0 THEN 'open' ELSE 'replayed' END, g % 2, NULL
       FROM generate_series(1, 20000) g
       JOIN external_tasks t ON t.id = g * (:tasks / 20000)
       JOIN outbox_messages o ON o.task_id = t.id""",
    """INSERT INTO incidents (correlation_id, kind, subject, open_key, detail, owner, opened_at, resolved_at)
       SELECT d.correlation_id, 'submit_failed', 'outbox:' || d.outbox_id,
              CASE WHEN d.id % 5 = 0 THEN md5('i' || d.id) END,
              'dead letter ' || d.id || ' (system): POST vendor: HTTP 503', NULL, d.last_failed_at,
              CASE WHEN d.id % 5 = 0 THEN NULL ELSE d.last_failed_at + interval '1 hour' END
       FROM dead_letters d""",
    """INSERT INTO orphan_events (source, message_id, vendor_job_id, payload, received_at, state, resolved_at)
       SELECT 'sim', 'orphan-' || g, 'job-unknown-' || g, '{"type": "job.accepted", "job_id": "x"}',
              now() - g * interval '1 minute', CASE WHEN g % 5 = 0 THEN 'open' ELSE 'resolved' END, NULL
       FROM generate_series(1, 5000) g""",
    """INSERT INTO callback_endpoints (client_id, url_hash, url, disabled_at, disabled_reason, enabled_at)
       SELECT 1 + g % 20, md5('e' || g) || md5('f' || g), 'https://shop' || g || '.example/gone',
              CASE WHEN g % 5 = 0 THEN now() END, '410 Gone', NULL
       FROM generate_series(1, 50) g""",
]


def fill(db: Database, tasks: int) -> None:
    t0 = time.perf_counter()
    with db.engine.begin() as conn:
        for statement in FILL:
            started = time.perf_counter()
            conn.execute(text(statement), {"tasks": tasks} if ":tasks" in statement else {})
            first = " ".join(statement.split()[:3])
            print(f"  {first}: {time.perf_counter() - started:.1f}s", flush=True)
    with db.engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    print(f"filled in {time.perf_counter() - t0:.1f}s")
    with db.engine.connect() as conn:
        for table in ("external_tasks", "task_events", "outbox_messages", "dead_letters", "incidents", "orphan_events"):
            print(f"  {table}: {conn.exec_driver_sql(f'SELECT count(*) FROM {table}').scalar():,} rows")


def pages(db: Database, tasks: int) -> list[tuple[str, str]]:
    """(name, path) of every console page, with ids that exist."""
    with db.engine.connect() as conn:
        one = lambda sql: conn.exec_driver_sql(sql).scalar()  # noqa: E731
        finished = one("SELECT id FROM external_tasks WHERE state = 'succeeded' ORDER BY id DESC LIMIT 1")
        retrying = one("SELECT id FROM external_tasks WHERE next_attempt_at IS NOT NULL ORDER BY id LIMIT 1")
        letter = one("SELECT id FROM dead_letters WHERE state = 'open' ORDER BY id LIMIT 1")
        lettered = one(
            f"SELECT task_id FROM outbox_messages WHERE id = (SELECT outbox_id FROM dead_letters WHERE id = {letter})"
        )
        incident = one("SELECT id FROM incidents WHERE resolved_at IS NULL ORDER BY id LIMIT 1")
        orphan = one("SELECT id FROM orphan_events WHERE state = 'open' ORDER BY id LIMIT 1")
        endpoint = one("SELECT id FROM callback_endpoints WHERE disabled_at IS NOT NULL ORDER BY id LIMIT 1")
        cursor_from = one(
            f"SELECT id FROM external_tasks WHERE state = 'failed' ORDER BY id DESC OFFSET {tasks // 40} LIMIT 1"
        )
        assert cursor_from is not None, "fill() makes failed tasks"
    return [
        ("overview", "/console/"),
        ("tasks (all, newest)", "/console/tasks"),
        ("tasks state=failed", "/console/tasks?state=failed"),
        ("tasks state=failed, deep cursor", f"/console/tasks?state=failed&cursor={encode_cursor(cursor_from)}"),
        ("tasks state=cancel_requested provider=globex", "/console/tasks?state=cancel_requested&provider=globex"),
        ("tasks client=client-7", "/console/tasks?client=client-7"),
        ("tasks client + state=accepted", "/console/tasks?client=client-7&state=accepted"),
        ("tasks retrying", "/console/tasks?retrying=1"),
        ("tasks correlation_id", f"/console/tasks?correlation_id=order-{tasks // 2}"),
        ("task page (succeeded)", f"/console/tasks/{finished}"),
        ("task page (retrying)", f"/console/tasks/{retrying}"),
        ("task page (dead-lettered)", f"/console/tasks/{lettered}"),
        ("dead letters (open)", "/console/dead-letters"),
        ("dead letters kind+fault+provider", "/console/dead-letters?kind=submit&fault=system&provider=sim"),
        ("dead letters older than 1 day", "/console/dead-letters?older_than_s=86400"),
        ("dead letter page", f"/console/dead-letters/{letter}"),
        ("replay-matching confirmation", "/console/dead-letters/replay?kind=relay&fault=caller"),
        ("incidents (open)", "/console/incidents"),
        ("incident page", f"/console/incidents/{incident}"),
        ("orphans (open)", "/console/orphans"),
        ("orphan page", f"/console/orphans/{orphan}"),
        ("endpoints", "/console/endpoints"),
        ("endpoint enable confirmation", f"/console/endpoints/{endpoint}/enable"),
        ("clients", "/console/clients"),
    ]


def sign_in(client: Any) -> None:
    page = client.get("/console/sign-in").text
    found = re.search(r'name="csrf_token" value="([^"]+)"', page)
    assert found is not None, "no CSRF token on the sign-in page"
    csrf = found[1]
    response = client.post("/console/sign-in", data={"operator": "bench", "token": TOKEN, "csrf_token": csrf})
    assert response.status_code == 302


def time_pages(app: Any, targets: list[tuple[str, str]], repeat: int) -> list[tuple[str, float, float, int]]:
    client = app.test_client()
    sign_in(client)
    results = []
    for name, path in targets:
        response = client.get(path)  # warm: compiled statements, templates
        assert response.status_code == 200, (path, response.status_code, response.text[:500])
        took = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            response = client.get(path)
            took.append((time.perf_counter() - t0) * 1000)
            assert response.status_code == 200
        results.append((name, statistics.median(took), max(took), len(response.data)))
    return results


def statements_of(app: Any, path: str) -> list[tuple[str, Any]]:
    """The SELECTs one request of ``path`` sends, with their parameters."""
    engine = app.extensions["liaison"].db.engine
    seen: list[tuple[str, Any]] = []

    def _note(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        if statement.lstrip().upper().startswith(("SELECT", "EXPLAIN")):
            seen.append((statement, parameters))

    client = app.test_client()
    sign_in(client)
    event.listen(engine, "before_cursor_execute", _note)
    try:
        client.get(path)
    finally:
        event.remove(engine, "before_cursor_execute", _note)
    return seen


def explain(db: Database, statement: str, parameters: Any) -> str:
    with db.engine.connect() as conn:
        rows = conn.exec_driver_sql(f"EXPLAIN (ANALYZE, BUFFERS) {statement}", parameters).fetchall()
        conn.rollback()
    return "\n".join("    " + r[0] for r in rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0].replace("\n", " "))
    parser.add_argument("--tasks", type=int, default=1_000_000, help="rows in external_tasks")
    parser.add_argument("--repeat", type=int, default=7, help="timed requests per page (after one warm-up)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch database (its name is printed)")
    args = parser.parse_args()

    name = f"console_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    url = f"postgresql+psycopg://postgres@127.0.0.1:5432/{name}"
    print(f"scratch database {name}")
    try:
        migrate(url)
        env = {
            "DATABASE_URL": url,
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/14",
            "LIAISON_ADMIN_TOKEN": TOKEN,
            "LIAISON_PROVIDERS": ",".join(PROVIDERS),
            "LIAISON_QUEUE": f"bench-{uuid.uuid4().hex[:6]}",
            "LIAISON_LOG_LEVEL": "warning",
            "LIAISON_VAR_DIR": tempfile.mkdtemp(),
            "LIAISON_FLOWER_URL": "http://127.0.0.1:5555",
        }
        for provider in PROVIDERS:
            env[f"LIAISON_PROVIDER_{provider.upper()}_BASE_URL"] = "http://127.0.0.1:9"
            env[f"LIAISON_PROVIDER_{provider.upper()}_WEBHOOK_SECRETS"] = generate_secret()
        app = create_app(Settings.from_env(env))
        db = app.extensions["liaison"].db
        fill(db, args.tasks)

        print(f"\n== pages: p50 and max of {args.repeat} requests each (ms), in-process test client")
        results = time_pages(app, pages(db, args.tasks), args.repeat)
        width = max(len(r[0]) for r in results)
        for page, p50, worst, size in results:
            flag = "" if worst < 200 else "   <-- over 200 ms"
            print(f"  {page:<{width}}  p50 {p50:7.1f}  max {worst:7.1f}  ({size / 1024:.0f} KiB){flag}")

        print("\n== estimated counts on the overview against exact ones")
        with db.engine.connect() as conn:
            exact = conn.exec_driver_sql(
                "SELECT state, provider, count(*) FROM external_tasks"
                " WHERE state IN ('succeeded', 'failed', 'canceled') GROUP BY 1, 2 ORDER BY 1, 2"
            ).fetchall()
            with Session(conn) as session:
                counts = task_counts(session, PROVIDERS)
        for state, provider, n in exact:
            shown = counts.get(state, provider)
            off = (shown.value - n) / n * 100 if n else 0.0
            print(f"  {state:<10} {provider:<7} exact {n:>9,}  shown ≈{shown.value:>9,} ({off:+.1f} %)")

        for page in ("/console/", "/console/tasks?state=failed", "/console/tasks?client=client-7&state=accepted"):
            print(f"\n== EXPLAIN (ANALYZE, BUFFERS): every SELECT of {page}")
            for statement, parameters in statements_of(app, page):
                if statement.lstrip().upper().startswith("EXPLAIN"):
                    print(f"\n  -- (the planner's estimate, not run) {' '.join(statement.split())}")
                    continue
                print(f"\n  -- {' '.join(statement.split())}\n  -- {parameters}")
                print(explain(db, statement, parameters))
        db.dispose()
    finally:
        if not args.keep:
            with psycopg.connect(ADMIN_URL, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
