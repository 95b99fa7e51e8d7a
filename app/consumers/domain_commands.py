"""Commands from domain apps over a broker channel: SubmitTask and CancelTask, taken like the API's.

One command is one transaction: its MessageId recorded in the inbox (``ProcessedMessage``, source
``channel:<client>``: a second delivery, or a resend, changes nothing), then exactly what
``POST /api/v1/tasks`` or ``POST …/cancel`` does — a submit through the same way in
(``app.commands``: the API's parser, the service's intake), the same limits (body size, depth, the
submit rate and the open-task cap) — or, for a command that cannot be taken, a ``task.rejected``
event in the outbox naming it and the problem the HTTP request would have had. Never a silent drop.
The message is acked only after that transaction committed; a database that does not answer leaves
it unacked (RabbitMQ redelivers it, Redis keeps it pending and it is read again).

The channels are read by ``app.consumers.command_readers``. This module sits with the composition
roots (``app``): it uses the API's way in (``app.commands``) and limits.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app import commands
from app.errors import ApiError
from app.limits import check_submit_rate
from core.trace_context import valid_traceparent
from foundation import tracing
from foundation.logging import bind, clear
from models.base import utcnow
from models.client import Client
from models.messages import MAX_MESSAGE_ID_CHARS
from runtime.context import Liaison
from service import claims, credentials, intake, outbox_rows
from service.lifecycle import AlreadyFinal, request_cancel
from service.vendor_events import first_time
from wire.channel_messages import (
    CANCEL_TASK,
    SUBMIT_TASK,
    CommandRefused,
    cancel_fields,
    parse_command,
    rejection,
)

log = logging.getLogger(__name__)
#: A database that does not answer: the command is tried again after this pause.
RETRY_PAUSE_S = 1.0
#: How often the consumers look for clients put on their channel since they started.
REFRESH_S = 10.0


@dataclass(frozen=True)
class Handled:
    outcome: str  # submitted | replayed | cancel_requested | duplicate | rejected
    message_id: str | None
    correlation_id: str | None = None


@dataclass(frozen=True)
class ChannelClient:
    id: int
    name: str


def source(client: str) -> str:
    return f"channel:{client}"


def take(
    ctx: Liaison,
    client: ChannelClient,
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    idempotency_key: str | None = None,
    traceparent: str | None = None,
) -> Handled:
    """Take one command (commits), in the trace its ``traceparent`` names. SQLAlchemyError escapes:
    the caller leaves the message unacked."""
    clear()
    bind(client=client.name, message_id=message_id)
    with tracing.continued(valid_traceparent(traceparent), "liaison.channel_command", command=command_type):
        return _take_committed(ctx, client, message_id, command_type, body, idempotency_key, traceparent)


def _take_committed(
    ctx: Liaison,
    client: ChannelClient,
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    idempotency_key: str | None,
    traceparent: str | None,
) -> Handled:
    refused: ApiError | None = None
    if command_type == SUBMIT_TASK:
        # the limiter runs its own short transaction, before ours (as the API does)
        with ctx.db.transaction() as session:
            found = session.get(Client, client.id)
            assert found is not None
            session.expunge(found)
        try:
            check_submit_rate(ctx.limiter, ctx.settings, found)  # every submit counts, as over HTTP
        except ApiError as exc:
            refused = exc
    for attempt in (1, 2):
        try:
            with ctx.db.transaction() as session:
                return _take(
                    ctx, session, client, message_id, command_type, body, (idempotency_key, traceparent), refused
                )
        except IntegrityError:
            # a concurrent identical command (or submit) won a unique constraint: the retry finds it
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _take(
    ctx: Liaison,
    session: Session,
    ref: ChannelClient,
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    keys: tuple[str | None, str | None],
    refused: ApiError | None,
) -> Handled:
    """``keys``: the command's Idempotency-Key and traceparent, as received."""
    idempotency_key, traceparent = keys
    now = utcnow()
    settings = ctx.settings
    client = session.get_one(Client, ref.id)

    def reject(status: int, title: str, errors: list[dict[str, str]] | None, correlation_id: str | None) -> Handled:
        payload = rejection(
            message_id,
            command_type,
            status,
            title,
            errors or [],
            correlation_id=correlation_id,
            occurred_at=now.isoformat(),
        )
        payload.update(message_id=outbox_rows.new_message_id(), client_id=client.id)
        outbox_rows.add_channel_event(session, None, correlation_id, payload, now)
        log.info("channel command %s from %s rejected: %s", message_id, client.name, title)
        return Handled("rejected", message_id, correlation_id)

    try:
        command = parse_command(
            message_id,
            command_type,
            body,
            max_bytes=settings.max_body_bytes,
            max_depth=settings.max_json_depth,
            idempotency_key=idempotency_key,
            traceparent=traceparent,
        )
    except CommandRefused as exc:
        seen_before = (
            message_id is not None
            and len(message_id) <= MAX_MESSAGE_ID_CHARS
            and not first_time(session, source(client.name), message_id, str(command_type)[:64], now)
        )
        if seen_before:
            return Handled("duplicate", message_id)
        return reject(exc.status, exc.title, exc.errors, None)
    if not first_time(session, source(client.name), command.message_id, command.type, now):
        return Handled("duplicate", command.message_id)
    correlation_id = command.body.get("correlation_id")
    correlation_id = correlation_id if isinstance(correlation_id, str) else None
    if client.disabled_at is not None:
        return reject(403, "this client is disabled", None, correlation_id)
    if refused is not None:
        return reject(refused.status, str(refused), refused.errors, correlation_id)
    if command.type == CANCEL_TASK:
        try:
            correlation_id, reason = cancel_fields(command.body)
        except CommandRefused as exc:
            return reject(exc.status, exc.title, exc.errors, correlation_id)
        task = intake.find_task(session, client, correlation_id)
        if task is None:
            return reject(404, "no such task", None, correlation_id)
        task = claims.lock_task(session, task.id)
        try:
            with session.begin_nested():
                request_cancel(session, task, reason, now)
        except AlreadyFinal as exc:
            return reject(409, str(exc), None, correlation_id)
        return Handled("cancel_requested", command.message_id, correlation_id)
    try:
        result = commands.submit(
            settings,
            session,
            client,
            command.body,
            command.idempotency_key,
            now,
            tracing.current_traceparent() or command.traceparent,
        )
    except ApiError as exc:  # the status, title and errors the HTTP request would have had
        return reject(exc.status, str(exc), exc.errors, correlation_id)
    outcome = "submitted" if result.created else "replayed"
    return Handled(outcome, command.message_id, result.task.correlation_id)


def channel_clients(ctx: Liaison, channel: str) -> list[ChannelClient]:
    with ctx.db.transaction() as session:
        return [ChannelClient(id_, name) for id_, name in credentials.clients_on_channel(session, channel)]


def as_bytes(body: Any) -> bytes:
    if isinstance(body, (bytes, bytearray)):
        return bytes(body)
    return str(body).encode("utf-8")
