"""The HTTP contract as an OpenAPI 3.1 document: the domain apps' API (``/api/v1``) and the
operators' API (``/admin/v1``), served at ``GET /api/v1/openapi.json`` and read at ``/api/v1/docs``
(``app/api/reference.py``).

Its schemas are generated from the models the views validate with (``app/api/contract.py``): one
source, so the document cannot drift from the server's checks. What is written here is what no
model holds: the operations (paths, parameters, statuses), their examples, and the shared problem
answers. Held to the code three ways: ``tests/unit/test_openapi.py`` (every route documented, every
documented operation a route), ``tests/middle/test_contract_agreement.py`` (the document takes a
value exactly when the server does) and ``tests/integration/test_conformance.py`` (schemathesis
against the real server: no 5xx, every answer as documented).
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, models_json_schema

from app.api import contract as c
from app.api.representation import CURSOR_OR_EMPTY, MAX_ID, TIMELINE_CAP, TIMELINE_MAX_LIMIT
from app.version import VERSION
from core.states import State
from models.messages import DEAD_LETTER_KINDS
from service.incidents import IncidentKind

Schema = dict[str, Any]
API_KEY, ADMIN = "ApiKey", "AdminToken"
JSON, PROBLEM = "application/json", "application/problem+json"
STRING: Schema = {"type": "string"}
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
        "The database or the broker is not answering, or the migrations have not run (`detail` names "
        "`liaison db upgrade`); ask again after Retry-After.",
    ),
}
#: Any JSON value the API can store: what a task's ``input`` and the members a body may carry besides
#: its documented ones can hold (``wire.bounded_json`` refuses U+0000 anywhere in a body: 400).
STORED_JSON: Schema = {
    "description": "Any JSON value without U+0000 in a string or an object key (a body holding one is a 400).",
    "anyOf": [
        {"type": ["null", "boolean", "number"]},
        {"type": "string", "pattern": c.NO_NUL},
        {"type": "array", "items": {"$ref": "#/components/schemas/StoredJson"}},
        {
            "type": "object",
            "propertyNames": {"pattern": c.NO_NUL},
            "additionalProperties": {"$ref": "#/components/schemas/StoredJson"},
        },
    ],
}
#: what each path parameter looks like in the examples
EXAMPLE_PARAMS = {
    "correlation_id": "order-42",
    "name": "shop",
    "key": "1",
    "kind": IncidentKind.ALL[0],
    **dict.fromkeys(("letter_id", "incident_id", "orphan_id"), "1"),
}


class _Generator(GenerateJsonSchema):
    """Pydantic's JSON Schema without a title on every property (the document's names say it), its
    members in the order the models declare them (the reader's order), not sorted."""

    def field_title_should_be_set(self, schema: Any) -> bool:
        return False

    def sort(self, value: Any, parent_key: str | None = None) -> Any:
        return value


def ref(name: str) -> Schema:
    return {"$ref": f"#/components/schemas/{name}"}


def storable(schema: Any) -> Any:
    """A request body's schema saying what the parser refuses in any body (a copy): no string holds
    U+0000, and an open object's other members are ``StoredJson`` under keys without it."""
    if isinstance(schema, list):
        return [storable(s) for s in schema]
    if not isinstance(schema, dict) or "$ref" in schema:
        return schema
    out = {k: storable(v) if k in ("properties", "items", "anyOf", "oneOf", "allOf") else v for k, v in schema.items()}
    if "properties" in schema:
        out["properties"] = {k: storable(v) for k, v in schema["properties"].items()}
    if out.get("type") == "string" and not {"pattern", "enum", "const"} & out.keys():
        out["pattern"] = c.NO_NUL
    if out.get("type") == "object" and out.get("additionalProperties") is not False:
        out["propertyNames"] = {"pattern": c.NO_NUL}
        if out.get("additionalProperties") in (None, True):
            out["additionalProperties"] = ref("StoredJson")
    return out


def _tidy(value: Any) -> Any:
    """Drop pydantic's ``"default": null`` (absent says the same) wherever it appears."""
    if isinstance(value, dict):
        return {k: _tidy(v) for k, v in value.items() if not (k == "default" and v is None)}
    return [_tidy(v) for v in value] if isinstance(value, list) else value


@cache
def schemas() -> dict[str, Schema]:
    """The component schemas: the contract's models, requests as the parser reads them."""
    models = [(m, "validation") for m in c.REQUESTS] + [(m, "serialization") for m in c.ANSWERS]
    _, defs = models_json_schema(
        models,  # type: ignore[arg-type]  # pydantic's own literal modes
        ref_template="#/components/schemas/{model}",
        schema_generator=_Generator,
    )
    requests = {m.__name__ for m in c.REQUESTS}
    out = {name: storable(s) if name in requests else s for name, s in _tidy(defs["$defs"]).items()}
    return {**out, "StoredJson": STORED_JSON}


def _example(schema: Schema) -> Any:
    target = schemas().get(schema.get("$ref", "").rsplit("/", 1)[-1], schema)
    return (target.get("examples") or [None])[0]


def ok(description: str, schema: Schema, **headers: Schema) -> Schema:
    content: Schema = {"schema": schema}
    if (example := _example(schema)) is not None:
        content["example"] = example
    response: Schema = {"description": description, "content": {JSON: content}}
    if headers:
        response["headers"] = headers
    return response


def query(name: str, schema: Schema, description: str = "", *, required: bool = False) -> Schema:
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": description}


def path(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema, "example": EXAMPLE_PARAMS[name]}


def obj(properties: dict[str, Schema], required: tuple[str, ...] = ()) -> Schema:
    return {"type": "object", "properties": properties, "required": list(required)}


def items(item: Schema, cursor: str | None = "next_after_id") -> Schema:
    """A list answer: ``items``, and the cursor of the next page when it is paged."""
    props: dict[str, Schema] = {"items": {"type": "array", "items": item}}
    if cursor:
        props[cursor] = {"type": ["integer", "null"]}
    return obj(props, tuple(props))


def _curl(method: str, route: str, operation: Schema, body: Schema | None) -> str:
    """The operation as one ``curl`` command: its example request."""
    url = "http://localhost:5000" + re.sub(r"\{(\w+)\}", lambda m: str(EXAMPLE_PARAMS[m[1]]), route)
    lines = [f"curl -X {method.upper()} '{url}'"]
    for scheme, variable in ((API_KEY, "LIAISON_API_KEY"), (ADMIN, "LIAISON_ADMIN_TOKEN")):
        if {scheme: []} in operation["security"]:
            lines.append(f'-H "Authorization: Bearer ${variable}"')
    if body is not None and (example := _example(body)) is not None:
        lines += ["-H 'Content-Type: application/json'", f"-d '{json.dumps(example)}'"]
    return " \\\n  ".join(lines)


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
    """One operation. ``None`` in ``responses`` is the shared problem answer for that status; the
    statuses every operation of its API can answer (auth, a body's problems) are added here."""
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
            str(s): r if r is not None else {"$ref": f"#/components/responses/{ERRORS[s][0]}"}
            for s, r in sorted(merged.items())
        },
    }
    if description:
        operation["description"] = description
    if params:
        operation["parameters"] = list(params)
    if body is not None:
        # A body with required members is itself required: without one, those members are missing (422).
        target = schemas().get(body.get("$ref", "").rsplit("/", 1)[-1], body)
        required = body_required or bool(target.get("required"))
        content: Schema = {"schema": body}
        if (example := _example(body)) is not None:
            content["example"] = example
        operation["requestBody"] = {"required": required, "content": {JSON: content}}
    return operation


