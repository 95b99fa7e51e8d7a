"""Inbound vendor events as plain data. Pure: parsing only, every problem is a MalformedEvent.

The JSON itself is read by ``wire.bounded_json.strict_loads`` (re-exported here), which refuses
a body nested past the outcome's depth limit before parsing it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from core.states import COMPLETION_STATES, EventType, State, target_of
from wire.bounded_json import InvalidJson, JsonLimits, TooDeep, TooLarge, check_bounds, strict_loads
from wire.json_pointer import PointerMissing, resolve
from wire.profiles import EventMapping, VendorProfile

__all__ = [
    "EventParser",
    "EventTooLarge",
    "InvalidJson",
    "MalformedEvent",
    "MappedEvents",
    "Parsed",
    "VendorEvent",
    "parse_event",
    "parser_for",
    "strict_loads",
]


class MalformedEvent(ValueError):
    """The body is signed but is not an event we understand (→ 400)."""


class EventTooLarge(MalformedEvent):
    """The event's outcome is past the size limit (→ 413)."""


#: A progress report's message: short, printable, one line of what the job is doing.
MAX_PROGRESS_MESSAGE = 500


@dataclass(frozen=True)
class Progress:
    """What a ``job.progress`` says: a percentage (0–100) and/or a short message."""

    percent: float | None = None
    message: str | None = None

    def as_payload(self) -> dict[str, Any]:
        return {"percent": self.percent, "message": self.message}


@dataclass(frozen=True)
class VendorEvent:
    type: EventType
    job_id: str
    status: str | None = None
    outcome: Any = None
    progress: Progress | None = None  # job.progress only

    @property
    def target(self) -> State:
        return target_of(self.type, self.status)

    def as_payload(self) -> dict[str, Any]:
        payload = {"type": self.type.value, "job_id": self.job_id, "status": self.status, "outcome": self.outcome}
        if self.progress is not None:
            payload.update(self.progress.as_payload())
        return payload


def parse_event(body: bytes | dict[str, Any], limits: JsonLimits | None = None) -> VendorEvent:
    """A verified body → a VendorEvent. A body (bytes) is bounded by ``limits``: its depth is checked
    on the text before parsing (the event object adds one level to its outcome's), then the
    outcome's depth and canonical size. An already parsed dict (a stored orphan) is taken as it is.
    """
    if isinstance(body, (bytes, bytearray)):
        limits = limits or JsonLimits()
        try:
            data = strict_loads(body, max_depth=limits.max_depth + 1)
        except TooDeep as exc:
            raise MalformedEvent(
                f"body nested {exc.depth} levels deep: the outcome may have at most {limits.max_depth}"
            ) from None
        except InvalidJson as exc:
            raise MalformedEvent(f"body is not valid JSON: {exc}") from None
        outcome = data.get("outcome") if isinstance(data, dict) else None
        if isinstance(outcome, dict):
            try:
                check_bounds(outcome, limits, "outcome")
            except TooLarge as exc:
                raise EventTooLarge(str(exc)) from None
            except TooDeep as exc:
                raise MalformedEvent(str(exc)) from None
    else:
        data = body
    if not isinstance(data, dict):
        raise MalformedEvent("body must be a JSON object")
    try:
        event_type = EventType(data.get("type", ""))
    except ValueError:
        raise MalformedEvent(f"type must be one of {[t.value for t in EventType]}") from None
    job_id = data.get("job_id")
    if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
        raise MalformedEvent("job_id must be a non-empty string of at most 200 characters")
    status = data.get("status")
    if event_type is EventType.COMPLETED and (not isinstance(status, str) or status not in COMPLETION_STATES):
        raise MalformedEvent(f"status must be one of {sorted(COMPLETION_STATES)}")
    if event_type is EventType.PROGRESS:
        return VendorEvent(event_type, job_id, progress=_progress(data))
    if event_type is EventType.ACCEPTED:
        status = None
    outcome = data.get("outcome")
    if outcome is not None and not isinstance(outcome, dict):
        raise MalformedEvent("outcome must be an object")
    return VendorEvent(event_type, job_id, status, outcome)


def _progress(data: dict[str, Any]) -> Progress:
    """``percent`` (a number from 0 to 100) and/or ``message`` (at most 500 printable characters);
    anything else in the body (``status``, ``outcome``) is not read: progress moves no state."""
    percent, message = data.get("percent"), data.get("message")
    if percent is not None:
        if isinstance(percent, bool) or not isinstance(percent, (int, float)) or not 0 <= percent <= 100:
            raise MalformedEvent("percent must be a number from 0 to 100")
        percent = float(percent)
    if message is not None and (
        not isinstance(message, str) or len(message) > MAX_PROGRESS_MESSAGE or not message.isprintable()
    ):
        raise MalformedEvent(f"message must be a printable string of at most {MAX_PROGRESS_MESSAGE} characters")
    if percent is None and not message:
        raise MalformedEvent("job.progress needs a percent, a message or both")
    return Progress(percent, message)


