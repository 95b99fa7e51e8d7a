"""Who may use the console, and the browser-side defences.

Sign-in takes the admin token (the one credential operators hold) and the operator's name, which
every action then records as its actor. The session is a cookie signed with a key derived from the
admin token — rotating the token signs everyone out — holding the operator's name and a CSRF token;
it is HttpOnly, SameSite=Strict, scoped to ``/console``, Secure when the console is served over
https, and expires after ``LIAISON_CONSOLE_SESSION_S``. Every POST must carry the CSRF token (the
sign-in form too, against login CSRF). Every answer carries a strict Content-Security-Policy (no
script at all: the console needs none), ``X-Frame-Options: DENY`` and ``Referrer-Policy``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from typing import Any

from flask import Response, g, redirect, request, url_for
from itsdangerous import BadSignature, URLSafeTimedSerializer
from werkzeug.wrappers import Response as BaseResponse

from app.errors import BadRequest, NotFound
from workers.runtime import liaison

COOKIE = "liaison_console"
PATH = "/console"
CSRF_FIELD = "csrf_token"
#: an operator's name: what the timelines show as the actor
OPERATOR_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._@-]{0,63}")
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
#: what an anonymous visitor may reach: the sign-in page and the stylesheet
OPEN_ENDPOINTS = frozenset({"console.sign_in", "console.static"})


class CsrfRefused(BadRequest):
    """A POST without this session's CSRF token (→ 400, nothing done)."""


@dataclass
class ConsoleSession:
    csrf: str
    operator: str | None = None
    changed: bool = False


def _serializer() -> URLSafeTimedSerializer:
    token = liaison().settings.admin_token
    key = hmac.new(token.encode(), b"liaison console session v1", hashlib.sha256).hexdigest()
    return URLSafeTimedSerializer(key, salt="liaison.console")


def current() -> ConsoleSession:
    return g.console_session


def operator() -> str:
    """The signed-in operator's name (views behind ``before_request`` always have one)."""
    name = current().operator
    assert name is not None
    return name


def load_session() -> BaseResponse | None:
    """``before_request``: the console is off without an admin token; read the cookie; send the
    anonymous to sign in; refuse a POST without the CSRF token."""
    settings = liaison().settings
    if not settings.admin_token:
        raise NotFound("the console is disabled (LIAISON_ADMIN_TOKEN is not set)")
    data: Any = None
    raw = request.cookies.get(COOKIE)
    if raw:
        try:
            data = _serializer().loads(raw, max_age=settings.console_session_s)
        except BadSignature:  # tampered, expired, or signed with a token since rotated
            data = None
    if isinstance(data, dict) and isinstance(data.get("csrf"), str):
        session = ConsoleSession(csrf=data["csrf"], operator=data.get("op") or None)
    else:
        session = ConsoleSession(csrf=secrets.token_urlsafe(32), changed=True)
    g.console_session = session
    if request.method == "POST":
        sent = request.form.get(CSRF_FIELD, "")
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise CsrfRefused("this form's CSRF token is missing or stale: reload the page and try again")
    if session.operator is None and request.endpoint not in OPEN_ENDPOINTS:
        return redirect(url_for("console.sign_in", next=request.full_path.rstrip("?")))
    return None


def token_matches(token: str) -> bool:
    expected = liaison().settings.admin_token
    return bool(expected) and hmac.compare_digest(token.encode(), expected.encode())


def sign_in(name: str) -> None:
    """A fresh CSRF token with every sign-in (nothing seen before it stays valid)."""
    g.console_session = ConsoleSession(csrf=secrets.token_urlsafe(32), operator=name, changed=True)


def sign_out() -> None:
    g.console_session = ConsoleSession(csrf=secrets.token_urlsafe(32), changed=True)


def safe_next(target: str | None) -> str:
    """Where to go after signing in: a console path only, never another site (``//host``)."""
    if target and target.startswith(PATH) and not target.startswith("//") and "\\" not in target:
        return target
    return url_for("console.overview")


def finish(response: Response) -> Response:
    """``after_request``: write the cookie when it changed; the security headers on every answer."""
    response.headers.update(SECURITY_HEADERS)
    session = g.get("console_session")
    if session is not None and session.changed:
        secure = request.is_secure or liaison().settings.public_url.startswith("https://")
        value = _serializer().dumps({"csrf": session.csrf, "op": session.operator})
        response.set_cookie(
            COOKIE,
            value,
            max_age=liaison().settings.console_session_s,
            path=PATH,
            secure=secure,
            httponly=True,
            samesite="Strict",
        )
    return response
