"""Claiming due polls (service.polling): fair across clients (every client's oldest due before anyone's
second), at most ``cap`` per run, never a second check while one is pending, each task's next poll
moved along the schedule; a ``confirm`` hint that came while a check was out is asked once more."""

from __future__ import annotations

import random
from datetime import timedelta

from sqlalchemy import select

from models.db import Database
from models.messages import OutboxKind, OutboxMessage
from models.task import ExternalTask
from service import checks
from service.polling import arm, claim_due
from tests.middle.builders import NOW, at_vendor, later, new_client

SCHEDULE = (5.0, 15.0, 60.0)


def _open_jobs(db: Database, client_jobs: dict[str, int]) -> dict[str, list[int]]:
    """Per client, that many tasks at the vendor, polled from NOW + 5 s (the n-th a second later)."""
    out: dict[str, list[int]] = {}
    with db.transaction() as session:
        for name, n in client_jobs.items():
            client = new_client(session, name)
            out[name] = []
            for i in range(n):
                task = at_vendor(session, client, f"{name}-{i}", now=NOW + timedelta(seconds=i))
                arm(task, SCHEDULE, NOW + timedelta(seconds=i), random.Random(i))
                out[name].append(task.id)
    return out


def _claim(db: Database, at: float, cap: int) -> list[int]:
    with db.transaction() as session:
        return [t.id for t in claim_due(session, "sim", SCHEDULE, later(at), cap, random.Random(1))]


def _checks(db: Database) -> list[OutboxMessage]:
    with db.transaction() as session:
        rows = list(session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.CHECK)))
        session.expunge_all()
        return rows


def _finish_checks(db: Database) -> None:
    with db.transaction() as session:
        for row in session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.CHECK)):
            row.done_at = row.done_at or later(100)


def test_a_run_takes_every_clients_oldest_before_anyones_second_and_stops_at_its_cap(db: Database) -> None:
    jobs = _open_jobs(db, {"big": 6, "small": 2})
    first = _claim(db, 30, cap=4)  # everything is due by NOW + 5.5 s (jitter 10%)
    assert first == [jobs["big"][0], jobs["small"][0], jobs["big"][1], jobs["small"][1]]
    second = _claim(db, 30, cap=4)  # the rest of the big client's, oldest first: none claimed twice
    assert second == jobs["big"][2:6]
    assert _claim(db, 30, cap=4) == []  # each has its check pending; nothing more is due by then
    assert len(_checks(db)) == 8


def test_a_task_is_not_polled_while_its_check_is_pending_and_its_next_poll_follows_the_schedule(
    db: Database,
) -> None:
    [task_id] = _open_jobs(db, {"one": 1})["one"]
    assert _claim(db, 6, cap=10) == [task_id]
    with db.transaction() as session:
        task = session.get(ExternalTask, task_id)
        assert task is not None and task.polls == 1 and task.poll_due_at is not None
        assert later(6 + 15 * 0.9) <= task.poll_due_at <= later(6 + 15 * 1.1)  # the schedule's second delay
    assert _claim(db, 60, cap=10) == []  # due again, but its first check is not done
    _finish_checks(db)
    assert _claim(db, 60, cap=10) == [task_id]
    with db.transaction() as session:
        task = session.get(ExternalTask, task_id)
        assert task is not None and task.polls == 2
        assert later(60 + 60 * 0.9) <= (task.poll_due_at or NOW) <= later(60 + 60 * 1.1)
    _finish_checks(db)
    assert _claim(db, 200, cap=10) == [task_id]  # the last delay repeats
    with db.transaction() as session:
        task = session.get(ExternalTask, task_id)
        assert task is not None and later(200 + 54) <= (task.poll_due_at or NOW) <= later(200 + 66)


def test_a_hint_while_a_check_is_out_is_asked_once_more_after_it(db: Database) -> None:
    with db.transaction() as session:
        at_vendor(session, new_client(session), "hinted", "job-h")
    with db.transaction() as session:
        assert checks.hint(session, "sim", "job-h", later(1)) is checks.HintResult.CHECKING
    with db.transaction() as session:  # the check's call is out: its start counted the delivery
        [row] = session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.CHECK))
        row.deliveries = 1
    for _ in range(30):  # the vendor's word may have changed after that call went: asked again, once
        with db.transaction() as session:
            assert checks.hint(session, "sim", "job-h", later(2)) is checks.HintResult.PENDING
    with db.transaction() as session:
        assert claim_due(session, "sim", None, later(3), 10) == []  # not while the first is out
    _finish_checks(db)
    with db.transaction() as session:
        [task] = claim_due(session, "sim", None, later(4), 10)
        assert task.poll_due_at is None  # a provider without a schedule: a one-off
    assert [r.payload["reason"] for r in _checks(db)] == ["hint", "hint"]
    _finish_checks(db)
    with db.transaction() as session:
        assert claim_due(session, "sim", None, later(5), 10) == []


def test_a_hint_before_its_check_started_adds_nothing(db: Database) -> None:
    with db.transaction() as session:
        at_vendor(session, new_client(session), "hinted", "job-h")
    with db.transaction() as session:
        checks.hint(session, "sim", "job-h", later(1))
        checks.hint(session, "sim", "job-h", later(2))
    _finish_checks(db)
    with db.transaction() as session:
        assert claim_due(session, "sim", None, later(3), 10) == []
    assert len(_checks(db)) == 1