def _sampled(document: Schema) -> Schema:
    """Every operation gets its example request as a ``curl`` command (``x-codeSamples``)."""
    for route, item in document["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody", {}).get("content", {}).get(JSON, {}).get("schema")
            operation["x-codeSamples"] = [
                {"lang": "curl", "label": "curl", "source": _curl(method, route, operation, body)}
            ]
    return document


IDEMPOTENCY = {
    "name": "Idempotency-Key",
    "in": "header",
    "required": False,
    "schema": {"type": "string", "pattern": c.PRINTABLE},
    "description": "The request's MessageId: the same key and body again is the same request.",
}
CANCEL_KEY = {
    **IDEMPOTENCY,
    "description": "Bound to the task it first canceled: the same key on that task again is the same request "
    "(202, nothing more done); on another of the client's tasks it is a 409.",
}
TRACEPARENT = query("traceparent", STRING) | {
    "in": "header",
    "description": "W3C Trace Context: the task's trace, continued by every call, webhook and callback Liaison "
    "makes for it. An invalid value is ignored, never refused.",
}
CURSOR = query(
    "cursor",
    {"type": "string", "pattern": CURSOR_OR_EMPTY},
    f"`next_cursor` of the previous page, as it came: `t` and a row id, 1 to {MAX_ID - 1} (empty: the first page).",
)
CORRELATION = path("correlation_id", STRING)
ROW_ID = {"type": "integer", "minimum": 0, "maximum": MAX_ID}
LIMIT = query("limit", {"type": "integer", "minimum": 1, "maximum": 500, "default": 50})
AFTER_ID = query("after_id", ROW_ID, "`next_after_id` of the last page")
NO_STORE = {"Cache-Control": {"schema": {"const": "no-store"}, "required": True}}
TASK_PAGE = obj({"tasks": {"type": "array", "items": ref("Task")}, "next_cursor": {"type": ["string", "null"]}})


