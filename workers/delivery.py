"""One signed POST of a callback to a domain app. No retrying here: the relay task decides."""

from __future__ import annotations

import json
from typing import Any

from core.outbound_guard import AllowList
from webhooks.signing import sign
from workers.http import call


def encode(payload: dict[str, Any]) -> bytes:
    """The exact bytes we sign and send (stable key order, so a replay sends the same body)."""
    return json.dumps(payload, sort_keys=True, separators=(",", ":")).encode("utf-8")


def deliver(
    url: str,
    secrets: list[str],
    message_id: str,
    payload: dict[str, Any],
    now_ts: float,
    timeout_s: float,
    *,
    allow: AllowList,
    max_response_bytes: int,
) -> int:
    """POST the callback; return the 2xx status or raise the classified ``CallError``.

    The URL is the client's: it goes through the outbound guard (``allow`` lists the exceptions;
    a refusal is ``OutboundRefused``). ``timeout_s`` bounds the whole call, and at most
    ``max_response_bytes`` of the answer are read (only its status matters).
    """
    body = encode(payload)
    headers = sign(secrets, message_id, int(now_ts), body).as_dict()
    headers["Content-Type"] = "application/json"
    headers["User-Agent"] = "Liaison-Relay/1"
    response = call(
        "POST",
        url,
        timeout=(min(5.0, timeout_s), timeout_s),
        idempotent=True,
        deadline_s=timeout_s,
        max_body_bytes=max_response_bytes,
        truncate=True,
        guard=allow,
        data=body,
        headers=headers,
    )
    return response.status_code
