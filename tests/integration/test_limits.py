"""Limits and internal surfaces on real services (issue 8, points 6 and 7): the per-client submit
rate limit and open-task cap, the provider rate limit shared by separate OS processes (Redis and the
database), the metrics token, and the business gauges' cache. Counts, never timings."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from sqlalchemy import event, select, update

from app.observability.collectors import BusinessCollector
from core.rate_limit import EPSILON_S, Decision, Limit
from models.client import Client
from models.messages import OutboxMessage
from models.task import ExternalTask, TaskEvent
from runtime.limiter import RateLimited
from tests.integration import services
from tests.integration.conftest import PAIRS, _stack
from tests.integration.stack import METRICS_AUTH, Stack, migrate
from tests.support.servers import ServerThread
from workers.providers import RateLimitedProvider

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]

SUBMIT_RATE, SUBMIT_BURST = 1.0, 5
PROVIDER_RATE = 2.0
LIMITS_ENV = {
    "LIAISON_CLIENT_SUBMIT_RATE_PER_S": str(SUBMIT_RATE),
    "LIAISON_CLIENT_SUBMIT_BURST": str(SUBMIT_BURST),
    "LIAISON_METRICS_CACHE_S": "3600",  # a scrape flood reads the database once
    # Submits queue for the vendor: 2 per second, no waiting inside a worker -- refused slots go
    # back to the broker, so the "retry without an attempt" path runs.
    "LIAISON_PROVIDER_SIM_RATE_LIMIT_PER_S": str(PROVIDER_RATE),
    "LIAISON_PROVIDER_SIM_RATE_LIMIT_BURST": "1",
    "LIAISON_PROVIDER_RATE_MAX_WAIT_S": "0",
}


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def limits_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    """SQLite + Redis (limits kept in Redis) and PostgreSQL + RabbitMQ (limits kept in the database)."""
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=LIMITS_ENV)


def _set_limits(stack: Stack, api_key: str, **limits: Any) -> None:
    with stack.db.transaction() as session:
        session.execute(update(Client).where(Client.name == stack.client_name(api_key)).values(**limits))


def _rate_limited(stack: Stack, scope: str) -> float:
    """``liaison_rate_limited_total{scope}`` summed over providers, from /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    text = stack.internal("/metrics").text
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "liaison_rate_limited_total" and sample.labels.get("scope") == scope
    )


def _quiet(cid: str) -> dict[str, Any]:
    """A task that stays open (the simulator completes it only after a minute)."""
    return {"correlation_id": cid, "input": {"simulate": {"complete_delay_s": 60}}}


# --- per-client submit rate limit ---------------------------------------------------------------


def test_a_burst_from_one_client_gets_429s_with_retry_after_and_another_client_is_unaffected(
    limits_stack: Stack,
) -> None:
    noisy, _, _ = limits_stack.new_client()
    calm, _, _ = limits_stack.new_client()
    counted_before = _rate_limited(limits_stack, "submit")
    sent = 20
    started = time.monotonic()
    answers = [limits_stack.submit(noisy, {"input": {"n": i}}) for i in range(sent)]
    elapsed = time.monotonic() - started
    accepted = [r for r in answers if r.status_code == 202]
    limited = [r for r in answers if r.status_code == 429]
    print(
        f"\n[{limits_stack.name}] submit rate {SUBMIT_RATE}/s burst {SUBMIT_BURST}: {sent} requests in "
        f"{elapsed:.2f}s -> {len(accepted)} x 202, {len(limited)} x 429"
    )
    assert len(accepted) + len(limited) == sent
    # The burst goes through; beyond it, no more than the rate allows over the time the requests took.
    assert SUBMIT_BURST <= len(accepted) <= SUBMIT_BURST + SUBMIT_RATE * elapsed + 1e-6
    assert len(limited) >= 1
    for response in limited:
        assert response.headers["Content-Type"] == "application/problem+json"
        assert int(response.headers["Retry-After"]) >= 1
        body = response.json()
        assert (body["status"], body["limit"]) == (429, "submit_rate")
    assert _rate_limited(limits_stack, "submit") == counted_before + len(limited)
    # Another client has its own bucket.
    assert limits_stack.submit(calm, {"input": {"calm": 1}}).status_code == 202
    # Waiting what Retry-After says is enough.
    time.sleep(int(limited[-1].headers["Retry-After"]))
    assert limits_stack.submit(noisy, {"input": {"later": 1}}).status_code == 202


