"""Worker health for supervisors: ``python -m app.worker_health [--timeout 5] [--worker celery@host]``.

Pings Celery workers over the broker's remote-control channel and exits 0 when at least one
answers (the named one, with ``--worker``), 1 otherwise, printing which answered -- usable as a
Docker ``HEALTHCHECK``, a Kubernetes exec probe or a systemd ``ExecStartPost`` check. A worker
that answers is connected to the broker and its consumer loop is running; whether tasks succeed
is what ``/metrics`` tells.
Reads the same environment as the worker (``CELERY_BROKER_URL``...).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from celery import Celery
from kombu.exceptions import KombuError


class BrokerUnreachable(Exception):
    """The broker did not accept a connection within the timeout."""


def ping_workers(celery_app: Celery, timeout: float, worker: str | None = None, wait_all: bool = False) -> list[str]:
    """Names of the workers that answered within ``timeout`` seconds (sorted).

    Without ``wait_all`` it returns at the first answer: a probe should be quick when all is well,
    and waiting out the timeout to list every worker is what ``--all`` is for."""
    with celery_app.connection_for_write() as conn:
        try:
            conn.ensure_connection(max_retries=1, timeout=timeout)
        except (KombuError, OSError, *conn.connection_errors) as exc:
            raise BrokerUnreachable(type(exc).__name__) from exc
        replies = celery_app.control.ping(
            destination=[worker] if worker else None,
            timeout=timeout,
            connection=conn,
            limit=None if wait_all else 1,
        )
    return sorted(name for reply in replies or [] for name in reply)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.worker_health", description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds to wait for answers (default 5)")
    parser.add_argument("--worker", help="only this node name counts (e.g. celery@$(hostname))")
    parser.add_argument("--all", action="store_true", help="wait the whole timeout and list every worker that answers")
    args = parser.parse_args(argv)

    from app.make_celery import celery_app  # builds the app from the environment: imported late

    try:
        answered = ping_workers(celery_app, args.timeout, args.worker, wait_all=args.all)
    except BrokerUnreachable as exc:
        print(f"unhealthy: broker unreachable ({exc})", file=sys.stderr)
        return 1
    if not answered:
        print(f"unhealthy: no worker answered within {args.timeout:g}s", file=sys.stderr)
        return 1
    print("healthy: " + ", ".join(answered))
    return 0


if __name__ == "__main__":
    sys.exit(main())
