"""Database connections that die under the platform (a server restart, a failover), or a pool with
none free in time, cost a retry, not the outbox lease: the web answers 503 with Retry-After, and a
task whose connection died, or that found every pooled connection busy, tries again a moment later
(workers.tasks.attempt, models.db.database_unavailable). Pooled connections are pinged only after an idle spell
(models.db), so this is the path a restart under load takes."""

from __future__ import annotations

import threading
import time
import uuid

import psycopg
import pytest
from celery import signals
from sqlalchemy import QueuePool, create_engine, event, select, text

from models.db import POOL_SIZE, Database, DescribedOnDemandCursor, Description
from models.task import ExternalTask
from tests.integration.stack import Stack
from tests.support.servers import RecordedRequest


def _kill_every_other_connection(database_url: str) -> int:
    observer = create_engine(database_url)
    try:
        with observer.connect() as conn:
            killed = conn.execute(
                text(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
    finally:
        observer.dispose()
    return int(killed)


def _submit_until_accepted(stack: Stack, api_key: str, cid: str) -> list[int]:
    """Submit with one Idempotency-Key until 202, as a client honouring Retry-After would."""
    statuses: list[int] = []
    for _ in range(5):
        response = stack.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid)
        statuses.append(response.status_code)
        if response.status_code == 202:
            return statuses
        assert response.status_code == 503, response.text
        assert response.headers["Retry-After"] == "1"
        time.sleep(float(response.headers["Retry-After"]))
    raise AssertionError(f"never accepted: {statuses}")


def _state_seen_apart(database_url: str, cid: str, timeout: float = 20) -> str:
    """The task's state once final, read on an engine of its own: the web and the worker's shared
    pool is left for the worker to find dead."""
    observer = create_engine(database_url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            with observer.connect() as conn:
                state = conn.scalar(select(ExternalTask.state).where(ExternalTask.correlation_id == cid))
            if state in ("succeeded", "failed", "canceled") or time.monotonic() > deadline:
                return str(state)
            time.sleep(0.1)
    finally:
        observer.dispose()


def test_killed_connections_cost_a_retry_not_the_lease(pair_stack: Stack) -> None:
    stack = pair_stack
    if stack.db.is_sqlite:
        pytest.skip("SQLite has no server connection to lose")
    api_key, _, path = stack.new_client()
    warm = f"warm-{uuid.uuid4().hex[:8]}"
    assert _submit_until_accepted(stack, api_key, warm) == [202]
    stack.wait_for_task(api_key, warm)  # web and worker now hold pooled connections, used just now

    assert _kill_every_other_connection(stack.settings.database_url) >= 1
    cids = [f"after-kill-{i}-{uuid.uuid4().hex[:6]}" for i in range(3)]
    statuses = [_submit_until_accepted(stack, api_key, cid) for cid in cids]

    assert all(s[-1] == 202 for s in statuses)
    assert all(code in (202, 503) for s in statuses for code in s), statuses  # never a 500
    for cid in cids:
        # Within seconds, not the lease (30 min; this stack runs no sweep at all): the worker's
        # task whose connection died retried a moment later.
        assert stack.wait_for_task(api_key, cid, timeout=20)["state"] == "succeeded"

    def completed(reqs: list[RecordedRequest]) -> list[str]:
        return sorted(
            r.json()["correlation_id"] for r in reqs if r.path == path and r.json()["type"] == "task.completed"
        )

    stack.callbacks.wait_for(lambda reqs: len(completed(reqs)) >= 4, timeout=20, message="four completions")
    assert completed(stack.callbacks.requests) == sorted([warm, *cids])


def test_a_task_whose_connection_died_tries_again_at_once(pair_stack: Stack, caplog: pytest.LogCaptureFixture) -> None:
    stack = pair_stack
    if stack.db.is_sqlite:
        pytest.skip("SQLite has no server connection to lose")
    api_key, _, _ = stack.new_client()
    warm = f"warm-{uuid.uuid4().hex[:8]}"
    assert _submit_until_accepted(stack, api_key, warm) == [202]
    stack.wait_for_task(api_key, warm)
    cid, outbox_id = stack.unpublished_task(
        api_key, {"correlation_id": f"dead-conn-{uuid.uuid4().hex[:6]}", "input": {}}
    )

    assert _kill_every_other_connection(stack.settings.database_url) >= 1
    # Straight to the broker: the worker is the first to use a pooled connection after the kill.
    stack.celery.send_task("liaison.submit", args=[outbox_id], queue=stack.queue)

    assert _state_seen_apart(stack.settings.database_url, cid) == "succeeded"
    assert any("the database is not answering" in r.getMessage() for r in caplog.records)


def test_a_task_that_finds_every_pooled_connection_busy_tries_again(pair_stack: Stack) -> None:
    """The worker's pool is exhausted for real: the test holds every connection it may open
    (``POOL_SIZE``, no overflow), so the task's first checkout waits the pool's timeout and raises
    ``sqlalchemy.exc.TimeoutError``, which is no ``DBAPIError``. It must be retried like a dead
    connection, not acked as a failure: this stack runs no sweep, so an acked task would stay
    ``requested`` for good."""
    stack = pair_stack
    if stack.db.is_sqlite:
        pytest.skip("one database suffices: the pool and the classification are the same on both")
    api_key, _, _ = stack.new_client()
    cid, outbox_id = stack.unpublished_task(api_key, {"correlation_id": f"no-conn-{uuid.uuid4().hex[:6]}", "input": {}})
    outcomes: list[str] = []

    def retried(request: object = None, **_: object) -> None:
        if getattr(request, "args", None) == [outbox_id]:
            outcomes.append("retried")

    def failed(args: tuple[object, ...] = (), exception: BaseException | None = None, **_: object) -> None:
        if list(args) == [outbox_id]:
            outcomes.append(f"failed: {type(exception).__name__}")

    signals.task_retry.connect(retried, weak=False)
    signals.task_failure.connect(failed, weak=False)
    held = [stack.db.engine.connect() for _ in range(POOL_SIZE)]
    try:
        stack.celery.send_task("liaison.submit", args=[outbox_id], queue=stack.queue)
        deadline = time.monotonic() + 120  # the pool's timeout (30 s) first
        while not outcomes and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        for conn in held:
            conn.close()
        signals.task_retry.disconnect(retried)
        signals.task_failure.disconnect(failed)
    assert outcomes[:1] == ["retried"], outcomes
    assert _state_seen_apart(stack.settings.database_url, cid) == "succeeded"


def test_threads_that_overlap_in_the_database_keep_their_connections(postgres_url: str) -> None:
    """A threaded worker (the Procfile's calls and relay lines) whose threads overlap in the
    database more than SQLAlchemy's default five kept connections must not open and close one per
    burst: each is a new PostgreSQL backend. Twelve threads meet inside a transaction, then all
    hand their connections back before the next burst, round after round: the pool opens twelve
    connections in the first round and none after."""
    db = Database(postgres_url)
    threads, rounds = 12, 5
    opened = []
    event.listen(db.engine, "connect", lambda *_: opened.append(1))
    meet = threading.Barrier(threads)
    failed: list[Exception] = []

    def work() -> None:
        try:
            for _ in range(rounds):
                with db.transaction() as session:
                    session.execute(text("SELECT 1"))
                    meet.wait(timeout=30)  # every thread holds its connection at this moment
                meet.wait(timeout=30)  # and now none does: a burst is over
        except Exception as exc:  # a thread's failure is the test's (pool timeout, broken barrier)
            failed.append(exc)
            meet.abort()

    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join()
        assert not failed, failed
        assert len(opened) == threads  # SQLAlchemy's default pool: 12 + 7 a round after the first (40)
        pool = db.engine.pool
        assert isinstance(pool, QueuePool) and pool.checkedin() == threads  # all kept, none closed
    finally:
        db.dispose()


def test_a_cursor_describes_its_result_on_demand_as_psycopg_would(postgres_url: str) -> None:
    """``models.db.DescribedOnDemandCursor``: the engine's cursors make a result's ``Column`` objects
    only when SQLAlchemy reads them (the first run of a statement), the same columns psycopg's own
    cursor gives; a statement with no rows has none; a description read after its cursor moved on
    refuses to describe the new result."""
    db = Database(postgres_url)
    query = "SELECT 1 AS one, 'x'::text AS two, now() AS three, NULL::jsonb AS four"
    try:
        with db.engine.connect() as conn:
            dbapi = conn.connection.dbapi_connection
            assert isinstance(dbapi, psycopg.Connection)
            cursor = dbapi.cursor()
            plain = psycopg.Cursor(dbapi)
            expected = plain.execute(query).description
            assert expected is not None
            described = cursor.execute(query).description
            assert isinstance(cursor, DescribedOnDemandCursor) and isinstance(described, Description)
            assert len(described) == 4 and described._columns is None  # nothing made yet
            assert [(c.name, c.type_code) for c in described] == [(c.name, c.type_code) for c in expected]
            assert described[-1].name == "four" and [c.name for c in described[-2:]] == ["three", "four"]
            assert cursor.execute("SET LOCAL statement_timeout = 0").description is None
            stale = cursor.execute(query).description
            assert stale is not None
            cursor.execute("SELECT 2")
            with pytest.raises(RuntimeError, match="moved to another result"):
                stale[0]
            # and through SQLAlchemy, a statement's first run (its metadata built from the columns)
            assert conn.execute(text(query)).mappings().one()["two"] == "x"
            conn.rollback()
    finally:
        db.dispose()
