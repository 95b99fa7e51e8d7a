"""The building blocks of the OpenAPI document (``app/api/openapi.py``): shared responses,
parameters and schemas, and a helper that makes one operation. The component schemas are in
``app/api/openapi_schemas.py``, the operators' paths in ``openapi_admin.py`` and ``openapi_clients.py``.

Kept by hand, next to the hand-written validation it describes (``app/api/validation.py``,
which reports every field problem at once as problem+json), and held to the code twice:
``tests/unit/test_openapi.py`` checks that every Flask route under those prefixes is documented and
every documented path is a route, and ``tests/integration/test_conformance.py`` runs schemathesis
against the real server (no 5xx, every response as documented). Patterns and limits are imported
from the code that enforces them, so the two cannot drift apart silently.
"""

from __future__ import annotations

from typing import Any

from app.api.representation import CURSOR_OR_EMPTY, MAX_ID
from app.api.validation import IDEMPOTENCY_KEY

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
    503: (
        "ServiceUnavailable",
        "The database or the broker is not answering (restarting), or the database's migrations have not "
        "run (`detail` names `liaison db upgrade`); ask again after Retry-After.",
    ),
}


#: No string a request carries may hold U+0000: PostgreSQL text cannot store it, and
#: ``wire.bounded_json.strict_loads`` refuses a JSON body with one anywhere, keys included (400).
NO_NUL = "^[^\\x00]*$"
#: Any JSON value the API can store (``StoredJson``): what free-form fields (a task's ``input``) and
#: the members a body may carry besides its documented ones can hold.
STORED_JSON: Schema = {
    "description": "Any JSON value without U+0000 in a string or an object key (PostgreSQL cannot store it; "
    "a body holding one anywhere is a 400).",
    "anyOf": [
        {"type": ["null", "boolean", "number"]},
        {"type": "string", "pattern": NO_NUL},
        {"type": "array", "items": {"$ref": "#/components/schemas/StoredJson"}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": "#/components/schemas/StoredJson"},
        },
    ],
}


