"""Sending signed vendor webhooks from a test, as the external system would."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import requests

from webhooks.signing import sign


def post_event(
    web_url: str,
    secret: str,
    event: dict[str, Any],
    *,
    provider: str = "sim",
    message_id: str | None = None,
    timestamp: float | None = None,
) -> requests.Response:
    body = json.dumps(event).encode()
    headers = sign(secret, message_id or f"msg_{uuid.uuid4().hex}", int(timestamp or time.time()), body).as_dict()
    headers["Content-Type"] = "application/json"
    return requests.post(f"{web_url}/webhooks/{provider}", data=body, headers=headers, timeout=10)
