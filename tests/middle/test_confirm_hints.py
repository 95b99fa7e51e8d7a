"""The ``confirm`` scheme through the whole app in-process: an unsigned request is only a hint. Its
body is never applied (a forged completion with a made-up outcome moves nothing); it names a job,
and that job gets one status check (an outbox ``check`` row), however many hints come; what the
check's answer applies is the vendor's own status. Unknown jobs are answered and nothing is kept."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask
from prometheus_client import REGISTRY
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from models import ExternalTask, ProcessedMessage
from models.attention import OrphanEvent
from models.messages import OutboxKind, OutboxMessage
from service.checks import settle_check
from service.outbox_rows import add_outbox
from service.probes import lock_task_without_payload
from tests.middle.apps import in_process_app
from tests.middle.builders import at_vendor, later, new_client


@pytest.fixture
def app(migrated_template: Path, tmp_path: Path) -> Iterator[Flask]:
    app = in_process_app(migrated_template, tmp_path, LIAISON_PROVIDER_SIM_WEBHOOK_SCHEME="confirm")
    with app.extensions["liaison"].db.transaction() as session:
        at_vendor(session, new_client(session), "order-1", "job-1")
    yield app
    app.extensions["liaison"].db.dispose()


def _hint(app: Flask, body: dict[str, object]) -> tuple[int, str]:
    response = app.test_client().post("/webhooks/sim", data=json.dumps(body), content_type="application/json")
    return response.status_code, (response.get_json() or {}).get("status", "")


def _checks(app: Flask) -> list[OutboxMessage]:
    with app.extensions["liaison"].db.transaction() as session:
        rows = session.scalars(select(OutboxMessage).where(OutboxMessage.kind == OutboxKind.CHECK)).all()
        session.expunge_all()
        return list(rows)


def _task(app: Flask) -> tuple[str, object]:
    with app.extensions["liaison"].db.transaction() as session:
        task = session.scalars(select(ExternalTask).where(ExternalTask.correlation_id == "order-1")).one()
        return task.state, task.outcome


def _hints_counted(result: str) -> float:
    return REGISTRY.get_sample_value("liaison_webhook_hints_total", {"provider": "sim", "result": result}) or 0.0


FORGED: dict[str, object] = {
    "type": "job.completed",
    "job_id": "job-1",
    "status": "succeeded",
    "outcome": {"paid": 1_000_000},
}


def test_a_forged_completion_never_applies_its_body_and_the_vendors_word_is_applied(app: Flask) -> None:
    assert _hint(app, FORGED) == (202, "checking")
    assert _task(app) == ("submitted", None)  # the body changed nothing
    [check] = _checks(app)
    assert check.payload["reason"] == "hint" and check.done_at is None
    with app.extensions["liaison"].db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(ProcessedMessage)) == 0

    # The check's answer, as the worker records it: the vendor says the job is running.
    with app.extensions["liaison"].db.transaction() as session:
        row = session.get(OutboxMessage, check.id)
        assert row is not None
        task = lock_task_without_payload(session, check.task_id or 0)
        assert settle_check(session, row, task, "running", None, later(5)) == "applied"
    assert _task(app) == ("accepted", None)  # what the vendor said, not what the hint claimed
    assert _checks(app)[0].done_at is not None


def test_fifty_hints_make_one_check_and_a_hint_after_it_makes_the_next(app: Flask) -> None:
    before = _hints_counted("pending")
    answers = [_hint(app, FORGED) for _ in range(50)]
    assert answers == [(202, "checking")] + [(202, "pending")] * 49
    assert len(_checks(app)) == 1
    assert _hints_counted("pending") - before == 49

    with app.extensions["liaison"].db.transaction() as session:  # the check is answered: succeeded
        row = session.get(OutboxMessage, _checks(app)[0].id)
        assert row is not None and row.task_id is not None
        settle_check(session, row, lock_task_without_payload(session, row.task_id), "succeeded", {"ok": 1}, later(5))
    assert _task(app) == ("succeeded", {"ok": 1})
    assert _hint(app, FORGED) == (202, "final")  # a final task is asked about no more
    assert len(_checks(app)) == 1


def test_one_pending_check_per_task_is_the_databases_rule(app: Flask) -> None:
    with app.extensions["liaison"].db.transaction() as session:
        task = session.scalars(select(ExternalTask)).one()
        add_outbox(session, OutboxKind.CHECK, task, later(1), reason="hint")
    with pytest.raises(IntegrityError), app.extensions["liaison"].db.transaction() as session:
        task = session.scalars(select(ExternalTask)).one()
        add_outbox(session, OutboxKind.CHECK, task, later(2), reason="poll")


def test_hints_for_unknown_jobs_are_answered_and_nothing_is_stored(app: Flask) -> None:
    before = _hints_counted("unknown_job")
    for n in range(20):
        assert _hint(app, {**FORGED, "job_id": f"job-forged-{n}"}) == (202, "unknown_job")
    assert _hints_counted("unknown_job") - before == 20
    assert _checks(app) == []
    with app.extensions["liaison"].db.transaction() as session:
        assert session.scalar(select(func.count()).select_from(ProcessedMessage)) == 0
        assert session.scalar(select(func.count()).select_from(OrphanEvent)) == 0


def test_a_hint_without_a_job_id_is_a_400(app: Flask) -> None:
    assert _hint(app, {"type": "job.completed"})[0] == 400
    assert _hint(app, {"type": "job.completed", "job_id": "has space"})[0] == 400
    assert _hint(app, {"type": "job.completed", "job_id": {"nested": 1}})[0] == 400
    assert _checks(app) == []
