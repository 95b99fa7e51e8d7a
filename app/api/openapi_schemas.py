"""The OpenAPI document's component schemas (``app/api/openapi.py``): what the API takes and
answers. Patterns and limits are imported from the code that enforces them, so the two cannot
drift apart silently."""

from __future__ import annotations

from app.api.openapi_parts import CALLBACK_URL, NO_NUL, STORED_JSON, STRING, TIME, nullable, obj, ref, storable
from app.api.representation import TIMELINE_CAP
from app.api.validation import CONCURRENCY_KEY, CORRELATION_ID, MAX_TIMEOUT_S
from core.fair_share import ENDPOINT_PAUSED, MAX_PRIORITY, MIN_PRIORITY, REASONS
from core.states import State
from models.messages import DEAD_LETTER_KINDS

ID_PATTERN = CORRELATION_ID.pattern
TASK = obj(
    {
        "correlation_id": {"type": "string", "pattern": ID_PATTERN},
        "state": {"enum": [s.value for s in State]},
        "provider": STRING,
        "input": {"type": ["object", "string"]},
        "outcome": {"description": "What the vendor reported on completion; null before."},
        "callback_url": nullable("string"),
        "acceptance_deadline": TIME,
        "execution_deadline": TIME,
        "on_deadline": {"enum": ["escalate", "cancel"]},
        "heartbeat_timeout_s": {
            "type": ["integer", "null"],
            "description": "No vendor event for this long asks the vendor for the job's status; null: none kept.",
        },
        "last_event_at": {**TIME, "description": "When the vendor last sent an event for this task; null before."},
        "attempts": {"type": "integer", "minimum": 0},
        "retrying": {"type": "boolean", "description": "A failed attempt with another one scheduled."},
        "last_error": nullable("string"),
        "next_attempt_at": TIME,
        "priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
        "concurrency_key": nullable("string"),
        "waiting": {
            "oneOf": [
                {"type": "null"},
                obj(
                    {"reason": {"enum": sorted(REASONS)}, "description": STRING, "since": TIME},
                    ("reason", "description", "since"),
                ),
            ],
            "description": "While the task waits in Liaison to go to the vendor: why (the vendor's capacity, an "
            "earlier task with its concurrency key, the client's own earlier or more urgent tasks, the vendor's "
            "rate limit) and since when; null otherwise.",
        },
        "callbacks_waiting": {
            "oneOf": [
                {"type": "null"},
                obj(
                    {"reason": {"enum": [ENDPOINT_PAUSED]}, "description": STRING, "until": TIME},
                    ("reason", "description", "until"),
                ),
            ],
            "description": "Only on GET /api/v1/tasks/{correlation_id}: the task's callback endpoint is paused "
            "after failing, so its callbacks wait (until when, at least); null otherwise.",
        },
        "created_at": TIME,
        "updated_at": TIME,
        "timeline": {
            "type": "array",
            "maxItems": TIMELINE_CAP,
            "description": f"Only on GET /api/v1/tasks/{{correlation_id}}: the oldest {TIMELINE_CAP} entries at most, "
            "oldest first; `timeline_next_cursor` pages on to the rest.",
            "items": ref("TimelineEntry"),
        },
        "timeline_next_cursor": {
            **nullable("string"),
            "description": "Only on GET /api/v1/tasks/{correlation_id}: null when `timeline` is the whole timeline, "
            "else the `cursor` for GET /api/v1/tasks/{correlation_id}/timeline that goes on after its last entry.",
        },
    },
    (
        "correlation_id",
        "state",
        "provider",
        "input",
        "outcome",
        "callback_url",
        "acceptance_deadline",
        "execution_deadline",
        "on_deadline",
        "heartbeat_timeout_s",
        "last_event_at",
        "attempts",
        "retrying",
        "last_error",
        "next_attempt_at",
        "priority",
        "concurrency_key",
        "waiting",
        "created_at",
        "updated_at",
    ),
)

