"""Ingest mode of bench/e2e.py: signed-webhook requests/s of Liaison's web against a bare Flask POST.

Both are served by the Procfile's web line (gunicorn, 2 workers × 4 threads): Liaison as it is
(web only: its database and broker, no worker), the bare app (bench/naive/bare.py) by the same line
with its app in Liaison's place. Cases, each a fixed number of distinct, validly signed requests
from C keep-alive connections spread over a few driver processes (so the driver, on the same two
cores, is not the bottleneck; its CPU is printed):

- ``bare``: the bare view parses the JSON body and answers 200 (measured first and last);
- ``orphan``: ``job.completed`` for job ids nobody knows (stored as orphan events);
- ``known``: ``job.accepted`` for tasks created beforehand in state ``submitted`` (a transition,
  a task event and a relay outbox row published to the broker);
- ``duplicate``: the ``known`` requests again, same message ids (answered ``duplicate``);
- ``naive``: the ``known`` requests to the naive pipeline's webhook (bench/naive/web.py, its web
  only): verify, one ``UPDATE``, a publish, no dedup, no timeline, no outbox. Not a target: it
  shows what even the least a webhook can do that writes a row and sends a message costs, against
  a view that does neither.

Every answer's ``status`` is tallied, so a case that did not take its intended path shows.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import statistics
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, insert, select

from bench.driver import broker_roots
from bench.environment import PG_SETTINGS, broker
from bench.naive.schema import jobs as naive_table
from bench.postgres_cluster import PostgresCluster
from bench.procs import Proc, usage, wait_until
from bench.report import log_errors
from bench.services import free_port
from bench.stacks import (
    PROCFILE,
    PROVIDER,
    _answers,
    _host_env,
    base_env,
    naive_web_command,
    start_liaison,
    start_naive,
)
from models import ExternalTask
from models.client import Client
from models.db import Database
from webhooks.signing import sign

Request = tuple[bytes, dict[str, str]]


def signed(secret: str, events: list[tuple[str, dict[str, Any]]]) -> list[Request]:
    """(body, headers) of each (message id, event), signed now (valid for 5 minutes)."""
    now = int(time.time())
    out = []
    for msg_id, event in events:
        body = json.dumps(event, separators=(",", ":")).encode()
        headers = sign(secret, msg_id, now, body).as_dict()
        headers["Content-Type"] = "application/json"
        out.append((body, headers))
    return out


def _shoot(port: int, path: str, requests: list[Request], threads: int, queue: Any) -> None:
    """One driver process: ``threads`` keep-alive connections share ``requests``."""
    statuses: Counter[str] = Counter()
    lock = threading.Lock()
    index = iter(range(len(requests)))

    def worker() -> None:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for i in index:  # next() on a shared iterator: each request is sent once
            body, headers = requests[i]
            conn.request("POST", path, body=body, headers=headers)
            response = conn.getresponse()
            data = response.read()
            status = json.loads(data).get("status", "?") if response.status == 200 else str(response.status)
            with lock:
                statuses[status] += 1
        conn.close()

    cpu0, start = time.process_time(), time.time()
    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    queue.put((start, time.time(), time.process_time() - cpu0, dict(statuses)))


def drive(port: int, path: str, requests: list[Request], concurrency: int, procs: int) -> dict[str, Any]:
    """Send every request; (req/s, statuses, driver CPU s)."""
    ctx = multiprocessing.get_context("fork")
    queue = ctx.SimpleQueue()
    slices = [requests[i::procs] for i in range(procs)]
    workers = [
        ctx.Process(target=_shoot, args=(port, path, part, max(1, concurrency // procs), queue)) for part in slices
    ]
    for worker in workers:
        worker.start()
    results = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    statuses: Counter[str] = Counter()
    for *_, counts in results:
        statuses.update(counts)
    window = max(r[1] for r in results) - min(r[0] for r in results)
    return {"rps": len(requests) / window, "statuses": dict(statuses), "driver_cpu_s": sum(r[2] for r in results)}


def known_tasks(database_url: str, count: int) -> None:
    """``count`` tasks in state submitted with vendor job ids ``known-<i>``, owned by the bench client."""
    db = Database(database_url)
    with db.transaction() as session:
        client = session.scalars(select(Client).where(Client.name == "bench")).one()
        rows = [
            {
                "correlation_id": f"known-{i}",
                "client_id": client.id,
                "provider": PROVIDER,
                "state": "submitted",
                "input": {"i": i},
                "callback_url": client.callback_url,
                "vendor_job_id": f"known-{i}",
                "attempts": 1,
            }
            for i in range(count)
        ]
        session.execute(insert(ExternalTask), rows)
    db.dispose()


def naive_jobs(database_url: str, count: int) -> None:
    """``count`` rows of the naive pipeline's table in state submitted, vendor job ids ``known-<i>``."""
    engine = create_engine(database_url)
    with engine.begin() as conn:
        conn.execute(
            insert(naive_table),
            [
                {"correlation_id": f"known-{i}", "state": "submitted", "input": {"i": i}, "vendor_job_id": f"known-{i}"}
                for i in range(count)
            ],
        )
    engine.dispose()


