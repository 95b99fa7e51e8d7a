"""Starting what one benchmark run measures: Liaison (or the naive pipeline) from the Procfile's
command lines, with a fresh database, fresh queues, a lean vendor and a lean domain app.

Liaison's processes run the Procfile's ``web``, ``worker`` and ``relay`` lines as they are (read
from the file, never copied); migrations run its ``release`` line. The naive pipeline runs the same
lines with its own app put in Liaison's place (``-c python:app.gunicorn_config`` dropped: that module is
Liaison's start-up checks and logging), so both have the same gunicorn shape (2 workers × 4
threads) and the same Celery pools (a work process on prefork, concurrency 2; a relay process on
threads, ``LIAISON_RELAY_THREADS``).
"""

from __future__ import annotations

import functools
import os
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import requests
from sqlalchemy import create_engine

from bench.naive.schema import metadata
from bench.postgres_cluster import PostgresCluster
from bench.procs import ROOT, Proc, procfile, run, wait_until
from bench.services import free_port
from models.db import Database
from service.credentials import create_client
from webhooks.signing import generate_secret

PROCFILE = procfile((ROOT / "Procfile").read_text())
PROVIDER = "bench"
#: Limits that exist to protect a shared production system: a benchmark of throughput lifts them,
#: or it would measure the limit (10 submits/s per client, 10 vendor calls/s, 16 relays at once per
#: client and 4 per callback origin: the benchmark's one client calls one origin). A client may hold at
#: most half of the relay threads (a setting rule), so that is what it gets here.
UNLIMITED = {
    "LIAISON_CLIENT_SUBMIT_RATE_PER_S": "1000000",
    "LIAISON_CLIENT_SUBMIT_BURST": "1000000",
    "LIAISON_CLIENT_MAX_OPEN_TASKS": "100000000",
    f"LIAISON_PROVIDER_{PROVIDER.upper()}_RATE_LIMIT_PER_S": "1000000",
    f"LIAISON_PROVIDER_{PROVIDER.upper()}_RATE_LIMIT_BURST": "1000000",
    "LIAISON_RELAY_CLIENT_CONCURRENCY": "32",
    "LIAISON_RELAY_ENDPOINT_CONCURRENCY": "32",
}


@dataclass
class Stack:
    """One pipeline, running: where to submit, and its processes by kind."""

    kind: str  # liaison | naive
    web_url: str
    submit_path: str
    api_key: str
    database: str
    domain_url: str
    vendor_secret: str
    vendor_url: str
    procs: dict[str, list[Proc]] = field(default_factory=dict)

    def all_procs(self) -> list[Proc]:
        return [proc for group in self.procs.values() for proc in group]

    def stop(self) -> None:
        # web first (nothing new comes in), then workers, then the vendor and domain app
        for kind in ("web", "worker", "vendor", "domain"):
            for proc in self.procs.get(kind, []):
                proc.stop()


