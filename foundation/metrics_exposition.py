"""The Prometheus exposition of this process's metrics, and the multiprocess bookkeeping behind it.

With ``PROMETHEUS_MULTIPROC_DIR`` set *before* ``prometheus_client`` is imported, every process
(gunicorn workers, Celery prefork children) writes its samples to files there and :func:`render`
aggregates them with a fresh ``MultiProcessCollector`` per scrape. Without it, the default registry
of this one process is used (tests, ``flask run``). The directory must be wiped when the whole group
of processes starts (``bin/demo`` does; see docs/observability.md).

Apart from ``foundation.metrics`` (what is counted and how it is recorded) because this is how a
scrape reads the counts. The web's ``/metrics``, a worker host's listener and the launchers'
process hooks call it through ``foundation.metrics``, which re-exports these functions.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, generate_latest, multiprocess
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def multiprocess_dir() -> str | None:
    """The shared samples directory, or None in single-process mode."""
    return os.environ.get(MULTIPROC_ENV) or None


class _Forward(Collector):
    """Exposes another registry's metrics through a per-scrape registry (single-process mode)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._registry = registry

    def collect(self) -> Iterator[Metric]:
        yield from self._registry.collect()


def _registry() -> CollectorRegistry:
    """This process's metrics (single-process mode) or every process's, summed (multiprocess)."""
    registry = CollectorRegistry(auto_describe=False)
    path = multiprocess_dir()
    if path:
        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry.register(_Forward(REGISTRY))
    return registry


def sample_values(sample: str) -> list[tuple[dict[str, str], float]]:
    """Every labelled value of one sample (``liaison_webhooks_rejected_total``), as a scrape would
    read it: what the console shows beside the settings, without a Prometheus server."""
    return [(dict(s.labels), s.value) for metric in _registry().collect() for s in metric.samples if s.name == sample]


def render(*collectors: Collector) -> bytes:
    """The Prometheus text exposition for one scrape.

    ``collectors`` (the scrape-time business gauges) are registered first, so a scrape error they
    count is already in the counters read right after. A fresh registry per scrape: multiprocess
    collectors must not be registered on the default registry, and per-app collectors must not
    outlive their app.
    """
    registry = CollectorRegistry(auto_describe=False)
    for collector in collectors:
        registry.register(collector)
    path = multiprocess_dir()
    if path:
        multiprocess.MultiProcessCollector(registry, path=path)
    else:
        registry.register(_Forward(REGISTRY))
    return generate_latest(registry)


def mark_process_dead(pid: int) -> None:
    """Tell multiprocess mode a process is gone (gunicorn ``child_exit``, Celery
    ``worker_process_shutdown``). Its counter files stay: counters must keep their totals."""
    path = multiprocess_dir()
    if path:
        multiprocess.mark_process_dead(pid, path)


def ensure_multiprocess_dir() -> None:
    """Create the samples directory if it is configured but missing (a missing one makes the first
    increment fail). Wiping it is the launcher's job: only it knows no process still writes there."""
    path = multiprocess_dir()
    if path:
        os.makedirs(path, exist_ok=True)
