"""A Redis broker behind Sentinel (``sentinel://`` URLs, LIAISON_REDIS_SENTINEL_MASTER): the start-up
check, the queue probe and the whole flow, on a Redis primary, a replica and one Sentinel this module
starts on free loopback ports (temporary folders, stopped also when a test fails)."""

from __future__ import annotations

import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import redis
from kombu import Queue

from app.observability.queue_probe import queue_stats
from app.startup import EXIT_UNAVAILABLE, check_broker
from tests.integration.services import free_port
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread

MASTER = "liaison-test-master"
REDIS_SERVER = shutil.which("redis-server")
pytestmark = pytest.mark.skipif(REDIS_SERVER is None, reason="no redis-server on this machine")


def _wait(until: Callable[[], bool], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            if until():
                return
        except redis.RedisError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not ready within {timeout}s")
        time.sleep(0.1)


def _start(stack: ExitStack, args: list[str], log: Path) -> None:
    out = stack.enter_context(log.open("w"))
    process = subprocess.Popen([str(REDIS_SERVER), *args], stdout=out, stderr=subprocess.STDOUT)

    def stop() -> None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    stack.callback(stop)


@pytest.fixture(scope="module")
def sentinel(tmp_path_factory: Any) -> Iterator[tuple[str, int]]:
    """``(sentinel:// URL, the primary's port)``."""
    tmp = tmp_path_factory.mktemp("sentinel")
    primary, replica, watcher = free_port(), free_port(), free_port()
    common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
    with ExitStack() as stack:
        for port, extra in ((primary, []), (replica, ["--replicaof", "127.0.0.1", str(primary)])):
            folder = tmp / str(port)
            folder.mkdir()
            _start(stack, ["--port", str(port), "--dir", str(folder), *common, *extra], tmp / f"{port}.log")
        _wait(lambda: redis.Redis(port=primary).ping(), "the Redis primary")
        _wait(lambda: redis.Redis(port=replica).info("replication")["master_link_status"] == "up", "the Redis replica")
        conf = tmp / "sentinel.conf"  # Sentinel rewrites its configuration file: one of its own
        conf.write_text(f"port {watcher}\nbind 127.0.0.1\ndir {tmp}\nsentinel monitor {MASTER} 127.0.0.1 {primary} 1\n")
        _start(stack, [str(conf), "--sentinel"], tmp / "sentinel.log")
        _wait(lambda: redis.Redis(port=watcher).sentinel_get_master_addr_by_name(MASTER) is not None, "the Sentinel")
        yield f"sentinel://127.0.0.1:{watcher}", primary


@pytest.fixture(scope="module")
def sentinel_stack(
    sentinel: tuple[str, int], vendor: ServerThread, vendor_secret: str, tmp_path_factory: Any
) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("sentinel-stack")
    built = build_stack(
        "sqlite-sentinel",
        database_url=f"sqlite:///{tmp / 'liaison.db'}",
        broker_url=sentinel[0],
        vendor_url=vendor.url,
        vendor_secret=vendor_secret,
        tmp=tmp,
        extra_env={"LIAISON_REDIS_SENTINEL_MASTER": MASTER},
    )
    yield built
    built.close()


def test_the_start_up_check_reaches_the_primary_through_sentinel(sentinel: tuple[str, int]) -> None:
    url, _ = sentinel
    check_broker(url, 0, MASTER)  # returns: Sentinel named the primary, and it answered
    with pytest.raises(SystemExit) as exited:
        check_broker(url, 0, "no-such-master")
    assert exited.value.code == EXIT_UNAVAILABLE


def test_the_flow_runs_through_sentinel(sentinel_stack: Stack) -> None:
    api_key, _, path = sentinel_stack.new_client()
    cid = f"sentinel-{uuid.uuid4().hex[:8]}"
    assert sentinel_stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid).status_code == 202
    assert sentinel_stack.wait_for_task(api_key, cid)["state"] == "succeeded"
    hits = sentinel_stack.callbacks.wait_for(
        lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=15, message="two callbacks"
    )
    assert [r.json()["type"] for r in hits if r.path == path] == ["task.accepted", "task.completed"]


def test_the_queue_probe_reads_the_primary_through_sentinel(sentinel_stack: Stack, sentinel: tuple[str, int]) -> None:
    name = f"liaison-test-probe-{uuid.uuid4().hex[:8]}"
    with sentinel_stack.celery.connection_for_read() as conn:
        conn.Producer().publish({"n": 1}, routing_key=name, declare=[Queue(name)])
        stats = queue_stats(conn, name)
    assert stats.messages == 1 and stats.oldest_age_s is None  # no publish-time header on this one
    assert redis.Redis(port=sentinel[1]).llen(name) == 1  # it is the primary that holds it
    redis.Redis(port=sentinel[1]).delete(name)


def _master_port(watcher: redis.Redis) -> int | None:
    """The port Sentinel names for the primary (redis-py gives ``(b"host", port)``)."""
    addr = watcher.sentinel_get_master_addr_by_name(MASTER)
    return addr[1] if isinstance(addr, tuple) else None


def test_the_flow_goes_on_after_a_failover(sentinel_stack: Stack, sentinel: tuple[str, int]) -> None:
    """Sentinel promotes the replica: web and worker find the new primary through it (last in the
    module: the old primary is a replica from here on)."""
    url, primary = sentinel
    watcher = redis.Redis(port=int(url.rsplit(":", 1)[1]))
    assert _master_port(watcher) == primary
    watcher.sentinel_failover(MASTER)
    _wait(lambda: _master_port(watcher) not in (None, primary), "the failover", 60)
    _wait(lambda: redis.Redis(port=primary).info("replication")["role"] == "slave", "the old primary's demotion", 60)
    api_key, _, _ = sentinel_stack.new_client()
    cid = f"sentinel-failover-{uuid.uuid4().hex[:8]}"
    assert sentinel_stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid).status_code == 202
    assert sentinel_stack.wait_for_task(api_key, cid, timeout=90)["state"] == "succeeded"
