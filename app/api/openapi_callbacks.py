"""The callbacks Liaison sends to a task's ``callback_url``, as the OpenAPI 3.1 ``webhooks`` of the
document (``app/api/openapi.py``): their body, and what the domain app's answer means.

The body's members are the ones ``service.outbox_rows.add_relay`` writes (and ``service.progress`` for
``task.progress``); docs/design.md §4 is the prose.
"""

from __future__ import annotations

from typing import Any

from app.api.openapi_parts import JSON, STRING, nullable, obj, ref
from core.states import COMPLETED_CALLBACK, PROGRESS_CALLBACK, RELAYED, State
from webhooks.events import MAX_PROGRESS_MESSAGE

Schema = dict[str, Any]
TYPES = sorted({*RELAYED.values(), "task.deadline_exceeded", PROGRESS_CALLBACK})

CALLBACK = obj(
    {
        "type": {"enum": TYPES},
        "message_id": {
            "type": "string",
            "description": "Equals the `webhook-id` header; the same on every retry and replay of this callback: "
            "deduplicate on it.",
        },
        "correlation_id": STRING,
        "sequence": {
            "type": "integer",
            "minimum": 1,
            "description": "This callback's place in its task's order: 1, 2, 3 … A task's callbacks are delivered "
            "in this order (a later one waits while an earlier one is retried); one that was dead-lettered or "
            "parked is skipped, leaving a gap; for a client on HTTP and a broker channel at once, progress reports "
            "coalesced while one way was behind can skip numbers on the other. Keep the highest you have "
            "handled and discard anything lower.",
        },
        "state": {"enum": [s.value for s in State], "description": "The task's state when the event happened."},
        "supersedes": nullable(
            "string",
            description=f"On `{COMPLETED_CALLBACK}`: the `message_id` of an earlier `{COMPLETED_CALLBACK}` of this "
            "task that this one replaces (a replayed submission completed a task that had failed); null otherwise.",
        ),
        "outcome": {"description": "What the vendor reported; null on `task.deadline_exceeded` and `task.progress`."},
        "occurred_at": {"type": "string", "format": "date-time"},
        "percent": nullable(
            "number",
            minimum=0,
            maximum=100,
            description=f"`{PROGRESS_CALLBACK}` only. Reports that came while this callback waited were merged "
            "into it: the latest wins.",
        ),
        "message": nullable("string", maxLength=MAX_PROGRESS_MESSAGE, description=f"`{PROGRESS_CALLBACK}` only."),
        "deadline": {"enum": ["acceptance", "execution"], "description": "`task.deadline_exceeded` only."},
        "deadline_at": {"type": "string", "format": "date-time", "description": "`task.deadline_exceeded` only."},
        "late_by_s": {"type": "number", "description": "`task.deadline_exceeded` only."},
    },
    ("type", "message_id", "correlation_id", "sequence", "state", "supersedes", "outcome", "occurred_at"),
)


def callback_webhooks() -> dict[str, Schema]:
    headers = {
        name: {"in": "header", "name": name, "required": True, "schema": STRING, "description": text}
        for name, text in (
            ("webhook-id", "The callback's message_id."),
            ("webhook-timestamp", "Unix seconds; refuse one far from now."),
            ("webhook-signature", "Space-separated `v1,<base64 HMAC-SHA256>`, one per callback secret of the client."),
        )
    }
    headers["traceparent"] = {
        "in": "header",
        "name": "traceparent",
        "required": False,
        "schema": STRING,
        "description": "W3C Trace Context: the task's trace (when it has one), to continue; unsigned.",
    }
    return {
        "taskCallback": {
            "post": {
                "operationId": "taskCallback",
                "summary": "A task's callback, POSTed to its callback_url",
                "description": "Signed with the Standard Webhooks scheme. A task's callbacks arrive in `sequence` "
                "order. 2xx: delivered. 410 Gone: this URL is disabled for the client until an operator enables "
                "it. Anything else: retried on the relay schedule, then dead-lettered.",
                "tags": ["tasks"],
                "parameters": list(headers.values()),
                "requestBody": {"required": True, "content": {JSON: {"schema": ref("Callback")}}},
                "responses": {
                    "2XX": {"description": "Delivered."},
                    "410": {"description": "Gone: stop calling this URL for this client."},
                    "default": {"description": "Retried, then dead-lettered."},
                },
            }
        }
    }
