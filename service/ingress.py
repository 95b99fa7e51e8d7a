"""One way in for vendor events: a webhook (``POST /webhooks/<provider>``) and a message off an amqp
vendor's reply queue both go through :func:`receive`, so the two cannot drift apart.

In this order, each step refusing what fails it before the next one looks: the body's size, the
provider's verification scheme (``webhooks.schemes``, picked by ``LIAISON_PROVIDER_<NAME>_WEBHOOK_SCHEME``:
nothing in the payload is trusted before it checks out), the event id it names (bounded: it is
stored, and PostgreSQL text cannot hold NUL), the bounded event body,
then ``service.vendor_events.receive_event`` (the inbox's dedup, late binding of early events, the
state machine) in the caller's transaction. A ``confirm`` provider's request proves nothing: only
the job id it names is read, and one status check of that job is written (``service.checks``), so
what is applied is what the vendor's own status API says; it is answered 202. The webhook metrics
are counted here too: what arrived, each refusal by reason, duplicates. The caller maps a
:class:`Refused` to its transport (an HTTP status, a dead-lettered message) and commits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from sqlalchemy.orm import Session

from core.states import TERMINAL
from foundation import metrics
from foundation.logging import bind
from foundation.provider_settings import ProviderSettings
from foundation.settings import Settings
from models.base import utcnow
from models.messages import MAX_MESSAGE_ID_CHARS
from service import callback_tokens, checks, vendor_events
from webhooks.events import EventTooLarge, MalformedEvent
from webhooks.schemes import TOKEN_URL, EventIdError, Verified, hint_job_id, verify
from webhooks.signing import HeaderItems, SignatureError

MESSAGE_ID_RULE = f"webhook-id (svix-id) must be at most {MAX_MESSAGE_ID_CHARS} characters, without NUL"


class Refused(Exception):
    """A vendor event that is not applied, counted under ``reason`` (the metric's label).
    ``signature``: the signature check's own word (``stale``, ``bad_signature`` …) when that refused it."""

    def __init__(self, reason: metrics.WebhookRejection, detail: str, signature: str | None = None) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail
        self.signature = signature


@dataclass(frozen=True)
class Received:
    status: str  # applied | ignored | duplicate | orphan; a hint's: service.checks.HintResult
    message_id: str
    traceparent: str | None = None  # the task's (core.trace_context), for the span of the commit
    hint: bool = False  # a confirm hint: nothing applied, a check at most (HTTP 202)


def arrived(provider: str) -> None:
    """A vendor event arrived, whatever becomes of it (``liaison_webhooks_received_total``)."""
    metrics.webhook_received(provider)


def refuse(provider: str, reason: metrics.WebhookRejection, detail: str, signature: str | None = None) -> Refused:
    """Count a refusal and return it to raise: a transport's own refusals (an unknown provider, the
    wrong media type) are counted where the others are."""
    metrics.webhook_rejected(provider, reason)
    return Refused(reason, detail, signature)


def provider_settings(settings: Settings, provider: str) -> ProviderSettings:
    found = settings.providers.get(provider)
    if found is None:
        raise refuse(provider, "unknown_provider", "unknown provider")
    return found


def receive(
    session: Session,
    settings: Settings,
    provider: ProviderSettings,
    headers: HeaderItems,
    body: bytes,
    *,
    now_s: float,
    tolerance_s: int,
    path_token: str | None = None,
) -> Received:
    """Verify, bound, deduplicate and apply one vendor event in ``session`` (the caller commits).
    ``tolerance_s``: how old its signature may be (a queue holds events longer than a request takes);
    ``path_token``: the token of a ``token-url`` request's path."""
    name = provider.name
    if len(body) > settings.max_body_bytes:
        raise refuse(name, "too_large", f"{len(body)} bytes, at most {settings.max_body_bytes}")
    verified = _verified(provider, headers, body, now_s, tolerance_s, path_token)
    if verified.hint:
        return _hint(session, name, body, verified.event_id, provider.hint_job_pointer)
    message_id = verified.event_id
    if len(message_id) > MAX_MESSAGE_ID_CHARS or "\x00" in message_id:
        raise refuse(name, "malformed", MESSAGE_ID_RULE)
    bind(message_id=message_id)
    token_task = None if verified.token_digest is None else _token_task(session, name, verified.token_digest)
    try:
        parsed = provider.event_parser(body, settings.outcome_limits)
    except EventTooLarge as exc:
        raise refuse(name, "too_large", str(exc)) from None
    except MalformedEvent as exc:
        raise refuse(name, "malformed", str(exc)) from None
    event = parsed.event
    if event is None:  # a type its profile does not map: kept in the inbox, counted, answered 2xx
        return _ignored(session, name, message_id, parsed.vendor_type, "unknown_type")
    if parsed.reference is not None:
        job_id = vendor_events.job_of_reference(session, name, parsed.reference)
        if job_id is None:
            return _ignored(session, name, message_id, parsed.vendor_type, "unknown_reference")
        if not job_id:  # the task's submit answer is not recorded yet: the vendor sends it again
            raise refuse(name, "unbound", "the task's vendor job is not recorded yet: send it again")
        event = replace(event, job_id=job_id)
    if token_task is not None:
        _same_job(name, token_task, event.job_id)
    result = vendor_events.receive_event(session, name, message_id, event, utcnow())
    if result.status == "duplicate":
        metrics.webhook_rejected(name, "duplicate")
    return Received(result.status, message_id, result.traceparent)


def _hint(session: Session, provider: str, body: bytes, event_id: str, pointer: str | None) -> Received:
    """A ``confirm`` provider's hint: the job id it names (where its profile's events say, if it
    has one), and nothing else of it, asks for one status check of that job (at most one pending
    per task, however many hints come)."""
    try:
        job_id = hint_job_id(body) if pointer is None else hint_job_id(body, pointer)
    except EventIdError as exc:
        raise refuse(provider, "malformed", f"hint: {exc.reason}") from None
    result = checks.hint(session, provider, job_id, utcnow())
    metrics.webhook_hint(provider, result.value)
    return Received(result.value, event_id[:MAX_MESSAGE_ID_CHARS], hint=True)


def _ignored(session: Session, provider: str, message_id: str, vendor_type: str, reason: str) -> Received:
    """A verified event that means nothing to us: its id and type are stored in the inbox (a resend
    is a duplicate), it is counted (``liaison_webhooks_ignored_total``), and no state changes."""
    if not vendor_events.first_time(session, provider, message_id, f"ignored:{vendor_type}"[:64], utcnow()):
        metrics.webhook_rejected(provider, "duplicate")
        return Received("duplicate", message_id)
    metrics.webhook_ignored(provider, reason)
    return Received("ignored", message_id)


def _token_task(session: Session, provider: str, digest: str) -> callback_tokens.TokenTask:
    """A token-url request's task: one of this provider's, not final (a token dies with its task)."""
    task = callback_tokens.task_of(session, provider, digest)
    if task is None:
        raise refuse(provider, "signature", "signature rejected: unknown_token", "unknown_token")
    if task.state in TERMINAL:
        raise refuse(provider, "signature", "signature rejected: task_final", "task_final")
    return task


def _same_job(provider: str, task: callback_tokens.TokenTask, job_id: str) -> None:
    """A token moves its own task only: the event must name that task's vendor job. Before the submit's
    answer is recorded the job is not known, and the event waits for the vendor's retry (409): kept as
    an orphan, it could bind to whichever task later gets the job id it names."""
    if task.vendor_job_id is None:
        raise refuse(provider, "unbound", "the task's vendor job is not recorded yet: send it again")
    if job_id != task.vendor_job_id:
        raise refuse(provider, "signature", "signature rejected: other_job", "other_job")


def _verified(
    provider: ProviderSettings,
    headers: HeaderItems,
    body: bytes,
    now_s: float,
    tolerance_s: int,
    path_token: str | None,
) -> Verified:
    """The provider's scheme's verdict (``webhooks.schemes.VERIFIERS``), or a counted refusal: an
    unproven request is a ``signature`` (``stale``) refusal, a proven one without its event id is
    ``malformed``."""
    if path_token is not None and provider.webhook_scheme != TOKEN_URL:
        raise refuse(provider.name, "signature", "signature rejected: unexpected_token", "unexpected_token")
    try:
        return verify(provider.inbound_profile(tolerance_s), headers, body, now_s, path_token)
    except EventIdError as exc:
        raise refuse(provider.name, "malformed", f"event id: {exc.reason}") from None
    except SignatureError as exc:
        reason: metrics.WebhookRejection = "stale" if exc.reason == "stale" else "signature"
        raise refuse(provider.name, reason, f"signature rejected: {exc.reason}", exc.reason) from None
