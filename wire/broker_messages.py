"""Pure: the messages Liaison and an ``amqp`` vendor exchange over RabbitMQ (docs/design.md §5).

Liaison sends three commands to the vendor's command queue; the vendor answers on queues Liaison
names in ``reply_to``:

* ``job.submit``  body ``{"reference", "input"}``, header ``Idempotency-Key: <reference>``,
  ``correlation_id = reference``, ``reply_to`` = Liaison's event queue;
* ``job.cancel``  body ``{"job_id"}``, header ``Idempotency-Key: <job_id>``, ``reply_to`` as above;
* ``job.status``  body ``{"job_id"}``, ``reply_to`` = a queue of this one call, a fresh
  ``correlation_id``, ``expiration`` = how long Liaison waits for the answer.

The vendor's events (``job.accepted``, ``job.completed``, …) carry the webhook body and the
Standard Webhooks headers (``webhook-id``, ``webhook-timestamp``, ``webhook-signature``) as
message headers, signed with the provider's webhook secret exactly like a webhook; the status
reply is signed the same way and carries the request's ``correlation_id``.

An amqp vendor names its job by our reference: the submit has no synchronous answer to carry a
job id of the vendor's own (design departure 28). No broker client here: kombu lives in
``workers.providers.amqp`` and ``app.consumers.vendor_queues``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from wire.bounded_json import InvalidJson, JsonLimits, TooDeep, check_bounds, strict_loads

CONTENT_TYPE = "application/json"
SUBMIT = "job.submit"
CANCEL = "job.cancel"
STATUS = "job.status"
COMMANDS = (SUBMIT, CANCEL, STATUS)
IDEMPOTENCY_KEY = "Idempotency-Key"
#: A status reply's ``status``; ``not_found`` (with ``"error": "not_found"``) says no such job.
STATUSES = frozenset({"queued", "running", "succeeded", "failed", "canceled"})
NOT_FOUND = "not_found"
#: Headers read from a message at most: a vendor's message is untrusted input like a request.
MAX_HEADERS = 64
MAX_HEADER_CHARS = 4096


def encode(payload: Mapping[str, Any]) -> bytes:
    """The exact bytes that are signed and sent: compact JSON."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


@dataclass(frozen=True)
class Command:
    """One command as plain data: what the adapter hands to kombu's ``publish``."""

    type: str
    body: bytes
    message_id: str
    correlation_id: str
    headers: dict[str, str] = field(default_factory=dict)


def submit_command(reference: str, job_input: Any, message_id: str) -> Command:
    """Start a job. The vendor creates it once per Idempotency-Key (a resend after an unconfirmed
    publish is harmless) and names it by the reference."""
    body = encode({"reference": reference, "input": job_input})
    return Command(SUBMIT, body, message_id, reference, {IDEMPOTENCY_KEY: reference})


def cancel_command(job_id: str, message_id: str) -> Command:
    return Command(CANCEL, encode({"job_id": job_id}), message_id, job_id, {IDEMPOTENCY_KEY: job_id})


def status_command(job_id: str, message_id: str, correlation_id: str) -> Command:
    return Command(STATUS, encode({"job_id": job_id}), message_id, correlation_id)


def header_items(headers: Mapping[str, Any] | None) -> dict[str, str]:
    """A message's headers as the signature verifier reads them: lower-cased names, text values.

    AMQP header values are typed (a vendor's client may send bytes, numbers, nested tables):
    bytes are read as UTF-8, other scalars as their text, tables and lists are left out (no
    signature header is one). Past ``MAX_HEADERS`` entries or ``MAX_HEADER_CHARS`` a value, the
    rest is not read: the verifier then reports a missing or malformed header.
    """
    out: dict[str, str] = {}
    for count, (name, value) in enumerate((headers or {}).items()):
        if count >= MAX_HEADERS:
            break
        if not isinstance(name, str):
            continue
        if isinstance(value, (bytes, bytearray)):
            try:
                value = bytes(value).decode("utf-8")
            except UnicodeDecodeError:
                continue
        elif isinstance(value, bool) or not isinstance(value, (str, int)):
            continue
        text = str(value)
        if len(text) <= MAX_HEADER_CHARS:
            out[name.lower()] = text
    return out


class MalformedReply(ValueError):
    """A status reply that breaks the contract (the vendor's fault, never retried as ours)."""


@dataclass(frozen=True)
class StatusReply:
    job_id: str
    status: str  # one of STATUSES, or NOT_FOUND
    outcome: Any = None

    @property
    def found(self) -> bool:
        return self.status != NOT_FOUND


def parse_status_reply(body: bytes, limits: JsonLimits) -> StatusReply:
    """A verified reply body → StatusReply: ``{"job_id", "status", "outcome"?}`` or
    ``{"job_id", "error": "not_found"}``. The depth is checked on the text first, then the
    outcome's depth and size, as for a webhook."""
    try:
        data = strict_loads(body, max_depth=limits.max_depth + 1, what="status reply")
    except TooDeep as exc:
        deep = f"nested {exc.depth} levels deep: the outcome may have at most {limits.max_depth}"
        raise MalformedReply(deep) from None
    except InvalidJson as exc:
        raise MalformedReply(f"not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise MalformedReply("not a JSON object")
    job_id = data.get("job_id")
    if not isinstance(job_id, str) or not job_id or len(job_id) > 200:
        raise MalformedReply("job_id must be a non-empty string of at most 200 characters")
    if data.get("error") == NOT_FOUND:
        return StatusReply(job_id, NOT_FOUND)
    status = data.get("status")
    if status not in STATUSES:
        raise MalformedReply(f"status must be one of {sorted(STATUSES)}")
    outcome = data.get("outcome")
    if outcome is not None:
        if not isinstance(outcome, dict):
            raise MalformedReply("outcome must be an object")
        try:
            check_bounds(outcome, limits, "outcome")
        except InvalidJson as exc:
            raise MalformedReply(str(exc)) from None
    return StatusReply(job_id, status, outcome)


def status_reply(job_id: str, status: str | None, outcome: Any = None) -> bytes:
    """A vendor's reply body (the simulator's): ``status=None`` means no such job."""
    if status is None:
        return encode({"job_id": job_id, "error": NOT_FOUND})
    return encode({"job_id": job_id, "status": status, "outcome": outcome})


class MalformedCommand(ValueError):
    """A command a vendor cannot act on (the simulator's side)."""


def parse_command(kind: str, body: bytes) -> dict[str, Any]:
    """A command's body as a vendor reads it: ``job.submit`` needs a reference and an input,
    the others a job id."""
    if kind not in COMMANDS:
        raise MalformedCommand(f"type must be one of {list(COMMANDS)}")
    try:
        data = strict_loads(body, what="command")
    except InvalidJson as exc:
        raise MalformedCommand(str(exc)) from None
    if not isinstance(data, dict):
        raise MalformedCommand("body must be a JSON object")
    key = "reference" if kind == SUBMIT else "job_id"
    if not isinstance(data.get(key), str) or not data[key]:
        raise MalformedCommand(f"{key} must be a non-empty string")
    if kind == SUBMIT and "input" not in data:
        raise MalformedCommand("input is required")
    return data
