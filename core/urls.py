"""The form of a URL that may be stored or shown outside the task it belongs to.

A callback URL may carry credentials: ``user:password@`` in its authority, a token in its query
(``?key=…``) or fragment. The task keeps its URL whole (it is needed to deliver), but incidents,
the callback endpoint list, outbox rows, dead letters and logs hold only :func:`strip_url` of it.
Pure: no I/O, no resolution.
"""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

INVALID = "(invalid URL)"


def strip_url(url: str) -> str:
    """``scheme://host[:port]/path``: userinfo, query and fragment removed.

    Anything that does not parse as a URL with a scheme and a host becomes ``(invalid URL)``, never
    the raw text, which could hold a secret. Idempotent: ``strip_url(strip_url(u)) == strip_url(u)``.
    """
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port
    except (ValueError, TypeError, AttributeError):  # a malformed port or IPv6 literal, not a string
        return INVALID
    if not parts.scheme or not host:
        return INVALID
    if ":" in host:
        host = f"[{host}]"
    netloc = f"{host}:{port}" if port is not None else host
    return urlunsplit((parts.scheme.lower(), netloc, parts.path, "", ""))
