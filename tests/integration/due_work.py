"""Work each beat job must find, made due now (rows moved back in time, never by sleeping), so
that a test can run the job -- by CLI, on the worker, or as a function -- and check its effect."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select, update

from models import ExternalTask, OrphanEvent, OutboxMessage, ProcessedMessage
from models.base import utcnow
from tests.integration.stack import Stack
from tests.integration.webhook_client import post_event


def overdue_task(stack: Stack, api_key: str) -> str:
    """A task whose acceptance deadline passed a minute ago."""
    cid, _ = stack.unpublished_task(api_key, {"input": "late", "acceptance_timeout_s": 3600})
    with stack.db.transaction() as session:
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.correlation_id == cid)
            .values(acceptance_deadline=utcnow() - timedelta(minutes=1))
        )
    return cid


def old_processed_message(stack: Stack) -> tuple[str, str]:
    """An inbox record older than the retention: (source, message_id)."""
    source, message_id = f"due-{uuid.uuid4().hex[:8]}", f"msg_{uuid.uuid4().hex}"
    with stack.db.transaction() as session:
        session.add(
            ProcessedMessage(
                source=source,
                message_id=message_id,
                message_type="job.accepted",
                processed_at=utcnow() - timedelta(seconds=stack.settings.processed_retention_s + 60),
            )
        )
    return source, message_id


def processed_message_exists(stack: Stack, source: str, message_id: str) -> bool:
    with stack.db.transaction() as session:
        return (
            session.scalar(
                select(ProcessedMessage.id).where(
                    ProcessedMessage.source == source, ProcessedMessage.message_id == message_id
                )
            )
            is not None
        )


def lost_submit(stack: Stack, api_key: str) -> str:
    """A task whose submit message was committed an hour ago and never reached the broker."""
    cid, outbox_id = stack.unpublished_task(api_key, {"input": "lost"})
    with stack.db.transaction() as session:
        session.execute(
            update(OutboxMessage).where(OutboxMessage.id == outbox_id).values(created_at=utcnow() - timedelta(hours=1))
        )
    return cid


def quiet_finished_task(stack: Stack, api_key: str) -> str:
    """A task the vendor finished without telling us (webhook dropped), quiet for a day."""
    cid = f"due-quiet-{uuid.uuid4().hex[:8]}"
    # it would finish by itself in 60 s: this test finishes it (outcome {"quiet": true}) when it is ready
    stack.submit(
        api_key, {"correlation_id": cid, "input": {"simulate": {"drop": ["job.completed"], "complete_delay_s": 60}}}
    )
    # accepted, and its task.accepted relayed: no worker holds the row a reconcile claim would skip
    stack.wait_for_task(api_key, cid, until=lambda b: "relay.delivered" in [e["kind"] for e in b["timeline"]])
    job_id = stack.vendor("GET", f"/jobs?reference={stack.reference(cid)}").json()["jobs"][0]["job_id"]
    stack.vendor("POST", f"/_sim/jobs/{job_id}/complete", json={"status": "succeeded", "outcome": {"quiet": True}})
    with stack.db.transaction() as session:
        session.execute(
            update(ExternalTask)
            .where(ExternalTask.correlation_id == cid)
            .values(checked_at=utcnow() - timedelta(days=1))
        )
    return cid


def stale_orphan(stack: Stack, vendor_secret: str) -> str:
    """An event for a job no task knows, unbound for longer than the orphan window: its job id."""
    job_id = f"job_{uuid.uuid4().hex}"
    assert post_event(stack.web.url, vendor_secret, {"type": "job.accepted", "job_id": job_id}).status_code == 200
    with stack.db.transaction() as session:
        session.execute(
            update(OrphanEvent)
            .where(OrphanEvent.vendor_job_id == job_id)
            .values(received_at=utcnow() - timedelta(seconds=stack.settings.orphan_window_s + 60))
        )
    return job_id


def orphan_flagged(stack: Stack, job_id: str) -> bool:
    with stack.db.transaction() as session:
        return session.scalar(select(OrphanEvent.flagged_at).where(OrphanEvent.vendor_job_id == job_id)) is not None
