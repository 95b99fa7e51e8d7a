"""The naive pipeline's web app: a submit endpoint and a webhook view, one short transaction each,
then an enqueue. Served like Liaison's web (the Procfile's gunicorn line, this app instead).

    gunicorn ... 'bench.naive.web:create_app()'
"""

from __future__ import annotations

import hmac
import os
from datetime import UTC, datetime

from flask import Flask, Response, jsonify, request
from sqlalchemy import insert, update
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from bench.naive import tasks
from bench.naive.schema import engine, jobs


def create_app() -> Flask:
    app = Flask(__name__)
    api_key = os.environ["NAIVE_API_KEY"]
    vendor = Webhook(os.environ["NAIVE_VENDOR_SECRET"])

    @app.post("/tasks")
    def submit() -> tuple[Response, int]:
        if not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {api_key}"):
            return jsonify({"title": "Unauthorized"}), 401
        body = request.get_json()
        with engine().begin() as conn:
            job_id = conn.execute(
                insert(jobs)
                .values(correlation_id=body["correlation_id"], state="requested", input=body["input"])
                .returning(jobs.c.id)
            ).scalar_one()
        tasks.submit.delay(job_id)
        return jsonify({"correlation_id": body["correlation_id"], "state": "requested"}), 202

    @app.post("/webhooks/<provider>")
    def webhook(provider: str) -> tuple[Response, int]:
        raw = request.get_data()
        try:
            event = vendor.verify(raw, {key.lower(): value for key, value in request.headers.items()})
        except WebhookVerificationError:
            return jsonify({"title": "bad signature"}), 401
        completed = event["type"] == "job.completed"
        state = event.get("status", "failed") if completed else "accepted"
        values = {"state": state, "updated_at": datetime.now(UTC)}
        if completed:
            values["outcome"] = event.get("outcome")
        with engine().begin() as conn:
            row = conn.execute(
                update(jobs)
                .where(jobs.c.vendor_job_id == event["job_id"])
                .values(**values)
                .returning(jobs.c.correlation_id)
            ).one_or_none()
        if row is None:  # not recorded yet (no late binding): the vendor sends it again later
            return jsonify({"title": "unknown job"}), 404
        kind = "task.completed" if completed else "task.accepted"
        tasks.relay.delay(
            {
                "type": kind,
                "correlation_id": row.correlation_id,
                "state": state,
                "outcome": event.get("outcome"),
                "occurred_at": datetime.now(UTC).isoformat(),
            }
        )
        return jsonify({"status": "applied"}), 200

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        return jsonify({"status": "ok"}), 200

    return app
