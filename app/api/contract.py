"""The HTTP contract, declared once: the JSON bodies the API takes (validated here, with pydantic)
and the ones it answers (described here). ``app/api/openapi.py`` builds the OpenAPI document's
component schemas from these models, and the views validate with the same models, so the document
cannot allow a value the server refuses for its form, or refuse one it takes
(``tests/middle/test_contract_agreement.py`` holds the two to each other).

A field's problem keeps the fixed message clients see today: each field names it (``Msg``), and
``problems`` turns pydantic's errors into the problem+json ``errors`` list, every field at once.
What depends on the server's state (the configured providers, the client's callback origins, the
outbound guard's verdict on an address, the clock) stays in code beside the model
(``app/api/validation.py``) and in the fields' descriptions.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal, TypeVar

from annotated_types import Interval
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, Strict, ValidationError, WithJsonSchema

from app.errors import ValidationFailed
from core.fair_share import ENDPOINT_PAUSED, MAX_PRIORITY, MIN_PRIORITY, REASONS
from core.outbound_guard import MAX_URL_CHARS
from core.states import COMPLETED_CALLBACK, PROGRESS_CALLBACK, RELAYED, State
from models.messages import DEAD_LETTER_KINDS
from webhooks.events import MAX_PROGRESS_MESSAGE
from webhooks.schemes import SCHEMES

MAX_TIMEOUT_S = 366 * 24 * 3600
CORRELATION_ID = r"^[A-Za-z0-9._:@-]{1,200}$"
#: printable ASCII, no spaces: an Idempotency-Key, a concurrency key
PRINTABLE = r"^[\x21-\x7e]{1,200}$"
#: No string a request carries may hold U+0000: PostgreSQL text cannot store it, and
#: ``wire.bounded_json.strict_loads`` refuses a body with one anywhere, keys included (400).
NO_NUL = r"^[^\x00]*$"
_LABEL = "[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
#: A callback URL's form, the server's first check: http(s), a host of DNS labels (any number) or an
#: IPv6 literal, an optional port, then printable ASCII without space or backslash. No userinfo, no
#: ``%``. The outbound guard then judges the address (``core.outbound_guard``).
CALLBACK_URL = (
    rf"^[Hh][Tt][Tt][Pp][Ss]?://(?:(?:{_LABEL}\.)*{_LABEL}\.?|\[[0-9A-Fa-f:.]+\])(?::[0-9]*)?(?:[/?#][!-\[\]-~]*)?$"
)
#: An http(s) URL with an ASCII authority, then anything without NUL: how an operator names a
#: disabled endpoint (``app.api.validation.is_http_url`` takes every one).
HTTP_URL = r"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9._~%!$&'()*+,;=:@-]+(?:[/?#][^\x00]*)?$"
STATES = [s.value for s in State]


@dataclass(frozen=True)
class Msg:
    """The fixed message a field's problem carries in the problem+json ``errors``; ``missing`` the
    one for a required field left out or null (the same when not given)."""

    text: str
    missing: str | None = None


def _whole(value: Any) -> Any:
    """``5.0`` is the whole number 5, as JSON Schema counts integers; ``true``, ``"5"``, ``5.5`` are not."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


# A whole number in a range: the range before the validator that turns 5.0 into 5 (pydantic states
# a range it can apply to ``int`` itself as minimum/maximum in the schema).
Timeout = Annotated[int, Strict(), Interval(ge=1, le=MAX_TIMEOUT_S), BeforeValidator(_whole)]
Priority = Annotated[int, Strict(), Interval(ge=MIN_PRIORITY, le=MAX_PRIORITY), BeforeValidator(_whole)]
Seconds = Annotated[int, Strict(), Interval(ge=0, le=10**9), BeforeValidator(_whole)]
Limit = Annotated[int, Strict(), Interval(ge=1, le=100_000), BeforeValidator(_whole)]


#: An RFC 3339 time with an offset, as JSON Schema's ``date-time`` (seconds, ``T`` and ``Z`` upper case).
_HH_MM = "(?:[01][0-9]|2[0-3]):[0-5][0-9]"
RFC_3339 = rf"^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T{_HH_MM}:[0-5][0-9](?:\.[0-9]+)?(?:Z|[+-]{_HH_MM})$"


