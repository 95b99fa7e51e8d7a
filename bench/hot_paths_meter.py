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

STEPS = ("submit", "submission", "accepted", "completed", "relay")


def _module(path: str) -> str:
    """The package a file belongs to: ``sqlalchemy``, ``models``, ``<stdlib>``."""
    if "site-packages/" in path:
        return path.split("site-packages/", 1)[1].split("/", 1)[0]
    root = str(Path(__file__).resolve().parents[1]) + "/"
    if path.startswith(root):
        return path[len(root) :].split("/", 1)[0]
    return "<stdlib>"


class Meter:
    """CPU seconds, statements and Python function calls per step, and an optional profile of one
    step. CPU time drifts with the machine (a shared host's speed moves by a fifth within minutes);
    the count of Python function calls does not, so it is the figure that tells a change to the
    code's own work from the machine's mood. It is counted on jobs of its own (``--count-jobs``):
    counting every call slows the process down several times over."""

    def __init__(self, profile: str | None) -> None:
        self.profile = profile
        self.profiler = cProfile.Profile() if profile else None
        self.counting = False
        self.reset()

    def reset(self) -> None:
        self.cpu = dict.fromkeys(STEPS, 0.0)
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
        finally:
            self.step = None

    def per_call(self, step: str) -> tuple[float, float, float]:
        """(CPU ms, statements, Python calls) per call of ``step``."""
        timed, counted = self.timed[step] or 1, self.counted[step] or 1
        return 1000 * self.cpu[step] / timed, self.statements[step] / timed, self.python_calls[step] / counted

    def per_job(self, args: argparse.Namespace) -> tuple[float, float, float]:
        jobs = max(1, args.jobs)
        return (
            1000 * sum(self.cpu.values()) / jobs,
            sum(self.statements.values()) / jobs,
            sum(self.python_calls.values()) / max(1, args.count_jobs),
        )
