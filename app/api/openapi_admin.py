"""The operators' API in the OpenAPI document (``/admin/v1``): dead letters, incidents, orphans,
callback endpoints, operators' task views, the configured providers and operations now
(``app/api/openapi.py``)."""

from __future__ import annotations

from app.api.openapi_parts import (
    AFTER_ID,
    CLIENT_NAME,
    HTTP_URL,
    LIMIT,
    OPERATOR_TASK,
    REPLAY_COUNTS,
    ROW_ID,
    STRING,
    TEXT_FILTER,
    Schema,
    nullable,
    obj,
    ok,
    op,
    page,
    path,
    query,
    ref,
)
from models.messages import DEAD_LETTER_KINDS
from service.incidents import IncidentKind
from webhooks.schemes import SCHEMES

_NUMBER = {"type": "number"}
_INT = {"type": "integer", "minimum": 0}
#: One configured provider (``app/api/provider_summary.py``): settings only, never a secret.
PROVIDER = obj(
    {
        "name": STRING,
        "kind": {"enum": ["rest", "amqp", "http"]},
        "default": {"type": "boolean", "description": "the provider of a task that names none"},
        "base_url": {**nullable("string"), "description": "without userinfo or query; null for amqp"},
        "webhook_scheme": {"enum": list(SCHEMES)},
        "webhook_secrets": {**_INT, "description": "how many secrets are configured (two while one rotates)"},
        "profile": {**nullable("string"), "description": "an http provider's profile file"},
        "poll_schedule_s": {
            "type": ["array", "null"],
            "items": _NUMBER,
            "description": "seconds to the first poll, then between polls (the last repeated); null: no polling",
        },
        "max_in_flight": {**_INT, "description": "0: no limit"},
        "rate_limit_per_s": _NUMBER,
        "rate_limit_burst": _INT,
        "call_deadline_s": _NUMBER,
        "refusals_metric": {**STRING, "description": "where its refused webhooks are counted, by reason"},
    },
    (
        "name",
        "kind",
        "default",
        "base_url",
        "webhook_scheme",
        "webhook_secrets",
        "profile",
        "poll_schedule_s",
        "max_in_flight",
        "rate_limit_per_s",
        "rate_limit_burst",
        "call_deadline_s",
        "refusals_metric",
    ),
    closed=True,
)


def admin_paths() -> dict[str, Schema]:
    letter, incident, orphan = ref("DeadLetter"), ref("Incident"), ref("OrphanEvent")
    mute, who = ref("NotificationMute"), {"type": "string", "minLength": 1, "maxLength": 100}
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
                {200: ok("One page.", page(letter)), 422: None},
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
                {
                    202: ok(
                        "How many were replayed, and skipped (not replayable); letters of the caller's fault are"
                        " left open unless the filter names fault=caller.",
                        REPLAY_COUNTS,
                    )
                },
                tag="dead letters",
                body=filter_body,
            )
        },
        "/admin/v1/incidents": {
            "get": op(
                "listIncidents",
                "Incidents, oldest first",
                {200: ok("One page.", page(incident)), 422: None},
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
        "/admin/v1/notification-mutes": {
            "get": op(
                "listNotificationMutes",
                "Incident kinds whose notifications are muted",
                {200: ok("Every mute.", obj({"items": {"type": "array", "items": mute}}, ("items",)))},
                tag="notifications",
            )
        },
        "/admin/v1/notification-mutes/{kind}": {
            "put": op(
                "muteNotifications",
                "Mute an incident kind's notifications",
                {
                    200: ok("It was muted already: the first mute is kept.", mute),
                    201: ok("Muted.", mute),
                    422: None,
                },
                tag="notifications",
                params=(path("kind", {"enum": list(IncidentKind.ALL)}),),
                body=obj({"by": who, "note": nullable("string")}, ("by",)),
                body_required=True,
                description="Its notices are still recorded (marked muted), never sent; incidents open as before.",
            ),
            "delete": op(
                "unmuteNotifications",
                "Unmute an incident kind",
                {204: {"description": "Unmuted."}, 422: None},
                tag="notifications",
                params=(path("kind", {"enum": list(IncidentKind.ALL)}),),
            ),
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
        "/admin/v1/callback-endpoints/health": {
            "get": op(
                "listEndpointHealth",
                "Failing, paused and probing callback endpoints",
                {
                    200: ok(
                        "Each client callback origin that failed its last delivery: failing (not yet paused), "
                        "paused (its relays wait without calling it) or probing (one delivery is trying it). "
                        "Each resumes by itself when a probe succeeds.",
                        obj({"items": {"type": "array", "items": ref("EndpointHealth")}}, ("items",)),
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
                body=obj({"url": HTTP_URL, "client": CLIENT_NAME}, ("url",)),
            )
        },
        "/admin/v1/providers": {
            "get": op(
                "listProviders",
                "The configured providers",
                {200: ok("Each provider, by name.", obj({"items": {"type": "array", "items": PROVIDER}}, ("items",)))},
                tag="providers",
                description="From the settings (LIAISON_PROVIDERS and each LIAISON_PROVIDER_<NAME>_*): its adapter's "
                "kind, how its webhooks prove themselves, its profile, poll schedule and limits. Never a secret: "
                "only how many webhook secrets are configured.",
            )
        },
        "/admin/v1/tasks": {
            "get": op(
                "listRetryingTasks",
                "Tasks retrying right now (vendor calls and failing callbacks), across clients",
                {200: ok("One page.", page(OPERATOR_TASK)), 422: None},
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
                {200: ok("One page.", page(orphan)), 422: None},
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
