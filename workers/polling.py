"""``poll``: what beat runs every few seconds (``POLL_INTERVAL_S``): the due polls of every provider
(``service.polling``), each a status check on the calls queue.

A run claims per provider at most what its rate limit allows until the next run
(``RATE_LIMIT_PER_S`` × the interval, at least one, at most ``LIAISON_BEAT_BATCH``), in one
transaction per provider, so a provider with a backlog of due polls cannot queue more checks than
its vendor will be asked in that time; the rest stay due, the longest-due first next run. The calls
themselves take the provider's shared rate slots (every process, every host), as every call does.
"""

from __future__ import annotations

import math
from datetime import datetime

from foundation import metrics
from runtime.context import Liaison
from service.polling import claim_due

#: how often beat runs the poll job (beat_schedule.py), and so how much a run may claim
POLL_INTERVAL_S = 5.0


def poll_cap(rate_limit_per_s: float, batch: int) -> int:
    return max(1, min(batch, math.floor(rate_limit_per_s * POLL_INTERVAL_S)))


def poll(ctx: Liaison, now: datetime) -> dict[str, int]:
    """Checks written, per provider; counted in ``liaison_polls_total``."""
    written: dict[str, int] = {}
    for name, ps in ctx.settings.providers.items():
        cap = poll_cap(ps.rate_limit_per_s, ctx.settings.beat_batch)
        with ctx.db.transaction() as session:
            claimed = claim_due(session, name, ps.poll_schedule_s, now, cap)
        if claimed:
            written[name] = len(claimed)
            if ps.poll_schedule_s:
                metrics.polled(name, len(claimed))
    return written
