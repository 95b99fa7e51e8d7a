"""Beat jobs under a deploy's worst case: two beats (or a run overlapping the next) at once, large
tables, and queries that must touch only the rows that are due."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from datetime import timedelta

import pytest
from sqlalchemy import func, insert, select, text

from models import OutboxMessage, ProcessedMessage, TaskEvent
from models.base import utcnow
from models.store import slots as leases
from service.lifecycle import DEADLINES, due_query, escalate_due
from service.probes import silent_query
from service.reconciliation import quiet_query
from service.retention import prune_processed_messages
from tests.integration.stack import Stack
from tests.support.concurrency import twice_at_once


def test_pruning_ten_thousand_rows_in_batches_keeps_newer_ones(pair_stack: Stack) -> None:
    source = f"prune-{uuid.uuid4().hex[:8]}"
    now = utcnow()
    retention = pair_stack.settings.processed_retention_s
    old = now - timedelta(seconds=retention + 3600)
    with pair_stack.db.transaction() as session:
        session.execute(
            insert(ProcessedMessage),
            [
                {"source": source, "message_id": f"old-{i}", "message_type": "job.accepted", "processed_at": old}
                for i in range(10_000)
            ]
            + [
                {"source": source, "message_id": f"new-{i}", "message_type": "job.accepted", "processed_at": now}
                for i in range(50)
            ],
        )
    progress: list[int] = []
    removed = prune_processed_messages(pair_stack.db, now, retention, progress=progress.append)
    assert removed == 10_000
    assert progress[:3] == [1000, 2000, 3000] and progress[-1] == 10_000  # batches of 1000
    with pair_stack.db.transaction() as session:
        left = session.scalars(select(ProcessedMessage.message_id).where(ProcessedMessage.source == source)).all()
    assert sorted(left) == sorted(f"new-{i}" for i in range(50))


def test_two_prunes_at_once_delete_each_row_once(pair_stack: Stack) -> None:
    now = utcnow()
    retention = pair_stack.settings.processed_retention_s
    old = now - timedelta(seconds=retention + 60)
    source = f"prune2-{uuid.uuid4().hex[:8]}"
    with pair_stack.db.transaction() as session:
        session.execute(
            insert(ProcessedMessage),
            [{"source": source, "message_id": str(i), "message_type": "x", "processed_at": old} for i in range(3000)],
        )
    results = twice_at_once(lambda: prune_processed_messages(pair_stack.db, now, retention, batch=500))
    assert sum(results) == 3000


def test_two_deadline_checks_at_once_escalate_each_task_once(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    cids = [pair_stack.unpublished_task(api_key, {"input": "x", "acceptance_timeout_s": 60})[0] for _ in range(30)]
    later = utcnow() + timedelta(seconds=61)

    def run() -> int:
        with pair_stack.db.transaction() as session:
            escalated, _rows = escalate_due(session, later, 500)
        return escalated

    twice_at_once(run)
    with pair_stack.db.transaction() as session:
        for cid in cids:
            task_id = session.scalar(text("SELECT id FROM external_tasks WHERE correlation_id = :c").bindparams(c=cid))
            events = session.scalar(
                select(func.count())
                .select_from(TaskEvent)
                .where(TaskEvent.task_id == task_id, TaskEvent.kind == "deadline.exceeded")
            )
            relays = session.scalars(
                select(OutboxMessage).where(OutboxMessage.task_id == task_id, OutboxMessage.kind == "relay")
            ).all()
            assert events == 1
            assert [r.payload["type"] for r in relays] == ["task.deadline_exceeded"]


def test_two_sweeps_at_once_publish_each_row_once(pair_stack: Stack) -> None:
    api_key, _, _ = pair_stack.new_client()
    made = [pair_stack.unpublished_task(api_key, {"input": "x"}) for _ in range(20)]
    ids = {outbox_id for _, outbox_id in made}
    publisher = pair_stack.ctx.publisher
    sent: list[int] = []
    lock = threading.Lock()
    original = publisher._send

    def recording_send(rows: Iterable[OutboxMessage]) -> list[int]:
        result = original(rows)
        with lock:
            sent.extend(result)
        return result

    publisher._send = recording_send  # type: ignore[method-assign]  # observe what reaches the broker; the broker is still real
    try:
        twice_at_once(lambda: publisher.sweep(utcnow() + timedelta(seconds=60), 10, 1800))
    finally:
        del publisher._send
    mine = [i for i in sent if i in ids]
    assert sorted(mine) == sorted(ids)  # every row once, none twice
    for cid, _ in made[:3]:
        assert pair_stack.wait_for_task(api_key, cid)["state"] == "succeeded"


def test_beat_queries_use_their_partial_indexes_on_postgresql(pair_stack: Stack) -> None:
    if pair_stack.db.is_sqlite:
        pytest.skip("EXPLAIN output is PostgreSQL's; bench/beat_jobs.py --sqlite shows SQLite's plans and timings")
    now = utcnow()
    statements = {
        "ix_external_tasks_acceptance_due": due_query(DEADLINES[0], now, 500),
        "ix_external_tasks_execution_due": due_query(DEADLINES[1], now, 500),
        "ix_external_tasks_quiet_at_vendor": quiet_query("sim", 900, now, 500),
        "ix_external_tasks_heartbeat_due": silent_query(now, 500),
    }
    with pair_stack.db.engine.connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table would be scanned; ask what the index allows
        for index, statement in statements.items():
            compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
            plan = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {compiled}"))
            assert index in plan, plan
            assert "Seq Scan" not in plan, plan


def test_a_lease_is_held_by_one_run_until_released_or_expired(pair_stack: Stack) -> None:
    name, now = f"test:{uuid.uuid4().hex[:8]}", utcnow()
    assert leases.acquire(pair_stack.db, name, "a", now, 60)
    assert not leases.acquire(pair_stack.db, name, "b", now, 60)
    assert leases.acquire(pair_stack.db, name, "a", now, 60)  # its holder may renew it
    assert leases.acquire(pair_stack.db, name, "b", now + timedelta(seconds=61), 60)  # a dead holder's expired
    leases.release(pair_stack.db, name, "a")  # not the holder any more: changes nothing
    assert not leases.acquire(pair_stack.db, name, "c", now + timedelta(seconds=62), 60)
    leases.release(pair_stack.db, name, "b")
    assert leases.acquire(pair_stack.db, name, "c", now, 60)
    leases.release(pair_stack.db, name, "c")


def test_two_runs_taking_a_missing_lease_at_once_get_it_once(pair_stack: Stack) -> None:
    name, now = f"test:{uuid.uuid4().hex[:8]}", utcnow()
    holders = iter(["x", "y"])
    lock = threading.Lock()

    def take() -> bool:
        with lock:
            holder = next(holders)
        return leases.acquire(pair_stack.db, name, holder, now, 60)

    assert sorted(twice_at_once(take)) == [False, True]
