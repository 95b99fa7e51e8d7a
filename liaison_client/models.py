"""What the API answers, as frozen dataclasses. Times are timezone-aware ``datetime``s.

Each ``from_json`` reads the documented fields and keeps the whole body in ``raw``: a field a newer
Liaison adds is then still reachable, and never breaks an older client.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal, get_args

#: The states a task can be in, the last three final: a type, so a misspelt state (``"cancelled"``)
#: is a type checker's error. The same as the OpenAPI document's (tests/unit/test_client_states.py).
TaskState = Literal["requested", "submitted", "accepted", "cancel_requested", "succeeded", "failed", "canceled"]
STATES: tuple[TaskState, ...] = get_args(TaskState)
#: A task in one of these will not change again.
FINAL_STATES: frozenset[TaskState] = frozenset({"succeeded", "failed", "canceled"})


def parse_time(value: Any) -> datetime | None:
    """An ISO 8601 time from the API (``...Z`` or ``+00:00``); None for null. A malformed answer
    raises TypeError or ValueError, which the client turns into ``UnexpectedResponse``."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise TypeError(f"not a time: {value!r}")
    return datetime.fromisoformat(value)


def _str(data: Mapping[str, Any], name: str) -> str:
    value = data.get(name)
    if not isinstance(value, str):
        raise TypeError(f"{name} is missing or not a string")
    return value


def _state(data: Mapping[str, Any]) -> TaskState:
    """The task's ``state``: one of :data:`STATES`, or the answer is not one this client understands."""
    value = data.get("state")
    for state in STATES:
        if value == state:
            return state
    raise TypeError(f"state is not one of {', '.join(STATES)}: {value!r}")


def _opt_str(data: Mapping[str, Any], name: str) -> str | None:
    value = data.get(name)
    return value if isinstance(value, str) else None


def _opt_int(data: Mapping[str, Any], name: str) -> int | None:
    value = data.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class TimelineEntry:
    """One thing that happened to a task (``kind`` such as ``state.accepted``), as ``GET`` shows it."""

    at: datetime | None
    kind: str
    detail: dict[str, Any]

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TimelineEntry:
        detail = data.get("detail")
        return cls(parse_time(data.get("at")), _str(data, "kind"), dict(detail) if isinstance(detail, Mapping) else {})


@dataclass(frozen=True)
class Task:
    """A task as its domain app sees it. ``timeline`` is filled by :meth:`LiaisonClient.get` only
    (lists and submits leave it empty), with the oldest 200 entries at most: the rest are read with
    :meth:`LiaisonClient.timeline` from ``timeline_next_cursor``, or all of it with
    :meth:`LiaisonClient.iter_timeline`."""

    correlation_id: str
    state: TaskState
    provider: str | None
    input: Any
    outcome: Any
    callback_url: str | None
    acceptance_deadline: datetime | None
    execution_deadline: datetime | None
    on_deadline: str | None
    attempts: int
    retrying: bool
    last_error: str | None
    next_attempt_at: datetime | None
    created_at: datetime | None
    updated_at: datetime | None
    timeline: tuple[TimelineEntry, ...] = ()
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    priority: int = 3
    concurrency_key: str | None = None
    #: while the task waits in Liaison for its turn: ``{"reason", "description", "since"}``
    waiting: Mapping[str, Any] | None = None
    #: ``timeline`` is the start of a longer one: the cursor for :meth:`LiaisonClient.timeline`
    #: that goes on after its last entry (None: ``timeline`` is all of it, or not asked for)
    timeline_next_cursor: str | None = None

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @classmethod
    def from_json(cls, data: Any) -> Task:
        if not isinstance(data, Mapping):
            raise TypeError("a task must be a JSON object")
        attempts = data.get("attempts")
        timeline = data.get("timeline")
        return cls(
            correlation_id=_str(data, "correlation_id"),
            state=_state(data),
            provider=_opt_str(data, "provider"),
            input=data.get("input"),
            outcome=data.get("outcome"),
            callback_url=_opt_str(data, "callback_url"),
            acceptance_deadline=parse_time(data.get("acceptance_deadline")),
            execution_deadline=parse_time(data.get("execution_deadline")),
            on_deadline=_opt_str(data, "on_deadline"),
            attempts=attempts if isinstance(attempts, int) else 0,
            retrying=bool(data.get("retrying")),
            last_error=_opt_str(data, "last_error"),
            next_attempt_at=parse_time(data.get("next_attempt_at")),
            created_at=parse_time(data.get("created_at")),
            updated_at=parse_time(data.get("updated_at")),
            timeline=tuple(TimelineEntry.from_json(e) for e in timeline if isinstance(e, Mapping))
            if isinstance(timeline, list)
            else (),
            raw=dict(data),
            priority=data["priority"] if isinstance(data.get("priority"), int) else 3,
            concurrency_key=_opt_str(data, "concurrency_key"),
            waiting=data["waiting"] if isinstance(data.get("waiting"), Mapping) else None,
            timeline_next_cursor=_opt_str(data, "timeline_next_cursor"),
        )


