"""W3C Trace Context (https://www.w3.org/TR/trace-context/): the ``traceparent`` a domain app sends
on submit (HTTP header, or a field of a channel command), which Liaison keeps with the task and
continues in every span it makes for it.

Pure: parse, validate and format. Anything invalid is treated as absent, as the recommendation
says (a caller's bad header never fails its request). Only version ``00`` is understood; a later
version's first four fields are read as version 00's, again as the recommendation asks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A header longer than this is not a traceparent (version 00 is 55 characters; later versions may
#: append fields, which we ignore): never a large string into a regular expression or a column.
MAX_LENGTH = 128
_HEADER = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?")
INVALID_TRACE_ID = "0" * 32
INVALID_PARENT_ID = "0" * 16


@dataclass(frozen=True)
class TraceParent:
    """A valid traceparent: the trace it belongs to, the caller's span, and its flags."""

    trace_id: str  # 32 lowercase hex, not all zeros
    parent_id: str  # 16 lowercase hex, not all zeros
    flags: int  # 0..255; bit 0 is "sampled"

    @property
    def sampled(self) -> bool:
        return bool(self.flags & 1)

    def header(self) -> str:
        """The version-00 header for this trace and parent."""
        return format_traceparent(self.trace_id, self.parent_id, self.flags)


def parse_traceparent(value: str | None) -> TraceParent | None:
    """The traceparent in ``value``, or None when it is absent or invalid in any way."""
    if not isinstance(value, str) or not 0 < len(value) <= MAX_LENGTH:
        return None
    match = _HEADER.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_id, parent_id, flags, rest = match.groups()
    if version == "ff":  # forbidden version
        return None
    if version == "00" and rest is not None:  # version 00 has exactly four fields
        return None
    if trace_id == INVALID_TRACE_ID or parent_id == INVALID_PARENT_ID:
        return None
    return TraceParent(trace_id, parent_id, int(flags, 16))


def valid_traceparent(value: str | None) -> str | None:
    """``value`` as a normalised version-00 header if it is a valid traceparent, else None: what is
    stored with a task and forwarded."""
    parsed = parse_traceparent(value)
    return parsed.header() if parsed is not None else None


def format_traceparent(trace_id: str | int, parent_id: str | int, flags: int = 1) -> str:
    """A version-00 header; ids may be given as ints (as OpenTelemetry's span context holds them)."""
    trace = f"{trace_id:032x}" if isinstance(trace_id, int) else trace_id
    parent = f"{parent_id:016x}" if isinstance(parent_id, int) else parent_id
    return f"00-{trace}-{parent}-{flags & 0xFF:02x}"


def trace_id_of(value: str | None) -> str | None:
    """The trace id of a stored traceparent (for log lines), or None."""
    parsed = parse_traceparent(value)
    return parsed.trace_id if parsed is not None else None
