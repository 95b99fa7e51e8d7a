"""Pure: a ``POST /api/v1/tasks`` body → a SubmitRequest, or every field problem at once (422)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from app.errors import ValidationFailed
from core.fair_share import MAX_PRIORITY, MIN_PRIORITY
from core.origins import within
from core.outbound_guard import AllowList, Refused, check_offline
from foundation.provider_settings import ProviderSettings
from service.intake import SubmitRequest
from wire.bounded_json import JsonLimits, TooDeep, TooLarge, check_bounds

CORRELATION_ID = re.compile(r"^[A-Za-z0-9._:@-]{1,200}$")
IDEMPOTENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")
FIELDS = {
    "input",
    "correlation_id",
    "provider",
    "callback_url",
    "acceptance_timeout_s",
    "acceptance_deadline",
    "execution_timeout_s",
    "execution_deadline",
    "on_deadline",
    "heartbeat_timeout_s",
    "priority",
    "concurrency_key",
}
MAX_TIMEOUT_S = 366 * 24 * 3600
#: a concurrency key is the domain app's own name for what must not run twice at once (an account)
CONCURRENCY_KEY = re.compile(r"^[\x21-\x7e]{1,200}$")


def fingerprint(body: Any) -> str:
    """Same body (whatever its key order or spacing) → same fingerprint."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def whole_number(value: Any) -> int | None:
    """A JSON integer as JSON Schema (and so the OpenAPI document) counts them: ``5`` and ``5.0``
    alike, never ``true``, ``"5"`` or ``5.5``; None when ``value`` is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def is_http_url(value: Any) -> TypeGuard[str]:
    if not isinstance(value, str) or len(value) > 2000:
        return False
    try:
        parts = urlsplit(value)
    except ValueError:  # e.g. an unclosed IPv6 bracket: "http://[::1/x"
        return False
    return parts.scheme in ("http", "https") and bool(parts.netloc)


def _guard_refusal(url: str, allow: AllowList) -> str | None:
    """The outbound guard's fixed reason for refusing ``url`` offline, or None."""
    try:
        check_offline(url, allow)
    except Refused as exc:
        return str(exc)
    return None


def valid_idempotency_key(value: str | None) -> str | None:
    if value is None:
        return None
    if not IDEMPOTENCY_KEY.fullmatch(value):
        raise ValidationFailed(
            "bad Idempotency-Key",
            errors=[{"field": "Idempotency-Key", "message": "1–200 printable ASCII characters, no spaces"}],
        )
    return value


def _deadline(
    body: Mapping[str, Any], name: str, now: datetime, default_s: int | None, errors: list[dict[str, str]]
) -> datetime | None:
    timeout_key, deadline_key = f"{name}_timeout_s", f"{name}_deadline"
    if timeout_key in body and deadline_key in body:
        errors.append({"field": deadline_key, "message": f"give {timeout_key} or {deadline_key}, not both"})
        return None
    if timeout_key in body:
        value = whole_number(body[timeout_key])
        if value is None or not 0 < value <= MAX_TIMEOUT_S:
            errors.append({"field": timeout_key, "message": f"a whole number of seconds, 1 to {MAX_TIMEOUT_S}"})
            return None
        return now + timedelta(seconds=value)
    if deadline_key in body:
        value = body[deadline_key]
        try:
            when = datetime.fromisoformat(value.replace("Z", "+00:00")) if isinstance(value, str) else None
        except ValueError:
            when = None
        if when is None or when.tzinfo is None:
            errors.append(
                {"field": deadline_key, "message": "an ISO 8601 time with an offset, e.g. 2026-01-01T12:00:00Z"}
            )
            return None
        if when <= now:
            errors.append({"field": deadline_key, "message": "must be in the future"})
            return None
        try:
            return when.astimezone(UTC)
        except OverflowError:
            errors.append({"field": deadline_key, "message": "out of range"})
            return None
    return now + timedelta(seconds=default_s) if default_s else None


