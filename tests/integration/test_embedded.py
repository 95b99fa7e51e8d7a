"""The zero-server default the README promises for ``bin/demo``: a SQLite file and kombu's
``filesystem://`` broker under the var folder, a real worker and a real beat (Celery's own beat
service, in a thread), the simulator as the vendor over HTTP. No PostgreSQL, Redis or RabbitMQ."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from celery.beat import EmbeddedService
from sqlalchemy import select

from beat_schedule import BEAT_SCHEDULE
from foundation.settings import Settings
from models import OutboxMessage
from models.base import utcnow
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread
from webhooks.signing import verify

#: How often the test's beat sends ``sweep_outbox`` (production: every 30 s).
SWEEP_EVERY_S = 1


@pytest.fixture(scope="module")
def embedded(vendor: ServerThread, vendor_secret: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """A stack on exactly what Settings chooses when no database or broker is configured."""
    var = tmp_path_factory.mktemp("embedded-var")
    defaults = Settings.from_env({"LIAISON_VAR_DIR": str(var)})
    assert defaults.database_url.startswith("sqlite:") and defaults.broker_url.startswith("filesystem:")
    built = build_stack(
        "embedded",
        database_url=defaults.database_url,
        broker_url=defaults.broker_url,
        vendor_url=vendor.url,
        vendor_secret=vendor_secret,
        tmp=var,
    )
    try:
        yield built
    finally:
        built.close()


@pytest.fixture(scope="module")
def beat(embedded: Stack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Celery beat on the stack's app, with the production schedule except a faster outbox sweep."""
    celery = embedded.celery
    schedule = {
        **BEAT_SCHEDULE,
        "sweep-outbox": {**BEAT_SCHEDULE["sweep-outbox"], "schedule": timedelta(seconds=SWEEP_EVERY_S)},
    }
    celery.conf.beat_schedule = schedule
    schedule_file = tmp_path_factory.mktemp("beat") / "celerybeat-schedule"
    service = EmbeddedService(celery, thread=True, schedule_filename=str(schedule_file))
    service.start()
    try:
        yield
    finally:
        service.stop()
        service.join(timeout=10)


def test_the_embedded_default_runs_on_sqlite_and_the_filesystem_broker(embedded: Stack) -> None:
    settings = embedded.settings
    assert embedded.db.is_sqlite and settings.broker_url.startswith("filesystem:")
    assert Path(settings.broker_folder, "queue").is_dir()


def test_submit_to_completion_relays_signed_callbacks(embedded: Stack) -> None:
    api_key, secret, path = embedded.new_client()
    cid = f"embedded-{uuid.uuid4().hex[:8]}"
    response = embedded.submit(api_key, {"correlation_id": cid, "input": {"n": 1}}, key=cid)
    assert response.status_code == 202, response.text

    body = embedded.wait_for_task(api_key, cid, timeout=60)
    assert body["state"] == "succeeded"
    kinds = [e["kind"] for e in body["timeline"]]
    assert kinds[:3] == ["requested", "state.submitted", "state.accepted"] and "state.succeeded" in kinds

    hits = embedded.callbacks.wait_for(
        lambda reqs: sum(1 for r in reqs if r.path == path) >= 2, timeout=30, message="two callbacks"
    )
    mine = [r for r in hits if r.path == path]
    assert [r.json()["type"] for r in mine] == ["task.accepted", "task.completed"]
    for r in mine:
        assert verify([secret], r.headers, r.body, time.time()) == r.json()["message_id"]


def test_beat_sends_the_outbox_sweep_and_the_worker_re_drives_a_lost_submit(embedded: Stack, beat: None) -> None:
    """A submit committed but never published (a crash right after the commit) is found by the
    sweep that beat sends to the worker, and the task runs to the end. Nothing else publishes it."""
    api_key, _, path = embedded.new_client()
    cid, outbox_id = embedded.unpublished_task(api_key, {"input": "lost after commit"})
    with embedded.db.transaction() as session:  # committed an hour ago: well past the sweep's grace
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        row.created_at = utcnow() - timedelta(hours=1)

    assert embedded.wait_for_task(api_key, cid, timeout=60)["state"] == "succeeded"
    with embedded.db.transaction() as session:
        row = session.scalars(select(OutboxMessage).where(OutboxMessage.id == outbox_id)).one()
        assert row.dispatched_at is not None and row.done_at is not None
    embedded.callbacks.wait_for(
        lambda reqs: any(r.path == path and r.json()["type"] == "task.completed" for r in reqs),
        timeout=30,
        message="the completion callback",
    )
