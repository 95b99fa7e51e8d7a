"""Inbound verification schemes: how a vendor proves a webhook is its own, one verifier per scheme.

Pure: the standard library (``hmac``, ``hashlib``, ``base64``) and ``wire`` only; time is passed in.
Every verifier has the same shape, ``(profile, headers, body, now_s, path_token) -> Verified``, and
is *total*: whatever the headers, body or token, it returns a :class:`Verified` or raises
:class:`SignatureError` (→ 401), never anything else (→ 500). Every comparison of a secret or of a
MAC is ``hmac.compare_digest``; every scheme that can carry several signatures or take several
secrets checks each against each, so a secret can rotate.

The schemes (``LIAISON_PROVIDER_<NAME>_WEBHOOK_SCHEME``):

- ``standard-webhooks``: ``webhook-*`` (or ``svix-*``) headers, ``whsec_`` secrets (``signing``).
- ``stripe``: ``Stripe-Signature: t=<unix>,v1=<hex>[,v1=…]``, HMAC-SHA256 of ``<t>.<body>`` keyed
  with the secret's own text (Stripe's ``whsec_…`` is *not* base64-decoded).
- ``github``: ``X-Hub-Signature-256: sha256=<hex>``, HMAC-SHA256 of the body (no timestamp: a
  replay is caught by the ``X-GitHub-Delivery`` id's dedup).
- ``hmac``: a header of the vendor's naming, sha1/sha256/sha512, hex or base64, an optional prefix,
  over the body or over ``<timestamp header><separator><body>`` (then within the tolerance).
- ``basic``: ``Authorization: Basic`` with one of the configured ``user:password`` pairs.
- ``token-url``: the request's path carries the per-task token Liaison gave the vendor at submit;
  this checks its form and returns its digest, the caller finds the task it belongs to.
- ``confirm``: nothing is proven: the event is a *hint*. Only a job id is read of its body
  (:func:`hint_job_id`), and the caller asks the vendor's status API about that job instead of
  applying the body.

The event id (the inbox's dedup key) comes from :class:`EventIdSource`: a header, a JSON pointer
into the (verified) body, or the SHA-256 of the raw body; each scheme has a default.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from webhooks.signing import DEFAULT_TOLERANCE_S, HeaderItems, SignatureError, StaleTimestamp, decode_secret
from webhooks.signing import verify as verify_standard
from wire.bounded_json import InvalidJson, strict_loads
from wire.json_pointer import PointerMissing, resolve

STANDARD, STRIPE, GITHUB, HMAC, BASIC, TOKEN_URL, CONFIRM = (
    "standard-webhooks",
    "stripe",
    "github",
    "hmac",
    "basic",
    "token-url",
    "confirm",
)
SCHEMES: tuple[str, ...] = (STANDARD, STRIPE, GITHUB, HMAC, BASIC, TOKEN_URL, CONFIRM)
#: Schemes that need no configured secret (the token is per task; a hint proves nothing).
SECRETLESS: frozenset[str] = frozenset({TOKEN_URL, CONFIRM})
ALGORITHMS: dict[str, Callable[..., Any]] = {"sha1": hashlib.sha1, "sha256": hashlib.sha256, "sha512": hashlib.sha512}
ENCODINGS = ("hex", "base64")
SIGNED_CONTENTS = ("body", "timestamp-body")

_MAX_HEADER_LEN = 4096
#: The depth a body is parsed to for a ``pointer:`` event id (the event body is bounded later).
_POINTER_MAX_DEPTH = 64
#: A token-url token: ``secrets.token_urlsafe(32)`` is 43 characters of the URL-safe alphabet.
TOKEN_PATTERN = re.compile(r"[A-Za-z0-9_-]{32,128}")
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,100}")


# --- configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class EventIdSource:
    """Where the event id comes from: ``header`` (a header's value), ``pointer`` (an RFC 6901 JSON
    pointer into the body), ``digest`` (``sha256:<hex>`` of the raw body), or ``native`` (the
    scheme's own: Standard Webhooks' ``webhook-id``)."""

    kind: str
    where: str = ""

    @classmethod
    def parse(cls, text: str) -> EventIdSource:
        """``header:<Name>`` | ``pointer:/a/b`` | ``digest``; anything else is a ValueError."""
        kind, sep, where = text.strip().partition(":")
        if kind == "digest" and not sep:
            return cls("digest")
        if kind == "header" and _HEADER_NAME.fullmatch(where):
            return cls("header", where)
        if kind == "pointer" and where.startswith("/") and len(where) <= 200:
            return cls("pointer", where)
        raise ValueError("must be header:<Header-Name>, pointer:/json/pointer or digest")

    def __str__(self) -> str:
        return f"{self.kind}:{self.where}" if self.where else self.kind


#: Each scheme's event id when the profile names none.
DEFAULT_EVENT_ID: dict[str, EventIdSource] = {
    STANDARD: EventIdSource("native"),
    STRIPE: EventIdSource("pointer", "/id"),
    GITHUB: EventIdSource("header", "X-GitHub-Delivery"),
    HMAC: EventIdSource("digest"),
    BASIC: EventIdSource("digest"),
    TOKEN_URL: EventIdSource("digest"),
    CONFIRM: EventIdSource("digest"),
}


@dataclass(frozen=True)
class HmacParams:
    """The generic ``hmac`` scheme's knobs (``LIAISON_PROVIDER_<NAME>_WEBHOOK_HMAC_*``)."""

    header: str = ""
    algorithm: str = "sha256"
    encoding: str = "hex"
    prefix: str = ""
    timestamp_header: str = ""
    signed_content: str = "body"  # or timestamp-body
    separator: str = "."


