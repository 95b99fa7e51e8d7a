"""Beat's scheduler: Celery's own (``PersistentScheduler``, the schedule file) plus a heartbeat.

Celery sends a signal when beat starts (``beat_init``) but none per tick, and beat keeps its own
liveness (``Service._last_tick``) in memory only, where nothing outside the process can read it. So
the scheduler's ``tick`` is extended: after each one, the time is written to the database
(``models.heartbeats``), with the longest beat should ever sleep between ticks, for ``/readyz``,
``/metrics`` and ``liaison beat check`` to compare against (``core.beat_liveness``). Configured as
``beat_scheduler`` in celeryconfig.py, so ``celery beat`` needs no extra argument.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from celery.beat import PersistentScheduler
from celery.schedules import schedule as every
from sqlalchemy.exc import SQLAlchemyError

from core.beat_liveness import expected_interval_s
from models.base import utcnow
from models.store.heartbeats import record_tick

log = logging.getLogger(__name__)

#: ticks closer together than this write one heartbeat (a burst of due entries ticks back to back)
MIN_WRITE_GAP_S = 1.0


class HeartbeatScheduler(PersistentScheduler):
    _last_write: float | None = None
    _interval_s: float | None = None

    def tick(self, *args: Any, **kwargs: Any) -> float:
        interval: float = super().tick(*args, **kwargs)
        self.heartbeat()
        return interval

    def expected_interval_s(self) -> float:
        """The shortest fixed interval of the schedule, or the max loop interval if that is shorter
        (``celery beat --max-interval``): beat wakes at least that often."""
        if self._interval_s is None:
            intervals = [
                entry.schedule.run_every.total_seconds()
                for entry in self.schedule.values()
                if isinstance(entry.schedule, every)
            ]
            self._interval_s = expected_interval_s(intervals, float(self.max_interval))
        return self._interval_s

    def heartbeat(self) -> None:
        """A database that does not answer costs this tick's heartbeat, never beat itself: the
        heartbeat then goes stale, which is what it should say."""
        now = time.monotonic()
        if self._last_write is not None and now - self._last_write < MIN_WRITE_GAP_S:
            return
        db = self.app.flask_app.extensions["liaison"].db
        try:
            record_tick(db, utcnow(), self.expected_interval_s(), f"{socket.gethostname()}:{os.getpid()}")
        except SQLAlchemyError as exc:
            log.warning("beat: heartbeat not recorded (%s)", type(exc).__name__)
            return
        self._last_write = now
