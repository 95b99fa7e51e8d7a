"""Migration 0006 on data written under 0005: existing relays are numbered per task in the order
they were written, and each task's counter carries on after its last one."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from app.cli import alembic_config
from tests.integration.migrations import rows

NOW = "2026-12-01 06:00:00"


def test_0006_numbers_existing_relays_per_task(migration_url: str) -> None:
    config = alembic_config(migration_url)
    command.upgrade(config, "0005")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO clients (id, name, callback_secrets, created_at) VALUES (1, 'shop', '[]', :t)"),
            {"t": NOW},
        )
        for tid in (10, 11, 12):
            conn.execute(
                sa.text(
                    "INSERT INTO external_tasks (id, correlation_id, reference, client_id, provider, state, input, "
                    "on_deadline, checked_at, attempts, created_at, updated_at) VALUES (:i, :c, :r, 1, 'sim', "
                    "'accepted', '{}', 'escalate', :t, 0, :t, :t)"
                ),
                {"i": tid, "c": f"order-{tid}", "r": f"ref_{tid}", "t": NOW},
            )
        # task 10: relay, submit, relay; task 11: one relay; task 12: none
        for oid, tid, kind in ((20, 10, "relay"), (21, 10, "submit"), (22, 11, "relay"), (23, 10, "relay")):
            conn.execute(
                sa.text(
                    "INSERT INTO outbox_messages (id, message_id, kind, task_id, payload, attempts, deliveries, "
                    "created_at) VALUES (:o, :m, :k, :t, '{}', 0, 0, :n)"
                ),
                {"o": oid, "m": f"msg_{oid}", "k": kind, "t": tid, "n": NOW},
            )
    engine.dispose()

    command.upgrade(config, "head")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        assert rows(conn, "SELECT id, sequence FROM outbox_messages ORDER BY id") == [
            (20, 1),
            (21, None),
            (22, 1),
            (23, 2),
        ]
        assert rows(conn, "SELECT id, relay_seq FROM external_tasks ORDER BY id") == [(10, 2), (11, 1), (12, 0)]
        assert rows(conn, "SELECT count(*) FROM outbox_messages WHERE holds_back") == [(0,)]
        with pytest.raises(sa.exc.IntegrityError):  # one relay per place in a task's order
            conn.execute(
                sa.text(
                    "INSERT INTO outbox_messages (message_id, kind, task_id, sequence, payload, attempts, "
                    "deliveries, created_at) VALUES ('msg_dup', 'relay', 10, 2, '{}', 0, 0, :n)"
                ),
                {"n": NOW},
            )
    command.downgrade(config, "0005")
    engine.dispose()