def test_a_client_override_of_the_submit_rate_applies(limits_stack: Stack) -> None:
    api_key, _, _ = limits_stack.new_client()
    _set_limits(limits_stack, api_key, submit_rate_per_s=0.01, submit_burst=2)
    codes = [limits_stack.submit(api_key, {"input": {"n": i}}).status_code for i in range(4)]
    assert codes == [202, 202, 429, 429]
    assert limits_stack.submit(api_key, {"input": {"n": 9}}).headers["Retry-After"] == "100"  # 1 / 0.01, ceiled


def test_every_refused_submit_takes_its_slot(limits_stack: Stack) -> None:
    """A flood of refused requests is still a flood: not JSON, an invalid body, a reused
    Idempotency-Key and the open-task cap each take a slot as an accepted submit does (on
    PostgreSQL + RabbitMQ the database limiter's slot commits with the request's answer)."""
    api_key, _, _ = limits_stack.new_client()
    _set_limits(limits_stack, api_key, submit_rate_per_s=0.01, submit_burst=6, max_open_tasks=1)
    url, auth = f"{limits_stack.web.url}/api/v1/tasks", {"Authorization": f"Bearer {api_key}"}
    key = f"slot-{uuid.uuid4().hex[:8]}"
    answers = [
        limits_stack.submit(api_key, _quiet(key), key=key),  # accepted: the one open task the cap allows
        requests.post(url, data=b"{not json", headers={**auth, "Content-Type": "application/json"}, timeout=10),
        limits_stack.submit(api_key, {"input": {"n": 1}, "priority": "urgent"}),
        limits_stack.submit(api_key, {"input": {"other": "body"}}, key=key),  # the key, another body
        limits_stack.submit(api_key, _quiet(f"{key}-2")),  # past the open-task cap
        limits_stack.submit(api_key, _quiet(key), key=key),  # a replay: answered, counted
    ]
    assert [r.status_code for r in answers] == [202, 400, 422, 409, 429, 200]
    assert answers[4].json()["limit"] == "max_open_tasks"
    # Six slots of a burst of six are gone: the next request is refused by the rate, not the cap.
    over = limits_stack.submit(api_key, _quiet(f"{key}-3"))
    assert (over.status_code, over.json()["limit"]) == (429, "submit_rate")


