"""``POST /webhooks/<provider>``: verify on the raw body, then store and apply in one transaction.

Nothing in the payload is trusted before the signature checks out. The answer is 2xx only once
the event is durably stored (duplicates and orphans included); calls to other systems happen
after the response, from workers.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify, request

from app.errors import BadRequest, NotFound, Unauthorized, UnsupportedMediaType
from app.extensions import liaison
from app.session import db_session
from models import service
from models.base import utcnow
from webhooks.events import MalformedEvent, parse_event
from webhooks.signing import SignatureError, verify

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")


@bp.post("/<provider>")
def receive(provider: str) -> tuple[Response, int]:
    ctx = liaison()
    settings = ctx.settings.providers.get(provider)
    if settings is None:
        raise NotFound("unknown provider")
    if request.mimetype != "application/json":
        raise UnsupportedMediaType("send Content-Type: application/json")
    body = request.get_data(cache=True)  # raises 413 past MAX_CONTENT_LENGTH
    try:
        message_id = verify(settings.webhook_secrets, request.headers, body, time.time(), ctx.settings.webhook_tolerance_s)
    except SignatureError as exc:
        raise Unauthorized(f"signature rejected: {exc.reason}", reason=exc.reason) from None
    if len(message_id) > 200:
        raise BadRequest("webhook-id is longer than 200 characters")
    try:
        event = parse_event(body)
    except MalformedEvent as exc:
        raise BadRequest(str(exc)) from None

    session = db_session()
    result = service.receive_event(session, provider, message_id, event, utcnow())
    session.commit()
    ctx.publisher.publish(result.outbox)
    return jsonify({"status": result.status, "message_id": message_id}), 200
