"""One way in for domain apps' commands, however they came: ``POST /api/v1/tasks`` (``app.api.tasks``)
and a ``SubmitTask`` on a broker channel (``app.consumers.domain_commands``) both take a submit
here, as ``service.ingress`` is the one way in for vendor events.

A submit is parsed by the HTTP contract's parser (``app.api.validation``: the same body, the same
field problems) and recorded by the service (``service.intake``: idempotency, the open-task cap,
fair dispatch's admission); a refusal is the ``ApiError`` the HTTP request answers with, and the
channel turns the same status, title and errors into its ``task.rejected`` event. It sits with the
edges, not in ``service``, because the parser and its refusals are the HTTP contract's.

What stays with each way in: reading the body (JSON depth, Content-Type; a channel's bounds and
MessageId), the submit rate (taken in the request's transaction over HTTP, in a short one of its own
before the command's), committing and answering.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Session

from app.api.validation import parse_submit
from app.errors import Conflict, TooManyRequests
from app.limits import max_open_tasks
from foundation.settings import Settings
from models.client import Client
from service import intake


def submit(
    settings: Settings,
    session: Session,
    client: Client,
    body: Any,
    idempotency_key: str | None,
    now: datetime,
    traceparent: str | None,
) -> intake.SubmitResult:
    """Parse a submit's body and record its task, or find the one its idempotency key made before,
    in the caller's transaction (not committed). Raises the ``ApiError`` of a refusal: the body's
    422, a reused key's 409, the open-task cap's 429."""
    req = parse_submit(
        body,
        providers=settings.providers,
        default_provider=settings.default_provider,
        client_callback_url=client.callback_url,
        now=now,
        client_callback_origins=client.callback_origins,
        input_limits=settings.input_limits,
        outbound_allow=settings.outbound_allow,
        client_channel=client.channel,
    )
    try:
        return intake.submit_task(
            session,
            client,
            req,
            idempotency_key,
            now,
            max_open_tasks=max_open_tasks(settings, client),
            traceparent=traceparent,
        )
    except intake.IdempotencyConflict as exc:  # the client's own key: names nothing of another tenant
        raise Conflict(str(exc)) from None
    except intake.OpenTasksCapReached as exc:
        raise TooManyRequests(str(exc), limit="max_open_tasks", max_open_tasks=exc.cap) from None