def test_the_cli_sets_and_resets_a_clients_limits(limits_stack: Stack) -> None:
    api_key, _, _ = limits_stack.new_client()
    name = limits_stack.client_name(api_key)
    runner = limits_stack.app.test_cli_runner()
    result = runner.invoke(args=["liaison", "clients", "limits", name, "--max-open", "1", "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.output)
    assert (shown["max_open_tasks"], shown["overridden"]) == (1, ["max_open_tasks"])
    assert shown["submit_burst"] == SUBMIT_BURST  # the deployment's default
    cids = [f"cli-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    assert [limits_stack.submit(api_key, _quiet(cid)).status_code for cid in cids] == [202, 429]
    result = runner.invoke(args=["liaison", "clients", "limits", name, "--default", "--json"])
    assert json.loads(result.output)["overridden"] == []
    assert limits_stack.submit(api_key, _quiet(cids[1])).status_code == 202


# --- per-client cap on open tasks ---------------------------------------------------------------


def test_the_open_task_cap_holds_under_concurrent_submits_and_frees_as_tasks_end(limits_stack: Stack) -> None:
    api_key, _, _ = limits_stack.new_client()
    cap = 3
    _set_limits(limits_stack, api_key, max_open_tasks=cap, submit_rate_per_s=1000.0, submit_burst=1000)
    cids = [f"cap-{uuid.uuid4().hex[:8]}-{i}" for i in range(8)]
    barrier = threading.Barrier(len(cids))
    answers: dict[str, requests.Response] = {}

    def send(cid: str) -> None:
        barrier.wait()
        answers[cid] = limits_stack.submit(api_key, _quiet(cid), key=cid)

    threads = [threading.Thread(target=send, args=(cid,)) for cid in cids]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    codes = sorted(r.status_code for r in answers.values())
    assert codes == [202] * cap + [429] * (len(cids) - cap)
    refused = [r for r in answers.values() if r.status_code == 429]
    assert all(r.json()["limit"] == "max_open_tasks" and r.json()["max_open_tasks"] == cap for r in refused)
    assert all("max_open_tasks" in r.json()["detail"] for r in refused)
    with limits_stack.db.transaction() as session:
        stored = session.scalars(select(ExternalTask.correlation_id).where(ExternalTask.correlation_id.in_(cids))).all()
    assert len(stored) == cap

    # A replay of an accepted request still answers (200, same task) at the cap.
    first = next(cid for cid, r in answers.items() if r.status_code == 202)
    assert limits_stack.submit(api_key, _quiet(first), key=first).status_code == 200
    # Once one task is final, one more fits.
    cancel = requests.post(
        f"{limits_stack.web.url}/api/v1/tasks/{first}/cancel",
        headers={"Authorization": f"Bearer {api_key}"},
        json={},
        timeout=10,
    )
    assert cancel.status_code == 202
    limits_stack.wait_for_task(api_key, first, timeout=60)
    late = [cid for cid, r in answers.items() if r.status_code == 429]
    assert limits_stack.submit(api_key, _quiet(late[0]), key=late[0]).status_code == 202
    assert limits_stack.submit(api_key, _quiet(late[1]), key=late[1]).status_code == 429


# --- the provider rate limit in the worker ------------------------------------------------------


class _CountingLimiter:
    """Spy: the real limiter, with its refusals counted per key."""

    def __init__(self, real: Any) -> None:
        self.real = real
        self.refused: dict[str, int] = {}

    def acquire(self, key: str, limit: Limit, **kwargs: Any) -> Decision:
        decision: Decision = self.real.acquire(key, limit, **kwargs)
        self._count(key, decision)
        return decision

    def acquire_with(self, session: Any, key: str, limit: Limit, **kwargs: Any) -> Decision | None:
        """The database limiter takes a vendor call's slot in its start transaction."""
        decision: Decision | None = self.real.acquire_with(session, key, limit, **kwargs)
        self._count(key, decision)
        return decision

    def _count(self, key: str, decision: Decision | None) -> None:
        if decision is not None and not decision.allowed:
            self.refused[key] = self.refused.get(key, 0) + 1


def test_a_submit_refused_a_provider_slot_waits_without_using_an_attempt(limits_stack: Stack) -> None:
    provider = limits_stack.ctx.providers["sim"]
    assert isinstance(provider, RateLimitedProvider)  # workers.providers wraps every provider in its limit
    counted_before = _rate_limited(limits_stack, "provider")
    spy = _CountingLimiter(provider.limiter)
    provider.limiter = spy
    try:
        api_key, _, _ = limits_stack.new_client()
        cids = [f"paced-{uuid.uuid4().hex[:8]}-{i}" for i in range(5)]
        for cid in cids:
            assert limits_stack.submit(api_key, _quiet(cid)).status_code == 202
        for cid in cids:
            limits_stack.wait_for_task(api_key, cid, until=lambda b: b["state"] == "accepted", timeout=120)
    finally:
        provider.limiter = spy.real
    # Five submits at 2 per second with a burst of 1: some had to be refused a slot and come back.
    assert spy.refused.get("provider:sim", 0) >= 1
    assert _rate_limited(limits_stack, "provider") >= counted_before + 1
    with limits_stack.db.transaction() as session:
        tasks = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id.in_(cids))).all()
        outbox = session.scalars(
            select(OutboxMessage).where(OutboxMessage.correlation_id.in_(cids), OutboxMessage.kind == "submit")
        ).all()
        failed = session.scalars(
            select(TaskEvent.kind).where(
                TaskEvent.task_id.in_([t.id for t in tasks]), TaskEvent.kind.like("%attempt_failed")
            )
        ).all()
    # One attempt each (the one that was sent) and no failed one: waiting for a slot counted none.
    assert [t.attempts for t in tasks] == [1] * len(cids)
    assert [row.attempts for row in outbox] == [0] * len(cids)  # the retry policy's failure count
    assert failed == []


def test_reconcile_waits_for_a_refused_slot_and_asks_again() -> None:
    """Reconcile sleeps the refusal's retry_after and asks again (no error, no skipped task)."""
    from workers.reconcile import _status_when_slot

    class Busy:
        calls = 0

        def status(self, job_id: str) -> str:
            self.calls += 1
            if self.calls < 3:
                raise RateLimited("provider:x", 0.25)
            return job_id

    slept: list[float] = []
    assert _status_when_slot(Busy(), "job-7", slept.append) == "job-7"  # type: ignore[arg-type]
    assert slept == [0.25, 0.25]


# --- the provider rate limit across OS processes --------------------------------------------------

RATE, BURST, CALLS = 20.0, 2, 25


def _max_in_any_window(granted: list[float], rate: float, burst: int) -> float:
    """The worst excess over ``rate * window + burst`` among all windows between granted instants
    (<= 0 means the limit held everywhere)."""
    times = sorted(granted)
    worst = float("-inf")
    for i in range(len(times)):
        for j in range(i, len(times)):
            worst = max(worst, (j - i + 1) - (rate * (times[j] - times[i]) + burst))
    return worst


@pytest.mark.parametrize("storage", ["redis", "postgres", "sqlite"])
def test_the_provider_rate_limit_holds_across_two_worker_processes(
    storage: str, postgres_url: str, tmp_path: Path
) -> None:
    if storage == "redis":
        services.require(services.REDIS_URL, "Redis")
        kind, url = "redis", services.REDIS_URL
    else:
        url = postgres_url if storage == "postgres" else f"sqlite:///{tmp_path / 'limits.db'}"
        migrate(url)
        kind = "database"
    namespace = uuid.uuid4().hex[:12]
    start_at = time.time() + 3.0  # both processes import and connect first, then go together
    outs = [tmp_path / f"proc{i}.json" for i in range(2)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.integration.limiter_process",
                kind,
                url,
                namespace,
                str(RATE),
                str(BURST),
                str(CALLS),
                repr(start_at),
                str(out),
            ],
            cwd=ROOT,
        )
        for out in outs
    ]
    for proc in procs:
        assert proc.wait(timeout=120) == 0
    results = [json.loads(out.read_text()) for out in outs]
    granted = [t for r in results for t in r["granted"]]
    print(
        f"\n[{storage}] two processes, {RATE}/s burst {BURST}: {len(granted)} granted, "
        f"{sum(r['refused'] for r in results)} refusals, span {max(granted) - min(granted):.2f}s"
    )
    assert len(granted) == 2 * CALLS
    # They really competed: each was refused at least once while the other held the slots.
    assert all(r["refused"] >= 1 for r in results)
    # Together, never more than rate * window + burst in any window (float slack: microseconds).
    assert _max_in_any_window(granted, RATE, BURST) <= RATE * 1e-4