def _aware(value: Any) -> Any:
    """An RFC 3339 time as a datetime; anything else is left for the type to refuse."""
    if isinstance(value, str) and re.fullmatch(RFC_3339, value):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:  # no such day (02-30), or a year 0
            return value
    return value


Time = Annotated[
    datetime,
    BeforeValidator(_aware),
    Field(strict=True),
    WithJsonSchema({"type": "string", "format": "date-time", "pattern": RFC_3339}),
]
Text = Annotated[str, Field(pattern=NO_NUL)]
Name = Annotated[str, Field(min_length=1, max_length=100, pattern=NO_NUL)]
_TIMEOUT = f"a whole number of seconds, 1 to {MAX_TIMEOUT_S}"
_ISO = "an ISO 8601 time with an offset, e.g. 2026-01-01T12:00:00Z"
_DEADLINE = "In the future, with an offset. The acceptance deadline must not be after the execution deadline."


class Body(BaseModel):
    """A request body: strict types (no ``"5"`` for 5), every problem reported at once."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)
    #: field pairs of which a body may give one at most (the document's ``not``)
    one_of: ClassVar[tuple[tuple[str, str], ...]] = ()


class SubmitTask(Body):
    """A task to submit: its input, and how Liaison should treat it."""

    one_of: ClassVar[tuple[tuple[str, str], ...]] = (
        ("acceptance_timeout_s", "acceptance_deadline"),
        ("execution_timeout_s", "execution_deadline"),
    )
    model_config = ConfigDict(
        json_schema_extra={
            "not": {"anyOf": [{"required": list(p)} for p in one_of]},
            "examples": [
                {
                    "input": {"sku": "A1"},
                    "correlation_id": "order-42",
                    "callback_url": "https://hooks.shop.example.com/liaison",
                    "execution_timeout_s": 3600,
                }
            ],
        }
    )

    input: Annotated[
        dict[str, Any] | Text,
        Msg("must be an object or a string", missing="required"),
        Field(
            description="The work, passed to the vendor as is: an object or a string. At most LIAISON_MAX_JSON_DEPTH "
            "levels deep and LIAISON_MAX_INPUT_BYTES of canonical JSON."
        ),
    ]
    correlation_id: Annotated[
        str | None,
        Field(pattern=CORRELATION_ID, description="Yours; generated if absent or null."),
        Msg("1–200 characters of A-Z a-z 0-9 . _ : @ -"),
    ] = None
    # Checked in code (the configured providers): no Msg, so the model's own problem is not reported.
    provider: Annotated[
        str, Field(description="One of the configured providers (LIAISON_PROVIDERS); optional when exactly one is.")
    ] = None  # type: ignore[assignment]  # absent: the default provider
    callback_url: Annotated[
        str | None,
        Field(
            max_length=MAX_URL_CHARS,
            pattern=CALLBACK_URL,
            description="Where the task's callbacks go; absent or null: the client's default. An http(s) URL of at "
            "most 2000 characters: a host name (any number of labels) or an address, no userinfo. The server "
            "also refuses (422) what its outbound guard refuses offline — a private, loopback or link-local address "
            "in any spelling, `localhost`, a name longer than 253 characters, a last label that is a number (`12`, "
            "`0x1f`) in a name that is no IPv4 address, a bracketed host that is no IPv6 address, a port outside "
            "1–65535 — and a URL outside the client's callback origins, when it has any.",
        ),
        Msg("an http(s) URL of at most 2000 characters"),
    ] = None
    acceptance_timeout_s: Annotated[Timeout, Field(description="Or acceptance_deadline, not both."), Msg(_TIMEOUT)] = (
        None  # type: ignore[assignment]
    )
    acceptance_deadline: Annotated[Time, Field(description=_DEADLINE), Msg(_ISO)] = None  # type: ignore[assignment]
    execution_timeout_s: Annotated[Timeout, Field(description="Or execution_deadline, not both."), Msg(_TIMEOUT)] = None  # type: ignore[assignment]
    execution_deadline: Annotated[Time, Field(description=_DEADLINE), Msg(_ISO)] = None  # type: ignore[assignment]
    on_deadline: Annotated[Literal["escalate", "cancel"], Msg("escalate or cancel")] = "escalate"
    heartbeat_timeout_s: Annotated[
        Timeout,
        Field(
            description="No vendor event for this long (after submission) makes Liaison ask the vendor for the job's "
            "status; a vendor that does not answer is escalated. Default: the provider's HEARTBEAT_TIMEOUT_S."
        ),
        Msg(_TIMEOUT),
    ] = None  # type: ignore[assignment]
    priority: Annotated[
        Priority | None,
        Field(
            description="1 (most urgent) to 5; null or absent: the client's default (3 unless set). Orders the "
            "client's own waiting tasks, a lower priority aging up (LIAISON_PRIORITY_AGING_S): none is starved."
        ),
        Msg(f"a whole number, {MIN_PRIORITY} (most urgent) to {MAX_PRIORITY}"),
    ] = None
    concurrency_key: Annotated[
        str | None,
        Field(
            pattern=PRINTABLE,
            description="At most the client's concurrency-key limit (1 unless set) of its tasks with this key are "
            "open at the vendor at once; later ones wait, in order. E.g. a customer account.",
        ),
        Msg("1–200 printable ASCII characters, no spaces"),
    ] = None


class CancelTask(BaseModel):
    """Why the task is canceled: the body is optional, other members are ignored."""

    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"reason": "order voided"}]})
    reason: Annotated[str, Field(min_length=1, max_length=500), Msg("a string of 1 to 500 characters")] = (
        "canceled by the domain app"
    )


class ReplayFilter(BaseModel):
    """Which open dead letters to replay: null is the same as leaving a filter out."""

    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"kind": "submit"}]})
    kind: Annotated[Literal[DEAD_LETTER_KINDS] | None, Msg("one of " + ", ".join(DEAD_LETTER_KINDS))] = None  # type: ignore[valid-type]
    fault: Annotated[Literal["caller", "system"] | None, Msg("one of caller, system")] = None
    provider: Annotated[
        str | None, Field(max_length=200, pattern=NO_NUL), Msg("a string of at most 200 characters, no NUL")
    ] = None
    older_than_s: Annotated[Seconds | None, Msg("a whole number, 0 to 1000000000")] = None
    newer_than_s: Annotated[Seconds | None, Msg("a whole number, 0 to 1000000000")] = None
    limit: Annotated[Limit | None, Field(description="null: every match"), Msg("a whole number, 1 to 100000")] = 1000


class Owner(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"owner": "alice"}]})
    owner: Annotated[str, Field(min_length=1, max_length=100), Msg("1 to 100 characters")]


class Note(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"note": "vendor fixed"}]})
    note: Annotated[str | None, Msg("a string")] = None


class Mute(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"by": "alice"}]})
    by: Annotated[str, Field(min_length=1, max_length=100), Msg("who mutes it: 1 to 100 characters")]
    note: Annotated[str | None, Msg("a string")] = None


_CLIENT = Field(description="The client's name: needed only where several clients share the URL or the id.")


class EnableEndpoint(BaseModel):
    model_config = ConfigDict(
        extra="allow", strict=True, json_schema_extra={"examples": [{"url": "https://shop.example/cb"}]}
    )
    url: Annotated[str, Field(max_length=2000, pattern=HTTP_URL), Msg("the disabled endpoint's URL")]
    client: Annotated[Name | None, _CLIENT, Msg("a client's name")] = None


class Attach(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, json_schema_extra={"examples": [{"correlation_id": "o-42"}]})
    correlation_id: Annotated[str, Field(min_length=1), Msg("required")]
    client: Annotated[Name | None, _CLIENT, Msg("a client's name")] = None


class Channel(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"channel": "amqp"}]})
    channel: Annotated[Literal["amqp", "redis"] | None, Msg("amqp, redis or null")]


_PORT = "(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
#: A callback origin's form as ``core.origins.parse_origin`` takes it (which checks it: a 422 naming
#: ``origin``): ``http(s)://host[:port]``, a trailing ``/`` at most, no userinfo.
ORIGIN: dict[str, Any] = {
    "type": "string",
    "maxLength": 2000,
    "pattern": f"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9._~%!$&'()*+,;=-]+(?::{_PORT}?)?/?$",
}
Origins = Annotated[
    str | Annotated[list[str], Field(max_length=100)],
    WithJsonSchema({"anyOf": [ORIGIN, {"type": "array", "items": ORIGIN, "maxItems": 100}]}),
    Msg("a list of scheme://host[:port]"),
]


def as_list(origins: str | list[str]) -> tuple[str, ...]:
    """One origin or a list of them, as a tuple."""
    return (origins,) if isinstance(origins, str) else tuple(origins)


class ChangeOrigins(Body):
    model_config = ConfigDict(json_schema_extra={"examples": [{"add": ["https://shop.example"]}]})
    add: Origins = ()  # type: ignore[assignment]  # none
    remove: Origins = ()  # type: ignore[assignment]


M = TypeVar("M", bound=BaseModel)


def problems(model: type[BaseModel], exc: ValidationError, body: dict[str, Any]) -> list[dict[str, str]]:
    """Pydantic's errors as the API's ``errors``: one per field, in the model's order, with the
    field's fixed message; an unknown member is ``unknown field``, a required one missing (or null)
    ``required``. A field without a ``Msg`` is checked in code, which reports it."""
    out: dict[str, str] = {}
    for error in exc.errors():
        if not error["loc"]:
            continue
        name = str(error["loc"][0])
        if error["type"] == "extra_forbidden":
            out.setdefault(name, "unknown field")
            continue
        info = model.model_fields[name]
        msg = next((m for m in info.metadata if isinstance(m, Msg)), None)
        if msg is None:
            continue
        absent = error["type"] == "missing" or (info.is_required() and body.get(name, 0) is None)
        out.setdefault(name, msg.missing or msg.text if absent else msg.text)
    order = [*sorted(set(out) - set(model.model_fields)), *model.model_fields]
    return [{"field": name, "message": out[name]} for name in order if name in out]


def validated(model: type[M], body: Any, detail: str = "the request has invalid fields") -> M:
    """``body`` (parsed JSON) as ``model``, or a 422 naming every field's problem."""
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ValidationFailed(detail, errors=problems(model, exc, body)) from None


