"""Plain-text tables of the end-to-end benchmark: one per run, and a summary with the ratios of
Liaison to naive and the targets of issue 10 beside them (printed, never asserted)."""

from __future__ import annotations

import statistics
from pathlib import Path

from bench.driver import KINDS, RunResult

#: per-kind CPU of the figures the target "CPU per job ≤ 35 ms" sums (Liaison's own processes and
#: the services it drives); the vendor and domain app are the benchmark's and shown apart
PIPELINE_KINDS = ("web", "worker", "postgres", "broker")


def cpu_ms_per_job(result: RunResult, kinds: tuple[str, ...] = PIPELINE_KINDS) -> float:
    jobs = max(result.completed, 1)
    return sum(result.usage[k].cpu_s for k in kinds if k in result.usage) * 1000 / jobs


def run_table(r: RunResult) -> str:
    jobs = max(r.completed, 1)
    lines = [
        f"  {'jobs/s':<34}{r.jobs_per_s:10.1f}   ({r.completed} completed in {r.window_s:.1f} s)",
        f"  {'submitted / submit errors':<34}{r.submitted:10d} / {r.submit_errors}",
        f"  {'lost (never task.completed)':<34}{r.lost:10d}",
        f"  {'completed twice (distinct msg ids)':<34}{r.doubled:10d}",
        f"  {'redeliveries (same msg id again)':<34}{r.redeliveries:10d}",
        f"  {'completed but not succeeded':<34}{r.failed_state:10d}",
        f"  {'bad callback signatures':<34}{r.bad_signatures:10d}",
        f"  {'vendor webhook re-sends':<34}{r.vendor_resent:10d}   (after a non-2xx answer or no answer)",
        f"  {'submit latency p50 / p99 (ms)':<34}{r.p(50):10.1f} / {r.p(99):.1f}",
        f"  {'SQL statements / job':<34}{r.statements / jobs:10.1f}   (top level, BEGIN/COMMIT/ROLLBACK left out)",
        f"  {'nested statements / job':<34}{r.nested_statements / jobs:10.1f}   (foreign-key checks, triggers)",
        f"  {'commits / job':<34}{r.commit_statements / jobs:10.1f}   (COMMIT statements)",
        f"  {'server commits / job':<34}{r.commits / jobs:10.1f}   (xact_commit: also each pool pre-ping)",
        f"  {'connections opened / job':<34}{r.sessions / jobs:10.2f}   (sessions: each a new PostgreSQL backend)",
        f"  {'CPU ms / job (web+worker+pg+broker)':<34}{cpu_ms_per_job(r):10.1f}",
        f"  {'process kind':<14}{'CPU s':>9}{'ms/job':>9}{'procs':>7}{'peak RSS MB':>13}",
    ]
    for kind in KINDS:
        u = r.usage.get(kind)
        if u is not None:
            lines.append(
                f"    {kind:<12}{u.cpu_s:9.2f}{u.cpu_s * 1000 / jobs:9.2f}{u.processes:7d}{u.peak_rss_kb / 1024:13.1f}"
            )
    lines.append(f"    {'driver':<12}{r.driver_cpu_s:9.2f}{r.driver_cpu_s * 1000 / jobs:9.2f}")
    if r.top_statements:
        lines.append(f"  {'calls/job':>11}{'ms/job':>8}  statements that took PostgreSQL longest (pg_stat_statements)")
        lines += [f"  {calls / jobs:11.2f}{ms / jobs:8.3f}  {query}" for calls, ms, query in r.top_statements]
    return "\n".join(lines)


