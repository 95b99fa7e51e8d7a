"""``POST /webhooks/<provider>``: verify on the raw body, then store and apply in one transaction.

Nothing in the payload is trusted before the signature checks out. The answer is 2xx only once
the event is durably stored (duplicates and orphans included); calls to other systems happen
after the response, from workers.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from app.errors import ApiError, BadRequest, NotFound, PayloadTooLarge, Unauthorized, UnsupportedMediaType
from app.session import db_session
from foundation import metrics
from foundation.logging import bind
from models.base import utcnow
from service import vendor_events
from webhooks.events import EventTooLarge, MalformedEvent, parse_event
from webhooks.signing import SignatureError, verify
from workers.runtime import liaison

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")


def _reject(provider: str, reason: metrics.WebhookRejection, error: ApiError) -> ApiError:
    metrics.webhook_rejected(provider, reason)
    return error


@bp.post("/<provider>")
def receive(provider: str) -> tuple[Response, int]:
    ctx = liaison()
    metrics.webhook_received(provider)
    settings = ctx.settings.providers.get(provider)
    if settings is None:
        raise _reject(provider, "unknown_provider", NotFound("unknown provider"))
    if request.mimetype != "application/json":
        raise _reject(provider, "unsupported_media_type", UnsupportedMediaType("send Content-Type: application/json"))
    try:
        body = request.get_data(cache=True)
    except RequestEntityTooLarge:
        metrics.webhook_rejected(provider, "too_large")
        raise
    try:
        message_id = verify(
            settings.webhook_secrets, request.headers, body, time.time(), ctx.settings.webhook_tolerance_s
        )
    except SignatureError as exc:
        reason: metrics.WebhookRejection = "stale" if exc.reason == "stale" else "signature"
        raise _reject(provider, reason, Unauthorized(f"signature rejected: {exc.reason}", reason=exc.reason)) from None
    bind(message_id=message_id)
    if len(message_id) > 200 or "\x00" in message_id:  # PostgreSQL text cannot hold NUL
        raise _reject(
            provider, "malformed", BadRequest("webhook-id (svix-id) must be at most 200 characters, without NUL")
        )
    try:
        event = parse_event(body, ctx.settings.outcome_limits)
    except EventTooLarge as exc:
        raise _reject(provider, "too_large", PayloadTooLarge(str(exc))) from None
    except MalformedEvent as exc:
        raise _reject(provider, "malformed", BadRequest(str(exc))) from None

    session = db_session()
    result = vendor_events.receive_event(session, provider, message_id, event, utcnow())
    session.commit()
    if result.status == "duplicate":
        metrics.webhook_rejected(provider, "duplicate")
    return jsonify({"status": result.status, "message_id": message_id}), 200
