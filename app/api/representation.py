"""How tasks look to their domain app. The vendor's job id is never shown."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from app.errors import BadRequest
from core.fair_share import CLIENT_BACKLOG, ENDPOINT_PAUSED, RATE_LIMIT, REASONS
from core.states import TERMINAL
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.endpoint_health import EndpointHealth
from models.messages import DeadLetter
from models.notifications import NotificationMute
from models.task import ExternalTask, TaskEvent


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


#: ``GET /api/v1/tasks/<id>`` shows at most this many timeline entries, the oldest; the rest are
#: paged with ``GET /api/v1/tasks/<id>/timeline`` from its ``timeline_next_cursor``. Unbounded, one
#: task with 50,001 entries answered 29.9 MB in 1.8 s.
TIMELINE_CAP = 200
#: the most entries one page of ``GET /api/v1/tasks/<id>/timeline`` has (``limit``)
TIMELINE_MAX_LIMIT = 500


def task_body(task: ExternalTask, events: list[TaskEvent] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "correlation_id": task.correlation_id,
        "state": task.state,
        "provider": task.provider,
        "input": task.input,
        "outcome": task.outcome,
        "callback_url": task.callback_url,
        "acceptance_deadline": _time(task.acceptance_deadline),
        "execution_deadline": _time(task.execution_deadline),
        "on_deadline": task.on_deadline,
        "heartbeat_timeout_s": task.heartbeat_timeout_s,
        "last_event_at": _time(task.last_event_at),
        "attempts": task.attempts,
        # A failed attempt with another one scheduled: the task is retrying right now.
        "retrying": task.next_attempt_at is not None and task.state not in TERMINAL,
        "last_error": task.last_error,
        "next_attempt_at": _time(task.next_attempt_at),
        "priority": task.priority,
        "concurrency_key": task.concurrency_key,
        "waiting": waiting_body(task),
        "created_at": _time(task.created_at),
        "updated_at": _time(task.updated_at),
    }
    if events is not None:
        body["timeline"] = [timeline_entry(e) for e in events]
    return body


def timeline_entry(event: TaskEvent) -> dict[str, Any]:
    return {"at": _time(event.at), "kind": event.kind, "detail": event.detail}


def waiting_body(task: ExternalTask) -> dict[str, Any] | None:
    """Why a task is not at the vendor yet: waiting in the database for its turn, or released and
    waiting for a slot of the vendor's rate limit (None otherwise)."""
    if task.state != "requested":
        return None
    if task.dispatched_at is None:
        reason = task.wait_reason or CLIENT_BACKLOG
        return {"reason": reason, "description": REASONS.get(reason, reason), "since": _time(task.created_at)}
    if task.wait_reason == RATE_LIMIT:
        return {"reason": RATE_LIMIT, "description": REASONS[RATE_LIMIT], "since": _time(task.dispatched_at)}
    return None


def callbacks_waiting_body(paused: EndpointHealth | None) -> dict[str, Any] | None:
    """The task's callback endpoint is paused after failing (``models.endpoint_health``): its
    callbacks wait until a probe succeeds."""
    if paused is None:
        return None
    return {
        "reason": ENDPOINT_PAUSED,
        "description": "the callback endpoint is paused after failing; it is probed and resumes by itself",
        "until": _time(paused.paused_until),
    }


#: Ids from a client (cursors, admin routes) stop well inside a 64-bit database integer.
MAX_ID = 2**62


def operator_task_body(task: ExternalTask) -> dict[str, Any]:
    """A task as operators see it: with its client, since correlation ids are unique per client only."""
    return {**task_body(task), "client": task.client.name}


def _up_to(limit: int) -> str:
    """A regular expression for the whole numbers 1 to ``limit``, written without leading zeros."""
    digits = str(limit)
    shorter = [f"[1-9][0-9]{{0,{len(digits) - 2}}}"] if len(digits) > 1 else []
    same_length = []
    for i, d in enumerate(digits):
        low = "1" if i == 0 else "0"
        if int(d) > int(low):
            rest = len(digits) - i - 1
            below = low if int(d) - 1 == int(low) else f"[{low}-{int(d) - 1}]"
            same_length.append(digits[:i] + below + (f"[0-9]{{{rest}}}" if rest else ""))
    return "|".join([*shorter, *same_length, digits])


#: A list's cursor, as the OpenAPI document states it: ``t`` and the last row's id (1 to
#: ``MAX_ID - 1``). Opaque to clients, who pass ``next_cursor`` back as it came; its format is
#: stated so that a malformed one is a schema violation, and every cursor the pattern allows is one
#: the API takes (a page after it may be empty). An empty ``cursor=`` is no cursor: the first page.
CURSOR = re.compile(f"^t(?:{_up_to(MAX_ID - 1)})$")
CURSOR_OR_EMPTY = f"^(?:{CURSOR.pattern[1:-1]})?$"


def encode_cursor(last_id: int) -> str:
    return f"t{last_id}"


def decode_cursor(cursor: str) -> int:
    if not CURSOR.fullmatch(cursor):
        raise BadRequest("cursor is not one this API gave out")
    return int(cursor[1:])


def dead_letter_body(letter: DeadLetter) -> dict[str, Any]:
    return {
        "id": letter.id,
        "kind": letter.kind,
        "fault": letter.fault,
        "state": letter.state,
        "message_id": letter.message_id,
        "correlation_id": letter.correlation_id,
        "provider": letter.provider,
        "error": letter.error,
        "answer": letter.answer,
        "attempts": letter.attempts,
        "replay_count": letter.replay_count,
        "first_failed_at": _time(letter.first_failed_at),
        "last_failed_at": _time(letter.last_failed_at),
        "closed_at": _time(letter.closed_at),
        "payload": letter.payload,
    }


def incident_body(incident: Incident) -> dict[str, Any]:
    return {
        "id": incident.id,
        "kind": incident.kind,
        "subject": incident.subject,
        "correlation_id": incident.correlation_id,
        "detail": incident.detail,
        "owner": incident.owner,
        "opened_at": _time(incident.opened_at),
        "resolved_at": _time(incident.resolved_at),
    }


def mute_body(row: NotificationMute) -> dict[str, Any]:
    return {"kind": row.kind, "muted_by": row.muted_by, "muted_at": _time(row.muted_at), "note": row.note}


def orphan_body(orphan: OrphanEvent) -> dict[str, Any]:
    return {
        "id": orphan.id,
        "source": orphan.source,
        "message_id": orphan.message_id,
        "vendor_job_id": orphan.vendor_job_id,
        "state": orphan.state,
        "payload": orphan.payload,
        "received_at": _time(orphan.received_at),
        "resolved_at": _time(orphan.resolved_at),
    }


def endpoint_health_body(health: EndpointHealth, now: datetime) -> dict[str, Any]:
    """An origin (``scheme://host[:port]``) has no path, query or userinfo: nothing of a secret."""
    return {
        "id": health.id,
        "client": health.client.name,
        "origin": health.origin,
        "state": health.state(now),
        "failures": health.failures,
        "pauses": health.pauses,
        "paused_until": _time(health.paused_until),
        "probe_until": _time(health.probe_until),
        "last_error": health.last_error,
        "last_failure_at": _time(health.last_failure_at),
    }


def endpoint_body(endpoint: CallbackEndpoint) -> dict[str, Any]:
    """``url`` is stored stripped (no userinfo, query or fragment): see ``core.urls``."""
    return {
        "id": endpoint.id,
        "client": endpoint.client.name,
        "url": endpoint.url,
        "disabled_at": _time(endpoint.disabled_at),
        "reason": endpoint.disabled_reason,
    }
