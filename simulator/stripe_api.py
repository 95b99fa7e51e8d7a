"""The ``stripe`` personality's API: Stripe's conventions on the simulator's jobs.

``POST /v1/jobs`` (JSON ``{"reference", "input"}``; Stripe itself takes form encoding),
``GET /v1/jobs/<id>``, ``GET /v1/jobs?reference=`` (a Stripe list), ``POST /v1/jobs/<id>/cancel``.
A job is ``{"id": "job_…", "object": "job", "created", "livemode", "status":
"queued"|"processing"|"succeeded"|"failed"|"canceled", "reference", "progress", "outcome"}``
(``simulator.personality.stripe_job``). As at Stripe: ``Idempotency-Key`` is optional (without it,
every POST is a new job), a create answers 200 and a replay the same with ``Idempotent-Replayed:
true``; every answer has a ``Request-Id``; errors are ``{"error": {"type", "code", "message",
"param"?}}`` (400 invalid_request_error, 404 resource_missing, 429 rate_limit_error, 5xx
api_error). Webhooks go to ``SIMULATOR_WEBHOOK_URL`` (``simulator.personality``).
"""

from __future__ import annotations

import secrets
from typing import Any

from flask import Blueprint, Response, jsonify, request

from simulator import submission
from simulator.personality import stripe_job
from simulator.runtime import runtime

bp = Blueprint("stripe", __name__, url_prefix="/v1")


def _answer(body: dict[str, Any], status: int = 200) -> Response:
    response = jsonify(body)
    response.status_code = status
    response.headers["Request-Id"] = "req_" + secrets.token_hex(7)
    return response


def stripe_error(status: int, message: str, code: str | None = None, param: str | None = None) -> Response:
    """Stripe's error object; the type follows the status as Stripe's does."""
    kind = "rate_limit_error" if status == 429 else "api_error" if status >= 500 else "invalid_request_error"
    error: dict[str, Any] = {"type": kind, "message": message}
    if code:
        error["code"] = code
    if param:
        error["param"] = param
    return _answer({"error": error}, status)


def _unaskable() -> Response | None:
    config = runtime().store.config
    if config.status_down:
        return stripe_error(config.down_status, "simulated outage (status_down)")
    return None


@bp.post("/jobs")
def create_job() -> Response:
    rt = runtime()
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        return stripe_error(400, "The request body must be a JSON object.", "parameter_invalid")
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference.strip():
        return stripe_error(400, "Missing required param: reference.", "parameter_missing", "reference")
    if "input" not in body:
        return stripe_error(400, "Missing required param: input.", "parameter_missing", "input")
    key = request.headers.get("Idempotency-Key", "").strip() or None
    result = submission.submit(
        rt, key, reference, body["input"], "", request.headers.get("traceparent"), request.headers.get("baggage")
    )
    if isinstance(result, submission.Refusal):
        if result.reason == submission.INVALID_KNOBS:
            return stripe_error(400, result.detail, "parameter_invalid", "input[simulate]")
        if result.reason == submission.REJECTED:
            return stripe_error(400, result.detail, "job_rejected")
        response = stripe_error(result.status, result.detail)
        if result.retry_after is not None:
            response.headers["Retry-After"] = str(result.retry_after)
        return response
    response = _answer(stripe_job(result.job))
    if not result.created:
        response.headers["Idempotent-Replayed"] = "true"
    return response


@bp.get("/jobs/<job_id>")
def retrieve_job(job_id: str) -> Response:
    refused = _unaskable()
    if refused is not None:
        return refused
    job = runtime().store.get(job_id)
    if job is None:
        return stripe_error(404, f"No such job: '{job_id}'", "resource_missing", "id")
    return _answer(stripe_job(job))


@bp.get("/jobs")
def list_jobs() -> Response:
    """Jobs with this ``reference`` (or every job, newest first), ``limit`` of them (10; 1 to 100)."""
    refused = _unaskable()
    if refused is not None:
        return refused
    limit_text = request.args.get("limit", "10")
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= 100:
        return stripe_error(400, "Invalid integer: limit must be between 1 and 100.", "parameter_invalid", "limit")
    store = runtime().store
    reference = request.args.get("reference")
    jobs = store.find(reference) if reference else store.all_jobs()
    jobs.sort(key=lambda j: j.created_at, reverse=True)
    limit = int(limit_text)
    data = [stripe_job(job) for job in jobs[:limit]]
    return _answer({"object": "list", "url": "/v1/jobs", "has_more": len(jobs) > limit, "data": data})


@bp.post("/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    job, changed = runtime().engine.finish(job_id, "canceled")
    if job is None:
        return stripe_error(404, f"No such job: '{job_id}'", "resource_missing", "id")
    if not changed:
        message = f"You cannot cancel this job because it has a status of {stripe_job(job)['status']}."
        return stripe_error(400, message, "job_unexpected_state")
    return _answer(stripe_job(job))
