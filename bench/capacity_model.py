"""The capacity model's arithmetic (bench/capacity.py measures, this derives): plain numbers in,
plain numbers out, no I/O, so tests/unit/test_capacity_model.py holds every formula the runbook's
"Capacity model" quotes.

The model, per job (one submit, its vendor call, two webhooks, two callbacks):

- PostgreSQL is the one shared, not horizontally scalable part: a primary of ``cores`` cores
  carries ``cores × utilisation × 1000 / pg_ms`` jobs/s, where ``pg_ms`` is the server's CPU
  milliseconds per job (its backends and background processes together).
- Redis runs commands on one thread: a deployment on one Redis carries at most ``utilisation ×
  1000 / broker_ms`` jobs/s, whatever the cores.
- Liaison's processes scale out by host: a host of ``cores`` cores carries ``cores × utilisation ×
  1000 / liaison_ms`` jobs/s, but never more than one of its Procfile processes can: a process
  runs Python on one core at most (the GIL), so a class of ``n`` processes that spends ``ms`` per
  job caps its host at ``n × utilisation × 1000 / ms``.
- Connections: every host holds its pools' connections whether busy or not, so ``max_connections``
  bounds the hosts one primary can take; PgBouncer in transaction pooling replaces the per-host
  sum by the transactions running at once (Little's law: rate × transactions per job × time each
  holds its connection).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping

#: Share of a core the model lets a process use at the rate it plans for: the rest is headroom for
#: bursts, retries after an outage, a migration, autovacuum, the console and the scrapes.
DEFAULT_UTILISATION = 0.7


def jobs_per_core_second(cpu_ms_per_job: float) -> float:
    """Jobs one fully used core does per second at ``cpu_ms_per_job`` (0 costs nothing: infinite)."""
    return math.inf if cpu_ms_per_job <= 0 else 1000.0 / cpu_ms_per_job


def primary_ceiling(pg_ms_per_job: float, cores: int, utilisation: float = DEFAULT_UTILISATION) -> float:
    """Jobs/s a PostgreSQL primary of ``cores`` cores carries before its CPU passes ``utilisation``."""
    return cores * utilisation * jobs_per_core_second(pg_ms_per_job)


def primary_cores_for_rate(rate: float, pg_ms_per_job: float, utilisation: float = DEFAULT_UTILISATION) -> int:
    """The fewest primary cores that carry ``rate`` jobs/s at ``utilisation`` (at least one)."""
    return max(1, math.ceil(rate * pg_ms_per_job / 1000 / utilisation - 1e-9))


def single_core_ceiling(ms_per_job: float, utilisation: float = DEFAULT_UTILISATION) -> float:
    """Jobs/s of a server that runs on one core whatever the machine has: Redis executes commands on
    one thread, so the broker's CPU per job caps a deployment on one Redis at this rate."""
    return primary_ceiling(ms_per_job, 1, utilisation)


def host_rate(
    ms_per_job: Mapping[str, float],
    processes: Mapping[str, int],
    cores: int,
    utilisation: float = DEFAULT_UTILISATION,
) -> tuple[float, str]:
    """(jobs/s, what limits it) of one Liaison host of ``cores`` cores running ``processes[c]``
    processes of each class ``c`` that spends ``ms_per_job[c]`` CPU ms per job: the host's cores,
    or the class whose processes are first to fill their one core each."""
    total = sum(ms_per_job.values())
    best, limit = cores * utilisation * jobs_per_core_second(total), f"{cores} cores"
    for cls, ms in ms_per_job.items():
        rate = processes.get(cls, 1) * utilisation * jobs_per_core_second(ms)
        if rate < best:
            best, limit = rate, f"{cls} ({processes.get(cls, 1)} process(es), one core each at most)"
    return best, limit


def hosts_for_rate(rate: float, per_host: float) -> int:
    """Liaison hosts needed for ``rate`` jobs/s when one carries ``per_host`` (at least one)."""
    if rate <= 0:
        return 1
    return max(1, math.ceil(rate / per_host - 1e-9))


def hosts_within_connections(max_connections: int, reserved: int, per_host: float) -> int:
    """Hosts one PostgreSQL's ``max_connections`` admits when each holds ``per_host`` connections
    and ``reserved`` are kept for superusers, migrations, operators and the monitoring."""
    if per_host <= 0:
        return 10**9
    return max(0, math.floor((max_connections - reserved) / per_host))


def transaction_seconds(busy_connections: float, jobs_per_s: float, commits_per_job: float) -> float:
    """Mean time a transaction holds its connection (Little's law: in flight = rate × time), from the
    connections found busy (active or idle in transaction) at ``jobs_per_s``."""
    committed = jobs_per_s * commits_per_job
    return busy_connections / committed if committed > 0 else 0.0


def server_connections(rate: float, commits_per_job: float, seconds_each: float) -> float:
    """Transactions running at once at ``rate`` jobs/s: what PgBouncer's ``default_pool_size`` must
    cover (Little's law again), before headroom."""
    return rate * commits_per_job * seconds_each


def commits_per_s(rate: float, commits_per_job: float) -> float:
    """Commits a second at ``rate``: each a WAL flush unless group commit joins them, the figure to
    hold against the primary's disk (the benchmark's cluster runs with fsync off and cannot)."""
    return rate * commits_per_job


# --- what the Procfile and the pool say a host holds -----------------------------------------

_DEFAULT = re.compile(r"\$\{[A-Z_]+:-(\d+)\}")


def _number(text: str) -> int:
    """``16`` or ``${LIAISON_CALL_THREADS:-16}``: the value, or the shell default the line names."""
    found = _DEFAULT.fullmatch(text)
    return int(found.group(1) if found else text)


def _option(command: str, name: str) -> int | None:
    found = re.search(rf"{name}[ =](\S+)", command)
    return _number(found.group(1)) if found else None


def process_shape(command: str) -> tuple[int, int]:
    """(processes, threads each) a Procfile line runs: gunicorn's ``--workers`` × ``--threads``; a
    Celery worker's prefork children (``--concurrency``, one thread each) or one process of
    ``--concurrency`` threads (``--pool threads``); anything else one process of one thread. The
    masters (gunicorn's arbiter, Celery's prefork parent) are left out: they run no request or task."""
    if command.startswith("gunicorn"):
        return _option(command, "--workers") or 1, _option(command, "--threads") or 1
    if " worker" in command:
        concurrency = _option(command, "--concurrency") or 1
        if "--pool threads" in command:
            return 1, concurrency
        return concurrency, 1
    return 1, 1


def pool_bound(command: str, pool_size: int) -> int:
    """The most PostgreSQL connections a Procfile line's processes can hold: each process's pool is
    opened on demand up to ``pool_size`` and used by its threads, so min(threads, pool) each."""
    processes, threads = process_shape(command)
    return processes * min(threads, pool_size)
