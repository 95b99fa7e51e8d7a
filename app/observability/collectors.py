"""Business gauges computed at scrape time from the database and the broker.

They describe shared state (tasks, dead letters, queue depth), so they must not be process-local
gauges: with several web workers each would report its own stale view. Instead every scrape asks the
source of truth with a handful of grouped COUNTs on indexed columns. A failing source drops its
gauges for that scrape, sets ``liaison_scrape_source_up{source}`` to 0 and counts
``liaison_scrape_errors_total{source}`` -- a scrape never fails with a 500 because the database or
the broker is down.

A scrape flood must not become a flood of table counts: what one scrape read is served again for
``cache_s`` seconds (``LIAISON_METRICS_CACHE_S``, per process), and concurrent scrapes of an expired
cache wait for one reader instead of each counting.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime

from celery import Celery
from kombu.exceptions import KombuError
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.exc import SQLAlchemyError

from app.observability.queue_probe import BrokerProbeError, QueueStats, filesystem_stats, queue_stats
from core.beat_liveness import BeatLiveness
from core.states import State
from foundation import metrics
from models.base import utcnow
from models.db import Database
from models.endpoint_health import UNHEALTHY_STATES, health_state
from models.messages import DEAD_LETTER_KINDS, OutboxKind
from models.read_models import gauge_counts
from models.store.heartbeats import beat_liveness
from service.incidents import IncidentKind

log = logging.getLogger(__name__)

FAULTS = ("caller", "system")


@dataclass
class _Families:
    items: list[Metric] = field(default_factory=list)

    def gauge(self, name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=labels)
        self.items.append(family)
        return family


class BusinessCollector(Collector):
    """Scrape-time gauges for one Liaison app (its database, its Celery queues)."""

    def __init__(
        self,
        db: Database,
        celery: Celery,
        providers: Iterable[str],
        *,
        queues: Iterable[str] | None = None,
        statement_timeout_ms: int = 2000,
        broker_timeout_s: float = 2.0,
        cache_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.db = db
        self.celery = celery
        self.providers = tuple(providers)
        self._queues = tuple(queues) if queues is not None else None  # default: the app's work queues
        self.statement_timeout_ms = statement_timeout_ms
        self.broker_timeout_s = broker_timeout_s
        self.cache_s = cache_s
        self._clock = clock
        self._lock = threading.Lock()
        self._cached: tuple[float, list[Metric]] | None = None

    def collect(self) -> Iterator[Metric]:
        if self.cache_s <= 0:
            yield from self._read_sources()
            return
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._cached[0] >= self.cache_s:
                self._cached = (now, list(self._read_sources()))
            families = self._cached[1]
        yield from families

    def _read_sources(self) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "liaison_scrape_source_up", "1 if this scrape could read the source, else 0.", labels=["source"]
        )
        took = GaugeMetricFamily(
            "liaison_scrape_source_duration_seconds",
            "Time this scrape spent reading the source.",
            labels=["source"],
        )
        for source, read in (("database", self._database), ("broker", self._broker)):
            start = time.perf_counter()
            try:
                families = read()
            except (SQLAlchemyError, KombuError, OSError, BrokerProbeError) as exc:
                # Typed: these are the ways a source can be unavailable. Anything else is a bug and
                # surfaces as a scrape failure.
                log.warning("metrics: %s unavailable for this scrape: %s", source, type(exc).__name__)
                metrics.scrape_error(source)  # type: ignore[arg-type]
                up.add_metric([source], 0)
                families = []
            else:
                up.add_metric([source], 1)
            took.add_metric([source], time.perf_counter() - start)
            yield from families
        yield up
        yield took

    # --- database ---------------------------------------------------------------------------

    def _database(self) -> list[Metric]:
        now = utcnow()
        out = _Families()
        with self.db.engine.connect() as conn:
            gauge_counts.limit_statements(conn, self.statement_timeout_ms)
            counts = gauge_counts.read_counts(conn)
            try:  # last: a schema before migration 0008 costs the beat gauges only, not the scrape
                beat: BeatLiveness | None = beat_liveness(conn, now)
            except SQLAlchemyError as exc:
                log.warning("metrics: beat heartbeat unreadable: %s", type(exc).__name__)
                beat = None

        # Every known combination is reported, zeros included, so alerts and graphs never see a
        # series vanish when its count drops to 0.
        task_counts = {(state.value, provider): 0 for state in State for provider in self.providers}
        task_counts.update({(state, provider): n for state, provider, n in counts.tasks})
        family = out.gauge("liaison_tasks", "Tasks by state and provider.", ["state", "provider"])
        for (state, provider), n in sorted(task_counts.items()):
            family.add_metric([state, provider], n)

        dead_counts = {(kind, fault): 0 for kind in DEAD_LETTER_KINDS for fault in FAULTS}
        dead_counts.update({(kind, fault): n for kind, fault, n in counts.dead_letters_open})
        family = out.gauge(
            "liaison_dead_letters_open", "Dead letters not yet replayed or discarded.", ["kind", "fault"]
        )
        for (kind, fault), n in sorted(dead_counts.items()):
            family.add_metric([kind, fault], n)

        incident_counts = dict.fromkeys(IncidentKind.ALL, 0)
        incident_counts.update(dict(counts.incidents_open))
        family = out.gauge("liaison_incidents_open", "Incidents not yet resolved, by kind.", ["kind"])
        for kind, n in sorted(incident_counts.items()):
            family.add_metric([kind], n)

        out.gauge("liaison_orphan_events_open", "Vendor events for jobs no task knows yet.").add_metric(
            [], counts.orphans_open
        )

        pending: dict[str, tuple[int, datetime | None]] = dict.fromkeys(OutboxKind.ALL, (0, None))
        pending.update({kind: (n, oldest) for kind, n, oldest in counts.outbox_pending})
        count = out.gauge(
            "liaison_outbox_pending", "Outbox rows not done (to publish, in flight or awaiting a retry).", ["kind"]
        )
        age = out.gauge(
            "liaison_outbox_oldest_pending_age_seconds",
            "Age of the oldest outbox row not done (0 when none); relay rows may legitimately wait hours for a retry.",
            ["kind"],
        )
        for kind, (n, oldest) in sorted(pending.items()):
            count.add_metric([kind], n)
            age.add_metric([kind], _age_s(now, oldest))

        backlog = out.gauge(
            "liaison_dispatch_queued",
            "Tasks waiting in the database for their turn to go to the broker (fair dispatch), by provider and client.",
            ["provider", "client"],
        )
        first_queued: dict[str, datetime] = {}
        for provider, client, n, first in counts.queued:
            backlog.add_metric([provider, client], n)
            first_queued[provider] = min(first, first_queued.get(provider, first))
        family = out.gauge(
            "liaison_dispatch_oldest_queued_age_seconds",
            "Age of the oldest task waiting for its turn, by provider (0 when none waits).",
            ["provider"],
        )
        for provider in sorted({*self.providers, *first_queued}):
            family.add_metric([provider], _age_s(now, first_queued.get(provider)))

        poll_due = dict(counts.poll_due)
        family = out.gauge(
            "liaison_poll_oldest_due_age_seconds",
            "How long the longest-due poll of an open job has waited, by provider (0 when none is overdue).",
            ["provider"],
        )
        for provider in sorted({*self.providers, *poll_due}):
            family.add_metric([provider], _age_s(now, poll_due.get(provider)))

        endpoint_counts = dict.fromkeys(UNHEALTHY_STATES, 0)
        for failures, paused_until, probe_until in counts.unhealthy:
            endpoint_counts[health_state(failures, paused_until, probe_until, now)] += 1
        family = out.gauge(
            "liaison_callback_endpoints_unhealthy",
            "Client callback origins failing (not yet paused), paused (their relays wait) or probing.",
            ["state"],
        )
        for state, n in endpoint_counts.items():
            family.add_metric([state], n)

        if beat is None:
            return out.items
        out.gauge(
            "liaison_beat_stale",
            "1 when beat has not ticked for 3 x its shortest interval (or never ticked), else 0.",
        ).add_metric([], 1 if beat.stale else 0)
        if beat.last_tick_at is not None:
            out.gauge("liaison_beat_last_tick_timestamp_seconds", "When beat last ticked (Unix time).").add_metric(
                [], beat.last_tick_at.timestamp()
            )
            out.gauge(
                "liaison_beat_stale_after_seconds", "How long without a tick before beat counts as stale."
            ).add_metric([], beat.stale_after_s or 0.0)
        return out.items

    # --- broker -------------------------------------------------------------------------------

    def queues(self) -> list[str]:
        """The Celery app's work queues: its default queue and any declared in ``task_queues``."""
        if self._queues is not None:
            return list(self._queues)
        names = [self.celery.conf.task_default_queue]
        for queue in self.celery.conf.task_queues or ():
            if queue.name not in names:
                names.append(queue.name)
        return names

    def queue_depths(self) -> list[QueueStats]:
        """Each work queue's depth (and oldest message's age where the broker tells), read now; the
        console shows them too. Raises what ``_read_sources`` treats as the broker being unavailable."""
        if self._is_filesystem():
            options = self.celery.conf.broker_transport_options or {}
            return [filesystem_stats(options, name) for name in self.queues()]
        return self._probe_connected()

    def _broker(self) -> list[Metric]:
        stats = self.queue_depths()
        out = _Families()
        depth = out.gauge("liaison_broker_queue_messages", "Messages ready in the broker queue.", ["queue"])
        age = out.gauge(
            "liaison_broker_queue_oldest_message_age_seconds",
            "How long the oldest ready message has waited (only where the broker can tell: Redis, filesystem).",
            ["queue"],
        )
        for stat in stats:
            depth.add_metric([stat.name], stat.messages)
            if stat.oldest_age_s is not None:
                age.add_metric([stat.name], stat.oldest_age_s)
        return out.items

    def _is_filesystem(self) -> bool:
        return str(self.celery.conf.broker_url or "").startswith("filesystem:")

    def _probe_connected(self) -> list[QueueStats]:
        """A short-lived connection per scrape: a probe must not disturb the publisher's pool, and
        ``ensure_connection`` gives up after one retry instead of hanging on a broker that is down."""
        with self.celery.connection_for_read() as conn:
            try:
                conn.ensure_connection(max_retries=1, timeout=self.broker_timeout_s)
                return [queue_stats(conn, name) for name in self.queues()]
            except (*conn.connection_errors, *conn.channel_errors) as exc:
                raise BrokerProbeError(f"{conn.transport.driver_type}: {type(exc).__name__}") from exc


def _age_s(now: datetime, then: datetime | None) -> float:
    return max((now - then).total_seconds(), 0.0) if then is not None else 0.0