TIMEOUT = {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S}
DEADLINE = {
    "type": "string",
    "format": "date-time",
    "description": "In the future, with an offset. An acceptance deadline (given, or now plus its timeout) must "
    "not be after the execution deadline.",
}
#: each deadline is given as a timeout or as a time, never both (``app.api.validation._deadline``)
EXCLUSIVE = [("acceptance_timeout_s", "acceptance_deadline"), ("execution_timeout_s", "execution_deadline")]
SUBMIT_FIELDS = obj(
    {
        "input": {
            "oneOf": [
                {
                    "type": "object",
                    "propertyNames": {"pattern": NO_NUL},
                    "additionalProperties": ref("StoredJson"),
                },
                {"type": "string", "pattern": NO_NUL},
            ],
            "description": "The work, passed to the vendor as is: an object or a string. At most "
            "LIAISON_MAX_JSON_DEPTH levels deep and LIAISON_MAX_INPUT_BYTES of canonical JSON.",
        },
        "correlation_id": {
            "type": ["string", "null"],
            "pattern": ID_PATTERN,
            "description": "Yours; generated if absent or null.",
        },
        "provider": {
            "type": "string",
            "description": "One of the configured providers (LIAISON_PROVIDERS); optional when exactly one is.",
        },
        "callback_url": {
            **CALLBACK_URL,
            "type": ["string", "null"],
            "description": "http(s); absent or null: the client's default. Must pass the outbound guard and lie "
            "within the client's callback origins, if it has any.",
        },
        "acceptance_timeout_s": {**TIMEOUT, "description": "Or acceptance_deadline, not both."},
        "acceptance_deadline": DEADLINE,
        "execution_timeout_s": {**TIMEOUT, "description": "Or execution_deadline, not both."},
        "execution_deadline": DEADLINE,
        "on_deadline": {"enum": ["escalate", "cancel"], "default": "escalate"},
        "heartbeat_timeout_s": {
            **TIMEOUT,
            "description": "No vendor event for this long (after submission) makes Liaison ask the vendor for "
            "the job's status; a final status is applied, a vendor that does not answer is escalated "
            "(task.deadline_exceeded with deadline heartbeat). Default: the provider's "
            "LIAISON_PROVIDER_<NAME>_HEARTBEAT_TIMEOUT_S, if set.",
        },
        "priority": {
            "type": ["integer", "null"],
            "minimum": MIN_PRIORITY,
            "maximum": MAX_PRIORITY,
            "description": "1 (most urgent) to 5; null or absent: the client's default priority (3 unless set). Orders "
            "the client's own waiting tasks: a task ranks as if created (priority - 1) x "
            "LIAISON_PRIORITY_AGING_S later, so a priority-5 task is never starved. It buys no share of "
            "other clients' capacity.",
        },
        "concurrency_key": {
            "type": ["string", "null"],
            "pattern": CONCURRENCY_KEY.pattern,
            "description": "At most the client's concurrency-key limit (1 unless set) of its tasks with this key "
            "are open at the vendor at once; later ones wait, in order. E.g. a customer account. Null: none.",
        },
    },
    ("input",),
    closed=True,
)
SUBMIT = {
    **storable(SUBMIT_FIELDS),
    "not": {"anyOf": [{"required": list(pair)} for pair in EXCLUSIVE]},
}

