"""Migration 0003 on data written under 0002: tasks keep their correlation id as vendor reference
(jobs in flight keep theirs), and each disabled callback endpoint goes to the client(s) it paused."""

from __future__ import annotations

import pytest
import sqlalchemy as sa
from alembic import command

from app.cli import alembic_config
from tests.integration.migrations import rows

NOW = "2026-11-30 12:00:00"
URL = "https://u:pw@shop.example/cb?token=s3cret"
SHOWN = "https://shop.example/cb"


def test_0003_backfills_references_and_endpoint_owners(migration_url: str) -> None:
    config = alembic_config(migration_url)
    command.upgrade(config, "0002")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        for cid, name, callback in ((1, "shop", URL), (2, "other", URL), (3, "third", "https://third.example/cb")):
            conn.execute(
                sa.text(
                    "INSERT INTO clients (id, name, api_key_hash, callback_secrets, callback_url, created_at) "
                    "VALUES (:i, :n, :h, '[]', :u, :t)"
                ),
                {"i": cid, "n": name, "h": f"h{cid}", "u": callback, "t": NOW},
            )
        for tid, client, corr in ((10, 1, "order-1"), (11, 2, "order-2")):
            conn.execute(
                sa.text(
                    "INSERT INTO external_tasks (id, correlation_id, client_id, provider, state, input, on_deadline, "
                    "checked_at, attempts, created_at, updated_at) VALUES (:i, :c, :cl, 'sim', 'accepted', '{}', "
                    "'escalate', :t, 0, :t, :t)"
                ),
                {"i": tid, "c": corr, "cl": client, "t": NOW},
            )
        # Under 0002 one 410 disabled the URL for everyone: both clients' relays got parked on it.
        for oid, tid in ((20, 10), (21, 11)):
            conn.execute(
                sa.text(
                    "INSERT INTO outbox_messages (id, message_id, kind, task_id, payload, attempts, deliveries, "
                    "parked_reason, target, created_at) "
                    "VALUES (:o, :m, 'relay', :t, '{}', 0, 0, 'endpoint_gone', :u, :n)"
                ),
                {"o": oid, "m": f"msg_{oid}", "t": tid, "u": URL, "n": NOW},
            )
        for eid, url in ((30, URL), (31, "https://third.example/cb"), (32, "https://nobody.example/cb")):
            conn.execute(
                sa.text(
                    "INSERT INTO callback_endpoints (id, url_hash, url, disabled_at, disabled_reason) "
                    "VALUES (:i, :h, :u, :t, 'answered 410 Gone')"
                ),
                {"i": eid, "h": f"hash{eid}", "u": url, "t": NOW},
            )
    engine.dispose()

    command.upgrade(config, "head")
    engine = sa.create_engine(migration_url)
    with engine.begin() as conn:
        assert rows(conn, "SELECT id, reference FROM external_tasks ORDER BY id") == [(10, "order-1"), (11, "order-2")]
        endpoints = rows(conn, "SELECT client_id, url_hash, url FROM callback_endpoints ORDER BY client_id")
        # both clients with parked relays keep them releasable; the third by its callback_url; no owner, no row
        assert endpoints == [(1, "hash30", SHOWN), (2, "hash30", SHOWN), (3, "hash31", "https://third.example/cb")]
        assert rows(conn, "SELECT DISTINCT target FROM outbox_messages") == [(SHOWN,)]
        # correlation ids are now unique per client only
        conn.execute(
            sa.text(
                "INSERT INTO external_tasks (id, correlation_id, reference, client_id, provider, state, input, "
                "on_deadline, checked_at, attempts, created_at, updated_at) "
                "VALUES (12, 'order-1', 'ref_x', 2, 'sim', 'requested', '{}', "
                "'escalate', :t, 0, :t, :t)"
            ),
            {"t": NOW},
        )
    with pytest.raises(sa.exc.IntegrityError), engine.begin() as conn:  # the reference is globally unique
        conn.execute(
            sa.text(
                "INSERT INTO external_tasks (id, correlation_id, reference, client_id, provider, state, input, "
                "on_deadline, checked_at, attempts, created_at, updated_at) "
                "VALUES (13, 'order-9', 'ref_x', 3, 'sim', 'requested', '{}', "
                "'escalate', :t, 0, :t, :t)"
            ),
            {"t": NOW},
        )
    engine.dispose()


def test_0003_downgrades_and_upgrades_again(migration_url: str) -> None:
    config = alembic_config(migration_url)
    command.upgrade(config, "head")
    command.downgrade(config, "0002")
    command.upgrade(config, "head")
