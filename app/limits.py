"""Per-client limits on the submit API (issue 8): a shared submit rate limit and a cap on open
tasks. The deployment's defaults (``LIAISON_CLIENT_*``) apply unless the client row overrides them
(``flask --app app liaison clients limits``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.orm import Session
from werkzeug.exceptions import HTTPException

from app.errors import ApiError, TooManyRequests
from core.rate_limit import Limit, retry_after_header
from foundation import metrics
from foundation.settings import Settings
from models.client import Client
from runtime.limiter import DatabaseLimiter, Limiter


def submit_limit(settings: Settings, client: Client) -> Limit:
    return Limit(
        client.submit_rate_per_s if client.submit_rate_per_s is not None else settings.client_submit_rate_per_s,
        client.submit_burst if client.submit_burst is not None else settings.client_submit_burst,
    )


def max_open_tasks(settings: Settings, client: Client) -> int:
    return client.max_open_tasks if client.max_open_tasks is not None else settings.client_max_open_tasks


def check_submit_rate(limiter: Limiter, settings: Settings, client: Client, session: Session | None = None) -> None:
    """Take one of the client's submit slots, or raise a 429 saying when the next one is free.
    Every authenticated POST counts, valid or not and replay or not: a flood is a flood.

    ``session``: the request's, its authentication read in it. A database limiter takes the slot in
    that transaction, and the submit goes on in it: the slot commits with the task, or with the
    refusal (:func:`refusals_commit`: the slot is durable whatever the request's answer), one
    commit for both; another storage takes it outside. Without a session, a database limiter
    takes its own short transaction."""
    limit = submit_limit(settings, client)
    key = f"submit:client:{client.id}"
    if session is not None and isinstance(limiter, DatabaseLimiter):
        decision = limiter.acquire_in(session, key, limit)
    else:
        decision = limiter.acquire(key, limit)
    if not decision.allowed:
        metrics.rate_limited("submit")
        raise TooManyRequests(
            f"submit rate limit: {limit.rate_per_s:g} per second, bursts of {limit.burst}",
            retry_after=retry_after_header(decision.retry_after_s),
            limit="submit_rate",
        )


def retake_after_rollback(limiter: Limiter, settings: Settings, client: Client, session: Session) -> None:
    """The request's transaction was rolled back (it lost a race with its own identical request)
    and, with it, the slot a database limiter took in it: take it again before the retry, so the
    request still counts once. Another storage's slot was never in the transaction."""
    if isinstance(limiter, DatabaseLimiter):
        check_submit_rate(limiter, settings, client, session)


@contextmanager
def refusals_commit(session: Session) -> Iterator[None]:
    """A submit refused after its slot was taken (not JSON, an invalid body, a reused
    Idempotency-Key, the open-task cap) commits before its 4xx, so the slot a database limiter took
    in the request's transaction (:func:`check_submit_rate`) stays taken. Nothing else of the
    request is written by then. An unexpected error (a 500) rolls back as any other."""
    try:
        yield
    except (ApiError, HTTPException):
        session.commit()
        raise