def _tasks() -> dict[str, Schema]:
    task = ok("The task.", ref("Task"))
    timeline = obj(
        {
            "timeline": {"type": "array", "maxItems": TIMELINE_MAX_LIMIT, "items": ref("TimelineEntry")},
            "next_cursor": {"type": ["string", "null"]},
        },
        ("timeline", "next_cursor"),
    )
    return {
        "/api/v1/tasks": {
            "post": op(
                "submitTask",
                "Submit a task",
                {
                    202: ok(
                        "Accepted: the task, stored with its submit work (transactional outbox).",
                        ref("Task"),
                        Location={"schema": STRING, "required": True, "description": "/api/v1/tasks/{correlation_id}"},
                    ),
                    200: ok("The same request again (same Idempotency-Key and body, or correlation_id).", ref("Task")),
                    409: None,
                    429: None,
                },
                tag="tasks",
                params=(IDEMPOTENCY, TRACEPARENT),
                body=ref("SubmitTask"),
                body_required=True,
                description="The rate limit is taken before the body is read, so junk counts too.",
            ),
            "get": op(
                "listTasks",
                "List the client's tasks, newest first",
                {
                    200: ok(
                        "One page; `next_cursor` is null on the last.",
                        TASK_PAGE | {"required": ["tasks", "next_cursor"]},
                    ),
                    400: None,
                    422: None,
                },
                tag="tasks",
                params=(
                    query("state", {"enum": [s.value for s in State]}),
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
                    CURSOR,
                ),
            ),
        },
        "/api/v1/tasks/{correlation_id}": {
            "get": op(
                "getTask",
                "A task: state, deadlines, outcome and the start of its timeline",
                {200: task, 404: None},
                tag="tasks",
                params=(CORRELATION,),
                description=f"`timeline` holds the oldest {TIMELINE_CAP} entries at most; when there are more, "
                "`timeline_next_cursor` is the `cursor` for GET /api/v1/tasks/{correlation_id}/timeline.",
            )
        },
        "/api/v1/tasks/{correlation_id}/timeline": {
            "get": op(
                "getTaskTimeline",
                "A task's timeline, a page at a time, oldest first",
                {
                    200: ok("One page; `next_cursor` is null on the last (for now).", timeline),
                    400: None,
                    404: None,
                    422: None,
                },
                tag="tasks",
                params=(
                    CORRELATION,
                    query(
                        "limit",
                        {"type": "integer", "minimum": 1, "maximum": TIMELINE_MAX_LIMIT, "default": TIMELINE_CAP},
                    ),
                    CURSOR | {"description": "`timeline_next_cursor` or a page's `next_cursor` (empty: the start)."},
                ),
            )
        },
        "/api/v1/tasks/{correlation_id}/cancel": {
            "post": op(
                "cancelTask",
                "Ask for cancellation",
                {
                    202: ok("Asked: the task ends `canceled` once the vendor confirms.", ref("Task")),
                    404: None,
                    409: None,
                },
                tag="tasks",
                params=(CORRELATION, CANCEL_KEY),
                body=ref("CancelTask"),
                description="409 when the task is already final (the problem names its `state`), or when the "
                "Idempotency-Key already canceled another task of the client (`errors` names `Idempotency-Key`).",
            )
        },
        "/api/v1/openapi.json": {
            "get": op(
                "openapi",
                "This document",
                {200: {"description": "OpenAPI 3.1", "content": {JSON: {"schema": {"type": "object"}}}}},
                tag="contract",
            )
        },
        "/api/v1/asyncapi.yaml": {
            "get": op(
                "asyncapi",
                "The AsyncAPI 3.0 document of the broker channels",
                {
                    200: {
                        "description": "Commands and events over RabbitMQ and Redis Streams (YAML).",
                        "content": {"application/yaml": {"schema": {"type": "object"}}},
                    },
                    404: None,
                },
                tag="contract",
            )
        },
        "/api/v1/docs": {
            "get": op(
                "docs",
                "This document as a page",
                {
                    200: {
                        "description": "The API reference (Redoc, served by Liaison itself: nothing from elsewhere).",
                        "content": {"text/html": {"schema": STRING}},
                    }
                },
                tag="contract",
            )
        },
    }