# --- answers: described for the document (app/api/representation.py builds them) ----------------

Stamp = Annotated[datetime | None, Field(description="UTC, ISO 8601; null: not yet.")]


def Enum(values: Any) -> WithJsonSchema:  # reads as a type in an Annotated
    """An answer's closed set of values, as the document states it."""
    return WithJsonSchema({"type": "string", "enum": list(values)})


class Answer(BaseModel):
    """An answer's shape (documented, never validated on the way out: schemathesis checks the real ones)."""


class Waiting(Answer):
    reason: Annotated[str, Enum(sorted(REASONS))]
    description: str
    since: Stamp


class CallbacksWaiting(Answer):
    reason: Annotated[str, Enum([ENDPOINT_PAUSED])]
    description: str
    until: Stamp


class TimelineEntry(Answer):
    """One thing that happened to a task."""

    at: Stamp
    kind: str
    detail: dict[str, Any]


_TASK_EXAMPLE: dict[str, Any] = {
    "correlation_id": "order-42",
    "state": "requested",
    "provider": "simulator",
    "input": {"sku": "A1"},
    "outcome": None,
    "callback_url": "https://hooks.shop.example.com/liaison",
    "acceptance_deadline": None,
    "execution_deadline": "2026-12-07T13:00:00Z",
    "on_deadline": "escalate",
    "heartbeat_timeout_s": None,
    "last_event_at": None,
    "attempts": 0,
    "retrying": False,
    "last_error": None,
    "next_attempt_at": None,
    "priority": 3,
    "concurrency_key": None,
    "waiting": None,
    "created_at": "2026-12-07T12:00:00Z",
    "updated_at": "2026-12-07T12:00:00Z",
}