def base_env() -> dict[str, str]:
    """The driver's environment with the virtualenv first on PATH and the repository importable;
    nothing of a Liaison configuration the caller may have exported leaks in."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "NAIVE_", "PROMETHEUS_", "OTEL_"))}
    env.pop("DATABASE_URL", None)
    env.pop("CELERY_BROKER_URL", None)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT)
    return env


def start_helpers(
    env: dict[str, str], log_dir: Path, tag: str, vendor_secret: str, callback_secret: str, domain_port: int
) -> tuple[dict[str, list[Proc]], str, str]:
    """The lean vendor and the lean domain app: (procs by kind, vendor URL, domain URL)."""
    vendor_port = free_port()
    python = sys.executable
    vendor = Proc(
        f"{tag}-vendor", f"{python} -m bench.lean_vendor --port {vendor_port} --secret {vendor_secret}", env, log_dir
    )
    domain = Proc(
        f"{tag}-domain", f"{python} -m bench.lean_domain --port {domain_port} --secret {callback_secret}", env, log_dir
    )
    for url, proc in (
        (f"http://127.0.0.1:{vendor_port}/healthz", vendor),
        (f"http://127.0.0.1:{domain_port}/progress", domain),
    ):
        wait_until(functools.partial(_answers, url), 30, proc.name, [proc])
    return (
        {"vendor": [vendor], "domain": [domain]},
        f"http://127.0.0.1:{vendor_port}",
        f"http://127.0.0.1:{domain_port}",
    )


def _answers(url: str) -> bool:
    try:
        requests.get(url, timeout=1)
        return True
    except requests.RequestException:
        return False


#: The Procfile's Celery workers Liaison runs (the naive pipeline has no calls queue: its submits
#: run on its work queue, as a naive pipeline's do).
LIAISON_WORKERS = ("worker", "calls", "relay")
NAIVE_WORKERS = ("worker", "relay")


def worker_commands(hosts: int, names: tuple[str, ...] = LIAISON_WORKERS) -> list[tuple[str, str, int]]:
    """(name, command, host) of the Procfile's worker lines ``names`` for each pretend host; hosts
    after the first get node names of their own (two ``worker@%h`` on one machine would clash)."""
    commands = []
    for host in range(hosts):
        for name in names:
            command = PROCFILE[name] if host == 0 else PROCFILE[name].replace("@%h", f"@host{host}")
            commands.append((f"{name}{host}" if hosts > 1 else name, command, host))
    return commands


def start_liaison(
    pg: PostgresCluster,
    broker_url: str,
    log_dir: Path,
    workers: int = 1,
    tag: str = "liaison",
    *,
    vendor_url: str | None = None,
    extra_env: dict[str, str] | None = None,
    processes: tuple[str, ...] = LIAISON_WORKERS,
) -> Stack:
    """Migrate a fresh database, create the client, start vendor, domain app, web and the workers of
    ``workers`` pretend hosts (the Procfile lines ``processes`` each, by default its worker, calls and
    relay; 0 = web only). ``vendor_url`` points the provider at another vendor than the lean one;
    ``extra_env`` adds settings."""
    run_id = uuid.uuid4().hex[:8]
    database = f"liaison_{run_id}"
    url = pg.create_database(database)
    env = base_env()
    env["DATABASE_URL"] = url
    run(PROCFILE["release"], env, log_dir / f"{tag}-release.log")

    domain_port = free_port()  # known before the client exists: its callback URL names it
    db = Database(url)
    with db.transaction() as session:
        _, key, callback_secret = create_client(session, "bench", f"http://127.0.0.1:{domain_port}/callbacks")
    db.dispose()
    vendor_secret = generate_secret()
    helpers, lean_vendor_url, domain_url = start_helpers(env, log_dir, tag, vendor_secret, callback_secret, domain_port)
    vendor_url = vendor_url or lean_vendor_url

    web_port = free_port()
    var_dir = log_dir / f"var-{run_id}"
    var_dir.mkdir(parents=True, exist_ok=True)  # beat's schedule file goes there
    env.update(UNLIMITED)
    env.update(
        {
            "CELERY_BROKER_URL": broker_url,
            "LIAISON_PUBLIC_URL": f"http://127.0.0.1:{web_port}",
            "LIAISON_PROVIDERS": PROVIDER,
            f"LIAISON_PROVIDER_{PROVIDER.upper()}_BASE_URL": vendor_url,
            f"LIAISON_PROVIDER_{PROVIDER.upper()}_WEBHOOK_SECRETS": vendor_secret,
            "LIAISON_OUTBOUND_ALLOW": f"127.0.0.1:{domain_port}",
            "LIAISON_QUEUE": f"bench-{run_id}",
            "LIAISON_LOG_LEVEL": "warning",
            "LIAISON_METRICS_TOKEN": "bench-" + uuid.uuid4().hex,
            "LIAISON_VAR_DIR": str(var_dir),
            "PORT": str(web_port),
            **(extra_env or {}),
        }
    )
    stack = Stack(
        "liaison",
        f"http://127.0.0.1:{web_port}",
        "/api/v1/tasks",
        key.api_key,
        database,
        domain_url,
        vendor_secret,
        vendor_url,
    )
    stack.procs = helpers
    _start_pipeline(stack, env, log_dir, tag, PROCFILE["web"], lambda c: c, worker_commands(workers, processes))
    return stack


def start_naive(pg: PostgresCluster, broker_url: str, log_dir: Path, tag: str = "naive", workers: int = 1) -> Stack:
    """The naive pipeline (bench/naive/) on a fresh database, with the same command line shapes
    (``workers=0``: its web only)."""
    run_id = uuid.uuid4().hex[:8]
    database = f"naive_{run_id}"
    url = pg.create_database(database)
    engine = create_engine(url)
    metadata.create_all(engine)
    engine.dispose()
    env = base_env()
    vendor_secret, callback_secret = generate_secret(), generate_secret()
    helpers, vendor_url, domain_url = start_helpers(env, log_dir, tag, vendor_secret, callback_secret, free_port())
    web_port = free_port()
    api_key = "naive-" + uuid.uuid4().hex
    env.update(
        {
            "NAIVE_DATABASE_URL": url,
            "NAIVE_BROKER_URL": broker_url,
            "NAIVE_QUEUE": f"naive-{run_id}",
            "LIAISON_QUEUE": f"naive-{run_id}",  # the Procfile's -Q reads it: the same lines, our queues
            "NAIVE_VENDOR_URL": vendor_url,
            "NAIVE_VENDOR_SECRET": vendor_secret,
            "NAIVE_PUBLIC_URL": f"http://127.0.0.1:{web_port}",
            "NAIVE_CALLBACK_URL": domain_url + "/callbacks",
            "NAIVE_CALLBACK_SECRET": callback_secret,
            "NAIVE_API_KEY": api_key,
            "PORT": str(web_port),
        }
    )
    stack = Stack(
        "naive", f"http://127.0.0.1:{web_port}", "/tasks", api_key, database, domain_url, vendor_secret, vendor_url
    )
    stack.procs = helpers
    web = naive_web_command(PROCFILE["web"], "bench.naive.web:create_app()")
    naive = worker_commands(workers, NAIVE_WORKERS)
    _start_pipeline(stack, env, log_dir, tag, web, lambda c: c.replace("app.make_celery", "bench.naive.tasks"), naive)
    return stack


def naive_web_command(web: str, app_spec: str) -> str:
    """The Procfile's web line serving ``app_spec`` instead of Liaison (without app/gunicorn_config.py)."""
    return web.replace("-c python:app.gunicorn_config ", "").replace("'app:create_app()'", f"'{app_spec}'")


def _start_pipeline(
    stack: Stack,
    env: dict[str, str],
    log_dir: Path,
    tag: str,
    web: str,
    worker: Callable[[str], str],
    workers: list[tuple[str, str, int]],
) -> None:
    """Start web and ``workers`` (:func:`worker_commands`); wait until web answers."""
    try:
        stack.procs["web"] = [Proc(f"{tag}-web", web, _host_env(env, log_dir, tag, 0), log_dir)]
        for name, command, host in workers:
            proc = Proc(f"{tag}-{name}", worker(command), _host_env(env, log_dir, tag, host), log_dir)
            stack.procs.setdefault("worker", []).append(proc)
        wait_until(lambda: _answers(stack.web_url + "/healthz"), 60, f"{tag} web", stack.all_procs())
    except BaseException:
        stack.stop()
        raise


def _host_env(env: dict[str, str], log_dir: Path, tag: str, host: int) -> dict[str, str]:
    """Each pretend host has its own prometheus-client samples directory, wiped at start."""
    prom = log_dir / f"{tag}-prometheus-{env.get('PORT')}-host{host}"
    prom.mkdir(parents=True, exist_ok=True)
    return {**env, "PROMETHEUS_MULTIPROC_DIR": str(prom)}