# fmt: off
def _admin() -> dict[str, Schema]:
    letter, incident, orphan, mute = ref("DeadLetter"), ref("Incident"), ref("OrphanEvent"), ref("NotificationMute")
    seconds = {"type": "integer", "minimum": 0, "maximum": 10**9}
    text = {"type": "string", "maxLength": 200, "pattern": c.NO_NUL}
    filters = (query("provider", text), query("older_than_s", seconds), query("newer_than_s", seconds))
    letter_id, incident_id, orphan_id = (path(name, ROW_ID) for name in ("letter_id", "incident_id", "orphan_id"))
    kind = path("kind", {"enum": list(IncidentKind.ALL)})
    states = ["open", "replayed", "discarded", "all"]
    replayed = obj(
        {"replayed": {"type": "integer"}, "skipped": {"type": "integer"},
         "caller_fault": {"type": "integer", "description": "Open caller-fault letters matched."},
         "caller_fault_replayed": {"type": "boolean"}, "warning": {"type": ["string", "null"]}},
        ("replayed", "skipped", "caller_fault", "caller_fault_replayed", "warning"),
    )
    enabled = obj({"url": STRING, "client": {"type": ["string", "null"]}, "released": {"type": "integer"}},
                  ("url", "client", "released"))
    queued = obj({"queued": {"const": True}, "celery_task_id": STRING}, ("queued", "celery_task_id"))
    dl, inc, nm, ce, orph = "dead letters", "incidents", "notifications", "callback endpoints", "orphans"
    return {
        "/admin/v1/dead-letters": {"get": op(
            "listDeadLetters", "Dead letters, oldest first", {200: ok("One page.", items(letter)), 422: None}, tag=dl,
            params=(query("state", {"enum": states, "default": "open"}),
                    query("kind", {"enum": list(DEAD_LETTER_KINDS)}), query("fault", {"enum": ["caller", "system"]}),
                    *filters, LIMIT, AFTER_ID))},
        "/admin/v1/dead-letters/{letter_id}": {"get": op(
            "getDeadLetter", "One dead letter", {200: ok("The dead letter.", letter)}, tag=dl, params=(letter_id,))},
        "/admin/v1/dead-letters/{letter_id}/replay": {"post": op(
            "replayDeadLetter", "Replay, same MessageId", {202: ok("Re-enqueued.", letter), 409: None}, tag=dl,
            params=(letter_id,))},
        "/admin/v1/dead-letters/{letter_id}/discard": {"post": op(
            "discardDeadLetter", "Discard", {200: ok("Discarded.", letter), 409: None}, tag=dl, params=(letter_id,))},
        "/admin/v1/dead-letters/replay": {"post": op(
            "replayDeadLetters", "Replay every open match",
            {202: ok("How many were replayed, and skipped; letters of the caller's fault stay open unless the filter "
                     "names fault=caller.", replayed)}, tag=dl, body=ref("ReplayFilter"))},
        "/admin/v1/incidents": {"get": op(
            "listIncidents", "Incidents, oldest first", {200: ok("One page.", items(incident)), 422: None}, tag=inc,
            params=(query("state", {"enum": ["open", "resolved", "all"], "default": "open"}), query("kind", text),
                    LIMIT, AFTER_ID))},
        "/admin/v1/incidents/{incident_id}/assign": {"post": op(
            "assignIncident", "Give an incident an owner", {200: ok("The incident.", incident)}, tag=inc,
            params=(incident_id,), body=ref("Owner"))},
        "/admin/v1/incidents/{incident_id}/resolve": {"post": op(
            "resolveIncident", "Resolve an incident", {200: ok("The incident.", incident)}, tag=inc,
            params=(incident_id,), body=ref("Note"))},
        "/admin/v1/notification-mutes": {"get": op(
            "listNotificationMutes", "Incident kinds whose notifications are muted",
            {200: ok("Every mute.", items(mute, None))}, tag=nm)},
        "/admin/v1/notification-mutes/{kind}": {
            "put": op(
                "muteNotifications", "Mute an incident kind's notifications",
                {200: ok("It was muted already: the first mute is kept.", mute), 201: ok("Muted.", mute), 422: None},
                tag=nm, params=(kind,), body=ref("Mute"), body_required=True,
                description="Its notices are still recorded (marked muted), never sent; incidents open as before."),
            "delete": op(
                "unmuteNotifications", "Unmute an incident kind", {204: {"description": "Unmuted."}, 422: None},
                tag=nm, params=(kind,)),
        },
        "/admin/v1/callback-endpoints": {"get": op(
            "listCallbackEndpoints", "Disabled callback endpoints",
            {200: ok("Every disabled endpoint.", items(ref("CallbackEndpoint"), None))}, tag=ce)},
        "/admin/v1/callback-endpoints/health": {"get": op(
            "listEndpointHealth", "Failing, paused and probing callback endpoints",
            {200: ok("Each callback origin that failed its last delivery; each resumes when a probe succeeds.",
                     items(ref("EndpointHealth"), None))}, tag=ce)},
        "/admin/v1/callback-endpoints/enable": {"post": op(
            "enableCallbackEndpoint", "Re-enable an endpoint",
            {202: ok("Enabled; its parked callbacks were released.", enabled), 409: None}, tag=ce,
            body=ref("EnableEndpoint"))},
        "/admin/v1/providers": {"get": op(
            "listProviders", "The configured providers",
            {200: ok("Each provider, by name.", items(ref("Provider"), None))}, tag="providers",
            description="From the settings: its adapter's kind, how its webhooks prove themselves, its profile, "
            "poll schedule and limits. Never a secret: only how many webhook secrets are configured.")},
        "/admin/v1/tasks": {"get": op(
            "listRetryingTasks", "Tasks retrying right now, across clients",
            {200: ok("One page.", items(ref("OperatorTask"))), 422: None}, tag="tasks (operators)",
            params=(query("retrying", {"enum": ["true", "1"]}, "Only `true` is supported.", required=True),
                    LIMIT, AFTER_ID))},
        "/admin/v1/orphans": {"get": op(
            "listOrphans", "Orphan events (matched no task)", {200: ok("One page.", items(orphan)), 422: None},
            tag=orph, params=(query("state", {"enum": ["open", "resolved", "discarded", "all"], "default": "open"}),
                    LIMIT, AFTER_ID))},
        "/admin/v1/orphans/{orphan_id}/attach": {"post": op(
            "attachOrphan", "Bind an orphan to a task, apply it", {202: ok("Bound and applied.", orphan), 409: None},
            tag=orph, params=(orphan_id,), body=ref("Attach"))},
        "/admin/v1/orphans/{orphan_id}/discard": {"post": op(
            "discardOrphan", "Discard an orphan", {200: ok("Discarded.", orphan), 409: None}, tag=orph,
            params=(orphan_id,))},
        "/admin/v1/reconcile": {"post": op(
            "reconcileNow", "Queue a reconciliation run now", {202: ok("Queued on a worker.", queued)},
            tag="operations")},
    }


