"""The admin API's query parameters, parsed: whole numbers, page sizes, choices, free-text filters, a
dead-letter filter, an incident kind; and the JSON body as an object (its members are the contract's
models, ``app/api/contract.py``). A bad value is a 422 naming its field. The console parses its
dead-letter filter here too."""

from __future__ import annotations

from typing import Any

from flask import request

from app.api.tasks import json_body
from app.errors import ValidationFailed
from models.messages import DEAD_LETTER_KINDS
from models.read_models.lists import DeadLetterFilter
from service.incidents import IncidentKind

CHOICES = {
    "state": ("open", "replayed", "discarded", "all"),
    "kind": DEAD_LETTER_KINDS,
    "fault": ("caller", "system"),
}


def int_arg(source: dict[str, Any], name: str, default: int | None, lo: int, hi: int) -> int | None:
    """A whole number from the query string (a JSON body's are the contract's: ``app/api/contract.py``)."""
    value = source.get(name, default)
    if value is None:
        return None
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError):
        number = lo - 1
    if not lo <= number <= hi:
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": f"a whole number, {lo} to {hi}"}])
    return number


def page_limit(source: dict[str, Any]) -> int:
    """A page size from the query string: 1 to 500, 50 when left out."""
    limit = int_arg(source, "limit", 50, 1, 500)
    assert limit is not None  # the default is a number
    return limit


def choice(source: dict[str, Any], name: str, default: str | None = None) -> str | None:
    value = source.get(name, default)
    if value is not None and value not in CHOICES[name]:
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": f"one of {', '.join(CHOICES[name])}"}])
    return value


def text_arg(source: dict[str, Any], name: str) -> str | None:
    """An optional free-text filter: a string of at most 200 characters, without NUL."""
    value = source.get(name)
    if value is not None and (not isinstance(value, str) or len(value) > 200 or "\x00" in value):
        message = "a string of at most 200 characters, no NUL"
        raise ValidationFailed(f"bad {name}", errors=[{"field": name, "message": message}])
    return value


def json_object() -> dict[str, Any]:
    """The request's JSON object; no body at all is ``{}``."""
    body = json_body() if request.get_data(cache=True) else {}
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    return body


def dead_letter_filter(source: dict[str, Any]) -> DeadLetterFilter:
    state = choice(source, "state", "open")
    return DeadLetterFilter(
        state=None if state == "all" else state,
        kind=choice(source, "kind"),
        fault=choice(source, "fault"),
        provider=text_arg(source, "provider"),
        older_than_s=int_arg(source, "older_than_s", None, 0, 10**9),
        newer_than_s=int_arg(source, "newer_than_s", None, 0, 10**9),
    )


def incident_kind(kind: str) -> str:
    if kind not in IncidentKind.ALL:
        raise ValidationFailed(
            "unknown incident kind", errors=[{"field": "kind", "message": "one of " + ", ".join(IncidentKind.ALL)}]
        )
    return kind