@dataclass(frozen=True)
class Page:
    """One page of ``GET /api/v1/tasks``, newest first. ``next_cursor`` is None on the last page."""

    tasks: tuple[Task, ...]
    next_cursor: str | None

    @classmethod
    def from_json(cls, data: Any) -> Page:
        if not isinstance(data, Mapping) or not isinstance(data.get("tasks"), list):
            raise TypeError("a page must be a JSON object with a tasks list")
        return cls(tuple(Task.from_json(t) for t in data["tasks"]), _opt_str(data, "next_cursor"))


@dataclass(frozen=True)
class TimelinePage:
    """One page of ``GET /api/v1/tasks/<id>/timeline``, oldest first. ``next_cursor`` is None on the
    last page (for now: kept, it later gives the entries added since)."""

    entries: tuple[TimelineEntry, ...]
    next_cursor: str | None

    @classmethod
    def from_json(cls, data: Any) -> TimelinePage:
        if not isinstance(data, Mapping) or not isinstance(data.get("timeline"), list):
            raise TypeError("a timeline page must be a JSON object with a timeline list")
        entries = tuple(TimelineEntry.from_json(e) for e in data["timeline"] if isinstance(e, Mapping))
        return cls(entries, _opt_str(data, "next_cursor"))


@dataclass(frozen=True)
class Callback:
    """A verified callback from Liaison.

    ``message_id`` (the ``webhook-id`` header) is stable across redeliveries: store it and skip a
    message already handled. ``type`` is ``task.accepted``, ``task.progress`` (``data`` holds its
    ``percent`` and ``message``), ``task.completed`` (the task is final; ``state`` says how) or
    ``task.deadline_exceeded``.

    ``sequence`` orders one task's callbacks (1, 2, 3 …; they are delivered in that order, but a
    replayed one may come late): keep the highest handled and ignore a lower one. A ``task.completed``
    that replaces an earlier one names it in ``supersedes`` (its ``message_id``).
    """

    message_id: str
    type: str
    correlation_id: str
    state: str | None
    outcome: Any
    occurred_at: datetime | None
    timestamp: int
    sequence: int | None = None  # None from a server older than issue 12
    supersedes: str | None = None
    data: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def from_json(cls, message_id: str, timestamp: int, data: Any) -> Callback:
        if not isinstance(data, Mapping):
            raise TypeError("a callback body must be a JSON object")
        return cls(
            message_id=message_id,
            type=_str(data, "type"),
            correlation_id=_str(data, "correlation_id"),
            state=_opt_str(data, "state"),
            outcome=data.get("outcome"),
            occurred_at=parse_time(data.get("occurred_at")),
            timestamp=timestamp,
            sequence=_opt_int(data, "sequence"),
            supersedes=_opt_str(data, "supersedes"),
            data=dict(data),
        )