def _clients() -> dict[str, Schema]:
    client, key_row, name = ref("Client"), ref("ApiKeyRow"), path("name", STRING)
    base = "/admin/v1/clients/{name}"
    origins = ok("The client's callback origins.", obj({"origins": {"type": "array", "items": STRING}}, ("origins",)))
    new_key = obj({"api_key": STRING, "key": key_row}, ("api_key", "key"))
    new_secret = obj({"callback_secret": STRING, "secrets": {"type": "integer"}}, ("callback_secret", "secrets"))
    the_client = ok("The client.", client)
    retired_secrets = obj({"retired": {"type": "integer"}, "secrets": {"const": 1}}, ("retired", "secrets"))

    def change(operation_id: str, summary: str, responses: dict[int, Schema | None], **kw: Any) -> Schema:
        params = (name, *kw.pop("params", ()))
        return op(operation_id, summary, {409: None, **responses}, tag="clients", params=params, **kw)

    return {
        "/admin/v1/clients": {"get": op(
            "listClients", "Clients (never a key or a secret)", {200: ok("Every client.", items(client, None))},
            tag="clients")},
        base: {"get": op("getClient", "One client", {200: the_client}, tag="clients", params=(name,))},
        f"{base}/keys": {"post": change(
            "rotateKey", "A new API key; the old ones stay valid until retired",
            {201: ok("The key, shown this once.", new_key, **NO_STORE)})},
        f"{base}/keys/retire": {"post": change(
            "retireKeys", "Retire every key but the newest",
            {200: ok("The keys retired.", obj({"retired": {"type": "array", "items": key_row}}, ("retired",)))})},
        f"{base}/keys/{{key}}/revoke": {"post": change(
            "revokeKey", "Revoke one key now, by id or prefix", {200: ok("The key.", key_row)},
            params=(path("key", STRING),))},
        f"{base}/disable": {"post": change("disableClient", "Refuse its API requests (403)", {200: the_client})},
        f"{base}/enable": {"post": change("enableClient", "Accept its API requests again", {200: the_client})},
        f"{base}/secrets": {"post": change(
            "addSecret", "A new callback signing secret",
            {201: ok("The secret, shown this once.", new_secret, **NO_STORE)})},
        f"{base}/secrets/retire": {"post": change(
            "retireSecrets", "Keep only the newest callback secret",
            {200: ok("How many were retired.", retired_secrets)})},
        f"{base}/channel": {"put": change(
            "setChannel", "Put the client on a broker channel (amqp or redis), or back on HTTP only (null)",
            {200: the_client, 422: None}, body=ref("Channel"),
            description="Its tasks submitted from then on send their events to the channel too; 409 when its name "
            "cannot name a queue (1-64 of a-z 0-9 _ -).")},
        f"{base}/origins": {
            "get": op("listOrigins", "The client's callback origins", {200: origins}, tag="clients", params=(name,)),
            "post": change(
                "changeOrigins", "Add and remove callback origins", {200: origins}, body=ref("ChangeOrigins"),
                description="409 when the client would then hold more than 20 origins, or its default callback_url "
                "would lie outside them (the problem's `errors` names `origin`)."),
        },
    }
