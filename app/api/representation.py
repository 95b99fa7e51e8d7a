"""How tasks look to their domain app. The vendor's job id is never shown."""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Any

from app.errors import BadRequest
from models.task import ExternalTask, TaskEvent


def _time(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None


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
        "attempts": task.attempts,
        "last_error": task.last_error,
        "next_attempt_at": _time(task.next_attempt_at),
        "created_at": _time(task.created_at),
        "updated_at": _time(task.updated_at),
    }
    if events is not None:
        body["timeline"] = [{"at": _time(e.at), "kind": e.kind, "detail": e.detail} for e in events]
    return body


def encode_cursor(last_id: int) -> str:
    return base64.urlsafe_b64encode(f"t{last_id}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> int:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        if not raw.startswith("t"):
            raise ValueError
        return int(raw[1:])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise BadRequest("cursor is not one this API gave out") from None
