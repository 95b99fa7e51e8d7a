"""The Standard Webhooks signature scheme, in both directions.

Pure: standard library only; time is passed in. The verifier is *total*: every malformed input
(missing header, garbage signature list, bad base64, non-numeric timestamp, a secret that is not
``whsec_<base64>``) raises :class:`SignatureError`, so a view that catches it answers 401 and never
500. That is the one habit the reference implementation gets wrong (it leaks ``binascii.Error``).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

SECRET_PREFIX = "whsec_"
DEFAULT_TOLERANCE_S = 300
_MAX_HEADER_LEN = 4096


#: The header names a request may carry, in order of preference: Standard Webhooks' own, then the
#: ones vendors sending through Svix use for the very same scheme. A request is read with one set
#: only: if any ``webhook-*`` name is present, that set is used (and must be complete) and every
#: ``svix-*`` header is ignored; the two are never mixed, so a half of each proves nothing.
class HeaderItems(Protocol):
    """What the verifier reads headers through: (name, value) pairs. A dict and werkzeug's
    ``Headers`` (which is not a typed mapping, and may repeat a name) both have it."""

    def items(self) -> Iterable[tuple[str, str]]: ...


HEADER_SETS: tuple[tuple[str, str, str], ...] = (
    ("webhook-id", "webhook-timestamp", "webhook-signature"),
    ("svix-id", "svix-timestamp", "svix-signature"),
)


class SignatureError(Exception):
    """The request is not proven to come from the party holding the secret (→ 401)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        #: a short machine word for metrics: missing_header, stale, bad_signature, ...
        self.reason = reason


class StaleTimestamp(SignatureError):
    """The signature may be valid but the timestamp is outside the tolerance (replay guard)."""


@dataclass(frozen=True)
class SignedHeaders:
    webhook_id: str
    webhook_timestamp: str
    webhook_signature: str

    def as_dict(self) -> dict[str, str]:
        return {
            "webhook-id": self.webhook_id,
            "webhook-timestamp": self.webhook_timestamp,
            "webhook-signature": self.webhook_signature,
        }


def generate_secret(nbytes: int = 32) -> str:
    """A new ``whsec_`` secret; the spec recommends 24–64 random bytes."""
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(nbytes)).decode("ascii")


def decode_secret(secret: str) -> bytes:
    """The key bytes of a ``whsec_<base64>`` secret. A malformed secret is a configuration error."""
    if not isinstance(secret, str) or not secret.startswith(SECRET_PREFIX):
        raise ValueError("webhook secret must look like whsec_<base64>")
    try:
        key = base64.b64decode(secret[len(SECRET_PREFIX) :], validate=True)
    except (binascii.Error, ValueError) as exc:
        raise ValueError("webhook secret is not valid base64 after whsec_") from exc
    if len(key) < 16:
        raise ValueError("webhook secret is shorter than 16 bytes")
    return key


def _signature(key: bytes, msg_id: str, timestamp: str, body: bytes) -> bytes:
    signed = b"%s.%s.%s" % (msg_id.encode("utf-8"), timestamp.encode("ascii"), body)
    return hmac.new(key, signed, hashlib.sha256).digest()


def sign(secrets_: str | Iterable[str], msg_id: str, timestamp: int, body: bytes) -> SignedHeaders:
    """Headers for ``body``, one ``v1,`` signature per secret (several while a secret rotates)."""
    if isinstance(secrets_, str):
        secrets_ = [secrets_]
    ts = str(int(timestamp))
    sigs = ["v1," + base64.b64encode(_signature(decode_secret(s), msg_id, ts, body)).decode("ascii") for s in secrets_]
    if not sigs:
        raise ValueError("at least one secret is needed to sign")
    return SignedHeaders(msg_id, ts, " ".join(sigs))


def _header(headers: HeaderItems, name: str) -> str:
    value = None
    for key, val in headers.items():
        if key.lower() == name:
            value = val
            break
    if value is None or not isinstance(value, str) or not value.strip():
        raise SignatureError("missing_header")
    if len(value) > _MAX_HEADER_LEN:
        raise SignatureError("malformed_header")
    return value.strip()


def header_set(headers: HeaderItems) -> tuple[str, str, str]:
    """The (id, timestamp, signature) header names to read ``headers`` with: the first set of
    :data:`HEADER_SETS` any of whose names is present, else the first (which then reports
    ``missing_header``)."""
    present = {key.lower() for key, _ in headers.items()}  # werkzeug Headers iterate as pairs
    for names in HEADER_SETS:
        if present.intersection(names):
            return names
    return HEADER_SETS[0]


def verify(
    secrets_: Iterable[str],
    headers: HeaderItems,
    body: bytes,
    now: float,
    tolerance_s: int = DEFAULT_TOLERANCE_S,
) -> str:
    """Check ``body`` against any of ``secrets_``; return the ``webhook-id`` (the MessageId).

    The headers may be named ``webhook-*`` or ``svix-*`` (see :data:`HEADER_SETS`; ``webhook-*``
    wins when both are present). The timestamp is checked first (both directions: too old is a
    replay, too new is a clock or forgery problem), then every ``v1`` signature in the header
    against every secret.
    """
    id_name, ts_name, sig_name = header_set(headers)
    msg_id = _header(headers, id_name)
    try:
        msg_id.encode("utf-8")
    except UnicodeEncodeError:
        raise SignatureError("malformed_header") from None
    ts_text = _header(headers, ts_name)
    sig_text = _header(headers, sig_name)
    if not ts_text.isascii() or not ts_text.isdigit() or len(ts_text) > 12:
        raise SignatureError("malformed_header")
    timestamp = int(ts_text)
    if abs(now - timestamp) > tolerance_s:
        raise StaleTimestamp("stale")

    offered: list[bytes] = []
    for item in sig_text.split(" "):
        version, sep, b64 = item.partition(",")
        if not sep or version != "v1":
            continue  # other schemes (v1a, …) may sit beside ours; they prove nothing to us
        try:
            offered.append(base64.b64decode(b64, validate=True))
        except (binascii.Error, ValueError):
            continue
    if not offered:
        raise SignatureError("malformed_header")

    keys = []
    for secret in secrets_:
        try:
            keys.append(decode_secret(secret))
        except ValueError:
            continue  # a broken configured secret never matches; settings validation reports it
    for key in keys:
        expected = _signature(key, msg_id, ts_text, body)
        for candidate in offered:
            if hmac.compare_digest(expected, candidate):
                return msg_id
    raise SignatureError("bad_signature")
