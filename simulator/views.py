"""The provider contract (docs/design.md §5) that Liaison's generic REST provider speaks."""

from __future__ import annotations

import time
from typing import Any

from flask import Blueprint, Response, jsonify, request

from simulator.behaviour import BehaviourError, resolve_behaviour
from simulator.problems import problem
from simulator.runtime import runtime
from simulator.store import new_job

bp = Blueprint("provider", __name__)


def _body_errors(body: Any) -> list[str]:
    if not isinstance(body, dict):
        return ["body must be a JSON object"]
    errors = []
    reference = body.get("reference")
    if not isinstance(reference, str) or not reference.strip():
        errors.append("reference must be a non-empty string")
    if "input" not in body:
        errors.append("input is required (any JSON value)")
    callback_url = body.get("callback_url")
    if not isinstance(callback_url, str) or not callback_url.startswith(("http://", "https://")):
        errors.append("callback_url must be an http(s) URL")
    return errors


def _job_response(job_public: dict[str, Any], status: int) -> Response:
    response = jsonify(job_public)
    response.status_code = status
    response.headers["Location"] = f"/jobs/{job_public['job_id']}"
    return response


@bp.post("/jobs")
def submit_job() -> Response:
    """Create a job, once per Idempotency-Key, unless a knob says to fail first."""
    rt = runtime()
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return problem(400, "Missing Idempotency-Key", "POST /jobs needs an Idempotency-Key header")
    body = request.get_json(force=True, silent=True)
    errors = _body_errors(body)
    if errors:
        return problem(400, "Malformed job request", errors=errors)
    assert isinstance(body, dict)  # _body_errors accepts nothing else
    config = rt.store.config
    try:
        behaviour = resolve_behaviour(config, body["input"])
    except BehaviourError as exc:
        return problem(400, "Invalid simulate knobs", str(exc), errors=exc.errors)

    attempt = rt.store.count_attempt(key)
    if config.down:
        return problem(config.down_status, "Vendor unavailable", "simulated outage (down)")
    existing = rt.store.job_for_key(key)
    if existing is None:
        if behaviour.reject:
            return problem(422, "Job rejected", "simulated permanent rejection (reject)")
        if attempt <= behaviour.transient_failures:
            response = problem(
                behaviour.transient_status,
                "Temporarily unavailable",
                f"simulated transient failure {attempt} of {behaviour.transient_failures}",
            )
            if behaviour.retry_after is not None:
                response.headers["Retry-After"] = str(behaviour.retry_after)
            return response

    job, created = (
        (existing, False)
        if existing
        else rt.store.add_or_get(
            new_job(
                key,
                body["reference"],
                body["input"],
                body["callback_url"],
                behaviour,
                traceparent=request.headers.get("traceparent"),
                baggage=request.headers.get("baggage"),
            )
        )
    )
    if created:
        rt.engine.start(job)
    answer = job.public()  # the state as of now; the sleep below must not change the answer
    if behaviour.slow_s:
        time.sleep(behaviour.slow_s)  # after creation: a client that timed out can find the job
    return _job_response(answer, 201 if created else 200)


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
