"""The provider contract (docs/design.md §5) that Liaison's generic REST provider speaks: the API of
the ``liaison`` personality, and of ``poll-only`` (no ``callback_url``) and ``token-url`` (whose
``callback_url`` must lie on an allowed origin, ``simulator.callbacks``)."""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from simulator import submission
from simulator.callbacks import callback_allowed
from simulator.problems import problem
from simulator.runtime import runtime
from simulator.settings import POLL_ONLY, TOKEN_URL
from simulator.submission import DOWN, INVALID_KNOBS, REJECTED, TRANSIENT

bp = Blueprint("provider", __name__)


def _body_errors(body: Any, personality: str, origins: tuple[str, ...]) -> list[str]:
    if not isinstance(body, dict):
        return ["body must be a JSON object"]
    errors = []
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference.strip():
        errors.append("reference must be a non-empty string")
    if "input" not in body:
        errors.append("input is required (any JSON value)")
    if personality == POLL_ONLY:
        return errors  # a vendor without webhooks has no use for a callback URL
    callback_url = body.get("callback_url")
    if not isinstance(callback_url, str) or not callback_url.startswith(("http://", "https://")):
        errors.append("callback_url must be an http(s) URL")
    elif personality == TOKEN_URL and not callback_allowed(callback_url, origins):
        errors.append("callback_url is not on an origin this vendor calls back (SIMULATOR_CALLBACK_ORIGINS)")
    return errors


def _job_response(job_public: dict[str, Any], status: int) -> Response:
    response = jsonify(job_public)
    response.status_code = status
    response.headers["Location"] = f"/jobs/{job_public['job_id']}"
    return response


_TITLES = {
    INVALID_KNOBS: "Invalid simulate knobs",
    DOWN: "Vendor unavailable",
    REJECTED: "Job rejected",
    TRANSIENT: "Temporarily unavailable",
}


@bp.post("/jobs")
def submit_job() -> Response:
    """Create a job, once per Idempotency-Key, unless a knob says to fail first."""
    rt = runtime()
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return problem(400, "Missing Idempotency-Key", "POST /jobs needs an Idempotency-Key header")
    body = request.get_json(force=True, silent=True)
    errors = _body_errors(body, rt.settings.personality, rt.settings.callback_origins)
    if errors:
        return problem(400, "Malformed job request", errors=errors)
    assert isinstance(body, dict)  # _body_errors accepts nothing else
    callback_url = "" if rt.settings.personality == POLL_ONLY else body["callback_url"]
    result = submission.submit(
        rt,
        key,
        body["reference"],
        body["input"],
        callback_url,
        request.headers.get("traceparent"),
        request.headers.get("baggage"),
    )
    if isinstance(result, submission.Refusal):
        extra = {"errors": result.errors} if result.errors else {}
        response = problem(result.status, _TITLES[result.reason], result.detail, **extra)
        if result.retry_after is not None:
            response.headers["Retry-After"] = str(result.retry_after)
        return response
    return _job_response(result.job.public(), 201 if result.created else 200)


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    config = runtime().store.config
    if config.status_down:
        return problem(config.down_status, "Vendor unavailable", "simulated outage (status_down)")
    job = runtime().store.get(job_id)
    if job is None:
        return problem(404, "Unknown job", f"no job {job_id}")
    return jsonify(job.public())


@bp.get("/jobs")
def find_jobs() -> Response:
    """Look jobs up by the client's reference, to settle a submit whose answer was lost."""
    config = runtime().store.config
    if config.status_down:  # a vendor that cannot be asked: about a job, or by reference
        return problem(config.down_status, "Vendor unavailable", "simulated outage (status_down)")
    reference = request.args.get("reference")
    if not reference:
        return problem(400, "Missing reference", "GET /jobs needs ?reference=")
    return jsonify({"jobs": [job.public() for job in runtime().store.find(reference)]})


@bp.post("/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    job, changed = runtime().engine.finish(job_id, "canceled")
    if job is None:
        return problem(404, "Unknown job", f"no job {job_id}")
    if not changed:
        return problem(409, "Job already finished", f"job {job_id} is {job.status}")
    response = jsonify({"job_id": job.job_id, "status": job.status})
    response.status_code = 202
    return response
