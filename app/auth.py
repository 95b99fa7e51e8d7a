"""Bearer authentication: a client's API key (hashed at rest; live = neither retired nor revoked),
or the admin token. A disabled client's valid key is a 403 (we know who it is; it may not act)."""

from __future__ import annotations

import hmac

from flask import g, request

from app.errors import Forbidden, NotFound, Unauthorized
from app.session import db_session
from models.client import Client
from runtime.context import liaison
from service.credentials import authenticate

#: what each bearer token is called when it is missing: the credential the caller must send
API_KEY, ADMIN_TOKEN, METRICS_TOKEN = "API key", "LIAISON_ADMIN_TOKEN", "LIAISON_METRICS_TOKEN"


def _bearer(expected: str, header: str | None = None) -> str:
    """The token of an ``Authorization: Bearer <token>`` header (this request's, unless given);
    without one, a 401 naming the ``expected`` credential."""
    header = request.headers.get("Authorization", "") if header is None else header
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized(f"send Authorization: Bearer <{expected}>")
    return token.strip()


def current_client() -> Client:
    if "client" not in g:
        client = authenticate(db_session(), _bearer(API_KEY))
        if client is None:
            raise Unauthorized("unknown, retired or revoked API key")
        if client.disabled_at is not None:
            raise Forbidden("this client is disabled; ask the operators to enable it")
        g.client = client
    return g.client


def require_admin() -> None:
    token = liaison().settings.admin_token
    if not token:
        raise NotFound("the admin API is disabled (LIAISON_ADMIN_TOKEN is not set)")
    if not hmac.compare_digest(_bearer(ADMIN_TOKEN).encode(), token.encode()):
        raise Unauthorized("bad admin token")


def require_metrics_token() -> None:
    """``/metrics`` and ``/readyz`` are for the operator's scraper and probes, not the public: they
    take ``LIAISON_METRICS_TOKEN`` as a bearer token, and are off (404) when it is not set."""
    check_metrics_token(request.headers.get("Authorization", ""), liaison().settings.metrics_token)


def check_metrics_token(authorization: str, token: str) -> None:
    """The metrics token check on an ``Authorization`` header value, outside Flask too (a worker's
    metrics port, ``app.observability.worker_metrics``): NotFound when no token is configured,
    Unauthorized when the header does not carry it."""
    if not token:
        raise NotFound("not found")
    if not hmac.compare_digest(_bearer(METRICS_TOKEN, authorization).encode(), token.encode()):
        raise Unauthorized("bad metrics token")
