"""Retention (issue 12): finished work older than its kind's retention is removed, with every row
that belongs to it; nothing open and nothing newer is touched; two runs at once remove each row
once; the export is written before the delete, and a failed export deletes nothing; each kind's
query runs on its index. Both databases (``pair_stack``: sqlite-redis, postgres-rabbitmq).

Rows are written straight to the database with their timestamps in the past (never by sleeping),
through a plain session so no outbox row is published to the worker.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models import DeadLetter, ExternalTask, Incident, OrphanEvent, OutboxMessage, ProcessedMessage, TaskEvent
from models.base import Base, utcnow
from models.notifications import Notification
from models.store.retention import due_query, task_dependents
from service.credentials import authenticate
from service.retention import KINDS, Retention, prune
from service.retention_export import ExportFailed
from tests.integration.stack import Stack
from tests.support.concurrency import twice_at_once

pytestmark = pytest.mark.integration

DAY = timedelta(days=1)
RETENTION = Retention()  # the defaults: 30 days for every kind but the inbox (4 days)


@dataclass
class Made:
    tasks: dict[str, int]
    outbox: dict[str, int]
    letters: dict[str, int]
    incidents: dict[str, int]
    orphans: dict[str, int]
    processed: dict[str, int]


class Builder:
    def __init__(self, session: Session, client_id: int, now: datetime) -> None:
        self.session, self.client_id, self.now = session, client_id, now
        self.tag = uuid.uuid4().hex[:8]

    def task(
        self, name: str, state: str, age: timedelta, outbox: tuple[timedelta | None, ...] = ()
    ) -> tuple[int, list[int]]:
        """A task last changed ``age`` ago, with two events and outbox rows done that long ago (None: not done)."""
        at = self.now - age
        task = ExternalTask(
            correlation_id=f"{name}-{self.tag}",
            client_id=self.client_id,
            provider="sim",
            state=state,
            input={"n": name},
            created_at=at,
            updated_at=at,
            checked_at=at,
        )
        self.session.add(task)
        self.session.flush()
        self.session.add_all([TaskEvent(task_id=task.id, at=at, kind="state.requested", detail={}) for _ in range(2)])
        rows = [
            OutboxMessage(
                message_id=f"msg_{uuid.uuid4().hex}",
                kind="relay",
                task_id=task.id,
                correlation_id=task.correlation_id,
                payload={"type": "task.completed"},
                created_at=at,
                done_at=None if done is None else self.now - done,
            )
            for done in outbox
        ]
        self.session.add_all(rows)
        self.session.flush()
        return task.id, [r.id for r in rows]

    def letter(self, outbox_id: int | None, state: str, age: timedelta) -> int:
        at = self.now - age
        letter = DeadLetter(
            kind="relay",
            message_id=f"msg_{uuid.uuid4().hex}",
            outbox_id=outbox_id,
            payload={},
            error="x",
            fault="system",
            first_failed_at=at,
            last_failed_at=at,
            state=state,
            closed_at=None if state == "open" else at,
        )
        self.session.add(letter)
        self.session.flush()
        return letter.id

    def incident(self, resolved: bool, age: timedelta) -> int:
        at = self.now - age
        incident = Incident(
            kind="relay_failed",
            subject=f"test:{uuid.uuid4().hex}",
            open_key=None if resolved else uuid.uuid4().hex,
            detail="x",
            opened_at=at,
            resolved_at=at if resolved else None,
        )
        self.session.add(incident)
        self.session.flush()
        return incident.id

    def orphan(self, state: str, age: timedelta) -> int:
        at = self.now - age
        orphan = OrphanEvent(
            source="sim",
            message_id=f"msg_{uuid.uuid4().hex}",
            vendor_job_id=f"job_{uuid.uuid4().hex}",
            payload={"type": "job.completed"},
            received_at=at,
            state=state,
            resolved_at=None if state == "open" else at,
        )
        self.session.add(orphan)
        self.session.flush()
        return orphan.id

    def processed(self, age: timedelta) -> int:
        row = ProcessedMessage(
            source=f"ret-{self.tag}",
            message_id=uuid.uuid4().hex,
            message_type="job.accepted",
            processed_at=self.now - age,
        )
        self.session.add(row)
        self.session.flush()
        return row.id


def build(stack: Stack, now: datetime) -> Made:
    """One of everything retention must remove ("old_*") and everything it must keep."""
    api_key, _, _ = stack.new_client()
    old, new = 31 * DAY, 29 * DAY
    with Session(stack.db.engine, expire_on_commit=False) as session, session.begin():
        client = authenticate(session, api_key)
        assert client is not None
        b = Builder(session, client.id, now)
        tasks, outbox = {}, {}
        tasks["old_done"], (outbox["old_done_task_row"],) = b.task("old-done", "succeeded", old, (old,))
        tasks["old_failed"], _ = b.task("old-failed", "failed", old)
        tasks["old_canceled"], _ = b.task("old-canceled", "canceled", old, (old, old))
        tasks["new_done"], (outbox["new_done_task_row"],) = b.task("new-done", "succeeded", new, (new,))
        tasks["old_open"], (outbox["old_open_task_row"],) = b.task("old-open", "accepted", old, (old,))
        # finished long ago, but its completion callback is still waiting (parked or retrying)
        tasks["old_undelivered"], (outbox["undelivered"],) = b.task("old-undelivered", "succeeded", old, (None,))
        # finished long ago, but its callback was dead-lettered and the letter is still open
        tasks["old_dead_lettered"], (outbox["dead_lettered"],) = b.task("old-dl", "failed", old, (old,))
        letters = {
            "open_on_task": b.letter(outbox["dead_lettered"], "open", old),
            "old_discarded": b.letter(None, "discarded", old),
            "old_replayed": b.letter(None, "replayed", old),
            "new_discarded": b.letter(None, "discarded", new),
            "old_open": b.letter(None, "open", old),
        }
        incidents = {
            "old_resolved": b.incident(True, old),
            "new_resolved": b.incident(True, new),
            "old_open": b.incident(False, old),
        }
        orphans = {
            "old_resolved": b.orphan("resolved", old),
            "old_discarded": b.orphan("discarded", old),
            "new_resolved": b.orphan("resolved", new),
            "old_open": b.orphan("open", old),
        }
        processed = {"old": b.processed(5 * DAY), "new": b.processed(3 * DAY)}
    return Made(tasks, outbox, letters, incidents, orphans, processed)


def _ids(stack: Stack, model: Any, ids: dict[str, int]) -> set[str]:
    """Which of the named rows are still there."""
    with stack.db.transaction() as session:
        left = set(session.scalars(select(model.id).where(model.id.in_(ids.values()))))
    return {name for name, i in ids.items() if i in left}


def _count(stack: Stack, column: Any, ids: list[int]) -> int:
    with stack.db.transaction() as session:
        return int(session.scalar(select(func.count()).where(column.in_(ids))) or 0)


def test_retention_removes_only_finished_rows_older_than_the_cutoff(pair_stack: Stack) -> None:
    now = utcnow()
    made = build(pair_stack, now)
    removed = prune(pair_stack.db, now, RETENTION)
    assert set(removed) == set(KINDS)

    assert _ids(pair_stack, ExternalTask, made.tasks) == {
        "new_done",
        "old_open",
        "old_undelivered",
        "old_dead_lettered",
    }
    gone = [made.tasks[n] for n in ("old_done", "old_failed", "old_canceled")]
    kept = [made.tasks[n] for n in ("new_done", "old_open", "old_undelivered", "old_dead_lettered")]
    assert _count(pair_stack, TaskEvent.task_id, gone) == 0 and _count(pair_stack, OutboxMessage.task_id, gone) == 0
    assert _count(pair_stack, TaskEvent.task_id, kept) == 2 * len(kept)
    # the done rows of a task that may still change (open, or held) stay with it, however old
    assert _ids(pair_stack, OutboxMessage, made.outbox) == {
        "new_done_task_row",
        "old_open_task_row",
        "undelivered",
        "dead_lettered",
    }
    assert _ids(pair_stack, DeadLetter, made.letters) == {"open_on_task", "new_discarded", "old_open"}
    assert _ids(pair_stack, Incident, made.incidents) == {"new_resolved", "old_open"}
    assert _ids(pair_stack, OrphanEvent, made.orphans) == {"new_resolved", "old_open"}
    assert _ids(pair_stack, ProcessedMessage, made.processed) == {"new"}

    # Once the callback is delivered and the letter closed (and that, too, is old), the rest goes.
    with pair_stack.db.transaction() as session:
        undelivered = session.get(OutboxMessage, made.outbox["undelivered"])
        assert undelivered is not None
        undelivered.done_at = now - 31 * DAY
        letter = session.get(DeadLetter, made.letters["open_on_task"])
        assert letter is not None
        letter.state, letter.closed_at = "discarded", now - 31 * DAY
    prune(pair_stack.db, now, RETENTION)
    assert _ids(pair_stack, ExternalTask, made.tasks) == {"new_done", "old_open"}
    assert _ids(pair_stack, OutboxMessage, made.outbox) == {"new_done_task_row", "old_open_task_row"}

    assert prune(pair_stack.db, now, RETENTION)["tasks"] == 0  # a run with nothing due removes nothing


def test_notices_go_once_settled_and_old_never_while_pending(pair_stack: Stack) -> None:
    now = utcnow()
    old, new = now - 31 * DAY, now - DAY
    rows = {
        "old_sent": ("dispatched", old, old),
        "old_muted": ("muted", old, old),
        "old_pending": ("pending", old, None),  # held for a digest, or beat was down: never removed
        "new_sent": ("dispatched", new, new),
    }
    ids = {}
    with pair_stack.db.transaction() as session:
        for name, (state, occurred, settled) in rows.items():
            notice = Notification(
                key=uuid.uuid4().hex,
                kind="unknown_job",
                subject=name,
                phase="opened",
                detail="",
                occurred_at=occurred,
                state=state,
                dispatched_at=settled,
            )
            session.add(notice)
            session.flush()
            ids[name] = notice.id
    assert prune(pair_stack.db, now, RETENTION, kinds=["notifications"])["notifications"] >= 2
    assert _ids(pair_stack, Notification, ids) == {"old_pending", "new_sent"}


def test_done_outbox_rows_go_by_their_own_retention_when_tasks_are_kept_longer(pair_stack: Stack) -> None:
    now = utcnow()
    api_key, _, _ = pair_stack.new_client()
    with Session(pair_stack.db.engine) as session, session.begin():
        client = authenticate(session, api_key)
        assert client is not None
        b = Builder(session, client.id, now)
        settled, settled_rows = b.task("settled", "succeeded", 40 * DAY, (40 * DAY, 40 * DAY))
        running, running_rows = b.task("running", "accepted", 40 * DAY, (40 * DAY,))
    prune(pair_stack.db, now, Retention(tasks_s=365 * 86400), ["tasks", "outbox"])
    assert _count(pair_stack, ExternalTask.id, [settled, running]) == 2
    assert _count(pair_stack, OutboxMessage.id, settled_rows) == 0  # the settled task's callbacks: history
    assert _count(pair_stack, OutboxMessage.id, running_rows) == 1  # a running task's: kept while it runs
    assert _count(pair_stack, TaskEvent.task_id, [settled]) == 2  # the timeline stays with its task


def test_every_table_that_points_at_a_task_is_emptied_with_it() -> None:
    """Any column named task_id, or with a foreign key to external_tasks, is one retention deletes by."""
    covered = {(c.table.name, c.name) for c in task_dependents()}
    pointing = {
        (table.name, column.name)
        for table in Base.metadata.sorted_tables
        for column in table.columns
        if column.name == "task_id" or any(fk.column.table.name == "external_tasks" for fk in column.foreign_keys)
    }
    assert pointing <= covered, pointing - covered
    assert {("task_events", "task_id"), ("outbox_messages", "task_id")} <= covered


def test_two_runs_at_once_remove_each_task_once(pair_stack: Stack) -> None:
    now = utcnow()
    api_key, _, _ = pair_stack.new_client()
    with Session(pair_stack.db.engine) as session, session.begin():
        client = authenticate(session, api_key)
        assert client is not None
        b = Builder(session, client.id, now)
        ids = [b.task(f"twice-{i}", "succeeded", 40 * DAY, (40 * DAY,))[0] for i in range(600)]
    small = Retention(batch=100)
    results = twice_at_once(lambda: prune(pair_stack.db, now, small, ["tasks"])["tasks"])
    assert sum(results) >= 600  # rows of earlier tests' leftovers may be among them; none twice
    assert _count(pair_stack, ExternalTask.id, ids) == 0


def test_the_export_is_written_before_the_delete_and_a_failed_one_deletes_nothing(
    pair_stack: Stack, tmp_path: Path
) -> None:
    now = utcnow()
    api_key, _, _ = pair_stack.new_client()
    with Session(pair_stack.db.engine) as session, session.begin():
        client = authenticate(session, api_key)
        assert client is not None
        b = Builder(session, client.id, now)
        task_id, (row_id,) = b.task("exported", "succeeded", 60 * DAY, (60 * DAY,))
        incident_id = b.incident(True, 60 * DAY)

    blocked = tmp_path / "not-a-directory"
    blocked.write_text("a file where the export directory should be")
    with pytest.raises(ExportFailed):
        prune(pair_stack.db, now, Retention(export_dir=blocked / "export"), ["tasks"])
    assert _count(pair_stack, ExternalTask.id, [task_id]) == 1  # nothing deleted
    assert _count(pair_stack, TaskEvent.task_id, [task_id]) == 2

    export = tmp_path / "export"
    prune(pair_stack.db, now, Retention(export_dir=export), ["tasks", "incidents"])
    assert _count(pair_stack, ExternalTask.id, [task_id]) == 0
    lines = [json.loads(line) for line in (export / f"tasks-{now.date().isoformat()}.jsonl").read_text().splitlines()]
    mine = [line for line in lines if line["row"]["id"] == task_id]
    assert len(mine) == 1
    assert mine[0]["row"]["correlation_id"].startswith("exported-")
    assert len(mine[0]["belongs"]["task_events"]) == 2
    assert [r["id"] for r in mine[0]["belongs"]["outbox_messages"]] == [row_id]
    incidents = (export / f"incidents-{now.date().isoformat()}.jsonl").read_text().splitlines()
    assert incident_id in [json.loads(line)["row"]["id"] for line in incidents]
    assert oct((export / f"tasks-{now.date().isoformat()}.jsonl").stat().st_mode & 0o777) == "0o600"


INDEXES = {
    "tasks": "ix_external_tasks_finished",
    "outbox": "ix_outbox_messages_pending",
    "dead_letters": "ix_dead_letters_closed_at",
    "incidents": "ix_incidents_open",
    "notifications": "ix_notifications_dispatched",
    "orphans": "ix_orphan_events_resolved_at",
    "processed_messages": "ix_processed_messages_processed_at",
}


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_is_found_on_its_index(pair_stack: Stack, kind: str) -> None:
    """PostgreSQL: each kind's query runs on its index (the partial one for finished tasks), and the
    open-work checks on the outbox's task index and the open-letter index. SQLite's planner, without
    ANALYZE statistics, prefers an equality index (tasks: ``state``) and sorts: still a search on an
    index, never a scan of the table (docs/architecture.md "Retention")."""
    statement = due_query(kind, utcnow() - 30 * DAY, 1000)
    with pair_stack.db.engine.connect() as conn:
        compiled = statement.compile(dialect=conn.dialect, compile_kwargs={"literal_binds": True})
        if pair_stack.db.is_sqlite:
            plan = [str(row[-1]) for row in conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {compiled}")]
            assert plan[0].startswith("SEARCH ") and " USING " in plan[0], plan
            assert not any(line.startswith("SCAN ") for line in plan), plan
            return
        conn.exec_driver_sql("SET enable_seqscan = off")  # a tiny table would be scanned; ask what the index allows
        text = "\n".join(row[0] for row in conn.exec_driver_sql(f"EXPLAIN {compiled}"))
    assert "Seq Scan" not in text, text
    assert INDEXES[kind] in text, text
    if kind == "tasks":
        # the outbox by task: its task_id index, or the (task_id, sequence) unique one that leads with it
        assert "ix_outbox_messages_task_id" in text or "uq_outbox_messages_task_id_sequence" in text, text
        assert "ix_dead_letters_open_outbox" in text, text
