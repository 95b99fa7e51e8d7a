"""The HTTP contract as an OpenAPI 3.1 document: the domain apps' API (``/api/v1``) and the
operators' API (``/admin/v1``), served at ``GET /api/v1/openapi.json`` (``app/api/reference.py``).

A document kept by hand next to the hand-written validation it describes, and held to the code
twice: ``tests/unit/test_openapi.py`` checks that every Flask route under those prefixes is
documented and every documented operation is a route, and ``tests/integration/test_conformance.py``
runs schemathesis against the real server (no 5xx, every response as documented). Why not
generated from models: see docs/design.md §3.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from app.api.openapi_parts import (
    ADMIN,
    AFTER_ID,
    API_KEY,
    ERRORS,
    IDEMPOTENCY,
    JSON,
    LIMIT,
    ROW_ID,
    SCHEMAS,
    STRING,
    _error_response,
    nullable,
    obj,
    ok,
    op,
    path,
    query,
    ref,
)
from core.states import State
from models.messages import DEAD_LETTER_KINDS

Schema = dict[str, Any]
VERSION = "1.0.0"
CORRELATION = path("correlation_id", {"type": "string"})
TEXT_FILTER = {"type": "string", "maxLength": 200, "pattern": "^[^\\x00]*$"}
CLIENT_NAME = {
    "type": "string",
    "minLength": 1,
    "maxLength": 100,
    "pattern": "^[^\\x00]*$",
    "description": "Needed only where several clients share the name (a correlation id, a URL).",
}
NAME = path("name", {"type": "string"})
COUNTS = obj({"replayed": {"type": "integer"}, "skipped": {"type": "integer"}}, ("replayed", "skipped"))
OPERATOR_TASK = {"allOf": [ref("Task"), obj({"client": STRING}, ("client",))]}
NO_STORE = {"Cache-Control": {"schema": {"const": "no-store"}, "required": True}}


def _page(item: Schema) -> Schema:
    return obj(
        {"items": {"type": "array", "items": item}, "next_after_id": nullable("integer")}, ("items", "next_after_id")
    )


def _tasks() -> dict[str, Schema]:
    task = ok("The task.", ref("Task"))
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
                    200: ok(
                        "The same request again (same Idempotency-Key and body, or an existing correlation_id).",
                        ref("Task"),
                    ),
                    409: None,
                    429: None,
                },
                tag="tasks",
                params=(IDEMPOTENCY,),
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
                        obj(
                            {"tasks": {"type": "array", "items": ref("Task")}, "next_cursor": nullable("string")},
                            ("tasks", "next_cursor"),
                        ),
                    ),
                    400: None,
                    422: None,
                },
                tag="tasks",
                params=(
                    query("state", {"enum": [s.value for s in State]}),
                    query("limit", {"type": "integer", "minimum": 1, "maximum": 200, "default": 50}),
                    query("cursor", STRING, "`next_cursor` of the previous page"),
                ),
            ),
        },
        "/api/v1/tasks/{correlation_id}": {
            "get": op(
                "getTask",
                "A task: state, deadlines, outcome and timeline",
                {200: task, 404: None},
                tag="tasks",
                params=(CORRELATION,),
            ),
        },
        "/api/v1/tasks/{correlation_id}/cancel": {
            "post": op(
                "cancelTask",
                "Ask for cancellation",
                {
                    202: ok(
                        "Asked: the task ends `canceled` once the vendor confirms (at once if it never saw it).",
                        ref("Task"),
                    ),
                    404: None,
                    409: None,
                },
                tag="tasks",
                params=(CORRELATION, IDEMPOTENCY),
                body=obj({"reason": {"type": "string", "minLength": 1, "maxLength": 500}}),
                description="409 when the task is already final (the problem names its `state`).",
            ),
        },
        "/api/v1/openapi.json": {
            "get": op("openapi", "This document", {200: ok("OpenAPI 3.1", {"type": "object"})}, tag="contract"),
        },
        "/api/v1/docs": {
            "get": op(
                "docs",
                "This document as a page",
                {
                    200: {
                        "description": "HTML, rendered on the server: no asset from elsewhere.",
                        "content": {"text/html": {"schema": STRING}},
                    }
                },
                tag="contract",
            ),
        },
    }


def _operations() -> dict[str, Schema]:
    letter, incident, orphan = ref("DeadLetter"), ref("Incident"), ref("OrphanEvent")
    kind, fault = query("kind", {"enum": list(DEAD_LETTER_KINDS)}), query("fault", {"enum": ["caller", "system"]})
    seconds = {"type": "integer", "minimum": 0, "maximum": 10**9}
    filters = (query("provider", TEXT_FILTER), query("older_than_s", seconds), query("newer_than_s", seconds))
    row = {name: path(name, ROW_ID) for name in ("letter_id", "incident_id", "orphan_id")}
    # In the body, null is the same as leaving a filter out.
    filter_body = obj(
        {
            "kind": {"enum": [*DEAD_LETTER_KINDS, None]},
            "fault": {"enum": ["caller", "system", None]},
            "provider": {**TEXT_FILTER, "type": ["string", "null"]},
            "older_than_s": {**seconds, "type": ["integer", "null"]},
            "newer_than_s": {**seconds, "type": ["integer", "null"]},
            "limit": {
                "type": ["integer", "null"],
                "minimum": 1,
                "maximum": 100_000,
                "default": 1000,
                "description": "null: every match",
            },
        }
    )
    return {
        "/admin/v1/dead-letters": {
            "get": op(
                "listDeadLetters",
                "Dead letters, oldest first",
                {200: ok("One page.", _page(letter)), 422: None},
                tag="dead letters",
                params=(
                    query("state", {"enum": ["open", "replayed", "discarded", "all"], "default": "open"}),
                    kind,
                    fault,
                    *filters,
                    LIMIT,
                    AFTER_ID,
                ),
            )
        },
        "/admin/v1/dead-letters/{letter_id}": {
            "get": op(
                "getDeadLetter",
                "One dead letter",
                {200: ok("The dead letter.", letter)},
                tag="dead letters",
                params=(row["letter_id"],),
            )
        },
        "/admin/v1/dead-letters/{letter_id}/replay": {
            "post": op(
                "replayDeadLetter",
                "Replay, same MessageId",
                {202: ok("Re-enqueued.", letter), 409: None},
                tag="dead letters",
                params=(row["letter_id"],),
            )
        },
        "/admin/v1/dead-letters/{letter_id}/discard": {
            "post": op(
                "discardDeadLetter",
                "Discard",
                {200: ok("Discarded.", letter), 409: None},
                tag="dead letters",
                params=(row["letter_id"],),
            )
        },
        "/admin/v1/dead-letters/replay": {
            "post": op(
                "replayDeadLetters",
                "Replay every open match",
                {202: ok("How many were replayed, and skipped (not replayable).", COUNTS)},
                tag="dead letters",
                body=filter_body,
            )
        },
        "/admin/v1/incidents": {
            "get": op(
                "listIncidents",
                "Incidents, oldest first",
                {200: ok("One page.", _page(incident)), 422: None},
                tag="incidents",
                params=(
                    query("state", {"enum": ["open", "resolved", "all"], "default": "open"}),
                    query("kind", TEXT_FILTER),
                    LIMIT,
                    AFTER_ID,
                ),
            )
        },
        "/admin/v1/incidents/{incident_id}/assign": {
            "post": op(
                "assignIncident",
                "Give an incident an owner",
                {200: ok("The incident.", incident)},
                tag="incidents",
                params=(row["incident_id"],),
                body=obj({"owner": {"type": "string", "minLength": 1, "maxLength": 100}}, ("owner",)),
            )
        },
        "/admin/v1/incidents/{incident_id}/resolve": {
            "post": op(
                "resolveIncident",
                "Resolve an incident",
                {200: ok("The incident.", incident)},
                tag="incidents",
                params=(row["incident_id"],),
                body=obj({"note": nullable("string")}),
            )
        },
        "/admin/v1/callback-endpoints": {
            "get": op(
                "listCallbackEndpoints",
                "Disabled callback endpoints",
                {
                    200: ok(
                        "Every disabled endpoint.",
                        obj({"items": {"type": "array", "items": ref("CallbackEndpoint")}}, ("items",)),
                    )
                },
                tag="callback endpoints",
            )
        },
        "/admin/v1/callback-endpoints/enable": {
            "post": op(
                "enableCallbackEndpoint",
                "Re-enable an endpoint",
                {
                    202: ok(
                        "Enabled; its parked callbacks were released.",
                        obj(
                            {"url": STRING, "client": nullable("string"), "released": {"type": "integer"}},
                            ("url", "client", "released"),
                        ),
                    ),
                    409: None,
                },
                tag="callback endpoints",
                body=obj(
                    {"url": {"type": "string", "format": "uri", "maxLength": 2000}, "client": CLIENT_NAME}, ("url",)
                ),
            )
        },
        "/admin/v1/tasks": {
            "get": op(
                "listRetryingTasks",
                "Tasks retrying right now, across clients",
                {200: ok("One page.", _page(OPERATOR_TASK)), 422: None},
                tag="tasks (operators)",
                params=(
                    query("retrying", {"enum": ["true", "1"]}, "Only `true` is supported.", required=True),
                    LIMIT,
                    AFTER_ID,
                ),
            )
        },
        "/admin/v1/orphans": {
            "get": op(
                "listOrphans",
                "Orphan events (matched no task)",
                {200: ok("One page.", _page(orphan)), 422: None},
                tag="orphans",
                params=(
                    query("state", {"enum": ["open", "resolved", "discarded", "all"], "default": "open"}),
                    LIMIT,
                    AFTER_ID,
                ),
            )
        },
        "/admin/v1/orphans/{orphan_id}/attach": {
            "post": op(
                "attachOrphan",
                "Bind an orphan to a task, apply it",
                {202: ok("Bound and applied.", orphan), 409: None},
                tag="orphans",
                params=(row["orphan_id"],),
                body=obj(
                    {"correlation_id": {"type": "string", "minLength": 1}, "client": CLIENT_NAME}, ("correlation_id",)
                ),
            )
        },
        "/admin/v1/orphans/{orphan_id}/discard": {
            "post": op(
                "discardOrphan",
                "Discard an orphan",
                {200: ok("Discarded.", orphan), 409: None},
                tag="orphans",
                params=(row["orphan_id"],),
            )
        },
        "/admin/v1/reconcile": {
            "post": op(
                "reconcileNow",
                "Queue a reconciliation run now",
                {
                    202: ok(
                        "Queued on a worker.",
                        obj({"queued": {"const": True}, "celery_task_id": STRING}, ("queued", "celery_task_id")),
                    )
                },
                tag="operations",
            )
        },
    }


def _clients() -> dict[str, Schema]:
    client, key_row = ref("Client"), ref("ApiKeyRow")
    base = "/admin/v1/clients/{name}"
    origins = ok("The client's callback origins.", obj({"origins": {"type": "array", "items": STRING}}, ("origins",)))
    origin_list = {"oneOf": [STRING, {"type": "array", "items": STRING, "maxItems": 100}]}

    def change(operation_id: str, summary: str, responses: dict[int, Schema | None], **kw: Any) -> Schema:
        return op(
            operation_id, summary, {409: None, **responses}, tag="clients", params=(NAME, *kw.pop("params", ())), **kw
        )

    return {
        "/admin/v1/clients": {
            "get": op(
                "listClients",
                "Clients (never a key or a secret)",
                {200: ok("Every client.", obj({"items": {"type": "array", "items": client}}, ("items",)))},
                tag="clients",
            )
        },
        base: {"get": op("getClient", "One client", {200: ok("The client.", client)}, tag="clients", params=(NAME,))},
        f"{base}/keys": {
            "post": change(
                "rotateKey",
                "A new API key; the old ones stay valid until retired",
                {
                    201: ok(
                        "The key, shown this once.",
                        obj({"api_key": STRING, "key": key_row}, ("api_key", "key")),
                        **NO_STORE,
                    )
                },
            )
        },
        f"{base}/keys/retire": {
            "post": change(
                "retireKeys",
                "Retire every key but the newest",
                {200: ok("The keys retired.", obj({"retired": {"type": "array", "items": key_row}}, ("retired",)))},
            )
        },
        f"{base}/keys/{{key}}/revoke": {
            "post": change(
                "revokeKey",
                "Revoke one key now, by id or prefix",
                {200: ok("The key.", key_row)},
                params=(path("key", {"type": "string"}),),
            )
        },
        f"{base}/disable": {
            "post": change("disableClient", "Refuse its API requests (403)", {200: ok("The client.", client)})
        },
        f"{base}/enable": {
            "post": change("enableClient", "Accept its API requests again", {200: ok("The client.", client)})
        },
        f"{base}/secrets": {
            "post": change(
                "addSecret",
                "A new callback signing secret",
                {
                    201: ok(
                        "The secret, shown this once.",
                        obj(
                            {"callback_secret": STRING, "secrets": {"type": "integer"}}, ("callback_secret", "secrets")
                        ),
                        **NO_STORE,
                    )
                },
            )
        },
        f"{base}/secrets/retire": {
            "post": change(
                "retireSecrets",
                "Keep only the newest callback secret",
                {
                    200: ok(
                        "How many were retired.",
                        obj({"retired": {"type": "integer"}, "secrets": {"const": 1}}, ("retired", "secrets")),
                    )
                },
            )
        },
        f"{base}/origins": {
            "get": op("listOrigins", "The client's callback origins", {200: origins}, tag="clients", params=(NAME,)),
            "post": change(
                "changeOrigins",
                "Add and remove callback origins",
                {200: origins},
                body=obj({"add": origin_list, "remove": origin_list}, closed=True),
            ),
        },
    }


@cache
def document() -> dict[str, Any]:
    """The whole document (built once; callers must not change it)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Liaison",
            "version": VERSION,
            "description": "Hand Liaison a task; it submits it to the vendor, tracks it and relays every "
            "acceptance and completion to your callback_url as a Standard Webhooks-signed POST. "
            "Errors are application/problem+json (RFC 9457). The design: docs/design.md.",
        },
        "tags": [
            {"name": "tasks", "description": "Domain apps: bearer API key."},
            {"name": "contract", "description": "This document; no authentication."},
            *(
                {"name": t, "description": "Operators: bearer admin token (LIAISON_ADMIN_TOKEN)."}
                for t in (
                    "dead letters",
                    "incidents",
                    "callback endpoints",
                    "tasks (operators)",
                    "orphans",
                    "operations",
                    "clients",
                )
            ),
        ],
        "paths": {**_tasks(), **_operations(), **_clients()},
        "components": {
            "schemas": SCHEMAS,
            "responses": {name: _error_response(status) for status, (name, _) in ERRORS.items()},
            "securitySchemes": {
                API_KEY: {
                    "type": "http",
                    "scheme": "bearer",
                    "description": "A client's API key (`flask --app app liaison clients create`).",
                },
                ADMIN: {"type": "http", "scheme": "bearer", "description": "LIAISON_ADMIN_TOKEN; unset: 404."},
            },
        },
    }


__all__ = ["JSON", "document"]