DEAD_LETTER = obj(
    {
        "id": {"type": "integer"},
        "kind": {"enum": list(DEAD_LETTER_KINDS)},
        "fault": {"enum": ["caller", "system"]},
        "state": {"enum": ["open", "replayed", "discarded"]},
        "message_id": STRING,
        "correlation_id": nullable("string"),
        "provider": nullable("string"),
        "error": STRING,
        "answer": nullable(
            "string",
            description="What the refusing side (the vendor, or the domain app's endpoint) answered with the"
            " status that dead-lettered the message: at most 500 characters, secret-looking values masked.",
        ),
        "attempts": {"type": "integer"},
        "replay_count": {"type": "integer"},
        "first_failed_at": TIME,
        "last_failed_at": TIME,
        "closed_at": TIME,
        "payload": {"type": "object"},
    },
    ("id", "kind", "fault", "state", "message_id", "error", "attempts", "replay_count", "payload"),
)
INCIDENT = obj(
    {
        "id": {"type": "integer"},
        "kind": STRING,
        "subject": STRING,
        "correlation_id": nullable("string"),
        "detail": STRING,
        "owner": nullable("string"),
        "opened_at": TIME,
        "resolved_at": TIME,
    },
    ("id", "kind", "subject", "detail", "opened_at", "resolved_at"),
)
NOTIFICATION_MUTE = obj(
    {"kind": STRING, "muted_by": STRING, "muted_at": TIME, "note": nullable("string")},
    ("kind", "muted_by", "muted_at", "note"),
)
ORPHAN = obj(
    {
        "id": {"type": "integer"},
        "source": STRING,
        "message_id": STRING,
        "vendor_job_id": STRING,
        "state": {"enum": ["open", "resolved", "discarded"]},
        "payload": {"type": "object"},
        "received_at": TIME,
        "resolved_at": TIME,
    },
    ("id", "source", "message_id", "vendor_job_id", "state", "payload"),
)
ENDPOINT = obj(
    {"id": {"type": "integer"}, "client": STRING, "url": STRING, "disabled_at": TIME, "reason": nullable("string")},
    ("id", "client", "url"),
)
ENDPOINT_HEALTH = obj(
    {
        "id": {"type": "integer"},
        "client": STRING,
        "origin": STRING,
        "state": {"enum": ["failing", "paused", "probing"]},
        "failures": {"type": "integer"},
        "pauses": {"type": "integer"},
        "paused_until": TIME,
        "probe_until": TIME,
        "last_error": nullable("string"),
        "last_failure_at": TIME,
    },
    ("id", "client", "origin", "state", "failures", "pauses"),
)
API_KEY_ROW = obj(
    {
        "id": {"type": "integer"},
        "prefix": nullable("string"),
        "state": STRING,
        "created_at": TIME,
        "retired_at": TIME,
        "revoked_at": TIME,
    },
    ("id", "prefix", "state"),
)
CLIENT = obj(
    {
        "name": STRING,
        "callback_url": nullable("string"),
        "callback_origins": {"type": "array", "items": STRING},
        "disabled": {"type": "boolean"},
        "disabled_at": TIME,
        "channel": {
            "enum": ["amqp", "redis", None],
            "description": "Its broker channel (commands in, events out: /api/v1/asyncapi.yaml); null = HTTP only.",
        },
        "secrets": {"type": "integer"},
        "keys": {"type": "array", "items": ref("ApiKeyRow")},
        "weight": {"type": "integer", "description": "Its share of vendor capacity and of dispatch (1 unless set)."},
        "default_priority": {"type": "integer", "minimum": MIN_PRIORITY, "maximum": MAX_PRIORITY},
        "concurrency_key_limit": {"type": "integer", "description": "Its tasks with one concurrency key open at once."},
        "created_at": TIME,
    },
    ("name", "callback_url", "callback_origins", "disabled", "secrets", "keys"),
)
PROBLEM_SCHEMA = {
    "type": "object",
    "description": "RFC 9457 problem details; some problems add members (`limit`, `state`).",
    "properties": {
        "type": STRING,
        "title": STRING,
        "status": {"type": "integer"},
        "detail": STRING,
        "errors": {"type": "array", "items": obj({"field": STRING, "message": STRING}, ("field", "message"))},
    },
    "required": ["type", "title", "status"],
}

#: one thing that happened to a task, as its timeline shows it
TIMELINE_ENTRY = obj({"at": TIME, "kind": STRING, "detail": {"type": "object"}}, ("at", "kind", "detail"))

SCHEMAS = {
    "Task": TASK,
    "TimelineEntry": TIMELINE_ENTRY,
    "SubmitTask": SUBMIT,
    "StoredJson": STORED_JSON,
    "Problem": PROBLEM_SCHEMA,
    "DeadLetter": DEAD_LETTER,
    "Incident": INCIDENT,
    "NotificationMute": NOTIFICATION_MUTE,
    "OrphanEvent": ORPHAN,
    "CallbackEndpoint": ENDPOINT,
    "EndpointHealth": ENDPOINT_HEALTH,
    "ApiKeyRow": API_KEY_ROW,
    "Client": CLIENT,
}
