"""The vendors the simulator can play (``SIMULATOR_PERSONALITY``): their answers and their webhooks.

Pure (no Flask, no I/O): what a job looks like in each vendor's API, and what each vendor's webhook
carries (envelope, headers) and where it goes. The job's life (accept, progress, complete, cancel)
and every knob are the same whichever vendor is played; only the shapes differ.

==============  ==========================================  =======================================
personality     API                                         webhooks
==============  ==========================================  =======================================
``liaison``     ``/jobs``: docs/design.md §5 (default)      Standard Webhooks, to the submit's
                                                            ``callback_url``
``stripe``      ``/v1/jobs``: Stripe objects and errors     ``Stripe-Signature``, Stripe events,
                                                            to ``SIMULATOR_WEBHOOK_URL``
``github``      ``/api/v3/jobs``: GitHub objects, errors    ``X-Hub-Signature-256``,
                                                            ``X-GitHub-Event``/``-Delivery``, to
                                                            ``SIMULATOR_WEBHOOK_URL``
``poll-only``   ``/jobs`` (``callback_url`` ignored)        none: ask ``GET /jobs/<id>``
``token-url``   ``/jobs``                                   unsigned, to the submit's
                                                            ``callback_url`` (allowed origins only)
==============  ==========================================  =======================================
"""

from __future__ import annotations

import base64
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from simulator.behaviour import EVENT_ACCEPTED, EVENT_COMPLETED, EVENT_PROGRESS
from simulator.settings import GITHUB, LIAISON, POLL_ONLY, STRIPE, TOKEN_URL, Settings
from simulator.signers import github_signature_256, github_signature_sha1, stripe_signature
from simulator.store import Job
from webhooks.signing import sign

#: The API version a Stripe event names (informative: the simulator has one shape).
STRIPE_API_VERSION = "2024-06-20"
#: Our lifecycle's status → Stripe's status names.
STRIPE_STATUS = {
    "queued": "queued",
    "running": "processing",
    "succeeded": "succeeded",
    "failed": "failed",
    "canceled": "canceled",
}
#: Our lifecycle's status → GitHub's (``status``, ``conclusion``), as a workflow job or check run has.
GITHUB_STATUS: dict[str, tuple[str, str | None]] = {
    "queued": ("queued", None),
    "running": ("in_progress", None),
    "succeeded": ("completed", "success"),
    "failed": ("completed", "failure"),
    "canceled": ("completed", "cancelled"),
}
#: The GitHub webhook event the simulator's jobs send (``X-GitHub-Event``), and its actions.
GITHUB_EVENT = "job"
GITHUB_ACTIONS = {EVENT_ACCEPTED: "in_progress", EVENT_PROGRESS: "progress", EVENT_COMPLETED: "completed"}
JSON = "application/json"


# --- the API's objects ---------------------------------------------------------------------------