class Task(Answer):
    """A task as its domain app sees it (never the vendor's job id)."""

    model_config = ConfigDict(json_schema_extra={"examples": [_TASK_EXAMPLE]})
    correlation_id: Annotated[str, Field(pattern=CORRELATION_ID)]
    state: Annotated[str, Enum(STATES)]
    provider: str
    input: dict[str, Any] | str
    outcome: Annotated[Any, Field(description="What the vendor reported on completion; null before.")]
    callback_url: str | None
    acceptance_deadline: Stamp
    execution_deadline: Stamp
    on_deadline: Literal["escalate", "cancel"]
    heartbeat_timeout_s: Annotated[int | None, Field(description="Silence after which the vendor is asked.")]
    last_event_at: Annotated[datetime | None, Field(description="The vendor's last event for this task.")]
    attempts: Annotated[int, Field(ge=0)]
    retrying: Annotated[bool, Field(description="A failed attempt with another one scheduled.")]
    last_error: str | None
    next_attempt_at: Stamp
    priority: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)]
    concurrency_key: str | None
    waiting: Annotated[
        Waiting | None, Field(description="Why the task waits in Liaison to go to the vendor, and since when.")
    ]
    created_at: Stamp
    updated_at: Stamp
    callbacks_waiting: Annotated[
        CallbacksWaiting | None,
        Field(description="GET of one task only: its callback endpoint is paused after failing, until when."),
    ] = None
    timeline: Annotated[
        list[TimelineEntry], Field(description="GET of one task only: the oldest 200 entries at most.", max_length=200)
    ] = []
    timeline_next_cursor: Annotated[
        str | None, Field(description="GET of one task only: the `cursor` that pages on through the timeline.")
    ] = None