@dataclass(frozen=True, repr=False)
class Profile:
    """One provider's inbound scheme: what its verifier needs. The secrets never show in a repr."""

    scheme: str = STANDARD
    secrets: tuple[str, ...] = ()
    hmac: HmacParams = HmacParams()
    event_id: EventIdSource | None = None  # None: the scheme's default
    tolerance_s: int = DEFAULT_TOLERANCE_S

    def __repr__(self) -> str:
        return f"Profile(scheme={self.scheme!r}, secrets=<{len(self.secrets)}>, event_id={self.event_id_source})"

    @property
    def event_id_source(self) -> EventIdSource:
        return self.event_id or DEFAULT_EVENT_ID[self.scheme]


def check_secret(scheme: str, secret: str) -> None:
    """A configured secret's form for ``scheme``; ValueError (without the value) when it is wrong."""
    if scheme == STANDARD:
        decode_secret(secret)
    elif scheme == BASIC:
        user, sep, password = secret.partition(":")
        if not sep or not user or not password:
            raise ValueError("basic credentials must be user:password pairs")
    elif scheme in (STRIPE, GITHUB, HMAC) and not secret:
        raise ValueError("a secret must not be empty")


class EventIdError(SignatureError):
    """The request is proven, but the event id the profile names is missing or unreadable (→ 400)."""


# --- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verified:
    """What a verifier proved: the event id to deduplicate on; ``hint``: nothing was proven (the
    ``confirm`` scheme) and the body must not be applied; ``token_digest``: the SHA-256 (hex) of a
    ``token-url`` token, whose task the caller must find (and refuse the request if there is none)."""

    event_id: str
    hint: bool = False
    token_digest: str | None = None


# --- helpers -------------------------------------------------------------------------------------


def header(headers: HeaderItems, name: str) -> str:
    """The first header called ``name`` (any case), stripped; missing/blank or too long refuse."""
    wanted = name.lower()
    value: object = None
    for key, val in headers.items():
        if isinstance(key, str) and key.lower() == wanted:
            value = val
            break
    if not isinstance(value, str) or not value.strip():
        raise SignatureError("missing_header")
    if len(value) > _MAX_HEADER_LEN:
        raise SignatureError("malformed_header")
    return value.strip()


def token_digest(token: str) -> str:
    """What is stored of a token-url token: its SHA-256, hex (the token itself never is)."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def _timestamp(text: str, now_s: float, tolerance_s: int) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise SignatureError("malformed_header")
    value = int(text)
    if abs(now_s - value) > tolerance_s:
        raise StaleTimestamp("stale")
    return value


def _keys(secrets_: Iterable[str]) -> list[bytes]:
    keys = []
    for secret in secrets_:
        try:
            keys.append(secret.encode("utf-8"))
        except UnicodeEncodeError:  # a lone surrogate from a broken environment: never matches
            continue
    return keys


def _match(keys: list[bytes], algorithm: Callable[..., Any], message: bytes, offered: list[bytes]) -> bool:
    """Any offered MAC equal (constant time) to any key's MAC of ``message``."""
    found = False
    for key in keys:
        expected = hmac.new(key, message, algorithm).digest()
        for candidate in offered:
            found |= hmac.compare_digest(expected, candidate)
    return found


def _unhex(text: str) -> bytes | None:
    try:
        return bytes.fromhex(text) if text.isascii() else None
    except ValueError:
        return None


def _unbase64(text: str) -> bytes | None:
    try:
        return base64.b64decode(text, validate=True) if text.isascii() else None
    except (binascii.Error, ValueError):
        return None


# --- the verifiers -------------------------------------------------------------------------------

Verifier = Callable[[Profile, HeaderItems, bytes, float, "str | None"], Verified]


