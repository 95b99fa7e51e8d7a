"""Pure: a failed call → transient, permanent or uncertain (only transient failures retry), and
whose fault it is once it is dead-lettered (``caller`` or ``system``).

The caller reduces whatever went wrong to plain data first: an HTTP status, or one of the
``Failure`` labels (which say *when* the transport failed: before the request left, or after).
"""

from __future__ import annotations

from datetime import datetime
from email.utils import parsedate_to_datetime
from enum import StrEnum


class Fault:
    """Whose fault a dead letter is: the caller's (bad input, rejected, endpoint gone) or ours."""

    CALLER = "caller"
    SYSTEM = "system"


class Kind(StrEnum):
    TRANSIENT = "transient"
    PERMANENT = "permanent"
    UNCERTAIN = "uncertain"


class Failure(StrEnum):
    CONNECT_ERROR = "connect_error"  # refused / DNS / reset before the request was sent
    CONNECT_TIMEOUT = "connect_timeout"  # nothing was sent
    READ_TIMEOUT = "read_timeout"  # sent; the other side may have acted on it
    RESET_AFTER_SEND = "reset_after_send"  # sent; connection dropped before the answer
    BAD_RESPONSE = "bad_response"  # an answer that breaks the contract
    REFUSED = "refused_by_guard"  # the outbound guard refused a client-supplied URL: nothing was sent


TRANSIENT_STATUSES = frozenset({408, 425, 429})
#: A provider refusing the credentials we configured for it (its API key): ours, whatever the input.
CREDENTIAL_STATUSES = frozenset({401, 403})
PROXY_AUTH = 407  # our own egress proxy refused us, never the other side

_FAILURES: dict[Failure, Kind] = {
    Failure.CONNECT_ERROR: Kind.TRANSIENT,
    Failure.CONNECT_TIMEOUT: Kind.TRANSIENT,
    Failure.READ_TIMEOUT: Kind.UNCERTAIN,
    Failure.RESET_AFTER_SEND: Kind.UNCERTAIN,
    Failure.BAD_RESPONSE: Kind.PERMANENT,
    Failure.REFUSED: Kind.PERMANENT,
}
#: Relaying, these say the caller's endpoint is unreachable or not allowed: the caller's to fix.
UNREACHABLE = frozenset({Failure.CONNECT_ERROR, Failure.CONNECT_TIMEOUT, Failure.REFUSED})


def classify_status(status: int) -> Kind | None:
    """None for success (2xx); otherwise what the status means for a retry."""
    if 200 <= status < 300:
        return None
    if status in TRANSIENT_STATUSES or status >= 500:
        return Kind.TRANSIENT
    return Kind.PERMANENT


def classify_failure(failure: Failure | str) -> Kind:
    return _FAILURES[Failure(failure)]


def fault_of(
    kind: Kind, status: int | None = None, failure: Failure | None = None, *, callers_endpoint: bool = False
) -> str:
    """Whose fault a failed call is: ``caller`` only when the other side refused what the caller gave us.

    An outage (transient, uncertain) of a provider is ours to watch, and so is a permanent failure without a status
    (a broken contract, our own configuration) or with 407. Calling a provider, 401 and 403 refuse
    credentials *we* configured, and a 3xx breaks the contract: ``system``; any other 4xx rejects the
    caller's input. Relaying (``callers_endpoint``), the endpoint and the secrets it checks belong to
    the caller: any refusal of it, 401, 403 and redirects included, is the caller's, and so is an
    endpoint that cannot be reached (connection refused, connect timeout) or that the outbound
    guard refuses: nothing of ours stands between the worker and the caller's server.
    """
    if callers_endpoint and failure in UNREACHABLE:
        return Fault.CALLER
    if kind is not Kind.PERMANENT or status is None or failure is Failure.BAD_RESPONSE or status == PROXY_AUTH:
        return Fault.SYSTEM
    if callers_endpoint:
        return Fault.CALLER
    if 400 <= status < 500 and status not in CREDENTIAL_STATUSES:
        return Fault.CALLER
    return Fault.SYSTEM


def parse_retry_after(value: str | None, now: datetime) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP-date; None if absent or junk."""
    if not value:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, (when - now).total_seconds())
