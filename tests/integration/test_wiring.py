"""Celery wiring: reliability settings, stable task names, and the beat schedule against them."""

from __future__ import annotations

import json

import celeryconfig
from beat_schedule import BEAT_SCHEDULE
from tests.integration.stack import Stack


def test_reliability_settings_are_deliberate() -> None:
    assert celeryconfig.task_acks_late is True
    assert celeryconfig.task_reject_on_worker_lost is True
    assert celeryconfig.worker_prefetch_multiplier == 1
    assert celeryconfig.task_always_eager is False
    # Longer than the longest wait between two relay attempts (10 h), so Redis never redelivers early.
    assert celeryconfig.broker_transport_options["visibility_timeout"] > 10 * 3600


def test_beat_schedule_names_registered_tasks(pair_stack: Stack) -> None:
    registered = set(pair_stack.celery.tasks)
    for key, entry in BEAT_SCHEDULE.items():
        assert entry["task"] in registered, key
    assert {"liaison.submit", "liaison.relay"} <= registered


def test_cli_creates_a_client_whose_key_works(pair_stack: Stack) -> None:
    runner = pair_stack.app.test_cli_runner()
    result = runner.invoke(
        args=[
            "liaison",
            "clients",
            "create",
            "cli-test-" + pair_stack.queue[-8:],
            "--callback-url",
            pair_stack.callback_server.url + "/cli",
            "--json",
        ]
    )
    assert result.exit_code == 0, result.output
    created = json.loads(result.output)
    assert created["api_key"].startswith("lk_") and created["callback_secret"].startswith("whsec_")
    assert pair_stack.submit(created["api_key"], {"input": "from the CLI's client"}).status_code == 202
    again = runner.invoke(args=["liaison", "clients", "create", created["name"]])
    assert again.exit_code != 0 and "exists already" in again.output
    listed = runner.invoke(args=["liaison", "clients", "list"])
    assert created["name"] in listed.output and created["api_key"] not in listed.output


def test_migrations_match_the_models(pair_stack: Stack) -> None:
    """The schema Alembic built (the tests run on it) is exactly what the models declare."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from models import Base

    with pair_stack.db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == []
