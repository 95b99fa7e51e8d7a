"""The vocabulary of the settings table: ``ConfigError``, the parsers that turn a variable's text
into a value (each names the variable, never its value, when it refuses), and ``Option`` /
``Section``, the rows and groups of the table in ``foundation.setting_table``."""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from core.notifications import parse_routes
from core.outbound_guard import AllowList
from webhooks.schemes import SCHEMES, EventIdSource, check_secret
from wire.profiles import ProfileError, VendorProfile, load_profile

#: A bearer token (admin API, /metrics) is a credential: no shorter than this.
MIN_ADMIN_TOKEN_LEN = MIN_METRICS_TOKEN_CHARS = 32
#: ``scheme://user:password@`` and ``scheme://:password@`` (Redis): the password part of a URL, up
#: to the authority's *last* ``@`` (as ``urllib`` reads it), so a raw ``@`` in a password is masked
#: whole rather than half (``foundation.logging.SECRET_VALUES`` masks the same way).
_URL_PASSWORD = re.compile(r"(?<=://)([^:/\s]*):([^/\s]+)@")


def mask_url_password(url: str) -> str:
    """``redis://:***@host``: a URL fit to show, with any password masked (the user name stays)."""
    return _URL_PASSWORD.sub(r"\1:***@", url)


#: what a URL's user name or password may not hold raw: each ends the part it is in
_USERINFO_RESERVED = "@/?#"
PERCENT_ENCODE = (
    "percent-encode them (@ as %40, # as %23, / as %2F, ? as %3F: Python's urllib.parse.quote(password, safe=''))"
)


def ambiguous_credentials(url: str) -> bool:
    """True when a ``scheme://user:password@host/…`` URL cannot be read one way only: its user name or
    password (everything before the last ``@``) holds a raw ``@``, ``/``, ``?`` or ``#``, or it has a
    ``#`` anywhere (a fragment means nothing to a database or a broker). Drivers split such a URL
    differently -- SQLAlchemy took ``p`` of ``app:p@ss@db`` as the password and ``ss@db`` as the
    host, whose name then went into the driver's error, and a masked display hid only ``p`` -- so it
    is refused rather than guessed at. Without ``://`` there is nothing to read: False."""
    _scheme, sep, rest = url.partition("://")
    if not sep:
        return False
    if "#" in rest:
        return True
    userinfo, at, _host = rest.rpartition("@")
    return bool(at) and any(c in userinfo for c in _USERINFO_RESERVED)


def refuse_ambiguous_credentials(name: str, url: str) -> None:
    """Raise a :class:`ConfigError` naming ``name`` (never the URL) when ``url`` is ambiguous."""
    if ambiguous_credentials(url):
        raise ConfigError(f"{name} has a raw @, #, / or ? in its user name or password: {PERCENT_ENCODE}")


class ConfigError(ValueError):
    """A setting is missing or malformed; the message names the variable, never its value."""


# --- parsers: (variable, text) -> value; the text is stripped, "" only where "" is the default ---


@dataclass(frozen=True)
class Parser:
    convert: Callable[[str, str], Any]
    kind: str  # what the docs' table says the value is


def _number(cast: Callable[[str], float], minimum: float, kind: str) -> Parser:
    def convert(name: str, raw: str) -> Any:
        try:
            value = cast(raw)
        except ValueError:
            raise ConfigError(f"{name} must be a number") from None
        if not math.isfinite(value):  # "nan" would pass every comparison: a limit that never bites
            raise ConfigError(f"{name} must be a finite number")
        if value < minimum:
            raise ConfigError(f"{name} must be at least {minimum}")
        return value

    return Parser(convert, f"{kind} ≥ {minimum:g}")


def integer(minimum: int = 0) -> Parser:
    return _number(int, minimum, "integer")


def decimal(minimum: float = 0.0) -> Parser:
    return _number(float, minimum, "number")


def fraction() -> Parser:
    """A share between 0 and 1, both included."""
    share = decimal(0.0)

    def convert(name: str, raw: str) -> float:
        value = float(share.convert(name, raw))
        if value > 1:
            raise ConfigError(f"{name} must be at most 1")
        return value

    return Parser(convert, "number 0–1")


def optional_int() -> Parser:
    """Seconds, or empty / 0 for none."""
    whole = integer(0)
    return Parser(lambda name, raw: (whole.convert(name, raw) or None) if raw else None, "integer ≥ 0, 0 = none")


def choice(*choices: str, upper: bool = False) -> Parser:
    def convert(name: str, raw: str) -> str:
        if raw.lower() not in choices:
            raise ConfigError(f"{name} must be one of {', '.join(choices)}")
        return raw.upper() if upper else raw.lower()

    return Parser(convert, " | ".join(choices))


def _text(name: str, raw: str) -> str:
    return raw


def _http_url(name: str, raw: str) -> str:
    parts = urlsplit(raw)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ConfigError(f"{name} must be an http(s) URL")
    return raw.rstrip("/")


def _delays(name: str, raw: str) -> tuple[float, ...]:
    try:
        values = tuple(float(v) for v in raw.split(","))
    except ValueError:
        raise ConfigError(f"{name} must be comma-separated seconds") from None
    if any(v < 0 or not math.isfinite(v) for v in values):
        raise ConfigError(f"{name} must be finite and not negative")
    return values


def _webhook_secrets(name: str, raw: str) -> tuple[str, ...]:
    """Comma-separated; their form depends on the provider's scheme (:func:`check_webhook_secrets`)."""
    return tuple(s.strip() for s in raw.split(",") if s.strip())


def check_webhook_secrets(name: str, value: tuple[str, ...] | None, earlier: Mapping[str, Any]) -> None:
    """Each secret has its scheme's form: ``whsec_<base64>`` for standard-webhooks, ``user:password``
    for basic, any text for stripe (used as it is, never base64-decoded), github and hmac."""
    scheme = earlier["webhook_scheme"]
    for secret in value or ():
        try:
            check_secret(scheme, secret)
        except ValueError as exc:
            raise ConfigError(f"{name}: {exc} (scheme {scheme})") from None


def _vendor_profile(name: str, raw: str) -> VendorProfile | None:
    """The file is read and checked now, so a mistake stops the start-up naming the file and key."""
    if not raw:
        return None
    try:
        return load_profile(raw)
    except ProfileError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _event_id(name: str, raw: str) -> EventIdSource | None:
    if not raw:
        return None
    try:
        return EventIdSource.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name} {exc}") from None


_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")


def _header_name(name: str, raw: str) -> str:
    if raw and not _HEADER_NAME.fullmatch(raw):
        raise ConfigError(f"{name} must be an HTTP header name")
    return raw


def _allow_list(name: str, raw: str) -> AllowList:
    try:
        return AllowList.parse(raw)
    except ValueError as exc:
        raise ConfigError(f"{name}: {exc}") from None


def _names(name: str, raw: str) -> tuple[str, ...]:
    names = tuple(n.strip().lower() for n in raw.split(",") if n.strip())
    if not all(n.isidentifier() for n in names):
        raise ConfigError(f"{name} must be comma-separated simple names")
    return names


def token(minimum: int, hint: str = "") -> Parser:
    def convert(name: str, raw: str) -> str:
        if raw and len(raw) < minimum:
            raise ConfigError(f"{name} must be at least {minimum} characters{hint}")
        return raw

    return Parser(convert, f"secret, ≥ {minimum} characters or empty")


def _port(name: str, raw: str) -> int | None:
    """A TCP port to listen on; empty or 0 is off (nothing listens), never "any free port"."""
    value = integer(0).convert(name, raw) if raw else 0
    if value > 65535:
        raise ConfigError(f"{name} must be a TCP port, 1 to 65535 (empty or 0: off)")
    return value or None


def _ip_address(name: str, raw: str) -> str:
    try:
        return str(ipaddress.ip_address(raw))
    except ValueError:
        raise ConfigError(f"{name} must be an IP address, e.g. 127.0.0.1, 0.0.0.0 or ::") from None


def _kinds(name: str, raw: str) -> frozenset[str] | None:
    kinds = parse_routes(raw)
    if kinds is not None and not all(k == "*" or k.replace("_", "").isalnum() for k in kinds):
        raise ConfigError(f"{name} must be * or comma-separated incident kinds")
    return kinds


def _addresses(name: str, raw: str) -> tuple[str, ...]:
    addresses = tuple(a.strip() for a in raw.split(",") if a.strip())
    if not all("@" in a and not any(c in a for c in " <>\r\n") for a in addresses):
        raise ConfigError(f"{name} must be comma-separated email addresses")
    return addresses


def _amqp_url(name: str, raw: str) -> str:
    if raw and not raw.startswith(("amqp://", "amqps://")):
        raise ConfigError(f"{name} must be an amqp:// or amqps:// URL")
    refuse_ambiguous_credentials(name, raw)
    return raw


def _service_url(name: str, raw: str) -> str:
    """A broker's or Redis's URL, or several separated by ``;`` (Kombu's failover list): each one
    unambiguous (:func:`ambiguous_credentials`); what else it may be is its client library's to say."""
    for url in raw.split(";"):
        refuse_ambiguous_credentials(name, url.strip())
    return raw


TEXT = Parser(_text, "text")
AMQP_URL = Parser(_amqp_url, "amqp(s) URL")
SERVICE_URL = Parser(_service_url, "URL, password percent-encoded")
HTTP_URL = Parser(_http_url, "http(s) URL")
OPTIONAL_HTTP_URL = Parser(lambda name, raw: _http_url(name, raw) if raw else "", "http(s) URL or empty")
DELAYS = Parser(_delays, "seconds, comma-separated")
OPTIONAL_DELAYS = Parser(lambda name, raw: _delays(name, raw) if raw else None, "seconds, comma-separated, or empty")
WEBHOOK_SECRETS = Parser(_webhook_secrets, "secrets, comma-separated (their form: the scheme's)")
WEBHOOK_SCHEME = choice(*SCHEMES)
VENDOR_PROFILE = Parser(_vendor_profile, "path of a TOML vendor profile (docs/design.md §5)")
EVENT_ID = Parser(_event_id, "header:<Name> | pointer:/json/pointer | digest, or empty")
HEADER_NAME = Parser(_header_name, "HTTP header name")
ALLOW_LIST = Parser(_allow_list, "host, host:port or CIDR, comma-separated")
NAMES = Parser(_names, "names, comma-separated")
PORT = Parser(_port, "TCP port, empty or 0 = off")
IP_ADDRESS = Parser(_ip_address, "IP address")
KINDS = Parser(_kinds, "incident kinds, comma-separated, or *")
ADDRESSES = Parser(_addresses, "email addresses, comma-separated")


@dataclass(frozen=True)
class Option:
    """One variable. Unset or blank means ``default`` (or, with ``derive``, a value computed from
    the options read before it; ``default`` then says how, for the docs)."""

    env: str
    attr: str  # the Settings attribute it fills
    parser: Parser
    default: str = ""
    doc: str = ""
    secret: bool = False  # left out of reprs, logs and the docs' examples
    example: str | None = None  # a demo value .env.example shows instead of the default
    derive: Callable[[Mapping[str, Any]], str] | None = None
    required: bool = False
    #: required only when this holds of the options read before it (a provider's kind)
    required_when: Callable[[Mapping[str, Any]], bool] | None = None
    #: checks the value against the options read before it (a secret's form depends on the scheme);
    #: raises ConfigError naming the variable
    check: Callable[[str, Any, Mapping[str, Any]], None] | None = None

    def read(self, env: Mapping[str, str], earlier: Mapping[str, Any], what: str = "") -> Any:
        raw = env.get(self.env, "").strip() or (self.derive(earlier) if self.derive else self.default)
        required = self.required or (self.required_when is not None and self.required_when(earlier))
        value = self.parser.convert(self.env, raw) if raw or not required else None
        if required and not value:
            raise ConfigError(f"{self.env} is required{what}")
        if self.check is not None:
            self.check(self.env, value, earlier)
        return value


@dataclass(frozen=True)
class Section:
    title: str
    options: tuple[Option, ...]


def section(title: str, *options: Option) -> Section:
    return Section(title, options)
