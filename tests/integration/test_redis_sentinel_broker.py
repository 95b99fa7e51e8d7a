"""A Redis Sentinel channel reaches the primary after its connection is released (app/redis_broker.py,
``SentinelTransport``): the same cause as the plain Redis one (tests/integration/test_broker_restart.py),
on the transport a ``sentinel://`` broker URL gets.

bin/cluster-sim found it: the Sentinel primary SIGKILLed, the calls worker on two of the three hosts
exited with ``Unrecoverable error: AttributeError("'NoneType' object has no attribute 'hostname'")``
while restoring the messages it held. Here: a redis-server and one Sentinel of the test's own, on
loopback; the channel is left as Celery's ``collect()`` leaves it (pools dropped, transport released)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import redis as kombu_redis

from app import redis_broker
from bench.services import RedisServer, free_port, wait_for_port

MASTER = "liaison"


@pytest.fixture
def sentinel_url(tmp_path: Path) -> Iterator[str]:
    """``sentinel://127.0.0.1:<port>``: one Sentinel watching a redis-server of the test's own."""
    if shutil.which("redis-server") is None:
        pytest.skip("redis-server is not installed")
    with RedisServer() as primary:
        port = free_port()
        conf = tmp_path / "sentinel.conf"  # Sentinel rewrites its file: one of the test's own
        conf.write_text(
            f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\nsentinel monitor {MASTER} 127.0.0.1 {primary.port} 1\n"
        )
        log = (tmp_path / "sentinel.log").open("wb")
        sentinel = subprocess.Popen(
            ["redis-server", str(conf), "--sentinel"], stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            wait_for_port(port, timeout=30, process=sentinel)
            yield f"sentinel://127.0.0.1:{port}"
        finally:
            sentinel.terminate()
            sentinel.wait(timeout=10)
            log.close()


@pytest.mark.parametrize(
    "transport", [redis_broker.SentinelTransport, kombu_redis.SentinelTransport], ids=["ours", "kombus"]
)
def test_a_sentinel_channel_reaches_the_primary_after_its_connection_is_released(
    transport: type, sentinel_url: str
) -> None:
    """Ours still knows the Sentinels and the primary's parameters; kombu's raises the AttributeError
    that ended the worker (kept as the control: if kombu fixes it, this says so)."""
    connection = Connection(sentinel_url, transport=transport, transport_options={"master_name": MASTER})
    channel: Any = connection.default_channel  # a kombu Sentinel channel (typed as the abstract one)
    channel._disconnect_pools()  # what the aborted close had done before it stopped
    connection._do_close_transport()  # what collect() does after its close attempts
    if transport is redis_broker.SentinelTransport:
        with channel.conn_or_acquire() as client:
            assert client.ping()
    else:
        with pytest.raises(AttributeError, match="hostname"), channel.conn_or_acquire():
            pass


def test_a_sentinel_broker_url_gets_our_transport() -> None:
    assert redis_broker.transport_for("sentinel://10.0.0.1:26379;sentinel://10.0.0.2:26379") == (
        "app.redis_broker:SentinelTransport"
    )
    assert redis_broker.transport_for("redis://127.0.0.1:6379/0") == "app.redis_broker:Transport"
    assert redis_broker.transport_for("amqp://guest:guest@127.0.0.1:5672//") is None