def _mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def summary(broker: str, results: list[RunResult]) -> str:
    """Means over rounds per pipeline, and Liaison (1 worker host) / naive ratios with targets."""
    groups: dict[str, list[RunResult]] = {}
    for r in results:
        groups.setdefault(r.label, []).append(r)
    lines = [f"\n==== summary: {broker} ({', '.join(f'{k} ×{len(v)}' for k, v in groups.items())})"]
    lines.append(
        f"  {'pipeline':<32}{'jobs/s':>8}{'lost':>6}{'twice':>6}{'redeliv':>8}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'stmt/job':>9}{'commit/job':>11}{'CPU ms/job':>11}{'max RSS MB':>11}"
    )
    for label, rs in groups.items():
        peak = max(u.peak_rss_kb for r in rs for k, u in r.usage.items() if k in ("web", "worker")) / 1024
        lines.append(
            f"  {label:<32}{_mean([r.jobs_per_s for r in rs]):8.1f}{sum(r.lost for r in rs):6d}"
            f"{sum(r.doubled for r in rs):6d}{sum(r.redeliveries for r in rs):8d}"
            f"{_mean([r.p(50) for r in rs]):8.1f}{_mean([r.p(99) for r in rs]):8.1f}"
            f"{_mean([r.statements / max(r.completed, 1) for r in rs]):9.1f}"
            f"{_mean([r.commit_statements / max(r.completed, 1) for r in rs]):11.1f}"
            f"{_mean([cpu_ms_per_job(r) for r in rs]):11.1f}{peak:11.1f}"
        )
    liaison = groups.get("liaison (1 worker host)", [])
    naive = groups.get("naive", [])
    if liaison and naive:
        throughput = _mean([r.jobs_per_s for r in liaison]) / _mean([r.jobs_per_s for r in naive])
        p99 = _mean([r.p(99) for r in liaison]) / _mean([r.p(99) for r in naive])
        cpu = _mean([cpu_ms_per_job(r) for r in liaison])
        lines += [
            f"  Liaison / naive jobs/s:     {throughput:5.2f}×   (target ≥ 1.0×)",
            f"  Liaison / naive submit p99: {p99:5.2f}×   (target ≤ 1.5×)",
            f"  Liaison CPU per job:        {cpu:5.1f} ms (target ≤ 35 ms)",
            f"  Liaison lost / twice:       {sum(r.lost for r in liaison)} / {sum(r.doubled for r in liaison)}"
            "   (target 0 / 0)",
        ]
    two = groups.get("liaison (2 worker hosts)", [])
    if liaison and two:
        scale = _mean([r.jobs_per_s for r in two]) / _mean([r.jobs_per_s for r in liaison])
        lines.append(f"  Liaison 2 / 1 worker hosts: {scale:5.2f}× jobs/s")
    traced = groups.get("liaison traced (1 worker host)", [])
    if liaison and traced:  # bench/e2e.py --otlp
        ratio = _mean([r.jobs_per_s for r in traced]) / _mean([r.jobs_per_s for r in liaison])
        p99 = _mean([r.p(99) for r in traced]) / _mean([r.p(99) for r in liaison])
        cpu = _mean([cpu_ms_per_job(r) for r in traced]) - _mean([cpu_ms_per_job(r) for r in liaison])
        lines.append(
            f"  Liaison traced / untraced:  {ratio:5.2f}× jobs/s, {p99:5.2f}× submit p99, {cpu:+.1f} ms CPU per job"
        )
    return "\n".join(lines)


def log_errors(logs: Path, prefix: str = "") -> list[str]:
    """Lines of the process logs (of one run: ``prefix``) that look like trouble (an error, a
    traceback, a warning)."""
    found = []
    for path in sorted(logs.glob(f"{prefix}*.log")):
        for line in path.read_text(errors="replace").splitlines():
            lowered = line.lower()
            if any(noise in line for noise in NOISE) or "[info" in lowered or "[debug" in lowered:
                continue
            if any(word in lowered for word in ("error", "traceback", "exception", "warning", "critical")):
                found.append(f"{path.name}: {line[:300]}")
    return found


#: what every Celery worker started as root says (three lines), and gunicorn's info logger's name
NOISE = ("superuser privileges", "_warn_or_raise_security_error", " [py.warnings]", "[gunicorn.error]")
