"""A bare Flask POST view, the yardstick of signed-webhook ingest: it reads and parses the same
JSON body Liaison's ``/webhooks/<provider>`` gets, and answers 200, nothing else (no signature
check, no database). Served with the Procfile's gunicorn line shape (bench/ingest.py).
"""

from __future__ import annotations

from flask import Flask, Response, jsonify, request


def create_app() -> Flask:
    app = Flask(__name__)

    @app.post("/webhooks/<provider>")
    def receive(provider: str) -> tuple[Response, int]:
        event = request.get_json()
        return jsonify({"status": "ok", "type": event.get("type")}), 200

    @app.get("/healthz")
    def healthz() -> tuple[Response, int]:
        return jsonify({"status": "ok"}), 200

    return app