def test_redis_and_the_database_decide_alike(postgres_url: str) -> None:
    """The Lua script and the Python GCRA give the same decisions for the same sequence."""
    from models.db import Database
    from runtime.limiter import DatabaseLimiter, RedisLimiter

    services.require(services.REDIS_URL, "Redis")
    migrate(postgres_url)
    key = f"alike-{uuid.uuid4().hex}"
    limit = Limit(4.0, 3)
    moments = [1000.0, 1000.0, 1000.0, 1000.0, 1000.1, 1000.25, 1000.3, 1002.0, 1002.0, 1002.0, 1002.0, 1002.0]
    db = Database(postgres_url)
    redis_limiter = RedisLimiter(services.REDIS_URL, prefix="liaison:rate:test:")
    try:
        for max_wait in (0.0, 0.3):
            a = [DatabaseLimiter(db).acquire(key + str(max_wait), limit, max_wait_s=max_wait, now=t) for t in moments]
            b = [redis_limiter.acquire(key + str(max_wait), limit, max_wait_s=max_wait, now=t) for t in moments]
            assert [d.allowed for d in a] == [d.allowed for d in b]
            assert all(
                abs(x.wait_s - y.wait_s) < 1e-9 and abs(x.retry_after_s - y.retry_after_s) < 1e-9
                for x, y in zip(a, b, strict=True)
            )
            assert any(not d.allowed for d in a) and any(d.allowed for d in a)
    finally:
        redis_limiter.close()
        db.dispose()


