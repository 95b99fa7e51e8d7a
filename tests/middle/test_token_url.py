"""The token-url scheme through the whole app in-process: a task's token moves that task only, stops
working when the task is final, and never shows in a log line; a submit gives the vendor a callback
URL carrying a fresh token of which only the digest is stored."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from sqlalchemy import func, select

from foundation.logging import redact
from foundation.provider_settings import ProviderSettings
from models import CallbackToken, ExternalTask, ProcessedMessage
from runtime.provider import SubmitJob
from service import callback_tokens
from tests.middle.apps import in_process_app
from tests.middle.builders import NOW, at_vendor, new_client, submit
from webhooks.schemes import token_digest
from workers.providers.rest import RestProvider

TOKEN_URL = {"LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME": "token-url", "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": ""}


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    app = in_process_app(migrated_template, tmp_path, **TOKEN_URL)
    yield app
    app.extensions["liaison"].db.dispose()


def _tasks(app: Flask) -> tuple[str, str]:
    """Tasks A (job-a) and B (job-b) at the vendor, and a token of each."""
    with app.extensions["liaison"].db.transaction() as session:
        client = new_client(session)
        a, b = at_vendor(session, client, "a", "job-a"), at_vendor(session, client, "b", "job-b")
        return callback_tokens.issue(session, a.id, NOW), callback_tokens.issue(session, b.id, NOW)


def _post(app: Flask, token: str, job_id: str, kind: str = "job.accepted", **extra: str) -> int:
    body = json.dumps({"type": kind, "job_id": job_id, **extra}).encode()
    url = f"/webhooks/sim/t/{token}" if token else "/webhooks/sim"
    return app.test_client().post(url, data=body, content_type="application/json").status_code


def _states(app: Flask) -> dict[str, str]:
    with app.extensions["liaison"].db.transaction() as session:
        rows = session.execute(select(ExternalTask.correlation_id, ExternalTask.state)).all()
        return {cid: str(state) for cid, state in rows}


def _stored(app: Flask) -> int:
    with app.extensions["liaison"].db.transaction() as session:
        return session.scalar(select(func.count()).select_from(ProcessedMessage)) or 0


def test_a_token_moves_its_own_task_only(app: Flask) -> None:
    token_a, token_b = _tasks(app)
    assert _post(app, token_a, "job-b") == 401  # A's token naming B's job
    assert _post(app, token_b, "job-a", "job.completed", status="succeeded") == 401
    assert _states(app) == {"a": "submitted", "b": "submitted"} and _stored(app) == 0
    assert _post(app, token_a, "job-a") == 200
    assert _states(app) == {"a": "accepted", "b": "submitted"}


def test_no_token_a_guessed_or_malformed_token_is_refused(app: Flask) -> None:
    token_a, _ = _tasks(app)
    for token in ("", token_a[:-1] + ("A" if token_a[-1] != "A" else "B"), "short", "x" * 300):
        assert _post(app, token, "job-a") in (401, 404), token
    assert _stored(app) == 0


def test_a_token_stops_working_when_its_task_is_final(app: Flask) -> None:
    token_a, _ = _tasks(app)
    assert _post(app, token_a, "job-a", "job.completed", status="succeeded") == 200
    assert _states(app)["a"] == "succeeded"
    assert _post(app, token_a, "job-a", "job.completed", status="failed") == 401
    assert _stored(app) == 1


def test_an_event_before_the_job_id_is_recorded_waits_for_a_retry(app: Flask) -> None:
    """409, nothing stored: kept as an orphan it could bind to another task that gets that job id."""
    with app.extensions["liaison"].db.transaction() as session:
        task = submit(session, new_client(session), "early").task
        token = callback_tokens.issue(session, task.id, NOW)
    assert _post(app, token, "job-x") == 409
    assert _stored(app) == 0


def test_a_token_of_another_scheme_is_refused(migrated_template: Path, tmp_path: Path) -> None:
    app = in_process_app(migrated_template, tmp_path)  # standard-webhooks
    assert _post(app, "A" * 43, "job-a") == 401
    app.extensions["liaison"].db.dispose()


def test_the_token_never_shows_in_a_log_line(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    token_a, _ = _tasks(app)
    with caplog.at_level(logging.DEBUG):
        _post(app, token_a, "job-b")
        _post(app, token_a, "job-a")
    rendered = [redact(record.getMessage()) for record in caplog.records] + [
        redact(str(r.__dict__)) for r in caplog.records
    ]
    assert not any(token_a in line for line in rendered)
    line = f'127.0.0.1 - - "POST /webhooks/sim/t/{token_a} HTTP/1.1" 200'
    assert token_a not in redact(line) and "/webhooks/sim/t/[redacted]" in redact(line)
    assert token_a not in redact({"path": f"/webhooks/sim/t/{token_a}"})["path"]


def test_submit_gives_the_vendor_a_tokened_callback_url_and_stores_only_its_digest(app: Flask) -> None:
    provider = RestProvider(ProviderSettings("sim", "rest", "http://127.0.0.1:9", ()), "http://pub/webhooks/sim")
    with app.extensions["liaison"].db.transaction() as session:
        task = submit(session, new_client(session), "s").task
        token = callback_tokens.issue(session, task.id, NOW)
        stored = session.scalars(select(CallbackToken.digest)).all()
    assert stored == [token_digest(token)] and token not in stored
    assert provider.callback_url(SubmitJob("ref", {}, token)) == f"http://pub/webhooks/sim/t/{token}"
    assert provider.callback_url(SubmitJob("ref", {})) == "http://pub/webhooks/sim"
