"""Pure: a ``POST /api/v1/tasks`` body → a SubmitRequest, or every field problem at once (422)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeGuard
from urllib.parse import urlsplit

from pydantic import ValidationError

from app.api import contract
from app.api.contract import SubmitTask, problems
from app.errors import ValidationFailed
from core.origins import within
from core.outbound_guard import AllowList, Refused, check_offline
from foundation.provider_settings import ProviderSettings
from service.intake import SubmitRequest
from wire.bounded_json import JsonLimits, TooDeep, TooLarge, check_bounds

CORRELATION_ID = re.compile(contract.CORRELATION_ID)
IDEMPOTENCY_KEY = re.compile(contract.PRINTABLE)
FIELDS = set(SubmitTask.model_fields)


def fingerprint(body: Any) -> str:
    """Same body (whatever its key order or spacing) → same fingerprint."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


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
    model: SubmitTask, body: dict[str, Any], name: str, now: datetime, default_s: int | None, errors: dict[str, str]
) -> datetime | None:
    """The deadline a timeout or a time gives (both: a problem), else the provider's default."""
    timeout_key, deadline_key = f"{name}_timeout_s", f"{name}_deadline"
    if timeout_key in body and deadline_key in body:
        errors[deadline_key] = f"give {timeout_key} or {deadline_key}, not both"
        return None
    if errors.keys() & {timeout_key, deadline_key}:
        return None
    timeout: int | None = getattr(model, timeout_key)
    if timeout is not None:
        return now + timedelta(seconds=timeout)
    when: datetime | None = getattr(model, deadline_key)
    if when is not None:
        if when <= now:
            errors[deadline_key] = "must be in the future"
            return None
        try:
            return when.astimezone(UTC)
        except OverflowError:
            errors[deadline_key] = "out of range"
            return None
    return now + timedelta(seconds=default_s) if default_s else None


def _model(body: dict[str, Any]) -> tuple[SubmitTask, dict[str, str]]:
    """The body as the contract's ``SubmitTask`` and its fields' problems: a field with a problem is
    left out (``input`` stands in as ``""``), so the checks that need the server's state still run on
    the others and every problem is reported at once."""
    try:
        return SubmitTask.model_validate(body), {}
    except ValidationError as exc:
        errors = {e["field"]: e["message"] for e in problems(SubmitTask, exc, body)}
    fine = {k: v for k, v in body.items() if k not in errors and k in SubmitTask.model_fields and k != "provider"}
    return SubmitTask.model_validate({**fine, "input": fine.get("input", "")}), errors


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
    """The body's form is the contract's ``SubmitTask`` (``app/api/contract.py``, the document's
    schema); this adds what depends on the server: the input's size, the providers, the clock, the
    outbound guard and the client's origins.

    ``client_callback_origins``: the client's registered origins; when there are any, the
    callback URL (given or the client's default) must lie within one of them.

    ``outbound_allow`` is ``LIAISON_OUTBOUND_ALLOW``: a ``callback_url`` the outbound guard would
    refuse whatever DNS says (a private address in any encoding, ``localhost``, userinfo, a host two
    parsers read apart) is a 422 here; a name is only resolved, and judged, at delivery.

    ``client_channel``: the client's broker channel; a client on one needs no callback URL (its
    events go to the channel; a URL, when there is one, gets them too)."""
    if not isinstance(body, dict):
        raise ValidationFailed("the body must be a JSON object")
    model, errors = _model(body)

    if "input" not in errors:
        try:
            check_bounds(model.input, input_limits or JsonLimits(), "input")
        except (TooDeep, TooLarge) as exc:
            errors["input"] = str(exc)

    provider = body.get("provider", default_provider)
    if provider is None and not providers:
        # The platform's own setup, not the request: say what the operator sets.
        errors["provider"] = "no provider is configured: the operator sets LIAISON_PROVIDERS"
    elif provider is None:
        errors["provider"] = "required: more than one provider is configured"
    elif not isinstance(provider, str) or provider not in providers:
        errors["provider"] = f"unknown provider; configured: {', '.join(sorted(providers)) or 'none'}"
    provider_settings = providers.get(provider) if isinstance(provider, str) else None

    raw_url = body.get("callback_url")
    if "callback_url" in errors:
        # The guard's reason is the more useful one (userinfo, a backslash) for what looks like a URL.
        if is_http_url(raw_url) and (refusal := _guard_refusal(raw_url, outbound_allow)):
            errors["callback_url"] = refusal
    elif (url := model.callback_url) is not None and (refusal := _guard_refusal(url, outbound_allow)):
        errors["callback_url"] = refusal
    elif url is None and not client_callback_url and not client_channel:
        errors["callback_url"] = "required: this client has no default callback_url"
    elif (url or client_callback_url) and not within(url or client_callback_url or "", client_callback_origins):
        errors["callback_url"] = "outside this client's registered callback origins"

    acceptance_s = provider_settings.acceptance_timeout_s if provider_settings else None
    execution_s = provider_settings.execution_timeout_s if provider_settings else None
    acceptance = _deadline(model, body, "acceptance", now, acceptance_s, errors)
    execution = _deadline(model, body, "execution", now, execution_s, errors)
    if acceptance and execution and acceptance > execution:
        errors["acceptance_deadline"] = "must not be after the execution deadline"
    heartbeat_s: int | None = model.heartbeat_timeout_s
    if "heartbeat_timeout_s" not in model.model_fields_set:
        heartbeat_s = provider_settings.heartbeat_timeout_s if provider_settings else None

    if errors:
        order = [*sorted(set(errors) - FIELDS), *SubmitTask.model_fields]
        problems_ = [{"field": name, "message": errors[name]} for name in order if name in errors]
        raise ValidationFailed("the task request has invalid fields", errors=problems_)
    assert isinstance(provider, str)  # checked above: a configured provider's name
    return SubmitRequest(
        input=body["input"],
        correlation_id=model.correlation_id,
        provider=provider,
        callback_url=model.callback_url,
        acceptance_deadline=acceptance,
        execution_deadline=execution,
        on_deadline=model.on_deadline,
        fingerprint=fingerprint(body),
        heartbeat_timeout_s=heartbeat_s,
        priority=model.priority,
        concurrency_key=model.concurrency_key,
    )
