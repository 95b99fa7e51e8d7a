"""Benchmark: the calls process's memory while every submission fails and is retried. Prints
figures; asserts nothing.

    .venv/bin/python bench/retry_memory.py                  # 800 tasks, each failing 6 times: 4,800 attempts
    .venv/bin/python bench/retry_memory.py --tasks 2000

It starts the Procfile's web, worker, calls and relay (``bench/stacks.py``) on a PostgreSQL cluster
and a redis-server of its own, with a vendor that answers every ``POST /jobs`` with 503, submits the
tasks and prints the resident memory (VmRSS, MiB) of the calls process (submissions run on its
threads, in its main process) after every 200 submits and at the end. A retried task leaves
reference cycles behind (Celery's exception info and the traceback's frames); ``app/worker_memory.py``
says how a worker frees them, and what prefork children grew to before it did.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import requests

from bench.environment import PG_SETTINGS, broker
from bench.postgres_cluster import PostgresCluster
from bench.procs import Proc
from bench.services import free_port
from bench.stacks import start_liaison

#: The provider policy of the run: few, quick retries, so the attempts add up fast.
POLICY = {
    "LIAISON_PROVIDER_BENCH_SUBMIT_MAX_ATTEMPTS": "6",
    "LIAISON_PROVIDER_BENCH_SUBMIT_BACKOFF_BASE_S": "0.2",
    "LIAISON_PROVIDER_BENCH_SUBMIT_BACKOFF_CAP_S": "1",
}


class Unavailable(BaseHTTPRequestHandler):
    """A vendor that is down: 503 to every submit, 200 to anything else (its health check)."""

    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._answer(503, b'{"error": "unavailable"}')

    def do_GET(self) -> None:
        self._answer(200, b"{}")

    def _answer(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def rss_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    return 0


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            return [int(child) for child in listing.read().split()]
    except OSError:
        return []


def worker_memory(worker: Proc) -> str:
    kids = ", ".join(str(rss_mib(child)) for child in children(worker.pid))
    return f"calls process {rss_mib(worker.pid)} MiB" + (f", children {kids} MiB" if kids else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", type=int, default=800, help="tasks to submit (default 800)")
    args = parser.parse_args()

    vendor = ThreadingHTTPServer(("127.0.0.1", free_port()), Unavailable)
    threading.Thread(target=vendor.serve_forever, daemon=True).start()
    vendor_url = f"http://127.0.0.1:{vendor.server_address[1]}"

    logs = Path(tempfile.mkdtemp(prefix="liaison-retry-memory-"))
    print(f"{args.tasks} tasks, each submit answered 503 and retried up to 6 times; logs in {logs}", flush=True)
    with PostgresCluster(PG_SETTINGS) as pg, broker("redis") as (broker_url, _):
        stack = start_liaison(pg, broker_url, logs, vendor_url=vendor_url, extra_env=POLICY)
        try:
            worker = next(proc for proc in stack.procs["worker"] if proc.name.endswith("-calls"))
            session = requests.Session()
            headers = {"Authorization": f"Bearer {stack.api_key}", "Content-Type": "application/json"}
            time.sleep(2)
            print(f"  start:     {worker_memory(worker)}", flush=True)
            for n in range(1, args.tasks + 1):
                answer = session.post(
                    stack.web_url + stack.submit_path, data=json.dumps({"input": {"n": n}}), headers=headers
                )
                answer.raise_for_status()
                if n % 200 == 0:
                    print(f"  {n:5} sent: {worker_memory(worker)}", flush=True)
            time.sleep(12)  # the last retries play out
            print(f"  end:       {worker_memory(worker)}", flush=True)
        finally:
            stack.stop()
            vendor.shutdown()


if __name__ == "__main__":
    main()
