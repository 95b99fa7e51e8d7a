"""The ``github`` personality's API: GitHub's REST conventions on the simulator's jobs.

Under ``/api/v3`` (a GitHub Enterprise Server's API root): ``POST /api/v3/jobs`` (``{"external_id",
"input"}``: the client's reference is ``external_id``, as on a check run), ``GET /api/v3/jobs/<id>``,
``GET /api/v3/jobs?external_id=`` (``{"total_count", "jobs"}``), ``POST /api/v3/jobs/<id>/cancel``
(202 ``{}``; 409 once completed, as a workflow run's cancel). A job is ``{"id": <integer>, "node_id",
"external_id", "status": "queued"|"in_progress"|"completed", "conclusion": null|"success"|"failure"|
"cancelled", "created_at", "started_at", "completed_at", "progress", "output"}``
(``simulator.personality.github_job``). GitHub has no idempotency keys: without ``Idempotency-Key``
every POST is a new job (the simulator honours one if sent). Errors are ``{"message",
"documentation_url", "status"}``, 422 ``Validation Failed`` with ``errors``. Webhooks go to
``SIMULATOR_WEBHOOK_URL``.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, jsonify, request

from simulator import submission
from simulator.personality import github_job
from simulator.runtime import runtime
from simulator.store import numeric_job_id

bp = Blueprint("github", __name__, url_prefix="/api/v3")
DOCS = "https://docs.github.com/rest"
_MESSAGES = {404: "Not Found", 409: "Conflict", 422: "Unprocessable Entity", 429: "API rate limit exceeded"}


def github_error(status: int, message: str | None = None, errors: list[dict[str, Any]] | None = None) -> Response:
    body: dict[str, Any] = {"message": message or _MESSAGES.get(status, "Server Error")}
    if errors:
        body["errors"] = errors
    body.update(documentation_url=DOCS, status=str(status))
    response = jsonify(body)
    response.status_code = status
    return response


def _invalid(field: str, code: str, message: str | None = None) -> Response:
    error: dict[str, Any] = {"resource": "Job", "field": field, "code": code}
    if message:
        error["message"] = message
    return github_error(422, "Validation Failed", [error])


def _unaskable() -> Response | None:
    config = runtime().store.config
    return github_error(config.down_status) if config.status_down else None


def _job(job_id: str) -> Any:
    return runtime().store.get(job_id) if job_id.isdigit() else None


@bp.post("/jobs")
def create_job() -> Response:
    rt = runtime()
    body = request.get_json(force=True, silent=True)
    if not isinstance(body, dict):
        return github_error(400, "Problems parsing JSON")
    external_id = body.get("external_id")
    if not isinstance(external_id, str) or not external_id.strip():
        return _invalid("external_id", "missing_field")
    if "input" not in body:
        return _invalid("input", "missing_field")
    key = request.headers.get("Idempotency-Key", "").strip() or None
    result = submission.submit(
        rt,
        key,
        external_id,
        body["input"],
        "",
        request.headers.get("traceparent"),
        request.headers.get("baggage"),
        job_id=numeric_job_id,
    )
    if isinstance(result, submission.Refusal):
        if result.reason == submission.INVALID_KNOBS:
            return _invalid("input.simulate", "invalid", result.detail)
        response = github_error(result.status)
        if result.retry_after is not None:
            response.headers["Retry-After"] = str(result.retry_after)
        return response
    response = jsonify(github_job(result.job))
    response.status_code = 201 if result.created else 200
    response.headers["Location"] = f"/api/v3/jobs/{result.job.job_id}"
    return response


@bp.get("/jobs/<job_id>")
def get_job(job_id: str) -> Response:
    refused = _unaskable()
    if refused is not None:
        return refused
    job = _job(job_id)
    return github_error(404) if job is None else jsonify(github_job(job))


@bp.get("/jobs")
def list_jobs() -> Response:
    """Jobs with this ``external_id`` (or every job, newest first), ``per_page`` of them (30; 1 to 100)."""
    refused = _unaskable()
    if refused is not None:
        return refused
    per_page = request.args.get("per_page", "30")
    if not per_page.isdigit() or not 1 <= int(per_page) <= 100:
        return _invalid("per_page", "invalid")
    store = runtime().store
    external_id = request.args.get("external_id")
    jobs = store.find(external_id) if external_id else store.all_jobs()
    jobs.sort(key=lambda j: j.created_at, reverse=True)
    return jsonify({"total_count": len(jobs), "jobs": [github_job(job) for job in jobs[: int(per_page)]]})


@bp.post("/jobs/<job_id>/cancel")
def cancel_job(job_id: str) -> Response:
    if _job(job_id) is None:
        return github_error(404)
    job, changed = runtime().engine.finish(job_id, "canceled")
    if job is None:
        return github_error(404)
    if not changed:
        return github_error(409, "Cannot cancel a job that is completed.")
    response = jsonify({})
    response.status_code = 202
    return response
