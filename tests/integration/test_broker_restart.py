"""A broker restart under load ends no process (issue 41.1), on Redis and on RabbitMQ.

The Procfile's web, worker (prefork), calls and relay (threads), beat and channel-commands run as a
deploy runs them, with the shipped timings, against a broker of the test's own: a redis-server with
its append-only file (``bench.services.RedisServer(persist=True)``: a restart keeps the queues) or a
RabbitMQ node of its own (``bench.services.RabbitMQNode``: durable queues survive its restart). Tasks
are submitted until the calls worker holds messages, the broker is stopped and started again on the
same port, and the rest are submitted while everything reconnects.

What must hold: every process is still the one started (same pid, never exited), every Celery node
answers a ping after the restart (its consumer runs: alive is not enough, a worker can sit wedged),
every task's ``task.completed`` reaches the domain app exactly once (one ``webhook-id``), and the
vendor has exactly one job per task.

Before the fix, on Redis, the calls and relay workers exited with ``Unrecoverable error:
AttributeError("'NoneType' object has no attribute 'hostname'")`` (app/redis_broker.py says why),
and on RabbitMQ the calls worker stayed up but stopped consuming (celeryconfig.py,
``worker_enable_prefetch_count_reduction``).
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import threading
import uuid
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from kombu import Connection
from kombu.transport import redis as kombu_redis

from app import redis_broker
from bench.procs import ROOT
from bench.services import RabbitMQNode, RedisServer
from tests.integration import services
from tests.integration.broker_platform import CELERY_NODES, Platform, platform
from tests.integration.processes import poll, poll_while_moving
from tests.support.servers import ServerThread

PROCESSES = ("web", "worker", "calls", "relay", "beat", "channel-commands")
#: tasks submitted before the restart (a burst: the calls worker holds some unacked) and after it
BEFORE, AFTER = 60, 60
#: the test's settings that shorten timings for other tests; these processes get the shipped ones
SHORTENED = ("_READ_TIMEOUT_S", "_MAX_ATTEMPTS", "_BACKOFF_", "_SCHEDULE_S", "_METRICS_CACHE_S", "_TIMEOUT_S")


@pytest.fixture(params=["redis", "rabbitmq"])
def broker(request: pytest.FixtureRequest) -> Iterator[RedisServer | RabbitMQNode]:
    if request.param == "redis":
        if shutil.which("redis-server") is None:
            pytest.skip("redis-server is not installed")
        server: RedisServer | RabbitMQNode = RedisServer(persist=True)
    else:
        if not (RabbitMQNode.RABBITMQ_BIN / "rabbitmq-server").exists():
            pytest.skip("rabbitmq-server is not installed")
        server = RabbitMQNode()
    with server:
        yield server


@pytest.fixture
def running(
    broker: RedisServer | RabbitMQNode, vendor: ServerThread, vendor_secret: str, tmp_path: Path
) -> Iterator[Platform]:
    with platform(broker.url, vendor.url, vendor_secret, tmp_path) as built:
        for key in [k for k in built.env if k.startswith("LIAISON_") and any(s in k for s in SHORTENED)]:
            del built.env[key]
        channel = "LIAISON_CHANNEL_REDIS_URL" if isinstance(broker, RedisServer) else "LIAISON_CHANNEL_AMQP_URL"
        built.env[channel] = broker.url
        for name in PROCESSES:
            built.start(name)
        poll("the web to answer /healthz", built.web_up, 120, lambda: _diagnose(built))
        for node in CELERY_NODES:
            poll(f"{node} to answer a ping", functools.partial(built.ping, node), 120, lambda: _diagnose(built))
        yield built


def _diagnose(p: Platform) -> str:
    return "\n".join(f"{name}: {what}" for name, what in p.exited().items()) or f"no process exited (logs: {p.log_dir})"


def _client(p: Platform) -> str:
    argv = ["flask", "--app", "app", "liaison", "clients", "create", f"restart-{uuid.uuid4().hex[:6]}"]
    argv += ["--callback-url", f"{p.callback_url}/cb", "--json"]
    done = subprocess.run(argv, cwd=ROOT, env=p.env, capture_output=True, check=True, text=True)
    return str(json.loads(done.stdout)["api_key"])


def _submit(p: Platform, api_key: str, ids: list[str]) -> None:
    """Each task until the web takes it (202), the same Idempotency-Key on every try: while the
    broker is down the web still takes it (the outbox), and a 5xx or a refused connection is tried
    again."""
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {api_key}"
        for cid in ids:
            for _ in range(60):
                try:
                    answer = session.post(
                        f"{p.web_url}/api/v1/tasks",
                        json={"correlation_id": cid, "input": {"cid": cid}},
                        headers={"Idempotency-Key": cid},
                        timeout=30,
                    )
                except requests.RequestException:
                    continue
                if answer.status_code == 202:
                    break
                assert answer.status_code >= 500, f"{cid}: {answer.status_code} {answer.text}"
            else:
                raise AssertionError(f"{cid} was never taken")


def _completions(p: Platform) -> dict[str, set[str]]:
    """correlation id -> the distinct webhook-ids its task.completed came under."""
    seen: dict[str, set[str]] = defaultdict(set)
    for request in p.callbacks.requests:
        body: Any = request.json()
        if body.get("type") == "task.completed":
            seen[body["correlation_id"]].add(request.headers.get("webhook-id", ""))
    return seen


def _calls_holding(p: Platform) -> bool:
    """The calls worker has taken work (its log shows a received submit): it holds messages now."""
    return "liaison.submit[" in p.procs["calls"].log.read_text(errors="replace")


def _in_threads(p: Platform, api_key: str, ids: list[str], threads: int = 4) -> list[threading.Thread]:
    started = [
        threading.Thread(target=_submit, args=(p, api_key, ids[n::threads]), daemon=True) for n in range(threads)
    ]
    for thread in started:
        thread.start()
    return started


@pytest.mark.timeout(900)  # starting a RabbitMQ node and six processes, then the work at the shipped pace
def test_a_broker_restart_under_load_ends_no_process_and_loses_no_task(
    running: Platform, broker: RedisServer | RabbitMQNode, vendor: ServerThread
) -> None:
    p = running
    pids = p.pids()
    api_key = _client(p)
    run = uuid.uuid4().hex[:6]
    ids = [f"restart-{run}-{n}" for n in range(BEFORE + AFTER)]

    first = _in_threads(p, api_key, ids[:BEFORE])
    poll("the calls worker to take work", lambda: _calls_holding(p), 120, lambda: _diagnose(p))
    broker.restart()  # stopped (every connection drops), then started again on the same port
    for thread in first:
        thread.join()
    for thread in _in_threads(p, api_key, ids[BEFORE:]):
        thread.join()

    def done() -> bool:
        assert not p.exited(), _diagnose(p)
        return set(_completions(p)) >= set(ids)

    poll_while_moving(
        "every task's task.completed at the domain app",
        done,
        lambda: len(_completions(p)),
        stall_s=180,
        diagnose=lambda: f"{len(set(ids) - set(_completions(p)))} missing; {_diagnose(p)}",
    )

    assert p.exited() == {}, _diagnose(p)
    assert p.pids() == pids
    for node in CELERY_NODES:
        assert p.ping(node), f"{node} is up but its consumer does not answer (logs: {p.log_dir})"
    twice = {cid: hooks for cid, hooks in _completions(p).items() if cid in ids and len(hooks) != 1}
    assert twice == {}, "task.completed under more than one webhook-id"
    jobs = requests.get(f"{vendor.url}/_sim/jobs", timeout=30).json()["jobs"]
    per_task = Counter(
        job["input"]["cid"] for job in jobs if isinstance(job.get("input"), dict) and job["input"].get("cid") in ids
    )
    assert set(per_task) == set(ids)
    assert {cid: n for cid, n in per_task.items() if n != 1} == {}, "a task with more than one vendor job"


@pytest.mark.parametrize("transport", [redis_broker.Transport, kombu_redis.Transport], ids=["ours", "kombus"])
def test_a_redis_channel_reaches_its_broker_after_its_connection_is_released(transport: type) -> None:
    """The cause, alone. Celery's first step with a dropped connection is ``collect()``: it closes
    the channels, which with the broker down stops at a channel's first Redis command, and then
    releases the transport. Here the channel stays open and the transport is released, as ``collect``
    leaves them; a restore or ack on the channel then needs a new Redis client. Ours still knows
    the broker's address; kombu's raises the AttributeError that ended the worker (kept as the
    control: if kombu fixes it, this says so)."""
    services.require(services.REDIS_URL, "Redis")
    connection = Connection(services.REDIS_URL, transport=transport)
    channel: Any = connection.default_channel  # a kombu Redis channel (typed as the abstract one)
    channel._disconnect_pools()  # what the aborted close had done before it stopped
    connection._do_close_transport()  # what collect() does after its close attempts
    if transport is redis_broker.Transport:
        with channel.conn_or_acquire() as client:
            assert client.ping()
    else:
        with pytest.raises(AttributeError, match="hostname"), channel.conn_or_acquire():
            pass
