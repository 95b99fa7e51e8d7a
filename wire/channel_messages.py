"""Pure: the messages a domain app and Liaison exchange over a broker channel (docs/asyncapi.yaml).

A client on a channel (``clients.channel``: ``amqp`` or ``redis``) sends commands and hears events
over that broker instead of, or besides, HTTP:

* **RabbitMQ**: commands on the durable queue ``<prefix>.<client>.commands`` (AMQP properties
  ``message_id`` and ``type``; optional headers ``Idempotency-Key`` and ``traceparent``; the body
  is JSON); events on
  the topic exchange ``<prefix>.events``, routing key ``<client>.<event type>``
  (``shop.task.completed``), the Standard Webhooks headers as message headers.
* **Redis Streams**: commands on the stream ``<prefix>:<client>:commands``, read by the consumer
  group ``liaison``; each entry has the fields ``message_id``, ``type``, ``body`` and optionally
  ``idempotency_key`` and ``traceparent``. Events on the stream ``<prefix>:<client>:events`` (trimmed to about
  ``LIAISON_CHANNEL_EVENTS_MAXLEN`` entries), fields ``message_id``, ``type``, ``body`` and the
  three ``webhook-*`` headers.

Commands: ``SubmitTask`` (the body is exactly ``POST /api/v1/tasks``'s) and ``CancelTask``
(``{"correlation_id", "reason"?}``). The MessageId deduplicates them; one that cannot be taken is
answered by a ``task.rejected`` event naming it. Events have the body, ``message_id`` and
``sequence`` of the HTTP callbacks. No broker client here: kombu and redis-py live in
``workers.channels`` and ``app.consumers``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from core.trace_context import valid_traceparent
from wire.bounded_json import InvalidJson, TooDeep, strict_loads

AMQP = "amqp"
REDIS = "redis"
CHANNELS = (AMQP, REDIS)
SUBMIT_TASK = "SubmitTask"
CANCEL_TASK = "CancelTask"
COMMANDS = (SUBMIT_TASK, CANCEL_TASK)
#: The events a channel carries: the HTTP callbacks' types, and the answer to a refused command.
REJECTED = "task.rejected"
EVENT_TYPES = ("task.accepted", "task.progress", "task.completed", "task.deadline_exceeded", REJECTED)
#: The consumer group that reads every command stream.
GROUP = "liaison"
#: A client on a channel names queues, streams and routing keys: one topic word, no separators.
CHANNEL_NAME = re.compile(r"^[a-z0-9_-]{1,64}$")
MESSAGE_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
#: A channel event's outbox row: the callback's message_id with this suffix (outbox message ids are
#: unique; the event itself carries the callback's).
ROW_SUFFIX = ".channel"


def channel_name_problem(name: str) -> str | None:
    """Why a client of this name cannot use a channel, or None."""
    if CHANNEL_NAME.fullmatch(name):
        return None
    return "a client on a channel needs a name of 1 to 64 characters of a-z 0-9 _ - (it names queues and routing keys)"


def command_queue(prefix: str, client: str) -> str:
    return f"{prefix}.{client}.commands"


def events_exchange(prefix: str) -> str:
    return f"{prefix}.events"


def routing_key(client: str, event_type: str) -> str:
    """``<client>.<event type>``: a domain app binds ``shop.#`` for all of its events, or
    ``shop.task.completed`` for one type."""
    return f"{client}.{event_type}"


def command_stream(prefix: str, client: str) -> str:
    return f"{prefix}:{client}:commands"


def events_stream(prefix: str, client: str) -> str:
    return f"{prefix}:{client}:events"


def row_message_id(event_message_id: str) -> str:
    return event_message_id + ROW_SUFFIX


@dataclass(frozen=True)
class Command:
    type: str  # SUBMIT_TASK | CANCEL_TASK
    message_id: str
    body: Any  # the JSON body, parsed; its fields are checked by the API's own parser
    idempotency_key: str | None = None
    #: the W3C traceparent the command was sent in (valid, or None: an invalid one is absent)
    traceparent: str | None = None


@dataclass(frozen=True)
class ChannelEvent:
    """One event bound for a client's channel, as the channel task hands it to the sender
    (``workers.channels``): which broker, whose, signed with which secrets, and its body."""

    channel: str  # amqp | redis
    client: str
    secrets: list[str]
    body: dict[str, Any]  # carries its message_id and type

    @property
    def message_id(self) -> str:
        return str(self.body["message_id"])

    @property
    def type(self) -> str:
        return str(self.body["type"])


class CommandRefused(ValueError):
    """A command that cannot be taken as it is: answered by a ``task.rejected`` event.
    ``status`` is the HTTP status the same request would have had."""

    def __init__(self, title: str, status: int = 400, errors: list[dict[str, str]] | None = None) -> None:
        super().__init__(title)
        self.title = title
        self.status = status
        self.errors = errors or []


def text_field(fields: Mapping[Any, Any], name: str) -> str | None:
    """A Redis entry's or AMQP message's field as text (bytes read as UTF-8), None when absent or
    not text."""
    value = fields.get(name, fields.get(name.encode()))
    if isinstance(value, (bytes, bytearray)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return None
    return value if isinstance(value, str) else None


def parse_command(
    message_id: str | None,
    command_type: str | None,
    body: bytes,
    *,
    max_bytes: int,
    max_depth: int,
    idempotency_key: str | None = None,
    traceparent: str | None = None,
) -> Command:
    """A command's envelope and JSON body, bounded like an HTTP request: at most ``max_bytes``, the
    body object plus ``max_depth`` levels (the ``input`` field's limit). The fields themselves are
    the API parser's business (``app.api.validation.parse_submit``). A ``traceparent`` that is not a
    valid W3C one (``core.trace_context``, bounded in length) is dropped, as over HTTP: never refused."""
    if message_id is None or not MESSAGE_ID.fullmatch(message_id):
        raise CommandRefused("a command needs a message_id of 1 to 200 printable ASCII characters")
    if command_type not in COMMANDS:
        raise CommandRefused(f"type must be one of {', '.join(COMMANDS)}")
    if idempotency_key is not None and not MESSAGE_ID.fullmatch(idempotency_key):
        raise CommandRefused(
            "bad Idempotency-Key",
            422,
            [{"field": "Idempotency-Key", "message": "1–200 printable ASCII characters, no spaces"}],
        )
    if len(body) > max_bytes:
        raise CommandRefused(f"the body is {len(body)} bytes, at most {max_bytes}", 413)
    try:
        data = strict_loads(body, max_depth=max_depth + 1, what="command")
    except TooDeep as exc:
        field = "input" if command_type == SUBMIT_TASK else "body"
        message = f"nested too deeply: at most {max_depth} levels (the command was {exc.depth} deep)"
        raise CommandRefused(f"{field} is nested too deeply", 422, [{"field": field, "message": message}]) from None
    except InvalidJson as exc:
        raise CommandRefused(f"the body is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise CommandRefused("the body must be a JSON object", 422)
    return Command(command_type, message_id, data, idempotency_key, valid_traceparent(traceparent))


def cancel_fields(body: Mapping[str, Any]) -> tuple[str, str]:
    """A CancelTask body → (correlation_id, reason), checked like ``POST …/cancel``."""
    correlation_id = body.get("correlation_id")
    if not isinstance(correlation_id, str) or not re.fullmatch(r"[A-Za-z0-9._:@-]{1,200}", correlation_id):
        raise CommandRefused(
            "bad correlation_id",
            422,
            [{"field": "correlation_id", "message": "1–200 characters of A-Z a-z 0-9 . _ : @ -"}],
        )
    reason = body.get("reason", "canceled by the domain app")
    if not isinstance(reason, str) or not 0 < len(reason) <= 500:
        raise CommandRefused("bad reason", 422, [{"field": "reason", "message": "a string of 1 to 500 characters"}])
    unknown = sorted(set(body) - {"correlation_id", "reason"})
    if unknown:
        raise CommandRefused("unknown fields", 422, [{"field": name, "message": "unknown field"} for name in unknown])
    return correlation_id, reason


def rejection(
    command_message_id: str | None,
    command_type: str | None,
    status: int,
    title: str,
    errors: list[dict[str, str]],
    *,
    correlation_id: str | None,
    occurred_at: str,
    **extra: Any,
) -> dict[str, Any]:
    """A ``task.rejected`` event's body (without its ``message_id``): the command it answers and
    the problem the same HTTP request would have had."""
    return {
        "type": REJECTED,
        "command_message_id": command_message_id,
        "command_type": command_type,
        "correlation_id": correlation_id,
        "status": status,
        "title": title,
        "errors": errors,
        "occurred_at": occurred_at,
        **extra,
    }
