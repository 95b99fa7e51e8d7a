"""Migration 0013 (fair dispatch) on a database with tasks in flight: every task already there was
published before dispatch existed, so it counts as released — on its way, or open at its vendor —
and none is queued, so none is released (published) a second time."""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import command
from sqlalchemy.orm import Session, sessionmaker

from app.cli import alembic_config
from core.fair_share import DispatchPolicy
from models.store import store_of
from service import dispatch
from tests.integration.migrations import rows

NOW = "2026-12-01 06:00:00"


def test_0013_marks_tasks_in_flight_released(migration_url: str) -> None:
    config = alembic_config(migration_url)
    command.upgrade(config, "0012")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO clients (id, name, callback_secrets, created_at) VALUES (1, 'shop', '[]', :t)"),
            {"t": NOW},
        )
        for tid, state in ((10, "requested"), (11, "submitted"), (12, "accepted"), (13, "succeeded")):
            conn.execute(
                sa.text(
                    "INSERT INTO external_tasks (id, correlation_id, reference, client_id, provider, state, input, "
                    "on_deadline, checked_at, attempts, created_at, updated_at) VALUES (:i, :c, :r, 1, 'sim', "
                    ":s, '{}', 'escalate', :t, 0, :t, :t)"
                ),
                {"i": tid, "c": f"order-{tid}", "r": f"ref_{tid}", "s": state, "t": NOW},
            )
        # the requested task's submit row is on its way (published, not done)
        conn.execute(
            sa.text(
                "INSERT INTO outbox_messages (id, message_id, kind, task_id, payload, attempts, deliveries, "
                "created_at, dispatched_at) VALUES (20, 'msg_20', 'submit', 10, '{}', 0, 0, :n, :n)"
            ),
            {"n": NOW},
        )
    engine.dispose()

    command.upgrade(config, "head")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        assert rows(conn, "SELECT id, priority, dispatched_at IS NOT NULL FROM external_tasks ORDER BY id") == [
            (10, 3, True),
            (11, 3, True),
            (12, 3, True),
            (13, 3, True),
        ]
        assert rows(conn, "SELECT weight, default_priority, concurrency_key_limit FROM clients") == [(1, 3, 1)]
        assert rows(conn, "SELECT parked_reason FROM outbox_messages") == [(None,)]
    maker = sessionmaker(engine)
    dispatch.install(maker, DispatchPolicy(window=1, caps={"sim": 3}))
    with maker() as session, session.begin():
        assert isinstance(session, Session)
        assert dispatch.queued_pairs(session) == []  # nothing waits: nothing is released twice
        assert dispatch.release(session, "sim", 1, datetime.now(UTC)) == 0
        # the requested task fills the client's window of 1; three are open at the vendor (its cap)
        assert store_of(session).admission.queue_load(session, "sim", 1) == (1, 0)
        assert store_of(session).dispatch.open_at_vendor(session, "sim") == 3
    engine.dispose()