class OperatorTask(Task):
    client: str


class Problem(Answer):
    """RFC 9457 problem details; some problems add members (`limit`, `state`)."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "examples": [
                {
                    "type": "about:blank",
                    "title": "Unprocessable Content",
                    "status": 422,
                    "detail": "the task request has invalid fields",
                    "errors": [{"field": "callback_url", "message": "an http(s) URL of at most 2000 characters"}],
                }
            ]
        },
    )

    class FieldProblem(Answer):
        field: str
        message: str

    type: str
    title: str
    status: int
    detail: str = ""
    errors: list[FieldProblem] = []


class DeadLetter(Answer):
    id: int
    kind: Annotated[str, Enum(DEAD_LETTER_KINDS)]
    fault: Literal["caller", "system"]
    state: Literal["open", "replayed", "discarded"]
    message_id: str
    correlation_id: str | None = None
    provider: str | None = None
    error: str
    answer: Annotated[
        str | None, Field(description="What the refusing side answered: 500 characters at most, secrets masked.")
    ] = None
    attempts: int
    replay_count: int
    first_failed_at: Stamp = None
    last_failed_at: Stamp = None
    closed_at: Stamp = None
    payload: dict[str, Any]


class Incident(Answer):
    id: int
    kind: str
    subject: str
    correlation_id: str | None = None
    detail: str
    owner: str | None = None
    opened_at: Stamp
    resolved_at: Stamp


class NotificationMute(Answer):
    kind: str
    muted_by: str
    muted_at: Stamp
    note: str | None


class OrphanEvent(Answer):
    id: int
    source: str
    message_id: str
    vendor_job_id: str
    state: Literal["open", "resolved", "discarded"]
    payload: dict[str, Any]
    received_at: Stamp = None
    resolved_at: Stamp = None


class CallbackEndpoint(Answer):
    id: int
    client: str
    url: str
    disabled_at: Stamp = None
    reason: str | None = None


class EndpointHealth(Answer):
    id: int
    client: str
    origin: str
    state: Literal["failing", "paused", "probing"]
    failures: int
    pauses: int
    paused_until: Stamp = None
    probe_until: Stamp = None
    last_error: str | None = None
    last_failure_at: Stamp = None


class ApiKeyRow(Answer):
    id: int
    prefix: str | None
    state: str
    created_at: Stamp = None
    retired_at: Stamp = None
    revoked_at: Stamp = None


class Client(Answer):
    """A client as operators see it: never a key or a secret, only how many there are."""

    name: str
    callback_url: str | None
    callback_origins: list[str]
    disabled: bool
    disabled_at: Stamp = None
    channel: Annotated[Literal["amqp", "redis"] | None, Field(description="Its broker channel; null: HTTP only.")] = (
        None
    )
    secrets: int
    keys: list[ApiKeyRow]
    weight: Annotated[int, Field(description="Its share of vendor capacity and of dispatch.")] = 1
    default_priority: Annotated[int, Field(ge=MIN_PRIORITY, le=MAX_PRIORITY)] = 3
    concurrency_key_limit: int = 1
    created_at: Stamp = None


class Provider(Answer):
    """One configured provider: its settings only, never a secret."""

    model_config = ConfigDict(extra="forbid")
    name: str
    kind: Literal["rest", "amqp", "http"]
    default: Annotated[bool, Field(description="the provider of a task that names none")]
    base_url: Annotated[str | None, Field(description="without userinfo or query; null for amqp")]
    webhook_scheme: Annotated[str, Enum(SCHEMES)]
    webhook_secrets: Annotated[int, Field(ge=0, description="how many are configured (two while one rotates)")]
    profile: Annotated[str | None, Field(description="an http provider's profile file")]
    poll_schedule_s: Annotated[list[float] | None, Field(description="seconds to the first poll, then between")]
    max_in_flight: Annotated[int, Field(ge=0, description="0: no limit")]
    rate_limit_per_s: float
    rate_limit_burst: Annotated[int, Field(ge=0)]
    call_deadline_s: float
    refusals_metric: Annotated[str, Field(description="where its refused webhooks are counted, by reason")]


class Callback(Answer):
    """A task's callback, POSTed to its callback_url."""

    type: Annotated[str, Enum(sorted({*RELAYED.values(), "task.deadline_exceeded", PROGRESS_CALLBACK}))]
    message_id: Annotated[str, Field(description="Equals `webhook-id`; the same on every retry: deduplicate on it.")]
    correlation_id: str
    sequence: Annotated[
        int,
        Field(
            ge=1,
            description="Its place in the task's order (1, 2, 3 …): delivered in this order, a dead-lettered one "
            "leaving a gap. Keep the highest handled and discard anything lower.",
        ),
    ]
    state: Annotated[str, Enum(STATES), Field(description="The task's state when the event happened.")]
    supersedes: Annotated[
        str | None,
        Field(description=f"On `{COMPLETED_CALLBACK}`: the message_id of an earlier one this one replaces."),
    ]
    outcome: Annotated[Any, Field(description="What the vendor reported; null on deadline and progress events.")]
    occurred_at: datetime
    percent: Annotated[float | None, Field(ge=0, le=100, description=f"`{PROGRESS_CALLBACK}` only.")] = None
    message: Annotated[str | None, Field(max_length=MAX_PROGRESS_MESSAGE, description="Progress only.")] = None
    deadline: Annotated[Literal["acceptance", "execution"], Field(description="Deadline events only.")] = None  # type: ignore[assignment]
    deadline_at: Annotated[datetime, Field(description="`task.deadline_exceeded` only.")] = None  # type: ignore[assignment]
    late_by_s: Annotated[float, Field(description="`task.deadline_exceeded` only.")] = None  # type: ignore[assignment]


REQUESTS: tuple[type[BaseModel], ...] = (
    SubmitTask,
    CancelTask,
    ReplayFilter,
    Owner,
    Note,
    Mute,
    EnableEndpoint,
    Attach,
    Channel,
    ChangeOrigins,
)
ANSWERS: tuple[type[BaseModel], ...] = (
    Task,
    OperatorTask,
    TimelineEntry,
    Problem,
    DeadLetter,
    Incident,
    NotificationMute,
    OrphanEvent,
    CallbackEndpoint,
    EndpointHealth,
    ApiKeyRow,
    Client,
    Provider,
    Callback,
)
