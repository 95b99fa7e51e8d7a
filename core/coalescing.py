"""Progress coalescing across the copies of one callback, as plain rules. Pure: no database, no I/O.

A task's callback may be delivered twice: over HTTP (its relay row) and, for a client on a broker
channel, as a channel event (a second row with the same body and ``message_id``). A domain app
deduplicates on ``message_id``, so one ``message_id`` must name one body wherever it is delivered;
and each of the two ways must still hear the newest progress, however far behind the other is.

When a progress report arrives, each copy of the task's latest progress callback is one of:

* **open**: never started, never sent: its content may still be replaced;
* **unsent**: it ended without anything being sent (a relay skipped for want of a callback URL,
  as every HTTP relay of a channel-only client is): nobody holds its body;
* **sent**: sent, being sent, or to be sent as it is (started, retrying, parked, locked by a
  worker starting it): its body is out, or as good as out.

The report then (:func:`plan`):

* replaces the content of every copy under the same ``message_id`` when none was sent
  (``IN_PLACE``: nobody has seen that id, latest wins as it always did);
* becomes a new callback — a new ``message_id`` and the task's next sequence — when one copy was
  sent and another is still open (``RENAMED``): the open copy takes the new callback in place (the
  old one is never sent that way), and the way whose copy was sent gets a new row for it. The
  numbers each way receives only grow; one may skip the number that went only the other way;
* is a new callback on every way when no copy is open (``NEW``).

``service.progress`` applies it; ``tests/unit/test_coalescing.py`` checks it over every mix of copies.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

from core.ordering import PendingProgress, coalesces_into


class Copy(StrEnum):
    OPEN = "open"
    UNSENT = "unsent"
    SENT = "sent"


class Plan(StrEnum):
    NEW = "new"  # a new callback, a row on every way
    IN_PLACE = "in_place"  # the same message_id and sequence, the new content, on every copy not sent
    RENAMED = "renamed"  # a new message_id and sequence: the open copy takes it, the sent way gets a new row


def copy_of(pending: PendingProgress | None, last_sequence: int, *, may_have_left: bool = True) -> Copy:
    """One copy of the task's latest progress callback (``pending.sequence`` is the callback's).

    ``None``: the row is locked by a worker starting it, or gone: as if sent. ``may_have_left``:
    whether anything of it may have been sent once it ended (a relay knows: it names its target
    before it calls one; a channel event does not record it, so it counts as sent)."""
    if pending is None:
        return Copy.SENT
    if coalesces_into(pending, last_sequence):
        return Copy.OPEN
    if pending.done and not may_have_left and pending.sequence == last_sequence:
        return Copy.UNSENT
    return Copy.SENT


def plan(copies: Iterable[Copy]) -> Plan:
    """What a new progress report does with these copies of the task's latest progress callback."""
    found = set(copies)
    if Copy.OPEN not in found:
        return Plan.NEW
    if Copy.SENT in found:
        return Plan.RENAMED
    return Plan.IN_PLACE