# --- a vendor's own event shape, read through its profile's [events] (wire.profiles) ----------------


@dataclass(frozen=True)
class Parsed:
    """A verified body, read: the event, or None for a type the profile does not map (stored,
    counted and ignored by the caller, never an error: the vendor may add types any day).
    ``reference``: the event names our reference rather than the vendor's job id (whose ``job_id``
    is then empty until the caller finds the task)."""

    event: VendorEvent | None
    vendor_type: str = ""
    reference: str | None = None


#: Reads one provider's verified event bodies, bounded by the limits given.
EventParser = Callable[[bytes, JsonLimits | None], Parsed]


def _liaison_shape(body: bytes, limits: JsonLimits | None = None) -> Parsed:
    event = parse_event(body, limits)
    return Parsed(event, event.type.value)


class MappedEvents:
    """An :data:`EventParser` for a vendor's own body shape: JSON pointers to its type, job id (or our
    reference), status, outcome and progress, and a table of what each type means."""

    def __init__(self, mapping: EventMapping, statuses: dict[str, str]) -> None:
        self.mapping = mapping
        self.statuses = statuses
        #: the outcome sits this many levels inside the body (``/data/object/result``: 3)
        self.envelope = len(mapping.outcome.split("/")) - 1 if mapping.outcome else 0

    def __call__(self, body: bytes, limits: JsonLimits | None = None) -> Parsed:
        limits = limits or JsonLimits()
        try:
            data = strict_loads(body, max_depth=limits.max_depth + max(self.envelope, 1))
        except TooDeep as exc:
            raise MalformedEvent(f"body nested {exc.depth} levels deep") from None
        except InvalidJson as exc:
            raise MalformedEvent(f"body is not valid JSON: {exc}") from None
        m = self.mapping
        vendor_type = self._at(data, m.type)
        if isinstance(vendor_type, bool) or not isinstance(vendor_type, (str, int)):
            raise MalformedEvent(f"the event type at {m.type} must be a string")
        vendor_type = str(vendor_type)[:200]
        meaning = m.meanings.get(vendor_type)
        if meaning is None:
            return Parsed(None, vendor_type)
        reference = None
        if m.reference is not None:
            reference, job_id = self._token(data, m.reference, "reference"), ""
        else:
            assert m.job_id is not None  # one of the two (wire.profiles)
            job_id = self._token(data, m.job_id, "job id")
        if meaning.kind == "accepted":
            return Parsed(VendorEvent(EventType.ACCEPTED, job_id), vendor_type, reference)
        if meaning.kind == "progress":
            fields = {"percent": self._optional(data, m.percent), "message": self._optional(data, m.message)}
            return Parsed(VendorEvent(EventType.PROGRESS, job_id, progress=_progress(fields)), vendor_type, reference)
        status = "canceled" if meaning.kind == "canceled" else meaning.status or self._status(data)
        outcome = self._optional(data, m.outcome)
        if outcome is not None:
            if not isinstance(outcome, dict):
                raise MalformedEvent(f"the outcome at {m.outcome} must be an object")
            try:
                check_bounds(outcome, limits, "outcome")
            except TooLarge as exc:
                raise EventTooLarge(str(exc)) from None
            except TooDeep as exc:
                raise MalformedEvent(str(exc)) from None
        return Parsed(VendorEvent(EventType.COMPLETED, job_id, status, outcome), vendor_type, reference)

    @staticmethod
    def _at(data: Any, pointer: str) -> Any:
        try:
            return resolve(data, pointer)
        except PointerMissing:
            raise MalformedEvent(f"nothing at {pointer}") from None

    @staticmethod
    def _optional(data: Any, pointer: str | None) -> Any:
        if pointer is None:
            return None
        try:
            return resolve(data, pointer)
        except PointerMissing:
            return None

    def _token(self, data: Any, pointer: str, what: str) -> str:
        value = self._at(data, pointer)
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str) or not value or len(value) > 200:
            raise MalformedEvent(f"the {what} at {pointer} must be a non-empty string of at most 200 characters")
        return value

    def _status(self, data: Any) -> str:
        assert self.mapping.status is not None  # plain completed needs it (wire.profiles)
        name = self._at(data, self.mapping.status)
        ours = self.statuses.get(name) if isinstance(name, str) else None
        if ours not in COMPLETION_STATES:
            raise MalformedEvent(f"the status at {self.mapping.status} is not one the profile maps to a final state")
        assert ours is not None
        return ours


def parser_for(profile: VendorProfile | None) -> EventParser:
    """A provider's event parser: its profile's ``[events]``, else Liaison's own shape (rest, amqp)."""
    if profile is None or profile.events is None:
        return _liaison_shape
    return MappedEvents(profile.events, profile.state_of)
