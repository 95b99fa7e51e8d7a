"""What a benchmark run stands on: our own PostgreSQL settings, and a broker no other run has used
(a Redis server of our own, or a fresh vhost on the machine's RabbitMQ)."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

from bench.services import RedisServer

#: pg_stat_statements counts statements; ``track = all`` counts those nested in others too
PG_SETTINGS = {
    "shared_preload_libraries": "pg_stat_statements",
    "pg_stat_statements.track": "all",
    "pg_stat_statements.max": "10000",
}


@contextmanager
def broker(kind: str) -> Iterator[tuple[str, int | None]]:
    """(broker URL, redis-server pid or None) of a broker no other run has used."""
    if kind == "redis":
        with RedisServer() as redis:
            yield redis.url, redis.pid
        return
    vhost = f"bench-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        rabbitmqctl("set_permissions", "-p", vhost, "guest", ".*", ".*", ".*")
        yield f"amqp://guest:guest@127.0.0.1:5672/{vhost}", None
    finally:
        rabbitmqctl("delete_vhost", vhost)


def rabbitmqctl(*args: str) -> None:
    subprocess.run(["rabbitmqctl", "-q", *args], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