def ingest(args: argparse.Namespace, logs: Path, say: Callable[[str], None]) -> None:
    for broker_kind in args.broker:
        ingest_on(broker_kind, args, logs, say)


def ingest_on(broker_kind: str, args: argparse.Namespace, logs: Path, say: Callable[[str], None]) -> None:
    """The five cases on a fresh database and broker of ``broker_kind``."""
    n, c = args.requests, args.concurrency
    with PostgresCluster(PG_SETTINGS) as pg, broker(broker_kind) as (url, redis_pid):
        say(
            f"\n== ingest on {broker_kind}: {n} requests per case, {c} connections,"
            f" {args.driver_procs} driver processes"
        )
        stack = start_liaison(pg, url, logs, workers=0, tag=f"ingest-{broker_kind}")
        naive = start_naive(pg, url, logs, tag=f"ingest-{broker_kind}-naive", workers=0)
        bare_port = free_port()
        env = {**base_env(), "PORT": str(bare_port)}
        bare = Proc(
            f"ingest-{broker_kind}-bare",
            naive_web_command(PROCFILE["web"], "bench.naive.bare:create_app()"),
            _host_env(env, logs, "bare", 0),
            logs,
        )
        try:
            bare_url = f"http://127.0.0.1:{bare_port}/healthz"
            wait_until(lambda: _answers(bare_url), 60, "bare web", [bare])
            known_tasks(pg.database_url(stack.database), n)
            naive_jobs(pg.database_url(naive.database), n)
            liaison_port = int(stack.web_url.rsplit(":", 1)[1])
            naive_port = int(naive.web_url.rsplit(":", 1)[1])
            secret = stack.vendor_secret
            orphans = [
                (
                    f"msg_orphan_{i}",
                    {
                        "type": "job.completed",
                        "job_id": f"orphan-{i}",
                        "status": "succeeded",
                        "outcome": {"result": "ok"},
                    },
                )
                for i in range(n)
            ]
            known = [(f"msg_known_{i}", {"type": "job.accepted", "job_id": f"known-{i}"}) for i in range(n)]
            rows = []
            services = [pid for pid in [pg.pid, *broker_roots(broker_kind, redis_pid)] if pid]
            liaison_web = [p.pid for p in stack.procs["web"]]
            for name, port, events, roots, key in (
                ("bare", bare_port, orphans, [bare.pid], secret),
                ("orphan", liaison_port, orphans, liaison_web, secret),
                ("known", liaison_port, known, liaison_web, secret),
                ("duplicate", liaison_port, known, liaison_web, secret),
                ("naive", naive_port, known, [p.pid for p in naive.procs["web"]], naive.vendor_secret),
                ("bare", bare_port, orphans, [bare.pid], secret),
            ):
                requests = signed(key, events)
                cpu0, services0 = usage(roots).cpu_s, usage(services).cpu_s
                result = drive(port, f"/webhooks/{PROVIDER}", requests, c, args.driver_procs)
                result["server_cpu_ms"] = (usage(roots).cpu_s - cpu0) * 1000 / n
                result["services_cpu_ms"] = (usage(services).cpu_s - services0) * 1000 / n
                rows.append((name, result))
                say(f"  {name:<10}{result['rps']:9.0f} req/s   statuses {result['statuses']}")
            say(table(rows))
            trouble = log_errors(logs, prefix=f"ingest-{broker_kind}")
            say(f"  log lines that look like trouble: {len(trouble)}" + "".join(f"\n    {t}" for t in trouble[:10]))
        finally:
            bare.stop()
            naive.stop()
            stack.stop()


def table(rows: list[tuple[str, dict[str, Any]]]) -> str:
    bare = statistics.fmean([r["rps"] for name, r in rows if name == "bare"])
    lines = [
        f"  {'case':<12}{'req/s':>8}{'× bare':>8}{'web CPU ms/req':>16}{'pg+broker ms/req':>18}{'driver CPU s':>14}"
        "  statuses"
    ]
    for name, r in rows:
        lines.append(
            f"  {name:<12}{r['rps']:8.0f}{r['rps'] / bare:8.2f}{r['server_cpu_ms']:16.2f}{r['services_cpu_ms']:18.2f}"
            f"{r['driver_cpu_s']:14.2f}  {r['statuses']}"
        )
    lines.append(
        "  target: each Liaison case (orphan, known, duplicate) ≥ 0.50× bare (bare = the mean of its two runs)"
    )
    return "\n".join(lines)
