"""A vendor's ``job.progress``, relayed as ``task.progress``: latest wins.

A progress report moves no state. While the task is open it becomes a ``task.progress`` callback
in the task's order (``core/ordering.py``), so it is never delivered after a completion that came
later, and one that comes after the completion is recorded and not relayed. When relays are
behind, reports are coalesced: a report replaces the content of the task's latest progress relay
if that one was never sent and is still the task's latest callback (``core.ordering.coalesces_into``);
a slow domain app thus gets the newest figure once, not every figure late.

Runs in the caller's transaction, under the task's row lock (``service.vendor_events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from core.ordering import PendingProgress, coalesces_into
from core.states import PROGRESS_CALLBACK, relays_progress
from models.messages import OutboxMessage
from models.task import ExternalTask
from service.outbox_rows import add_event, add_relay
from webhooks.events import Progress


def relay_progress(
    session: Session, task: ExternalTask, progress: Progress, message_id: str, now: datetime, **detail: Any
) -> tuple[bool, list[OutboxMessage]]:
    """(applied, new relay rows to publish): a report coalesced into a relay already on its way
    needs no new row."""
    if not relays_progress(task.state):
        add_event(
            session,
            task,
            "event.ignored",
            now,
            event="job.progress",
            message_id=message_id,
            reason=f"task already {task.state}",
            **detail,
        )
        return False, []
    task.checked_at = now  # the vendor is working on it: reconciliation need not ask
    pending = _pending(session, task)
    if pending is not None and coalesces_into(
        PendingProgress(
            pending.sequence or 0,
            attempted=pending.attempts > 0 or pending.deliveries > 0,
            done=pending.done_at is not None,
        ),
        task.relay_seq,
    ):
        # a new dict, so the JSON column sees the change; the relay reads its body at its start
        pending.payload = {**pending.payload, **progress.as_payload(), "occurred_at": now.isoformat()}
        add_event(session, task, "event.progress", now, message_id=message_id, coalesced=True, **_figures(progress))
        return True, []
    row = add_relay(session, task, PROGRESS_CALLBACK, now, outcome=None, **progress.as_payload())
    task.progress_outbox_id = row.id
    add_event(session, task, "event.progress", now, message_id=message_id, coalesced=False, **_figures(progress))
    return True, [row]


def _pending(session: Session, task: ExternalTask) -> OutboxMessage | None:
    """The task's latest progress relay, locked: its start (which counts the delivery) and this
    replacement exclude each other, so a relay never sends a body it did not count. One locked
    right now is being started: it is not waited for (SKIP LOCKED; its start may itself wait on an
    earlier relay whose settling waits on this task's lock) but passed over, as if sent."""
    if task.progress_outbox_id is None:
        return None
    return session.scalar(
        select(OutboxMessage)
        .where(OutboxMessage.id == task.progress_outbox_id)
        .with_for_update(key_share=True, skip_locked=True)
    )


def _as_pending(row: OutboxMessage) -> PendingProgress:
    # deliveries > 0: a worker started it (and may be sending it now); attempts > 0: it was sent
    attempted = row.attempts > 0 or row.deliveries > 0
    return PendingProgress(row.sequence or 0, attempted=attempted, done=row.done_at is not None)


def _figures(progress: Progress) -> dict[str, Any]:
    return {key: value for key, value in progress.as_payload().items() if value is not None}
