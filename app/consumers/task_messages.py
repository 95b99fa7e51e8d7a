"""A Celery consumer that dead-letters what it cannot run instead of dropping it.

Celery's own consumer logs and rejects (or, for a decode error, acks) a message naming no known
task or that cannot be decoded: on Redis it is simply gone. Ours first stores it as a DeadLetter
(kind ``poison``) with an Incident, then lets Celery reject it as usual (on RabbitMQ the queue's
dead-letter exchange keeps a copy too). It is a :class:`BrokerLossConsumer`: a broker restart
does not end the worker, and what it held on Redis is put back after the reconnect.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy.exc import SQLAlchemyError

from app.consumers.broker_loss import BrokerLossConsumer
from models.base import utcnow
from service.dead_letters import dead_letter_message

log = logging.getLogger(__name__)
_MAX_BODY = 4000


def _describe(message: Any, body: Any) -> tuple[str, dict[str, Any]]:
    headers = dict(getattr(message, "headers", None) or {})
    properties = dict(getattr(message, "properties", None) or {})
    message_id = str(headers.get("id") or properties.get("correlation_id") or getattr(message, "delivery_tag", "?"))
    raw = body if body is not None else getattr(message, "body", b"")
    return message_id, {
        "task": headers.get("task"),
        "content_type": getattr(message, "content_type", None),
        "body": repr(raw)[:_MAX_BODY],
    }


class DeadLetteringConsumer(BrokerLossConsumer):
    """Also lives through a broker loss (``app.consumers.broker_loss``)."""

    def _keep(self, message: Any, body: Any, error: str) -> None:
        message_id, payload = _describe(message, body)
        flask_app = getattr(self.app, "flask_app", None)
        if flask_app is None:
            log.error("cannot dead-letter message %s: no Flask app on the Celery app", message_id)
            return
        try:
            with flask_app.extensions["liaison"].db.transaction() as session:
                dead_letter_message(session, message_id, payload, error, utcnow())
        except SQLAlchemyError:
            log.exception("could not store poison message %s; it stays in the broker log only", message_id)

    def on_unknown_message(self, body: Any, message: Any) -> None:
        self._keep(message, body, "not a Celery task message")
        super().on_unknown_message(body, message)

    def on_unknown_task(self, body: Any, message: Any, exc: Exception) -> None:
        self._keep(message, body, f"names no registered task: {exc}")
        super().on_unknown_task(body, message, exc)

    def on_invalid_task(self, body: Any, message: Any, exc: Exception) -> None:
        self._keep(message, body, f"invalid task message: {exc}")
        super().on_invalid_task(body, message, exc)

    def on_decode_error(self, message: Any, exc: Exception) -> None:
        self._keep(message, None, f"cannot be decoded: {type(exc).__name__}")
        super().on_decode_error(message, exc)
