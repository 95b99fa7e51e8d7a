"""``check_deadlines``: what beat runs every minute and ``liaison check-deadlines`` runs by hand.

Deadlines and heartbeats both come due here. Neither escalates on its own word: each due task
gets a ``probe`` (``workers.tasks.probe``) that asks the vendor first, and escalates only if the
job is not final there (docs/design.md §7)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from runtime.context import Liaison
from service.lifecycle import escalate_due
from service.probes import claim_silent


def check_deadlines(
    ctx: Liaison, now: datetime, *, max_batches: int = 20, progress: Callable[[int], None] | None = None
) -> int:
    """Claim overdue tasks, then silent ones (heartbeat due), a batch per transaction until none is
    due (or ``max_batches`` each, so a backlog cannot hold one run for long: the next run a minute
    later goes on). Each batch's probes, relays and cancels are published after its commit (the
    outbox hook). Returns how many deadlines and heartbeats came due."""
    total = 0
    for claim in (escalate_due, claim_silent):
        for _ in range(max_batches):
            with ctx.db.transaction() as session:
                claimed, _ = claim(session, now, ctx.settings.beat_batch)
            if not claimed:
                break
            total += claimed
            if progress is not None:
                progress(total)
    return total
