"""Pure: a vendor profile (``LIAISON_PROVIDER_<NAME>_PROFILE``, kind ``http``) read from TOML into
frozen data, every key checked, and the tiny template language its requests are written in.

A profile describes a vendor's API (docs/design.md §5): for ``submit``, ``status``, ``cancel`` and
optionally ``find`` the method, the path under the provider's base URL, headers, query and body, and
JSON pointers to the job id, status and outcome in the answer; how the vendor's status names map onto
ours; how an uncertain submit is settled when there is no ``find``; and where the job id and type are
in the vendor's events. Secrets are not in the file: a header names ``{api_key}``, filled from settings.

Templates substitute named variables only (``{reference}``, ``{job_id}`` …), each escaped for where it
lands: a path segment (percent-encoded, ``/`` included), a query value (form-encoded), a header (CR, LF
and NUL refused), a JSON body (the value placed as JSON, never pasted into JSON text). Nothing in a
profile is evaluated: there are no expressions, only literal text and names. A mistake is a
:class:`ProfileError` naming the file and the dotted key, raised when the settings are read.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any
from urllib.parse import quote, urlencode

from wire import json_pointer

#: Our states a vendor's status may map onto (core.states' names; wire does not import core).
STATES = ("queued", "running", "succeeded", "failed", "canceled")
FINAL_STATES = ("succeeded", "failed", "canceled")
#: What an event type may mean: ``completed`` alone takes its status from ``events.status``.
MEANINGS = ("accepted", "progress", "completed", "canceled", *(f"completed:{s}" for s in FINAL_STATES))
UNCERTAIN = ("resend", "operator")
METHODS = ("GET", "POST", "PUT", "PATCH", "DELETE")

#: Variables each operation may use. ``idempotency_key`` is the reference (our Idempotency-Key).
SUBMIT_VARS = frozenset({"reference", "idempotency_key", "input", "callback_url", "api_key"})
JOB_VARS = frozenset({"job_id", "api_key"})
FIND_VARS = frozenset({"reference", "api_key"})
#: Only headers may carry a secret: a path or query reaches logs and proxies, a body the vendor's logs.
SECRET_VARS = frozenset({"api_key"})
#: Only a whole JSON value may be the input (it is an object, not text).
JSON_ONLY_VARS = frozenset({"input"})

_PLACEHOLDER = re.compile(r"\{([a-z_]{1,40})\}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")
_FORBIDDEN_IN_HEADER = frozenset("\r\n\x00")
MAX_PROFILE_BYTES = 64 * 1024


class ProfileError(ValueError):
    """A profile that cannot be used: the message is ``<file>: <dotted.key>: <what is wrong>``."""


class UnsafeValue(ValueError):
    """A substituted value that cannot stay inside its slot (a header value with a line break)."""


# --- templates -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Template:
    """Literal text and ``{name}`` placeholders, split once: ``parts`` alternates literal, name, …"""

    parts: tuple[str, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return self.parts[1::2]

    @property
    def whole(self) -> str | None:
        """The one variable the template is made of (``"{input}"``), else None."""
        return self.parts[1] if len(self.parts) == 3 and not self.parts[0] and not self.parts[2] else None

    def render(self, values: Mapping[str, Any], escape: Any) -> str:
        return "".join(part if i % 2 == 0 else escape(str(values[part])) for i, part in enumerate(self.parts))


def template(text: str) -> Template:
    """Split ``text`` into literal parts and names; a brace that is not a placeholder is a ValueError."""
    parts = tuple(_PLACEHOLDER.split(text))
    for literal in parts[0::2]:
        if "{" in literal or "}" in literal:
            raise ValueError("braces only around a variable's name, e.g. {reference}")
    return Template(parts)


def path_segment(value: str) -> str:
    """A value inside one path segment: every reserved character percent-encoded ('/' too)."""
    return quote(value, safe="")


def header_value(value: str) -> str:
    """A value inside a header: refused if it would end the header (CR, LF) or the string (NUL)."""
    if _FORBIDDEN_IN_HEADER.intersection(value):
        raise UnsafeValue("a header value may not contain CR, LF or NUL")
    return value


def render_path(t: Template, values: Mapping[str, Any]) -> str:
    return t.render(values, path_segment)


def render_query(query: tuple[tuple[str, Template], ...], values: Mapping[str, Any]) -> str:
    """``a=b&c=d``, every name and value form-encoded (``quote_plus``): '&', '=' and '#' stay inside."""
    return urlencode([(name, t.render(values, str)) for name, t in query])


def render_header(t: Template, values: Mapping[str, Any]) -> str:
    return header_value(t.render(values, header_value))


def render_json(spec: Any, values: Mapping[str, Any]) -> Any:
    """A body from its spec: a string that is one placeholder becomes the variable's value itself
    (the input as an object), a string with text around placeholders the text with the values put in
    (as Python strings: the body is serialised as JSON afterwards, so a quote stays a quote);
    tables and arrays are built member by member, keys literal; anything else is a constant."""
    if isinstance(spec, Template):
        name = spec.whole
        return values[name] if name is not None else spec.render(values, str)
    if isinstance(spec, tuple) and spec and spec[0] == _OBJECT:
        return {key: render_json(value, values) for key, value in spec[1:]}
    if isinstance(spec, tuple):
        return [render_json(item, values) for item in spec]
    return spec


#: marks a body table in the frozen spec (a tuple of (key, spec) pairs after it)
_OBJECT = "\x00object"


# --- the profile ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    method: str
    path: Template
    query: tuple[tuple[str, Template], ...] = ()
    headers: tuple[tuple[str, Template], ...] = ()
    body: Any = None  # a frozen spec for render_json; None: no body

    @property
    def names(self) -> frozenset[str]:
        """Every variable the request uses (headers, path, query; the body's are checked apart)."""
        found = set(self.path.names)
        for _, t in (*self.query, *self.headers):
            found.update(t.names)
        return frozenset(found)


@dataclass(frozen=True)
class Operation:
    """One call and where its answer's fields are (JSON pointers; None: not read)."""

    request: Request
    job_id: str | None = None
    status: str | None = None
    outcome: str | None = None


@dataclass(frozen=True)
class Meaning:
    """What a vendor's event type means: ``kind`` accepted | progress | completed | canceled, and for
    completed the final state it names (None: read from ``events.status`` through ``[statuses]``)."""

    kind: str
    status: str | None = None


@dataclass(frozen=True)
class EventMapping:
    """Where things are in the vendor's event bodies (JSON pointers) and what its types mean."""

    type: str
    types: tuple[tuple[str, Meaning], ...]
    job_id: str | None = None
    reference: str | None = None
    status: str | None = None
    outcome: str | None = None
    percent: str | None = None
    message: str | None = None

    @cached_property
    def meanings(self) -> dict[str, Meaning]:
        return dict(self.types)


@dataclass(frozen=True)
class VendorProfile:
    path: str
    submit: Operation
    status: Operation
    cancel: Operation
    statuses: tuple[tuple[str, str], ...]
    find: Operation | None = None
    uncertain: str = "find"  # find | resend | operator
    events: EventMapping | None = None

    @cached_property
    def state_of(self) -> dict[str, str]:
        """The vendor's status name → ours."""
        return dict(self.statuses)

    def __repr__(self) -> str:
        return f"VendorProfile({self.path!r})"


def load_profile(path: str) -> VendorProfile:
    """Read and check the profile at ``path``; ProfileError names the file and the key."""
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_PROFILE_BYTES + 1)
    except OSError as exc:
        raise ProfileError(f"{path}: cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(raw) > MAX_PROFILE_BYTES:
        raise ProfileError(f"{path}: longer than {MAX_PROFILE_BYTES} bytes")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise ProfileError(f"{path}: is not UTF-8") from None
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{path}: is not valid TOML ({exc})") from None
    return parse_profile(data, path)


def parse_profile(data: Mapping[str, Any], path: str = "<profile>") -> VendorProfile:
    return _Reader(path).profile(data)


class _Reader:
    """Checks one profile's keys, naming the file and the dotted key of the first mistake."""

    def __init__(self, path: str) -> None:
        self.path = path

    def fail(self, key: str, what: str) -> ProfileError:
        return ProfileError(f"{self.path}: {key}: {what}")

    def table(self, data: Any, key: str, allowed: tuple[str, ...], required: tuple[str, ...] = ()) -> dict[str, Any]:
        if not isinstance(data, dict):
            raise self.fail(key, "must be a table")
        for name in data:
            if name not in allowed:
                raise self.fail(_join(key, name), f"unknown key (known: {', '.join(allowed)})")
        for name in required:
            if name not in data:
                raise self.fail(_join(key, name), "is required")
        return data

    def text(self, value: Any, key: str, choices: tuple[str, ...] | None = None) -> str:
        if not isinstance(value, str) or not value:
            raise self.fail(key, "must be a non-empty string")
        if choices is not None and value not in choices:
            raise self.fail(key, f"must be one of {', '.join(choices)}")
        return value

    def pointer(self, value: Any, key: str) -> str:
        if not isinstance(value, str):
            raise self.fail(key, "must be a JSON pointer string, e.g. /data/id")
        try:
            json_pointer.check(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        return value

    def template(self, value: Any, key: str, allowed: frozenset[str], slot: str) -> Template:
        if not isinstance(value, str):
            raise self.fail(key, "must be a string")
        try:
            t = template(value)
        except ValueError as exc:
            raise self.fail(key, str(exc)) from None
        for name in t.names:
            if name not in allowed:
                raise self.fail(key, f"unknown variable {{{name}}} (here: {', '.join(sorted(allowed))})")
            if name in SECRET_VARS and slot != "header":
                raise self.fail(key, f"{{{name}}} is a secret: only a header may carry it")
            if name in JSON_ONLY_VARS and (slot != "json" or t.whole != name):
                raise self.fail(key, f'{{{name}}} is JSON: only a whole body value may be it, e.g. "{{{name}}}"')
        return t

    def body(self, value: Any, key: str, allowed: frozenset[str], depth: int = 0) -> Any:
        if depth > 8:
            raise self.fail(key, "nested deeper than 8 levels")
        if isinstance(value, str):
            return self.template(value, key, allowed, "json")
        if isinstance(value, dict):
            return (_OBJECT, *((k, self.body(v, _join(key, k), allowed, depth + 1)) for k, v in value.items()))
        if isinstance(value, list):
            return tuple(self.body(v, f"{key}[{i}]", allowed, depth + 1) for i, v in enumerate(value))
        if isinstance(value, (bool, int, float)):
            return value
        raise self.fail(key, "must be a string, number, boolean, table or array")

    def pairs(self, value: Any, key: str, allowed: frozenset[str], slot: str) -> tuple[tuple[str, Template], ...]:
        if not isinstance(value, dict):
            raise self.fail(key, "must be a table of names and templates")
        out = []
        for name, t in value.items():
            if slot == "header" and not _HEADER_NAME.fullmatch(name):
                raise self.fail(_join(key, name), "is not a valid header name")
            out.append((name, self.template(t, _join(key, name), allowed, slot)))
        return tuple(out)

    def operation(
        self,
        data: Any,
        key: str,
        allowed: frozenset[str],
        common_headers: tuple[tuple[str, Template], ...],
        pointers: tuple[str, ...],
        required: tuple[str, ...],
    ) -> Operation:
        fields = ("method", "path", "query", "headers", "body", *pointers)
        table = self.table(data, key, fields, ("method", "path", *required))
        method = self.text(table["method"], f"{key}.method", METHODS)
        path = self.template(table["path"], f"{key}.path", allowed, "path")
        if not path.parts[0].startswith("/"):
            raise self.fail(f"{key}.path", "must start with '/': it is a path under the provider's base URL")
        query = self.pairs(table.get("query", {}), f"{key}.query", allowed, "query")
        own = self.pairs(table.get("headers", {}), f"{key}.headers", allowed, "header")
        mine = {name.lower() for name, _ in own}
        headers = tuple(h for h in common_headers if h[0].lower() not in mine) + own
        for name, t in headers:  # the common headers' variables must exist for this operation too
            for var in t.names:
                if var not in allowed:
                    raise self.fail(f"headers.{name}", f"{{{var}}} is not known in {key}")
        body = None
        if "body" in table:
            if method == "GET":
                raise self.fail(f"{key}.body", "a GET has no body")
            body = self.body(table["body"], f"{key}.body", allowed)
        found = {p: self.pointer(table[p], f"{key}.{p}") if p in table else None for p in pointers}
        return Operation(Request(method, path, query, headers, body), **found)

    def statuses(self, data: Any) -> tuple[tuple[str, str], ...]:
        if not isinstance(data, dict) or not data:
            raise self.fail("statuses", "must be a table of the vendor's status names and ours (queued, running, …)")
        for name, ours in data.items():
            self.text(ours, _join("statuses", name), STATES)
        return tuple(data.items())

    def events(self, data: Any, statuses: tuple[tuple[str, str], ...]) -> EventMapping:
        keys = ("type", "types", "job_id", "reference", "status", "outcome", "percent", "message")
        table = self.table(data, "events", keys, ("type", "types"))
        if ("job_id" in table) == ("reference" in table):
            raise self.fail("events.job_id", "exactly one of events.job_id and events.reference is required")
        found = {k: self.pointer(table[k], f"events.{k}") for k in keys if k in table and k != "types"}
        types = table["types"]
        if not isinstance(types, dict) or not types:
            raise self.fail("events.types", "must be a table of the vendor's event types and what they mean")
        meanings = []
        for name, meaning in types.items():
            text = self.text(meaning, _join("events.types", name), MEANINGS)
            kind, _, status = text.partition(":")
            if kind == "completed" and not status and "status" not in table:
                raise self.fail(
                    _join("events.types", name), "plain completed needs events.status (or completed:<state>)"
                )
            meanings.append((name, Meaning(kind, status or None)))
        if "status" in table and not any(ours in FINAL_STATES for _, ours in statuses):
            raise self.fail("statuses", "events.status needs at least one status mapped to a final state")
        return EventMapping(types=tuple(meanings), **found)

    def profile(self, data: Mapping[str, Any]) -> VendorProfile:
        keys = ("uncertain", "headers", "statuses", "submit", "status", "cancel", "find", "events")
        table = self.table(dict(data), "", keys, ("statuses", "submit", "status", "cancel"))
        everyone = SUBMIT_VARS | JOB_VARS | FIND_VARS
        common = self.pairs(table.get("headers", {}), "headers", frozenset(everyone), "header")
        statuses = self.statuses(table["statuses"])
        submit = self.operation(table["submit"], "submit", SUBMIT_VARS, common, ("job_id",), ("job_id",))
        status = self.operation(
            table["status"], "status", JOB_VARS, common, ("job_id", "status", "outcome"), ("status",)
        )
        cancel = self.operation(table["cancel"], "cancel", JOB_VARS, common, (), ())
        find = None
        if "find" in table:
            find = self.operation(table["find"], "find", FIND_VARS, common, ("job_id",), ("job_id",))
            if "uncertain" in table:
                raise self.fail("uncertain", "only without [find]: with it, find settles an uncertain submit")
            uncertain = "find"
        else:
            if "uncertain" not in table:
                raise self.fail("uncertain", f"is required without [find]: one of {', '.join(UNCERTAIN)}")
            uncertain = self.text(table["uncertain"], "uncertain", UNCERTAIN)
        if uncertain == "resend" and not {"idempotency_key", "reference"} & {
            n for _, t in submit.request.headers for n in t.names
        }:
            raise self.fail(
                "submit.headers", 'uncertain = "resend" needs a header carrying {idempotency_key}, e.g. Idempotency-Key'
            )
        events = self.events(table["events"], statuses) if "events" in table else None
        return VendorProfile(self.path, submit, status, cancel, statuses, find, uncertain, events)


def _join(key: str, name: str) -> str:
    """A dotted key; a name that is not a bare TOML key is quoted, as TOML would write it."""
    if not re.fullmatch(r"[A-Za-z0-9_-]+", name):
        name = f'"{name}"'
    return f"{key}.{name}" if key else name
