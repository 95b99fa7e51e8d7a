"""``LIAISON_DATABASE_POOLER``: what it changes in psycopg's options, what it refuses, and the
PgBouncer tests' own prerequisite (tests/integration/test_pgbouncer.py runs the stack behind it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from foundation.options import ConfigError
from foundation.settings import Settings, database_pooler_from_env
from models.db import NO_POOLER, PGBOUNCER_TRANSACTION, POOLERS, postgres_connect_args
from tests.integration import pgbouncer


def test_behind_pgbouncer_in_transaction_pooling_psycopg_prepares_no_statement() -> None:
    assert postgres_connect_args(PGBOUNCER_TRANSACTION) == {"prepare_threshold": None}
    assert postgres_connect_args(NO_POOLER) == {}  # psycopg's own default (prepare after 5 runs)


def test_an_unknown_pooler_is_refused_by_the_settings_and_the_engine() -> None:
    with pytest.raises(ConfigError, match="LIAISON_DATABASE_POOLER must be one of"):
        database_pooler_from_env({"LIAISON_DATABASE_POOLER": "pgbouncer-session"})
    with pytest.raises(ValueError, match="unknown database pooler"):
        postgres_connect_args("pgpool")
    assert database_pooler_from_env({}) == NO_POOLER
    assert {database_pooler_from_env({"LIAISON_DATABASE_POOLER": p}) for p in POOLERS} == set(POOLERS)


def test_a_pooler_needs_a_postgresql_database_url(tmp_path: Path) -> None:
    sqlite = {"DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}"}
    with pytest.raises(ConfigError, match="LIAISON_DATABASE_POOLER"):
        Settings.from_env({**sqlite, "LIAISON_DATABASE_POOLER": PGBOUNCER_TRANSACTION})
    assert Settings.from_env(sqlite).database_pooler == NO_POOLER
    behind = Settings.from_env(
        {"DATABASE_URL": "postgres://u@db:6432/x", "LIAISON_DATABASE_POOLER": PGBOUNCER_TRANSACTION}
    )
    assert behind.database_pooler == PGBOUNCER_TRANSACTION


def test_missing_pgbouncer_skips_outside_ci_and_fails_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pgbouncer, "PGBOUNCER", "/nonexistent/pgbouncer")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="run bin/setup-pgbouncer"):
        pgbouncer.require_pgbouncer()
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI runs bin/test"):
        pgbouncer.require_pgbouncer()


def test_db_upgrade_with_another_setting_wrong_still_goes_through_the_pooler(monkeypatch: pytest.MonkeyPatch) -> None:
    """``liaison db upgrade`` runs on the database settings alone when another is wrong: the pooler
    is one of them, so a migration behind PgBouncer prepares nothing either."""
    import app
    from app import startup

    monkeypatch.setenv("DATABASE_URL", "postgresql://liaison@127.0.0.1:6432/liaison")
    monkeypatch.setenv("LIAISON_DATABASE_POOLER", PGBOUNCER_TRANSACTION)
    monkeypatch.setenv("LIAISON_MAX_BODY_BYTES", "lots")
    monkeypatch.setattr(startup, "running_flask_cli", lambda: True)
    settings, error = app._settings_from_env()
    assert error is not None and "LIAISON_MAX_BODY_BYTES" in error
    assert settings.database_pooler == PGBOUNCER_TRANSACTION
