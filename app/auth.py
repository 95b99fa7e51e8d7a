"""Bearer authentication: a client's API key (hashed at rest), or the admin token."""

from __future__ import annotations

import hmac

from flask import g, request
from sqlalchemy import select

from app.errors import NotFound, Unauthorized
from app.extensions import liaison
from app.session import db_session
from models.client import Client, hash_api_key


def _bearer() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send Authorization: Bearer <API key>")
    return token.strip()


def current_client() -> Client:
    if "client" not in g:
        client = db_session().scalar(select(Client).where(Client.api_key_hash == hash_api_key(_bearer())))
        if client is None:
            raise Unauthorized("unknown API key")
        g.client = client
    return g.client


def require_admin() -> None:
    token = liaison().settings.admin_token
    if not token:
        raise NotFound("the admin API is disabled (LIAISON_ADMIN_TOKEN is not set)")
    if not hmac.compare_digest(_bearer().encode(), token.encode()):
        raise Unauthorized("bad admin token")


def require_metrics_token() -> None:
    """``/metrics`` and ``/readyz`` are for the operator's scraper and probes, not the public: they
    take ``LIAISON_METRICS_TOKEN`` as a bearer token, and are off (404) when it is not set."""
    token = liaison().settings.metrics_token
    if not token:
        raise NotFound("not found")
    if not hmac.compare_digest(_bearer().encode(), token.encode()):
        raise Unauthorized("bad metrics token")
