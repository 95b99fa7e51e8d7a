"""A vendor's ``job.progress``, relayed as ``task.progress``: latest wins, on every way it goes.

A progress report moves no state. While the task is open it becomes a ``task.progress`` callback
in the task's order (``core/ordering.py``), so it is never delivered after a completion that came
later, and one that comes after the completion is recorded and not relayed. When relays are
behind, reports are coalesced: a slow domain app gets the newest figure once, not every figure late.

A task of a client on a broker channel has two copies of each callback, its HTTP relay and its
channel event, with one ``message_id``; one may be sent while the other waits. The task's latest
progress callback is looked at copy by copy (``core.coalescing``): a report replaces the content
of both while neither was sent; once one was, the other takes the report as a new callback (a
new ``message_id`` and the next sequence) and the way already served gets a new row for it. So
one ``message_id`` is one body wherever it is delivered, and each way hears the newest figure
once its earlier events are through. A client on HTTP alone has one copy: its report replaces the
relay's content while the relay was never sent and is still the task's latest callback
(``core.ordering.coalesces_into``), or adds a relay, as before.

Runs in the caller's transaction, under the task's row lock (``service.vendor_events``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from core.coalescing import Copy, Plan, copy_of, plan
from core.ordering import PendingProgress, next_sequence
from core.states import PROGRESS_CALLBACK, relays_progress
from models.messages import OutboxMessage
from models.store import store_of
from models.task import ExternalTask
from service.outbox_rows import add_channel_event, add_event, add_relay, new_message_id
from webhooks.events import Progress
from wire.channel_messages import row_message_id


def relay_progress(
    session: Session, task: ExternalTask, progress: Progress, message_id: str, now: datetime, **detail: Any
) -> tuple[bool, list[OutboxMessage]]:
    """(applied, new relay rows): a report coalesced into a relay already on its way needs none."""
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
    figures = {**progress.as_payload(), "occurred_at": now.isoformat()}
    relay = _pending(session, task)
    latest = relay is not None and relay.sequence == task.relay_seq  # else nothing coalesces: no need to look
    twin = _twin(session, relay) if relay is not None and latest and task.channel is not None else None
    chosen, relay_open = _plan(task, relay, twin)
    if chosen is Plan.IN_PLACE:
        for row in (relay, twin):
            if row is not None:  # a new dict, so the JSON column sees the change; workers read it at their start
                row.payload = {**row.payload, **figures}
        add_event(session, task, "event.progress", now, message_id=message_id, coalesced=True, **_figures(progress))
        return True, []
    if chosen is Plan.RENAMED:
        assert relay is not None
        replaced = relay.message_id
        rows = _renamed(session, task, relay, twin, relay_open, progress, figures, now)
        detail = {"coalesced": True, "replaces": replaced, **_figures(progress)}
        add_event(session, task, "event.progress", now, message_id=message_id, **detail)
        return True, rows
    row = add_relay(session, task, PROGRESS_CALLBACK, now, outcome=None, **progress.as_payload())
    task.progress_outbox_id = row.id
    add_event(session, task, "event.progress", now, message_id=message_id, coalesced=False, **_figures(progress))
    return True, [row]


def _plan(task: ExternalTask, relay: OutboxMessage | None, twin: OutboxMessage | None) -> tuple[Plan, bool]:
    """What the report does with the copies of the task's latest progress callback, and whether the
    relay's copy is the open one. A relay may have sent something only once it named its target
    (it does so before it calls one): a relay skipped for want of a URL has sent nothing."""
    if relay is None:
        return Plan.NEW, False
    relay_copy = copy_of(_as_pending(relay), task.relay_seq, may_have_left=relay.target is not None)
    copies = [relay_copy]
    if task.channel is not None:
        copies.append(copy_of(_as_pending(twin, relay.sequence), task.relay_seq))
    return plan(copies), relay_copy is Copy.OPEN


def _renamed(
    session: Session,
    task: ExternalTask,
    relay: OutboxMessage,
    twin: OutboxMessage | None,
    relay_open: bool,
    progress: Progress,
    figures: dict[str, Any],
    now: datetime,
) -> list[OutboxMessage]:
    """One copy was sent, the other is open: the report is a new callback (``core.coalescing``).
    The open copy takes it in place, so the old callback is never sent that way; the way whose
    copy was sent gets a new row for it."""
    if relay_open:  # the channel event is out: the relay becomes the new callback, a new row for the channel
        task.relay_seq = next_sequence(task.relay_seq)
        relay.message_id, relay.sequence = new_message_id(), task.relay_seq
        relay.payload = {**relay.payload, **figures, "sequence": task.relay_seq, "state": task.state}
        add_channel_event(session, task.id, task.correlation_id, dict(relay.payload, message_id=relay.message_id), now)
        return []
    assert twin is not None  # the relay is out: a new relay, and the channel event becomes its copy
    row = add_relay(session, task, PROGRESS_CALLBACK, now, with_channel=False, outcome=None, **progress.as_payload())
    task.progress_outbox_id = row.id
    twin.message_id, twin.payload = row_message_id(row.message_id), dict(row.payload, message_id=row.message_id)
    return [row]


def _pending(session: Session, task: ExternalTask) -> OutboxMessage | None:
    """The task's latest progress relay, locked: its start (which counts the delivery) and this
    replacement exclude each other, so a relay never sends a body it did not count. One locked
    right now is being started: it is not waited for (SKIP LOCKED; its start may itself wait on an
    earlier relay whose settling waits on this task's lock) but passed over, as if sent."""
    if task.progress_outbox_id is None:
        return None
    return store_of(session).outbox.lock_if_free(session, task.progress_outbox_id)


def _twin(session: Session, relay: OutboxMessage) -> OutboxMessage | None:
    """The relay's channel event (the same ``message_id``; its row id is derived from it), locked as
    :func:`_pending` locks the relay: one being published right now is passed over, as if sent.
    Only tasks on a channel look: a client on HTTP alone pays no statement for it."""
    return store_of(session).outbox.lock_channel_copy(session, row_message_id(relay.message_id))


def _as_pending(row: OutboxMessage | None, sequence: int | None = None) -> PendingProgress | None:
    """A copy as the coalescing rule sees it; ``sequence``: a channel event's is its relay's."""
    if row is None:
        return None
    # deliveries > 0: a worker started it (and may be sending it now); attempts > 0: it was sent
    attempted = row.attempts > 0 or row.deliveries > 0
    return PendingProgress(sequence or row.sequence or 0, attempted=attempted, done=row.done_at is not None)


def _figures(progress: Progress) -> dict[str, Any]:
    return {key: value for key, value in progress.as_payload().items() if value is not None}