#: An http(s) URL as ``app.api.validation.is_http_url`` takes it: a scheme, an ASCII authority (an
#: IPv6 literal or a non-ASCII host is taken too, but not described here), then anything without NUL.
HTTP_URL: Schema = {
    "type": "string",
    "maxLength": 2000,
    "pattern": "^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9._~%!$&'()*+,;=:@-]+(?:[/?#][^\\x00]*)?$",
}
_PORT = "(?:[0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_PORT_1 = "(?:[1-9][0-9]{0,3}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
_LABEL = "[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_OCTET = "(?:25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
#: A callback URL of the form the outbound guard takes offline (``core.outbound_guard.parse_target``):
#: printable ASCII without space or backslash, no userinfo, a port 1 to 65535, and a host that is a
#: name of at most three DNS labels (its last not a number, so within 253 characters) or a dotted
#: IPv4 address (other address spellings are judged too, but not described here). Where it may
#: point (a public address, within the client's origins) only the server knows.
CALLBACK_URL: Schema = {
    "type": "string",
    "maxLength": 2000,
    "pattern": f"^[Hh][Tt][Tt][Pp][Ss]?://(?:(?:{_LABEL}\\.){{0,2}}[A-Za-z_](?:[A-Za-z0-9_-]{{0,61}}[A-Za-z0-9_])?\\.?"
    f"|{_OCTET}(?:\\.{_OCTET}){{3}})(?::{_PORT_1})?(?:[/?#][!-\\[\\]-~]*)?$",
}
#: A callback origin as ``core.origins.parse_origin`` takes it: ``http(s)://host[:port]``, a trailing
#: ``/`` at most, no userinfo (an IPv6 literal or a non-ASCII host is taken too, but not described).
ORIGIN: Schema = {
    "type": "string",
    "maxLength": 2000,
    "pattern": f"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9._~%!$&'()*+,;=-]+(?::{_PORT}?)?/?$",
}


def storable(schema: Schema) -> Schema:
    """A request body's schema saying what the server refuses in any body (a copy): no string holds
    U+0000, and an open object's other members are ``StoredJson`` under keys without it. A ``$ref``
    is left as it is (its target says so itself)."""
    if not isinstance(schema, dict) or "$ref" in schema:
        return schema
    out = dict(schema)
    kinds = out.get("type", [])
    kinds = [kinds] if isinstance(kinds, str) else kinds
    if "string" in kinds and not {"pattern", "enum", "const"} & out.keys():
        out["pattern"] = NO_NUL
    if "object" in kinds:
        if "properties" in out:
            out["properties"] = {k: storable(v) for k, v in out["properties"].items()}
        if out.get("additionalProperties") is not False:
            out["propertyNames"] = {"pattern": NO_NUL}
            out.setdefault("additionalProperties", {"$ref": "#/components/schemas/StoredJson"})
    if "items" in out:
        out["items"] = storable(out["items"])
    for key in ("oneOf", "anyOf", "allOf"):
        if key in out:
            out[key] = [storable(s) for s in out[key]]
    return out


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


def _error_response(status: int) -> Schema:
    description = ERRORS[status][1]
    response: Schema = {"description": description, "content": {PROBLEM: {"schema": ref("Problem")}}}
    if status == 401:
        response["headers"] = {"WWW-Authenticate": {"schema": {"const": "Bearer"}, "required": True}}
    if status in (429, 503):
        when = "when a slot frees (submit_rate)" if status == 429 else "before asking again"
        response["headers"] = {
            "Retry-After": {
                "description": f"Whole seconds, {when}.",
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
#: W3C Trace Context: any value is taken (an invalid one is ignored, as the recommendation says)
TRACEPARENT = {
    "name": "traceparent",
    "in": "header",
    "required": False,
    "schema": {"type": "string"},
    "description": "W3C Trace Context (`00-<trace id>-<parent id>-<flags>`): the task's trace, continued by "
    "every call, webhook and callback Liaison makes for it. An invalid value is ignored, never refused.",
}
ROW_ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
CURSOR_PARAM = {
    "name": "cursor",
    "in": "query",
    "required": False,
    "schema": {"type": "string", "pattern": CURSOR_OR_EMPTY},
    "description": f"`next_cursor` of the previous page, passed back as it came: `t` and a row id, 1 to {MAX_ID - 1} "
    "(empty: the first page).",
}
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
        security, shared = [{API_KEY: []}], (401, 403, 503)
    elif tag == "contract":
        security, shared = [], ()
    else:
        security, shared = [{ADMIN: []}], (401, 404, 503)
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
        # A body with required members is itself required: without one, those members are missing (422).
        required = body_required or bool(body.get("required"))
        operation["requestBody"] = {"required": required, "content": {JSON: {"schema": storable(body)}}}
    return operation


# --- shared by the operations of several modules ---
CORRELATION = path("correlation_id", {"type": "string"})
TEXT_FILTER = {"type": "string", "maxLength": 200, "pattern": NO_NUL}
CLIENT_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 100,
    "pattern": NO_NUL,
    "description": "Needed only where several clients share the name (a correlation id, a URL).",
}
NAME = path("name", {"type": "string"})
#: a bulk replay's answer: the counts, and what it did about letters of the caller's fault
REPLAY_COUNTS = obj(
    {
        "replayed": {"type": "integer"},
        "skipped": {"type": "integer"},
        "caller_fault": {
            "type": "integer",
            "description": "Open letters of the caller's fault the filter matched: replayed only when the filter"
            " names fault=caller, otherwise left open.",
        },
        "caller_fault_replayed": {"type": "boolean"},
        "warning": nullable("string", description="Why replaying letters of the caller's fault rarely helps."),
    },
    ("replayed", "skipped", "caller_fault", "caller_fault_replayed", "warning"),
)
OPERATOR_TASK = {"allOf": [ref("Task"), obj({"client": STRING}, ("client",))]}
NO_STORE = {"Cache-Control": {"schema": {"const": "no-store"}, "required": True}}


def page(item: Schema) -> Schema:
    return obj(
        {"items": {"type": "array", "items": item}, "next_after_id": nullable("integer")}, ("items", "next_after_id")
    )
