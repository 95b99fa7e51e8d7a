"""Why something failed, in words a person can act on, bounded and without secrets: the reason a
vendor gave in a failed task's outcome, and an excerpt of the answer a vendor (or a domain app)
sent with a refusal. Pure: the console, the dead letters and the worker's error path share it.

Error messages (``core.errors``) deliberately carry no bodies -- they reach logs and
``task.last_error``, which clients read. The vendor's own answer is kept apart, with the dead
letter, so an operator deciding whether a replay can help sees what the vendor objected to.
"""

from __future__ import annotations

import re
from typing import Any

#: at most this many characters of a reason or an answer are kept and shown
REASON_LIMIT = 500
#: the outcome fields that say why, in the order they are looked for
REASON_KEYS = ("error", "message", "reason", "detail", "error_message", "description")

_SECRET_NAMES = r"(?:password|passwd|secret|token|api[_-]?key|apikey|authorization|signature|credentials?|cookie)"
#: ``"api_key": "…"``, ``token=…``, ``password: …``: the name is kept, the value masked. A name
#: starts at its quote or where a run of word characters starts, never inside one: the same matches
#: (the leftmost start of a run matches whenever a later one in it does), but a long run of word
#: characters is scanned once rather than once from each of its characters (quadratic: 7 CPU s for
#: a 10,000-character reason).
_SECRET_FIELD = re.compile(
    rf"""(?P<name>(?:["']|(?<![\w-]))[\w-]*{_SECRET_NAMES}[\w-]*["']?\s*[:=]\s*)(?P<value>"[^"]*"|'[^']*'|[^\s,&;}}\]]+)""",
    re.IGNORECASE,
)
_BEARER = re.compile(r"\b(Bearer|Basic)\s+[A-Za-z0-9._~+/=-]+", re.IGNORECASE)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
REDACTED = "[redacted]"


def bounded(text: str, limit: int = REASON_LIMIT) -> str:
    """At most ``limit`` characters, an ellipsis saying when more was cut."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def redact(text: str) -> str:
    """Mask the values of fields named like secrets and bearer or basic credentials; control
    characters (but newlines and tabs) become spaces: no terminal escapes or carriage returns reach a
    page or a terminal (the CLI's ``dead-letters show``)."""
    text = _CONTROL.sub(" ", text)
    text = _BEARER.sub(lambda m: f"{m[1]} {REDACTED}", text)

    def mask(match: re.Match[str]) -> str:
        value = match["value"]
        quote = value[0] if value[:1] in ("'", '"') else ""
        return f"{match['name']}{quote}{REDACTED}{quote}"

    return _SECRET_FIELD.sub(mask, text)


def answer_excerpt(body: bytes | None, limit: int = REASON_LIMIT) -> str | None:
    """What a refusal's body said, for the dead letter: decoded (undecodable bytes replaced),
    redacted, stripped and bounded; None for an empty body."""
    if not body:
        return None
    text = body[: limit * 4].decode("utf-8", errors="replace").strip()
    return bounded(redact(text), limit) if text else None


def _text(value: Any) -> str | None:
    if isinstance(value, str) and value.strip():
        return value.strip()
    if isinstance(value, dict):  # {"error": {"message": "…", "code": …}}
        return failure_reason(value)
    return None


def failure_reason(outcome: Any, limit: int = REASON_LIMIT) -> str | None:
    """The reason a failed task's outcome gives -- its ``error``, ``message``, ``reason``…
    field (a string, or an object holding one) -- redacted and bounded; None when it gives none."""
    if not isinstance(outcome, dict):
        return None
    for key in REASON_KEYS:
        found = _text(outcome.get(key))
        if found:
            return bounded(redact(found), limit)
    return None
