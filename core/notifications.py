"""Telling people: which notices go out now, alone or as one digest, and what each message says.

A notice is one thing a person should hear of once: an incident opened, or resolved (deadline
escalations and disabled callback endpoints are incidents too). Each has a stable key (kind,
subject, the incident's opening time and the phase), so a retry or a second beat can never make a
second one. Sending is planned here, over plain data, so the rule can be tested without a database:

- while calm, every notice goes out alone, at most ``threshold`` messages per ``window_s``;
- in a burst (more pending than that room), nothing goes out until the oldest pending notice is
  ``window_s`` old, and then all of them go out as one digest: 1,000 incidents in a minute are one
  message, not 1,000.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

OPENED = "opened"
RESOLVED = "resolved"
PHASES = (OPENED, RESOLVED)

EMAIL = "email"
CHAT = "chat"
CHANNELS = (EMAIL, CHAT)

#: Failing to notify is itself an incident, and is never notified: a mail server that is down for
#: good would otherwise make a notice of every failed notice, for ever.
NOT_NOTIFIED = frozenset({"notification_failed"})

#: A digest lists this many notices in full; the rest are counted.
DIGEST_LISTED = 50
#: Text taken from an incident's detail into a message (the rest is in the console / admin API).
DETAIL_CHARS = 500


def notice_key(kind: str, subject: str, opened_at: datetime, phase: str) -> str:
    """The notice's identity: the same incident's opening (or resolution) always has the same key."""
    raw = "\n".join((kind, subject, opened_at.isoformat(timespec="microseconds"), phase))
    return hashlib.sha256(raw.encode()).hexdigest()


@dataclass(frozen=True)
class Notice:
    id: int
    key: str
    kind: str
    subject: str
    phase: str
    detail: str
    occurred_at: datetime
    correlation_id: str | None = None


@dataclass(frozen=True)
class Message:
    """What one channel sends: one notice, or a digest of many."""

    key: str
    notices: tuple[Notice, ...]

    @property
    def digest(self) -> bool:
        return len(self.notices) > 1


@dataclass(frozen=True)
class DigestRule:
    threshold: int = 5  # messages per window before notices are held for a digest
    window_s: float = 60.0


def plan(pending: Sequence[Notice], sent_in_window: int, now: datetime, rule: DigestRule) -> list[Message]:
    """The messages to send now. Notices left out wait for a later run (a burst being gathered).

    ``sent_in_window`` is how many messages went out in the last ``rule.window_s``."""
    if not pending:
        return []
    room = rule.threshold - sent_in_window
    if len(pending) <= room:
        return [Message(n.key, (n,)) for n in pending]
    oldest = min(n.occurred_at for n in pending)
    if now - oldest < timedelta(seconds=rule.window_s):
        return []  # a burst: gather it until its first notice is a window old
    if len(pending) == 1:
        return [Message(pending[0].key, (pending[0],))]
    ordered = tuple(sorted(pending, key=lambda n: n.id))
    return [Message(digest_key(ordered), ordered)]


def digest_key(notices: Iterable[Notice]) -> str:
    return hashlib.sha256(("digest\n" + "\n".join(n.key for n in notices)).encode()).hexdigest()


def parse_routes(raw: str) -> frozenset[str] | None:
    """A channel's kinds: ``*`` for every kind, a comma list, or empty (the channel is off: None)."""
    names = frozenset(part.strip() for part in raw.split(",") if part.strip())
    if not names:
        return None
    return names


def routed(kind: str, routes: frozenset[str] | None) -> bool:
    if routes is None or kind in NOT_NOTIFIED:
        return False
    return "*" in routes or kind in routes


def for_channel(message: Message, routes: frozenset[str] | None) -> Message | None:
    """The part of a message a channel is configured for (None when it is for none of it)."""
    kept = tuple(n for n in message.notices if routed(n.kind, routes))
    if not kept:
        return None
    if kept == message.notices:
        return message
    return Message(kept[0].key if len(kept) == 1 else digest_key(kept), kept)


def _line(notice: Notice) -> str:
    who = f" ({notice.correlation_id})" if notice.correlation_id else ""
    return (
        f"[{notice.phase}] {notice.kind}: {notice.subject}{who} at {notice.occurred_at.isoformat(timespec='seconds')}"
    )


def title(message: Message) -> str:
    if message.digest:
        kinds = sorted({n.kind for n in message.notices})
        return f"[Liaison] {len(message.notices)} notices: {', '.join(kinds)}"
    notice = message.notices[0]
    verb = "resolved" if notice.phase == RESOLVED else "incident"
    task = f" ({notice.correlation_id})" if notice.correlation_id else ""
    return f"[Liaison] {verb}: {notice.kind} {notice.subject}{task}"[:200]


def text(message: Message, console_url: str | None = None) -> str:
    """The plain-text body (email) and the chat fallback text."""
    lines: list[str] = []
    if message.digest:
        lines.append(f"{len(message.notices)} notices in a burst, sent as one digest:")
        lines.extend(_line(n) for n in message.notices[:DIGEST_LISTED])
        if len(message.notices) > DIGEST_LISTED:
            lines.append(f"… and {len(message.notices) - DIGEST_LISTED} more")
    else:
        notice = message.notices[0]
        lines.append(_line(notice))
        if notice.detail:
            lines.append("")
            lines.append(notice.detail[:DETAIL_CHARS])
    if console_url:
        lines.extend(("", f"Incidents: {console_url}"))
    return "\n".join(lines)


def chat_body(message: Message, console_url: str | None = None) -> dict[str, Any]:
    """A Slack-compatible incoming-webhook body: ``text`` (what every compatible chat shows) and
    one section block with the same words."""
    body = text(message, console_url)
    return {
        "text": title(message),
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title(message)[:150]}},
            {"type": "section", "text": {"type": "mrkdwn", "text": _escape_mrkdwn(body)[:2900]}},
        ],
    }


def _escape_mrkdwn(value: str) -> str:
    """Slack's three control characters: a vendor's or client's string cannot become a link or mention."""
    return value.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def payload(channel: str, message: Message, console_url: str | None = None) -> dict[str, Any]:
    """What the outbox row carries: everything the sender needs, rendered once, at dispatch."""
    content: Mapping[str, Any]
    if channel == CHAT:
        content = {"body": chat_body(message, console_url)}
    else:
        content = {"subject": title(message), "text": text(message, console_url)}
    return {
        "channel": channel,
        "key": message.key,
        "notices": len(message.notices),
        "digest": message.digest,
        **content,
    }
