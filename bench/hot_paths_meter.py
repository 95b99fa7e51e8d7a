"""What bench/hot_paths.py measures of each step: CPU time, SQL statements and Python function calls
(``Meter``), and the package whose code made each call. Apart from the pipelines because both
pipelines are measured by the same meter, and the report reads only it."""

from __future__ import annotations

import argparse
import cProfile
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.services import child_pids

STEPS = ("submit", "submission", "accepted", "completed", "relay")


def _module(path: str) -> str:
    """The package a file belongs to: ``sqlalchemy``, ``models``, ``<stdlib>``."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    root = str(Path(__file__).resolve().parents[1]) + "/"
    if path.startswith(root):
        return path[len(root) :].split("/", 1)[0]
    return "<stdlib>"


def server_cpu_seconds(postmaster: int) -> float:
    """CPU seconds the live processes of a PostgreSQL cluster (the postmaster and its children: the
    backends, the WAL writer, autovacuum) have run, from ``/proc/<pid>/schedstat``: nanoseconds, where
    ``/proc/<pid>/stat`` counts 10 ms ticks, too coarse for a step that costs the server half a
    millisecond. The kernel brings a task's figure up to date when it stops running, so it is exact
    for a server between statements and lags for one still running. A process that exits between two
    readings takes its time with it; the pool keeps the backends a step uses alive."""
    total = 0
    for pid in (postmaster, *child_pids(postmaster)):
        try:
            total += int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # gone between the listing and the read
    return total / 1e9


class Meter:
    """CPU seconds (this process's and, with ``server_cpu``, the database server's), statements and
    Python function calls per step, and an optional profile of one step. CPU time drifts with the
    machine (a shared host's speed moves by a fifth within minutes); the count of Python function
    calls does not, so it is the figure that tells a change to the code's own work from the
    machine's mood. It is counted on jobs of its own (``--count-jobs``):
    counting every call slows the process down several times over."""

    def __init__(self, profile: str | None, server_cpu: Callable[[], float] | None = None) -> None:
        self.profile = profile
        self.server_cpu = server_cpu
        self.profiler = cProfile.Profile() if profile else None
        self.counting = False
        self.reset()

    def reset(self) -> None:
        self.cpu = dict.fromkeys(STEPS, 0.0)
        self.server = dict.fromkeys(STEPS, 0.0)
        self.timed = dict.fromkeys(STEPS, 0)
        self.counted = dict.fromkeys(STEPS, 0)
        self.statements = dict.fromkeys(STEPS, 0)
        self.python_calls = dict.fromkeys(STEPS, 0)
        #: Python calls of the counted jobs by the package whose code ran
        self.by_module: Counter[str] = Counter()
        self.step: str | None = None

    def on_statement(self, *_: Any) -> None:
        if self.step is not None and not self.counting:
            self.statements[self.step] += 1

    def _count(self, frame: Any, what: str, _arg: Any) -> None:
        if what == "call" and self.step is not None:  # a Python function entered (C calls left out)
            self.python_calls[self.step] += 1
            self.by_module[_module(frame.f_code.co_filename)] += 1

    def run(self, step: str, call: Callable[[], Any]) -> Any:
        self.step = step
        try:
            if self.counting:
                self.counted[step] += 1
                sys.setprofile(self._count)
                try:
                    return call()
                finally:
                    sys.setprofile(None)
            profiling = self.profiler is not None and step == self.profile
            # read outside this process's timed window: reading /proc is this process's CPU, not the step's
            server_started = self.server_cpu() if self.server_cpu is not None else 0.0
            started = time.process_time()
            if profiling:
                self.profiler.enable()  # type: ignore[union-attr]
            try:
                return call()
            finally:
                if profiling:
                    self.profiler.disable()  # type: ignore[union-attr]
                self.cpu[step] += time.process_time() - started
                self.timed[step] += 1
                if self.server_cpu is not None:
                    self.server[step] += self.server_cpu() - server_started
        finally:
            self.step = None

    def per_call(self, step: str) -> tuple[float, float, float, float]:
        """(CPU ms, server CPU ms, statements, Python calls) per call of ``step``."""
        timed, counted = self.timed[step] or 1, self.counted[step] or 1
        return (
            1000 * self.cpu[step] / timed,
            1000 * self.server[step] / timed,
            self.statements[step] / timed,
            self.python_calls[step] / counted,
        )

    def per_job(self, args: argparse.Namespace) -> tuple[float, float, float, float]:
        jobs = max(1, args.jobs)
        return (
            1000 * sum(self.cpu.values()) / jobs,
            1000 * sum(self.server.values()) / jobs,
            sum(self.statements.values()) / jobs,
            sum(self.python_calls.values()) / max(1, args.count_jobs),
        )
