"""One of the Procfile's Celery lines (``relay``, ``calls``) as a process of the test's own, on a
stack built with ``relay_in_process=False`` or ``calls_in_process=False``: what a deploy runs (its
pool, its concurrency, the shipped settings), not the test stack's in-process threads with their
short test timeouts. The ``web`` line likewise (``procfile_web``): gunicorn as a deploy runs it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import requests

from bench.procs import ROOT, Proc, procfile
from bench.stacks import base_env
from tests.integration.processes import poll
from tests.integration.stack import Stack

#: What ``liaison_env`` shortens so that failures play out in seconds; the process gets the
#: shipped defaults of these instead.
TEST_ONLY = ("LIAISON_RELAY_TIMEOUT_S", "LIAISON_RELAY_SCHEDULE_S", "LIAISON_RELAY_MAX_ATTEMPTS")
PROCFILE = procfile((ROOT / "Procfile").read_text())


@contextmanager
def procfile_worker(stack: Stack, name: str, log_dir: Path, *, args: str = "", **extra: str) -> Iterator[Proc]:
    """Run the Procfile's ``name`` line against the stack's database and broker until the block ends.
    ``args`` go after the line's own (a second process of a line on one host: its own ``-n``)."""
    env = {**base_env(), **{k: v for k, v in stack.env.items() if k not in TEST_ONLY}, **extra}
    proc = Proc(name, f"{PROCFILE[name]} {args}".strip(), env, log_dir)
    try:
        yield proc
    finally:
        proc.stop(timeout=40)


@contextmanager
def procfile_web(stack: Stack, log_dir: Path, port: int, *, unset: tuple[str, ...] = (), **extra: str) -> Iterator[str]:
    """The Procfile's ``web`` line (gunicorn, gunicorn.conf.py, its read-ahead worker) against the
    stack's database and broker, on loopback ``port``, until the block ends: its URL, once it answers
    ``/healthz``. ``unset``: variables of the stack's left out (back at their shipped values)."""
    env = {**base_env(), **stack.env, "WEB_ADDRESS": "127.0.0.1", "PORT": str(port), **extra}
    for name in unset:
        env.pop(name, None)
    url = f"http://127.0.0.1:{port}"
    proc = Proc(f"web-{port}", PROCFILE["web"], env, log_dir)
    try:

        def up() -> bool:
            assert proc.alive(), proc.tail()
            try:
                return requests.get(f"{url}/healthz", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        poll("the Procfile's web to answer /healthz", up, 60, proc.tail)
        yield url
    finally:
        proc.stop(timeout=40)
