"""The building blocks of the OpenAPI document (``app/api/openapi.py``): schemas of what the API
takes and answers, shared responses, and a helper that makes one operation.

Kept by hand, next to the hand-written validation it describes (``app/api/validation.py``,
which reports every field problem at once as problem+json), and held to the code twice:
``tests/unit/test_openapi.py`` checks that every Flask route under those prefixes is documented and
every documented path is a route, and ``tests/integration/test_conformance.py`` runs schemathesis
against the real server (no 5xx, every response as documented). Patterns and limits are imported
from the code that enforces them, so the two cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

from app.api.representation import MAX_ID
from app.api.validation import CORRELATION_ID, IDEMPOTENCY_KEY, MAX_TIMEOUT_S
from core.states import State
from models.messages import DEAD_LETTER_KINDS

Schema = dict[str, Any]

API_KEY, ADMIN = "ApiKey", "AdminToken"
JSON, PROBLEM = "application/json", "application/problem+json"
STRING = {"type": "string"}
TIME = {"type": ["string", "null"], "format": "date-time"}
ERRORS = {
    400: ("BadRequest", "Malformed: the body is not JSON, or a cursor this API did not give out."),
    401: ("Unauthorized", "No bearer token, or one that is unknown, retired or revoked."),
    403: ("Forbidden", "The client is disabled; its work in flight still finishes."),
    404: ("NotFound", "No such resource (or one of another client). On /admin/v1: also the admin API off."),
    409: ("Conflict", "The resource's state forbids it (a final task, a replayed dead letter, a key reused)."),
    413: ("PayloadTooLarge", "The body is larger than LIAISON_MAX_BODY_BYTES."),
    415: ("UnsupportedMediaType", "A body that is not application/json."),
    422: ("ValidationFailed", "Field problems, all at once, in `errors`."),
    429: ("TooManyRequests", "A limit: `limit` is `submit_rate` (with Retry-After) or `max_open_tasks`."),
}


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = (), *, closed: bool = False) -> Schema:
    schema: Schema = {"type": "object", "properties": properties, "required": list(required)}
    if closed:
        schema["additionalProperties"] = False
    return schema


def nullable(kind: str, **extra: Any) -> Schema:
    return {"type": [kind, "null"], **extra}


def page_of(item: str, cursor: str) -> Schema:
    cursor_schema = nullable("integer") if cursor == "next_after_id" else nullable("string")
    return obj(
        {
            "items" if cursor == "next_after_id" else "tasks": {"type": "array", "items": ref(item)},
            cursor: cursor_schema,
        },
        ("items" if cursor == "next_after_id" else "tasks", cursor),
    )


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
        "attempts": {"type": "integer", "minimum": 0},
        "retrying": {"type": "boolean", "description": "A failed attempt with another one scheduled."},
        "last_error": nullable("string"),
        "next_attempt_at": TIME,
        "created_at": TIME,
        "updated_at": TIME,
        "timeline": {
            "type": "array",
            "description": "Only on GET /api/v1/tasks/{correlation_id}.",
            "items": obj({"at": TIME, "kind": STRING, "detail": {"type": "object"}}, ("at", "kind", "detail")),
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
        "attempts",
        "retrying",
        "last_error",
        "next_attempt_at",
        "created_at",
        "updated_at",
    ),
)

TIMEOUT = {"type": "integer", "minimum": 1, "maximum": MAX_TIMEOUT_S}
SUBMIT = obj(
    {
        "input": {
            "type": ["object", "string"],
            "description": "The work, passed to the vendor as is. At most "
            "LIAISON_MAX_JSON_DEPTH levels deep and LIAISON_MAX_INPUT_BYTES of canonical JSON.",
        },
        "correlation_id": {"type": "string", "pattern": ID_PATTERN, "description": "Yours; generated if absent."},
        "provider": {"type": "string", "description": "Optional when exactly one provider is configured."},
        "callback_url": {
            "type": "string",
            "format": "uri",
            "maxLength": 2000,
            "description": "http(s); default: the client's. Must pass the outbound guard and lie "
            "within the client's callback origins, if it has any.",
        },
        "acceptance_timeout_s": TIMEOUT,
        "acceptance_deadline": {"type": "string", "format": "date-time"},
        "execution_timeout_s": TIMEOUT,
        "execution_deadline": {"type": "string", "format": "date-time"},
        "on_deadline": {"enum": ["escalate", "cancel"], "default": "escalate"},
    },
    ("input",),
    closed=True,
)

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
        "secrets": {"type": "integer"},
        "keys": {"type": "array", "items": ref("ApiKeyRow")},
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

SCHEMAS = {
    "Task": TASK,
    "SubmitTask": SUBMIT,
    "Problem": PROBLEM_SCHEMA,
    "DeadLetter": DEAD_LETTER,
    "Incident": INCIDENT,
    "OrphanEvent": ORPHAN,
    "CallbackEndpoint": ENDPOINT,
    "ApiKeyRow": API_KEY_ROW,
    "Client": CLIENT,
}


def _error_response(status: int) -> Schema:
    description = ERRORS[status][1]
    response: Schema = {"description": description, "content": {PROBLEM: {"schema": ref("Problem")}}}
    if status == 401:
        response["headers"] = {"WWW-Authenticate": {"schema": {"const": "Bearer"}, "required": True}}
    if status == 429:
        response["headers"] = {
            "Retry-After": {
                "description": "Whole seconds, when a slot frees (submit_rate).",
                "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"},
            }
        }
    return response


def ok(description: str, schema: Schema, **headers: Schema) -> Schema:
    response: Schema = {"description": description, "content": {JSON: {"schema": schema}}}
    if headers:
        response["headers"] = headers
    return response


def query(name: str, schema: Schema, description: str = "", *, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def path(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}


IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": IDEMPOTENCY_KEY.pattern},
    "description": "The request's MessageId: the same key and body again is the same request.",
}
ROW_ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
LIMIT = query("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50})
AFTER_ID = query("after_id", {"type": "integer", "minimum": 0, "maximum": MAX_ID}, "`next_after_id` of the last page")


def op(
    operation_id: str,
    summary: str,
    responses: dict[int, Schema | None],
    *,
    tag: str,
    params: tuple[Schema, ...] = (),
    body: Schema | None = None,
    body_required: bool = False,
    description: str = "",
) -> Schema:
    """One operation. ``None`` in ``responses`` means the shared problem response for that status;
    the statuses every operation of its API can answer (auth) are added here."""
    security: list[dict[str, list[str]]]
    shared: tuple[int, ...]
    if tag == "tasks":
        security, shared = [{API_KEY: []}], (401, 403)
    elif tag == "contract":
        security, shared = [], ()
    else:
        security, shared = [{ADMIN: []}], (401, 404)
    if body is not None:
        shared += (400, 413, 415, 422)
    merged = {**dict.fromkeys(shared), **responses}
    operation: Schema = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [tag],
        "security": security,
        "responses": {
            str(s): (r if r is not None else {"$ref": f"#/components/responses/{ERRORS[s][0]}"})
            for s, r in sorted(merged.items())
        },
    }
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = list(params)
    if body is not None:
        operation["requestBody"] = {"required": body_required, "content": {JSON: {"schema": body}}}
    return operation
