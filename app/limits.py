"""Per-client limits on the submit API (issue 8): a shared submit rate limit and a cap on open
tasks. The deployment's defaults (``LIAISON_CLIENT_*``) apply unless the client row overrides them
(``flask --app app liaison clients limits``)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.errors import TooManyRequests
from core.rate_limit import Limit, retry_after_header
from foundation import metrics
from foundation.settings import Settings
from models.client import Client
from workers.limiter import DatabaseLimiter, Limiter


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
    that transaction and commits it there (one commit for both: the slot is durable whatever becomes
    of the request); another storage leaves the transaction open, and the submit goes on in it.
    Without a session, a database limiter takes its own short transaction."""
    limit = submit_limit(settings, client)
    key = f"submit:client:{client.id}"
    if session is not None and isinstance(limiter, DatabaseLimiter):
        decision = limiter.acquire_in(session, key, limit)
        session.commit()
    else:
        decision = limiter.acquire(key, limit)
    if not decision.allowed:
        metrics.rate_limited("submit")
        raise TooManyRequests(
            f"submit rate limit: {limit.rate_per_s:g} per second, bursts of {limit.burst}",
            retry_after=retry_after_header(decision.retry_after_s),
            limit="submit_rate",
        )
