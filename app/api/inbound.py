"""``POST /webhooks/<provider>``: the HTTP way in for vendor events (``service.ingress``).

The answer is 2xx only once the event is durably stored (duplicates and orphans included); calls to
other systems happen after the response, from workers. A ``confirm`` provider's hint is answered
202: its status check is stored (or one was pending, the task is final, or the job is unknown:
nothing stored); the body itself is never applied.
"""

from __future__ import annotations

import time

from flask import Blueprint, Response, jsonify, request
from werkzeug.exceptions import RequestEntityTooLarge

from app.errors import ApiError, BadRequest, Conflict, NotFound, PayloadTooLarge, Unauthorized, UnsupportedMediaType
from app.session import db_session
from foundation import tracing
from runtime.context import liaison
from service import ingress

bp = Blueprint("webhooks", __name__, url_prefix="/webhooks")

#: A refusal's answer, by the reason it is counted under.
_ANSWERS: dict[str, type[ApiError]] = {
    "unknown_provider": NotFound,
    "unsupported_media_type": UnsupportedMediaType,
    "too_large": PayloadTooLarge,
    "signature": Unauthorized,
    "stale": Unauthorized,
    "malformed": BadRequest,
    "unbound": Conflict,
}


def _answer(refused: ingress.Refused) -> ApiError:
    if refused.signature is not None:
        return Unauthorized(refused.detail, reason=refused.signature)
    return _ANSWERS[refused.reason](refused.detail)


@bp.post("/<provider>")
def receive(provider: str) -> tuple[Response, int]:
    return _receive(provider, None)


@bp.post("/<provider>/t/<token>")
def receive_with_token(provider: str, token: str) -> tuple[Response, int]:
    """The token-url scheme's way in: the token proves the sender (``webhooks.schemes``). It is a
    credential: logs redact it (``foundation.logging``), traces skip this route, metrics name the
    endpoint, not the path."""
    return _receive(provider, token)


def _receive(provider: str, token: str | None) -> tuple[Response, int]:
    settings = liaison().settings
    ingress.arrived(provider)
    try:
        found = ingress.provider_settings(settings, provider)
        if request.mimetype not in found.media_types:
            wanted = " or ".join(found.media_types)
            raise ingress.refuse(provider, "unsupported_media_type", f"send Content-Type: {wanted}")
        try:
            body = request.get_data(cache=True)
        except RequestEntityTooLarge:
            ingress.refuse(provider, "too_large", "body too large")
            raise
        session = db_session()
        received = ingress.receive(
            session,
            settings,
            found,
            request.headers,
            body,
            now_s=time.time(),
            tolerance_s=settings.webhook_tolerance_s,
            path_token=token,
        )
    except ingress.Refused as refused:
        raise _answer(refused) from None
    # in the task's trace: the commit publishes the relays the event made, and they continue it
    with tracing.continued(received.traceparent, "liaison.webhook", provider=provider, status=received.status):
        session.commit()
    return jsonify({"status": received.status, "message_id": received.message_id}), 202 if received.hint else 200
