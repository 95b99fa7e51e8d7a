"""Control endpoints (``/_sim/...``) for tests and the demo: inspect, configure, reset, force.

Not part of the provider contract; a real vendor has nothing like it.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify, request

from simulator.behaviour import BehaviourError, parse_global_config
from simulator.engine import FINAL_STATUSES
from simulator.problems import problem
from simulator.runtime import runtime

bp = Blueprint("control", __name__)


def _optional_json_object() -> dict | None:
    """The body as an object; ``{}`` when empty; ``None`` when it is not a JSON object."""
    if not request.get_data():
        return {}
    body = request.get_json(force=True, silent=True)
    return body if isinstance(body, dict) else None


@bp.get("/healthz")
def healthz() -> Response:
    return jsonify({"status": "ok"})


@bp.get("/_sim/jobs")
def list_everything() -> Response:
    """All jobs, submit attempts per Idempotency-Key, every webhook delivery, the config, and the
    vendor played (jobs are shown in the simulator's own terms, whichever it is)."""
    rt = runtime()
    return jsonify({**rt.store.snapshot(), "personality": rt.settings.personality})


@bp.get("/_sim/config")
def get_config() -> Response:
    return jsonify(runtime().store.config.as_dict())


@bp.post("/_sim/config")
def set_config() -> Response:
    """Replace the global knobs (an empty object restores the defaults)."""
    body = _optional_json_object()
    try:
        config = parse_global_config(body)
    except BehaviourError as exc:
        return problem(400, "Invalid simulator config", str(exc), errors=exc.errors)
    runtime().store.set_config(config)
    return jsonify(config.as_dict())


@bp.post("/_sim/reset")
def reset() -> Response:
    """Forget all jobs, attempts, deliveries and config; pending timers of old jobs do nothing."""
    runtime().store.reset()
    return jsonify({"reset": True})


@bp.post("/_sim/jobs/<job_id>/complete")
def complete_now(job_id: str) -> Response:
    """Finish a job immediately (``{"status", "outcome"}`` optional), for deterministic tests."""
    body = _optional_json_object()
    if body is None or set(body) - {"status", "outcome"}:
        return problem(400, "Malformed body", 'expected {"status"?, "outcome"?}')
    rt = runtime()
    job = rt.store.get(job_id)
    if job is None:
        return problem(404, "Unknown job", f"no job {job_id}")
    status = body.get("status", job.behaviour.outcome)
    if status not in FINAL_STATUSES:
        return problem(400, "Malformed body", f"status must be one of {list(FINAL_STATUSES)}")
    job, changed = rt.engine.finish(job_id, status, body.get("outcome"))
    if job is None:
        return problem(404, "Unknown job", f"no job {job_id}")
    if not changed:
        return problem(409, "Job already finished", f"job {job_id} is {job.status}")
    return jsonify(job.public())