@pytest.fixture(params=["sqlite", "postgres"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh database at the migrations' head, of each kind."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'limits.db'}"
        migrate(url)
        yield url
        return
    url, database = services.create_postgres_database()
    try:
        migrate(url)
        yield url
    finally:
        services.drop_postgres_database(database)


def test_a_caller_queued_behind_a_keys_holder_takes_its_slot_at_the_time_it_gets_the_key(
    database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Callers of one key queue for its row (PostgreSQL: held until the holder's commit, a submit's
    included; SQLite: the write lock). A caller whose ``now`` was read before that wait, older than
    the times the holder moved the key on with, was refused though the client was well under its
    limit (a 429 at 120 submits against 1000 per second, bursts of 1000). Here 10 per second, bursts
    of 2: A takes a slot and keeps the key; B asks, and waits; half a second later A takes one more
    and commits. Three slots in half a second are within the limit: B must get its own."""
    from models.db import Database
    from models.rate_limits import RateLimitState
    from runtime.limiter import DatabaseLimiter

    db = Database(database_url)
    limiter = DatabaseLimiter(db)  # no clock injected: as deployed
    key, limit = f"queued-{uuid.uuid4().hex}", Limit(10.0, 2)
    b_sent = threading.Event()
    b_thread: list[threading.Thread] = []

    @event.listens_for(db.engine, "before_cursor_execute")
    def _sent(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if b_thread and threading.current_thread() is b_thread[0]:
            b_sent.set()  # B's BEGIN IMMEDIATE (SQLite) or its take (PostgreSQL): it waits for A

    decisions: list[Decision] = []
    try:
        with db.transaction() as a:
            assert limiter.acquire_in(a, key, limit).allowed
            b_thread.append(threading.Thread(target=lambda: decisions.append(limiter.acquire(key, limit))))
            b_thread[0].start()
            assert b_sent.wait(30)
            if not db.is_sqlite:
                _wait_for_a_lock_wait(a)
            time.sleep(0.5)
            assert limiter.acquire_in(a, key, limit).allowed
            held = a.scalar(select(RateLimitState.tat).where(RateLimitState.key == key))
        b_thread[0].join(30)
        with db.transaction() as session:
            tat = session.scalar(select(RateLimitState.tat).where(RateLimitState.key == key))
    finally:
        db.dispose()
    assert [(d.allowed, d.retry_after_s) for d in decisions] == [(True, 0.0)]
    assert tat is not None and held is not None and tat > held  # B's slot was taken, not failed open
    assert "rate limit storage unavailable" not in caplog.text


def _wait_for_a_lock_wait(session: Any) -> None:
    """Until another backend of this database waits on a lock (B's take behind A's row)."""
    from sqlalchemy import text

    deadline = time.monotonic() + 30
    query = text(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
    )
    while not session.scalar(query):
        assert time.monotonic() < deadline, "B never waited for the row"
        time.sleep(0.01)


def test_a_redis_caller_delayed_on_its_way_takes_its_slot_at_the_time_it_reaches_the_server(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The Redis script reads the server's ``TIME``: a caller whose request was slow to arrive (a
    busy host, a slow network) is not judged by a clock read before others' later calls got in.
    10 per second, bursts of 2: A takes a slot; B's request is held on its way; half a second later A
    takes one more; then B's arrives. Three slots in half a second are within the limit."""
    from urllib.parse import urlsplit

    from runtime.limiter import RedisLimiter
    from tests.support.tcp_proxy import TcpProxy

    services.require(services.REDIS_URL, "Redis")
    url = urlsplit(services.REDIS_URL)
    proxy = TcpProxy(url.hostname or "127.0.0.1", url.port or 6379).start()
    a = RedisLimiter(services.REDIS_URL, prefix="liaison:rate:test:")  # no clock injected: as deployed
    b = RedisLimiter(f"redis://127.0.0.1:{proxy.port}{url.path}", prefix="liaison:rate:test:")
    key, limit = f"delayed-{uuid.uuid4().hex}", Limit(10.0, 2)
    decisions: list[Decision] = []
    try:
        assert b.client.ping()  # B's connection open, through the proxy
        assert a.acquire(key, limit).allowed
        proxy.hold()
        b_thread = threading.Thread(target=lambda: decisions.append(b.acquire(key, limit)))
        b_thread.start()
        assert proxy.held.wait(30)
        time.sleep(0.5)
        assert a.acquire(key, limit).allowed
        before = _server_time(a)
        proxy.release()
        b_thread.join(30)
        after = _server_time(a)
        stored = a.client.get(f"liaison:rate:test:{key}")
    finally:
        proxy.release()
        a.client.delete(f"liaison:rate:test:{key}")
        a.close()
        b.close()
        proxy.stop()
    assert [(d.allowed, d.retry_after_s) for d in decisions] == [(True, 0.0)]
    assert "rate limit storage unavailable" not in caplog.text
    assert isinstance(stored, bytes)
    tat = float(stored)
    # B was judged at the server's time between the two reads: its slot moved the key to one
    # interval past that time at least, and A's and B's to two past the later read at most.
    assert before + limit.interval_s - EPSILON_S <= tat <= after + 2 * limit.interval_s + EPSILON_S


def _server_time(limiter: Any) -> float:
    seconds, microseconds = limiter.client.time()
    return float(seconds + microseconds / 1e6)


def test_a_limiter_whose_redis_is_down_fails_open() -> None:
    """A Redis outage must not turn submits into 500s (the outbox promises they succeed while the
    broker is down): the call is allowed, and a warning logged."""
    from runtime.limiter import RedisLimiter

    limiter = RedisLimiter(f"redis://127.0.0.1:{services.free_port()}/0", prefix="liaison:rate:down:")
    try:
        decisions = [limiter.acquire("k", Limit(0.001, 1)) for _ in range(3)]
    finally:
        limiter.close()
    assert all(d.allowed and d.wait_s == 0 for d in decisions)


# --- /metrics and /readyz behind a token ----------------------------------------------------------


@pytest.mark.parametrize("path", ["/metrics", "/readyz"])
def test_internal_surfaces_need_the_metrics_token(limits_stack: Stack, path: str) -> None:
    url = limits_stack.web.url + path
    assert requests.get(url, timeout=10).status_code == 401
    wrong = requests.get(url, headers={"Authorization": "Bearer " + "x" * 40}, timeout=10)
    assert wrong.status_code == 401 and wrong.headers["Content-Type"] == "application/problem+json"
    assert requests.get(url, headers=METRICS_AUTH, timeout=10).status_code == 200
    assert requests.get(limits_stack.web.url + "/healthz", timeout=10).status_code == 200  # stays open


def test_without_a_metrics_token_the_internal_surfaces_are_off(limits_stack: Stack) -> None:
    # The running app with the token unset (a second app in this process would become Celery's
    # default one, under the stack's worker).
    ctx = limits_stack.ctx
    configured = ctx.settings
    ctx.settings = dataclasses.replace(configured, metrics_token="")
    try:
        for path in ("/metrics", "/readyz"):
            assert requests.get(limits_stack.web.url + path, timeout=10).status_code == 404
            assert limits_stack.internal(path).status_code == 404
        assert requests.get(limits_stack.web.url + "/healthz", timeout=10).status_code == 200
    finally:
        ctx.settings = configured


# --- the business gauges are cached ---------------------------------------------------------------


class _TaskCounts:
    """Counts the gauges' grouped COUNT over external_tasks, on one engine."""

    def __init__(self, engine: Any) -> None:
        self.engine, self.n = engine, 0

    def __enter__(self) -> _TaskCounts:
        event.listen(self.engine, "before_cursor_execute", self._seen)
        return self

    def __exit__(self, *_: object) -> None:
        event.remove(self.engine, "before_cursor_execute", self._seen)

    def _seen(self, _conn: object, _cursor: object, statement: str, *_: object) -> None:
        text = statement.lower()
        if "count(" in text and "from external_tasks group by" in text:
            self.n += 1


def test_a_scrape_flood_counts_the_tables_once(limits_stack: Stack) -> None:
    limits_stack.internal("/metrics")  # fill the cache (this module's stack keeps it an hour)
    with _TaskCounts(limits_stack.db.engine) as counts:
        for _ in range(10):
            response = limits_stack.internal("/metrics")
            assert response.status_code == 200 and "liaison_tasks{" in response.text
    assert counts.n == 0


def test_the_gauges_are_read_again_once_the_cache_expires(limits_stack: Stack) -> None:
    now = [0.0]
    collector = BusinessCollector(limits_stack.db, limits_stack.celery, ["sim"], cache_s=5.0, clock=lambda: now[0])
    with _TaskCounts(limits_stack.db.engine) as counts:
        reads = []
        for moment in (0.0, 1.0, 4.9, 5.0, 6.0, 9.9, 10.0):
            now[0] = moment
            names = {family.name for family in collector.collect()}
            assert "liaison_tasks" in names
            reads.append(counts.n)
    assert reads == [1, 1, 1, 2, 2, 2, 3]