def parse_submit(
    body: Any,
    *,
    providers: Mapping[str, ProviderSettings],
    default_provider: str | None,
    client_callback_url: str | None,
    now: datetime,
    client_callback_origins: Sequence[str] = (),
    input_limits: JsonLimits | None = None,
    outbound_allow: AllowList = AllowList(),
    client_channel: str | None = None,
) -> SubmitRequest:
    """``client_callback_origins``: the client's registered origins; when there are any, the
    callback URL (given or the client's default) must lie within one of them.

    ``outbound_allow`` is ``LIAISON_OUTBOUND_ALLOW``: a ``callback_url`` the outbound guard would
    refuse whatever DNS says (a private address in any encoding, ``localhost``, userinfo, a host two
    parsers read apart) is a 422 here; a name is only resolved, and judged, at delivery.

    ``client_channel``: the client's broker channel; a client on one needs no callback URL (its
    events go to the channel; a URL, when there is one, gets them too)."""
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    errors: list[dict[str, str]] = []
    for name in sorted(set(body) - FIELDS):
        errors.append({"field": name, "message": "unknown field"})

    if "input" not in body or body["input"] is None:
        errors.append({"field": "input", "message": "required"})
    elif not isinstance(body["input"], (dict, str)):
        errors.append({"field": "input", "message": "must be an object or a string"})
    else:
        try:
            check_bounds(body["input"], input_limits or JsonLimits(), "input")
        except (TooDeep, TooLarge) as exc:
            errors.append({"field": "input", "message": str(exc)})

    correlation_id = body.get("correlation_id")
    if correlation_id is not None and (
        not isinstance(correlation_id, str) or not CORRELATION_ID.fullmatch(correlation_id)
    ):
        errors.append({"field": "correlation_id", "message": "1–200 characters of A-Z a-z 0-9 . _ : @ -"})

    provider = body.get("provider", default_provider)
    if provider is None and not providers:
        # The platform's own setup, not the request: say what the operator sets.
        errors.append(
            {"field": "provider", "message": "no provider is configured: the operator sets LIAISON_PROVIDERS"}
        )
    elif provider is None:
        errors.append({"field": "provider", "message": "required: more than one provider is configured"})
    elif not isinstance(provider, str) or provider not in providers:
        errors.append(
            {"field": "provider", "message": f"unknown provider; configured: {', '.join(sorted(providers)) or 'none'}"}
        )
    provider_settings = providers.get(provider) if isinstance(provider, str) else None

    callback_url = body.get("callback_url")
    if callback_url is not None and not is_http_url(callback_url):
        errors.append({"field": "callback_url", "message": "an http(s) URL of at most 2000 characters"})
    elif callback_url is not None and (refusal := _guard_refusal(callback_url, outbound_allow)):
        errors.append({"field": "callback_url", "message": refusal})
    elif callback_url is None and not client_callback_url and not client_channel:
        errors.append({"field": "callback_url", "message": "required: this client has no default callback_url"})
    elif (callback_url or client_callback_url) and not within(
        callback_url or client_callback_url or "", client_callback_origins
    ):
        errors.append({"field": "callback_url", "message": "outside this client's registered callback origins"})

    on_deadline = body.get("on_deadline", "escalate")
    if on_deadline not in ("escalate", "cancel"):
        errors.append({"field": "on_deadline", "message": "escalate or cancel"})

    acceptance_s = provider_settings.acceptance_timeout_s if provider_settings else None
    execution_s = provider_settings.execution_timeout_s if provider_settings else None
    acceptance = _deadline(body, "acceptance", now, acceptance_s, errors)
    execution = _deadline(body, "execution", now, execution_s, errors)
    if acceptance and execution and acceptance > execution:
        errors.append({"field": "acceptance_deadline", "message": "must not be after the execution deadline"})

    heartbeat_s = provider_settings.heartbeat_timeout_s if provider_settings else None
    if "heartbeat_timeout_s" in body:
        heartbeat_s = whole_number(body["heartbeat_timeout_s"])
        if heartbeat_s is None or not 0 < heartbeat_s <= MAX_TIMEOUT_S:
            errors.append(
                {"field": "heartbeat_timeout_s", "message": f"a whole number of seconds, 1 to {MAX_TIMEOUT_S}"}
            )

    priority = body.get("priority")
    if priority is not None:
        priority = whole_number(priority)
        if priority is None or not MIN_PRIORITY <= priority <= MAX_PRIORITY:
            errors.append(
                {"field": "priority", "message": f"a whole number, {MIN_PRIORITY} (most urgent) to {MAX_PRIORITY}"}
            )
    concurrency_key = body.get("concurrency_key")
    if concurrency_key is not None and (
        not isinstance(concurrency_key, str) or not CONCURRENCY_KEY.fullmatch(concurrency_key)
    ):
        errors.append({"field": "concurrency_key", "message": "1–200 printable ASCII characters, no spaces"})

    if errors:
        raise ValidationFailed("the task request has invalid fields", errors=errors)
    assert isinstance(provider, str)  # checked above: a configured provider's name
    return SubmitRequest(
        input=body["input"],
        correlation_id=correlation_id,
        provider=provider,
        callback_url=callback_url,
        acceptance_deadline=acceptance,
        execution_deadline=execution,
        on_deadline=on_deadline,
        fingerprint=fingerprint(body),
        heartbeat_timeout_s=heartbeat_s,
        priority=priority,
        concurrency_key=concurrency_key,
    )
