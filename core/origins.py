"""Pure: callback origins (``scheme://host[:port]``) a client may register, and whether a callback
URL lies within them. Standard library only.

An origin is compared as the triple (scheme, host, port) with the scheme's default port filled in,
so ``https://shop.example`` and ``https://SHOP.example:443`` are the same origin. A URL whose
authority is ambiguous (userinfo, a backslash, a bad port) is never within any origin: such URLs
parse to one host in one library and connect to another in the next.
"""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import urlsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
MAX_ORIGINS = 20


class BadOrigin(ValueError):
    """Not of the form ``scheme://host[:port]``; the message says what is wrong."""


Origin = tuple[str, str, int]


def _authority(url: str) -> Origin | None:
    """(scheme, host, port) of an http(s) URL, or None if it is not one or is ambiguous."""
    if not isinstance(url, str) or any(c in url for c in "\\\x00\t\r\n ") or len(url) > 2000:
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname or "@" in parts.netloc:
        return None
    return scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def parse_origin(value: str) -> Origin:
    """``scheme://host[:port]`` (a trailing ``/`` is tolerated) → its triple, or BadOrigin."""
    origin = _authority(value)
    if origin is None:
        raise BadOrigin("an origin is http(s)://host[:port], without userinfo")
    parts = urlsplit(value)
    if parts.path not in ("", "/") or parts.query or parts.fragment or value.endswith(("?", "#")):
        raise BadOrigin("an origin has no path, query or fragment: http(s)://host[:port]")
    return origin


def format_origin(origin: Origin) -> str:
    """The canonical spelling: lower case, the default port left out, IPv6 in brackets."""
    scheme, host, port = origin
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}" if port == DEFAULT_PORTS[scheme] else f"{scheme}://{shown}:{port}"


def normalize_origin(value: str) -> str:
    return format_origin(parse_origin(value))


def origin_of(url: str) -> str | None:
    """The canonical origin a URL calls (``https://shop.example:8443``), or None if it has none
    that can be trusted (not http(s), userinfo, a backslash): the key of an endpoint's health."""
    origin = _authority(url)
    return None if origin is None else format_origin(origin)


def within(url: str, origins: Iterable[str]) -> bool:
    """True when no origin is registered (no restriction), or ``url`` is on one of them."""
    registered = [parse_origin(o) for o in origins]
    if not registered:
        return True
    return _authority(url) in registered