def _iso(at: float | None) -> str | None:
    return None if at is None else datetime.fromtimestamp(int(at), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def stripe_job(job: Job) -> dict[str, Any]:
    """A job as a Stripe API object (``GET /v1/jobs/<id>``, and ``data.object`` of its events)."""
    return {
        "id": job.job_id,
        "object": "job",
        "created": int(job.created_at),
        "livemode": False,
        "status": STRIPE_STATUS[job.status],
        "reference": job.reference,
        "progress": job.progress,
        "outcome": job.outcome,
    }


def github_job(job: Job) -> dict[str, Any]:
    """A job as a GitHub REST object (``GET /api/v3/jobs/<id>``, and ``job`` of its events): a
    numeric ``id``, the client's reference as ``external_id``, ``status`` + ``conclusion``."""
    status, conclusion = GITHUB_STATUS[job.status]
    return {
        "id": int(job.job_id),
        "node_id": "SJ_" + base64.urlsafe_b64encode(f"Job{job.job_id}".encode()).decode().rstrip("="),
        "external_id": job.reference,
        "status": status,
        "conclusion": conclusion,
        "created_at": _iso(job.created_at),
        "started_at": _iso(job.accepted_at),
        "completed_at": _iso(job.finished_at),
        "progress": job.progress,
        "output": job.outcome,
    }


# --- webhooks ------------------------------------------------------------------------------------


def sends_webhooks(personality: str) -> bool:
    return personality != POLL_ONLY


def target(settings: Settings, job: Job) -> str:
    """Where the job's webhooks go: the endpoint registered at the vendor (stripe, github), else the
    URL handed in the submit (checked then: ``simulator.callbacks``)."""
    return settings.webhook_url if settings.personality in (STRIPE, GITHUB) else job.callback_url


def stripe_event_id(webhook_id: str) -> str:
    """``evt_…`` from the simulator's ``msg_…`` id: one per event, kept by duplicates and re-sends."""
    return "evt_" + webhook_id.removeprefix("msg_")


def github_delivery(webhook_id: str) -> str:
    """``X-GitHub-Delivery``: a GUID, one per event, kept by duplicates and re-sends."""
    return str(uuid.UUID(hex=webhook_id.removeprefix("msg_")))


def envelope(personality: str, job: Job, payload: dict[str, Any], webhook_id: str, now: float) -> dict[str, Any]:
    """The body of one webhook: the ``liaison`` ``payload`` (§4), or the vendor's own envelope
    around the job's object. Built once per event, so duplicates and re-sends carry the same bytes."""
    kind = payload["type"]
    if personality == STRIPE:
        if kind == EVENT_ACCEPTED:
            event_type = "job.processing"
        elif kind == EVENT_PROGRESS:
            event_type = "job.updated"
        else:
            event_type = "job." + STRIPE_STATUS[job.status]
        obj = stripe_job(job)
        if kind == EVENT_PROGRESS:
            obj["progress"] = payload["percent"]
        return {
            "id": stripe_event_id(webhook_id),
            "object": "event",
            "api_version": STRIPE_API_VERSION,
            "created": int(now),
            "livemode": False,
            "pending_webhooks": 1,
            "request": {"id": None, "idempotency_key": None},
            "type": event_type,
            "data": {"object": obj},
        }
    if personality == GITHUB:
        obj = github_job(job)
        if kind == EVENT_PROGRESS:
            obj["progress"] = payload["percent"]
        return {"action": GITHUB_ACTIONS[kind], "job": obj, "sender": {"login": "simulator[bot]", "type": "Bot"}}
    return payload


def headers(settings: Settings, webhook_id: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """One attempt's headers; signed at send time, so a re-send carries a fresh timestamp. With
    ``SIMULATOR_WEBHOOK_BASIC_AUTH`` set, ``Authorization: Basic`` beside the personality's own."""
    found = _signed_headers(settings, webhook_id, body, now)
    if settings.webhook_basic_auth:
        found["Authorization"] = "Basic " + base64.b64encode(settings.webhook_basic_auth.encode()).decode("ascii")
    return found


def _signed_headers(settings: Settings, webhook_id: str, body: bytes, now: float | None) -> dict[str, str]:
    now = time.time() if now is None else now
    personality, secret = settings.personality, settings.webhook_secret
    if personality == STRIPE:
        return {
            "Content-Type": JSON + "; charset=utf-8",
            "User-Agent": "Stripe/1.0 (+https://stripe.com/docs/webhooks)",
            "Stripe-Signature": stripe_signature(secret, body, int(now)),
        }
    if personality == GITHUB:
        return {
            "Content-Type": JSON,
            "User-Agent": "GitHub-Hookshot/simulator",
            "X-GitHub-Event": GITHUB_EVENT,
            "X-GitHub-Delivery": github_delivery(webhook_id),
            "X-GitHub-Hook-ID": "1",
            "X-Hub-Signature": github_signature_sha1(secret, body),
            "X-Hub-Signature-256": github_signature_256(secret, body),
        }
    if personality == TOKEN_URL:
        return {"Content-Type": JSON}  # the URL is the proof: nothing is signed
    assert personality == LIAISON
    return {**sign(secret, webhook_id, int(now), body).as_dict(), "Content-Type": JSON}