# fmt: on


def _webhooks() -> dict[str, Schema]:
    headers = [
        {"in": "header", "name": name, "required": True, "schema": STRING, "description": text}
        for name, text in (
            ("webhook-id", "The callback's message_id."),
            ("webhook-timestamp", "Unix seconds; refuse one far from now."),
            ("webhook-signature", "Space-separated `v1,<base64 HMAC-SHA256>`, one per callback secret of the client."),
        )
    ]
    headers.append(TRACEPARENT | {"description": "W3C Trace Context: the task's trace (when it has one); unsigned."})
    return {
        "taskCallback": {
            "post": {
                "operationId": "taskCallback",
                "summary": "A task's callback, POSTed to its callback_url",
                "description": "Signed with the Standard Webhooks scheme, in `sequence` order. 2xx: delivered. 410 "
                "Gone: this URL is disabled for the client until an operator enables it. Anything else: retried on "
                "the relay schedule, then dead-lettered.",
                "tags": ["callbacks"],
                "parameters": headers,
                "requestBody": {"required": True, "content": {JSON: {"schema": ref("Callback")}}},
                "responses": {
                    "2XX": {"description": "Delivered."},
                    "410": {"description": "Gone: stop calling this URL for this client."},
                    "default": {"description": "Retried, then dead-lettered."},
                },
            }
        }
    }


