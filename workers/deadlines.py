"""``check_deadlines``: what beat runs every minute and ``liaison check-deadlines`` runs by hand."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from models.lifecycle import escalate_due
from workers.runtime import Liaison


def check_deadlines(
    ctx: Liaison, now: datetime, *, max_batches: int = 20, progress: Callable[[int], None] | None = None
) -> int:
    """Escalate overdue tasks a batch per transaction until none is due (or ``max_batches``, so a
    backlog cannot hold one run for long: the next run a minute later goes on). Each batch's
    relays and cancels are published after its commit (the outbox hook)."""
    total = 0
    for _ in range(max_batches):
        with ctx.db.transaction() as session:
            escalated, _ = escalate_due(session, now, ctx.settings.beat_batch)
        if not escalated:
            break
        total += escalated
        if progress is not None:
            progress(total)
    return total
