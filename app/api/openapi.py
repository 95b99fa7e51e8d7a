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

from app.api.openapi_admin import admin_paths
from app.api.openapi_callbacks import CALLBACK, callback_webhooks
from app.api.openapi_clients import client_paths
from app.api.openapi_parts import (
    ADMIN,
    API_KEY,
    CORRELATION,
    CURSOR_PARAM,
    ERRORS,
    IDEMPOTENCY,
    JSON,
    STRING,
    TRACEPARENT,
    _error_response,
    nullable,
    obj,
    ok,
    op,
    query,
    ref,
)
from app.api.openapi_schemas import SCHEMAS
from app.api.representation import TIMELINE_CAP, TIMELINE_MAX_LIMIT
from core.states import State

Schema = dict[str, Any]
VERSION = "1.0.0"
#: a cancel's key is bound to the task it first canceled (``service.lifecycle.cancel_key_first_time``)
CANCEL_KEY = {
    **IDEMPOTENCY,
    "description": "Bound to the task it first canceled: the same key on that task again is the same request "
    "(202, nothing more done); on another of the client's tasks it is a 409.",
}


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
                    CURSOR_PARAM,
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
            ),
        },
        "/api/v1/tasks/{correlation_id}/timeline": {
            "get": op(
                "getTaskTimeline",
                "A task's timeline, a page at a time, oldest first",
                {
                    200: ok(
                        "One page; `next_cursor` is null on the last (for now: a task's timeline grows at its end, "
                        "so the cursor of the last page, kept, later gives what was added since).",
                        obj(
                            {
                                "timeline": {
                                    "type": "array",
                                    "maxItems": TIMELINE_MAX_LIMIT,
                                    "items": ref("TimelineEntry"),
                                },
                                "next_cursor": nullable("string"),
                            },
                            ("timeline", "next_cursor"),
                        ),
                    ),
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
                    {
                        **CURSOR_PARAM,
                        "description": "`timeline_next_cursor` of the task, or `next_cursor` of the previous page, "
                        "as it came (empty: from the first entry).",
                    },
                ),
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
                params=(CORRELATION, CANCEL_KEY),
                body=obj({"reason": {"type": "string", "minLength": 1, "maxLength": 500}}),
                description="409 when the task is already final (the problem names its `state`), or when the "
                "Idempotency-Key already canceled another task of the client (`errors` names `Idempotency-Key`).",
            ),
        },
        "/api/v1/openapi.json": {
            "get": op("openapi", "This document", {200: ok("OpenAPI 3.1", {"type": "object"})}, tag="contract"),
        },
        "/api/v1/asyncapi.yaml": {
            "get": op(
                "asyncapi",
                "The AsyncAPI 3.0 document of the broker channels",
                {
                    200: {
                        "description": "Commands and events over RabbitMQ and Redis Streams for clients on a channel, "
                        "and the amqp provider's messages (YAML).",
                        "content": {"application/yaml": {"schema": {"type": "object"}}},
                    },
                    404: None,
                },
                tag="contract",
            ),
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


@cache
def document() -> dict[str, Any]:
    """The whole document (built once; callers must not change it)."""
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Liaison",
            "version": VERSION,
            "description": "Hand Liaison a task; it submits it to the vendor, tracks it and relays every "
            "acceptance, progress report and completion to your callback_url as a Standard Webhooks-signed POST, "
            "in order, numbered by `sequence` (see `webhooks`). "
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
                    "notifications",
                    "callback endpoints",
                    "tasks (operators)",
                    "orphans",
                    "operations",
                    "providers",
                    "clients",
                )
            ),
        ],
        "paths": {**_tasks(), **admin_paths(), **client_paths()},
        "webhooks": callback_webhooks(),
        "components": {
            "schemas": {**SCHEMAS, "Callback": CALLBACK},
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