def _problem(status: int) -> Schema:
    description = ERRORS[status][1]
    response: Schema = {"description": description, "content": {PROBLEM: {"schema": ref("Problem")}}}
    if status == 422:
        response["content"][PROBLEM]["example"] = _example(ref("Problem"))
    if status == 401:
        response["headers"] = {"WWW-Authenticate": {"schema": {"const": "Bearer"}, "required": True}}
    if status in (429, 503):
        response["headers"] = {
            "Retry-After": {"description": "Whole seconds.", "schema": {"type": "string", "pattern": "^[1-9][0-9]*$"}}
        }
    return response


@cache
def document() -> dict[str, Any]:
    """The whole document (built once; callers must not change it)."""
    operators = "Operators: bearer admin token (LIAISON_ADMIN_TOKEN)."
    admin_tags = ("dead letters", "incidents", "notifications", "callback endpoints", "tasks (operators)")
    return _sampled(
        {
            "openapi": "3.1.0",
            "info": {
                "title": "Liaison",
                "version": VERSION,
                "description": "Hand Liaison a task; it submits it to the vendor, tracks it and relays every "
                "acceptance, progress report and completion to your callback_url as a Standard Webhooks-signed "
                "POST, in order, numbered by `sequence` (see the callbacks below). Errors are "
                "application/problem+json (RFC 9457), every field problem at once in `errors`.",
            },
            "tags": [
                {"name": "tasks", "description": "Domain apps: bearer API key."},
                {"name": "callbacks", "description": "What Liaison POSTs to a task's callback_url."},
                {"name": "contract", "description": "This document; no authentication."},
                *(
                    {"name": t, "description": operators}
                    for t in (*admin_tags, "orphans", "operations", "providers", "clients")
                ),
            ],
            "paths": {**_tasks(), **_admin(), **_clients()},
            "webhooks": _webhooks(),
            "components": {
                "schemas": schemas(),
                "responses": {name: _problem(status) for status, (name, _) in ERRORS.items()},
                "securitySchemes": {
                    API_KEY: {"type": "http", "scheme": "bearer", "description": "A client's API key."},
                    ADMIN: {"type": "http", "scheme": "bearer", "description": "LIAISON_ADMIN_TOKEN; unset: 404."},
                },
            },
        }
    )