def _standard(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    message_id = verify_standard(profile.secrets, headers, body, now_s, profile.tolerance_s)
    return Verified(message_id)


def _stripe(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    """Stripe's scheme: ``t`` once, any number of ``v1`` (one per active secret while rolling);
    ``v0`` and unknown keys are ignored, as Stripe's own library does."""
    value = header(headers, "Stripe-Signature")
    timestamps: list[str] = []
    offered: list[bytes] = []
    for item in value.split(","):
        key, sep, text = item.strip().partition("=")
        if not sep:
            continue
        if key == "t":
            timestamps.append(text)
        elif key == "v1":
            mac = _unhex(text)
            if mac is not None and len(mac) == hashlib.sha256().digest_size:
                offered.append(mac)
    if len(timestamps) != 1 or not offered:
        raise SignatureError("malformed_header")
    _timestamp(timestamps[0], now_s, profile.tolerance_s)
    message = timestamps[0].encode("ascii") + b"." + body
    if not _match(_keys(profile.secrets), hashlib.sha256, message, offered):
        raise SignatureError("bad_signature")
    return Verified("")


def _github(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    value = header(headers, "X-Hub-Signature-256")
    prefix, sep, text = value.partition("=")
    mac = _unhex(text) if sep and prefix == "sha256" else None
    if mac is None or len(mac) != hashlib.sha256().digest_size:
        raise SignatureError("malformed_header")
    if not _match(_keys(profile.secrets), hashlib.sha256, body, [mac]):
        raise SignatureError("bad_signature")
    return Verified("")


def _hmac(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    """The generic scheme. Several signatures may sit in the header, space- or comma-separated
    (each with the prefix), so a vendor can sign with an old and a new secret while rotating."""
    params = profile.hmac
    algorithm = ALGORITHMS[params.algorithm]
    size = algorithm().digest_size
    value = header(headers, params.header)
    message = body
    if params.signed_content == "timestamp-body":
        stamp = header(headers, params.timestamp_header)
        _timestamp(stamp, now_s, profile.tolerance_s)
        message = stamp.encode("ascii") + params.separator.encode("utf-8") + body
    decode = _unhex if params.encoding == "hex" else _unbase64
    offered = []
    for item in value.replace(",", " ").split():
        if not item.startswith(params.prefix):
            continue
        mac = decode(item[len(params.prefix) :])
        if mac is not None and len(mac) == size:
            offered.append(mac)
    if not offered:
        raise SignatureError("malformed_header")
    if not _match(_keys(profile.secrets), algorithm, message, offered):
        raise SignatureError("bad_signature")
    return Verified("")


def _basic(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    value = header(headers, "Authorization")
    kind, _, text = value.partition(" ")
    raw = _unbase64(text.strip()) if kind.lower() == "basic" else None
    if raw is None or b":" not in raw:
        raise SignatureError("malformed_header")
    found = False
    for pair in _keys(profile.secrets):
        found |= hmac.compare_digest(pair, raw)
    if not found:
        raise SignatureError("bad_signature")
    return Verified("")


def _token_url(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    if path_token is None:
        raise SignatureError("missing_token")  # the provider's plain URL proves nothing for this scheme
    if not isinstance(path_token, str) or not TOKEN_PATTERN.fullmatch(path_token):
        raise SignatureError("malformed_token")
    return Verified("", token_digest=token_digest(path_token))


def _confirm(profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None) -> Verified:
    return Verified("", hint=True)


#: The one place a scheme's name picks its verifier (the ingress looks it up; no if-chains).
VERIFIERS: dict[str, Verifier] = {
    STANDARD: _standard,
    STRIPE: _stripe,
    GITHUB: _github,
    HMAC: _hmac,
    BASIC: _basic,
    TOKEN_URL: _token_url,
    CONFIRM: _confirm,
}


def _pointer(body: bytes, pointer: str) -> str:
    try:
        data: Any = resolve(strict_loads(body, max_depth=_POINTER_MAX_DEPTH), pointer)
    except InvalidJson:
        raise EventIdError("malformed_event_id") from None
    except PointerMissing:
        raise EventIdError("missing_event_id") from None
    if isinstance(data, bool) or not isinstance(data, (str, int)):
        raise EventIdError("malformed_event_id")
    text = str(data)
    if not text:
        raise EventIdError("missing_event_id")
    return text


#: Where a ``confirm`` hint names its job: the vendor event's own ``job_id`` (docs/design.md §4).
HINT_JOB_ID_POINTER = "/job_id"
#: A job id as the provider contract allows it: printable ASCII, at most 200 characters.
_JOB_ID = re.compile(r"[!-~]{1,200}")


def hint_job_id(body: bytes, pointer: str = HINT_JOB_ID_POINTER) -> str:
    """The one thing a ``confirm`` hint is read for: the job it is about, at ``pointer`` (an RFC 6901
    JSON pointer; the event shape's ``job_id`` by default). Nothing else of the body is looked at,
    let alone trusted; a job id outside the contract's form refuses the hint (EventIdError → 400)."""
    try:
        found = _pointer(body, pointer)
    except EventIdError as exc:
        raise EventIdError(exc.reason.replace("event_id", "job_id")) from None
    if not _JOB_ID.fullmatch(found):
        raise EventIdError("malformed_job_id")
    return found


def event_id(source: EventIdSource, native: str, headers: HeaderItems, body: bytes) -> str:
    """The event id by ``source``: read after the signature checks, so it is as trusted as the body.
    A missing or unreadable one refuses the event (a vendor that names no id cannot be deduplicated
    by that id; choose ``digest`` for it)."""
    if source.kind == "native":
        return native
    if source.kind == "header":
        try:
            return header(headers, source.where)
        except SignatureError:
            raise EventIdError("missing_event_id") from None
    if source.kind == "pointer":
        return _pointer(body, source.where)
    return "sha256:" + hashlib.sha256(body).hexdigest()


def verify(
    profile: Profile, headers: HeaderItems, body: bytes, now_s: float, path_token: str | None = None
) -> Verified:
    """The profile's scheme's verifier, then its event id: a :class:`Verified` or SignatureError."""
    verifier = VERIFIERS.get(profile.scheme)
    if verifier is None:
        raise SignatureError("unknown_scheme")
    verified = verifier(profile, headers, body, now_s, path_token)
    found = event_id(profile.event_id_source, verified.event_id, headers, body)
    return Verified(found, verified.hint, verified.token_digest)
