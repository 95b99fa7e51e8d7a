"""Who may use the console, and the browser-side defences.

Sign-in takes the admin token (the one credential operators hold) and the operator's name, which
every action then records as its actor. The session lives on the server (``service.console_sessions``,
one row per sign-in): the cookie carries its random id and a CSRF token, signed with a key derived
from the admin token (rotating the token signs everyone out). A cookie whose row is gone (signed
out, here or everywhere) or expired is no session, in every web process. The cookie is HttpOnly,
SameSite=Strict, scoped to ``/console``, Secure when the console is served over https, and lasts
``LIAISON_CONSOLE_SESSION_S``. Every request but GET, HEAD and OPTIONS must carry the CSRF token
(the sign-in form too, against login CSRF); only a POST acts (``blueprint.act``). Every answer
carries a strict Content-Security-Policy (no script at all: the console needs none),
``X-Frame-Options: DENY`` and ``Referrer-Policy``.
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
from app.session import db_session
from models.base import utcnow
from runtime.context import liaison
from service import console_sessions

COOKIE = "liaison_console"
PATH = "/console"
CSRF_FIELD = "csrf_token"
#: the methods that only read: everything else must carry the CSRF token (and only POST acts)
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
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
    """A request that is not GET, HEAD or OPTIONS without this session's CSRF token (→ 400, nothing done)."""


@dataclass
class ConsoleSession:
    csrf: str
    operator: str | None = None
    #: the server-side session's id (``service.console_sessions``), while signed in
    session_id: str | None = None
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
    """``before_request``: the console is off without an admin token; read the cookie and find its
    session on the server; send the anonymous to sign in; refuse an unsafe method without the CSRF
    token."""
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
    session = _restore(data)
    g.console_session = session
    if request.method not in SAFE_METHODS:
        sent = request.form.get(CSRF_FIELD, "")
        if not hmac.compare_digest(sent.encode(), session.csrf.encode()):
            raise CsrfRefused("this form's CSRF token is missing or stale: reload the page and try again")
    if session.operator is None and request.endpoint not in OPEN_ENDPOINTS:
        return redirect(url_for("console.sign_in", next=request.full_path.rstrip("?")))
    return None


def _fresh() -> ConsoleSession:
    return ConsoleSession(csrf=secrets.token_urlsafe(32), changed=True)


def _restore(data: Any) -> ConsoleSession:
    """The cookie's session: anonymous with its CSRF token, or signed in while its row lives. A
    cookie naming a session the server ended (or expired) starts afresh, with a new CSRF token:
    nothing issued to it stays valid."""
    if not isinstance(data, dict) or not isinstance(data.get("csrf"), str):
        return _fresh()
    session_id = data.get("sid")
    if session_id is None:
        return ConsoleSession(csrf=data["csrf"])
    if not isinstance(session_id, str):
        return _fresh()
    name = console_sessions.live_operator(db_session(), session_id, utcnow())
    if name is None:
        return _fresh()
    return ConsoleSession(csrf=data["csrf"], operator=name, session_id=session_id)


def token_matches(token: str) -> bool:
    expected = liaison().settings.admin_token
    return bool(expected) and hmac.compare_digest(token.encode(), expected.encode())


def sign_in(name: str) -> None:
    """A new session on the server and a fresh CSRF token (nothing seen before it stays valid);
    the session this browser held before, if any, ends."""
    _end_current()
    session_id = console_sessions.open_session(liaison().db, name, utcnow(), liaison().settings.console_session_s)
    g.console_session = ConsoleSession(
        csrf=secrets.token_urlsafe(32), operator=name, session_id=session_id, changed=True
    )


def sign_out() -> None:
    """End this browser's session on the server: a copy of the cookie is then worth nothing."""
    _end_current()
    g.console_session = _fresh()


def sign_out_everywhere() -> int:
    """End every session of the signed-in operator's name (other browsers, a stolen cookie)."""
    db_session().rollback()  # its read would hold up the write on SQLite
    ended = console_sessions.end_operator_sessions(liaison().db, operator())
    g.console_session = _fresh()
    return ended


def _end_current() -> None:
    current_id = current().session_id
    db_session().rollback()  # its read would hold up the write on SQLite
    if current_id is not None:
        console_sessions.end_session(liaison().db, current_id)


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
        value = _serializer().dumps({"csrf": session.csrf, "sid": session.session_id})
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
