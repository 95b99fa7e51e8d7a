"""Inbound vendor events as plain data. Pure: parsing only, every problem is a MalformedEvent."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from models.states import COMPLETION_STATES, EventType, State, target_of


class MalformedEvent(ValueError):
    """The body is signed but is not an event we understand (→ 400)."""


@dataclass(frozen=True)
class VendorEvent:
    type: EventType
    job_id: str
    status: str | None = None
    outcome: Any = None

    @property
    def target(self) -> State:
        return target_of(self.type, self.status)

    def as_payload(self) -> dict[str, Any]:
        return {"type": self.type.value, "job_id": self.job_id, "status": self.status, "outcome": self.outcome}


def parse_event(body: bytes | dict[str, Any]) -> VendorEvent:
    if isinstance(body, (bytes, bytearray)):
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            raise MalformedEvent("body is not valid JSON") from None
    else:
        data = body
    if not isinstance(data, dict):
        raise MalformedEvent("body must be a JSON object")
    try:
        event_type = EventType(data.get("type"))
    except ValueError:
        raise MalformedEvent(f"type must be one of {[t.value for t in EventType]}") from None
    job_id = data.get("job_id")
    if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
        raise MalformedEvent("job_id must be a non-empty string of at most 200 characters")
    status = data.get("status")
    if event_type is EventType.COMPLETED and (not isinstance(status, str) or status not in COMPLETION_STATES):
        raise MalformedEvent(f"status must be one of {sorted(COMPLETION_STATES)}")
    if event_type is EventType.ACCEPTED:
        status = None
    outcome = data.get("outcome")
    if outcome is not None and not isinstance(outcome, dict):
        raise MalformedEvent("outcome must be an object")
    return VendorEvent(event_type, job_id, status, outcome)
