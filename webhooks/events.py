"""Inbound vendor events as plain data. Pure: parsing only, every problem is a MalformedEvent.

Also home of ``strict_loads``, the one JSON parser for untrusted request bodies (the domain apps'
API uses it too): it lives in this pure module so every edge can import it without a cycle.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, NoReturn

from models.states import COMPLETION_STATES, EventType, State, target_of


class MalformedEvent(ValueError):
    """The body is signed but is not an event we understand (→ 400)."""


class InvalidJson(ValueError):
    """Bytes that are not JSON we can store; the message says why, for a 400's detail."""


def _no_constant(name: str) -> NoReturn:
    raise InvalidJson(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InvalidJson("a number is too large")
    return value


def _check_strings(data: Any) -> None:
    """Every string (keys too) must be storable: valid UTF-8 and without U+0000."""
    pending = [data]
    while pending:  # a loop, not recursion: json.loads already allowed this depth
        value = pending.pop()
        if isinstance(value, dict):
            pending.extend(value)
            pending.extend(value.values())
        elif isinstance(value, list):
            pending.extend(value)
        elif isinstance(value, str):
            if "\x00" in value:
                raise InvalidJson("strings must not contain \\u0000")
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise InvalidJson("strings must be valid Unicode (a lone surrogate such as \\ud800 is not)") from None


def strict_loads(raw: bytes | bytearray | str) -> Any:
    """``json.loads`` for untrusted bodies, with every way it can fail turned into InvalidJson.

    Why not plain ``json.loads``: besides JSONDecodeError it raises a bare ValueError for integers
    past 4300 digits and RecursionError for deep nesting; and it accepts what PostgreSQL cannot
    store (NaN, ±Infinity, numbers that overflow to ±inf, \\u0000, lone surrogates such as
    \\ud800), which would fail later, at fingerprinting or in the database driver, as a 500.
    """
    try:
        data = json.loads(raw, parse_constant=_no_constant, parse_float=_finite_float)
    except InvalidJson:
        raise
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InvalidJson(str(exc)) from None
    except RecursionError:
        raise InvalidJson("nested too deeply") from None
    except ValueError:  # int() refuses more than 4300 digits (sys.get_int_max_str_digits)
        raise InvalidJson("a number has too many digits") from None
    _check_strings(data)
    return data


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
            data = strict_loads(body)
        except InvalidJson as exc:
            raise MalformedEvent(f"body is not valid JSON: {exc}") from None
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
