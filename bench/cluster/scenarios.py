"""The faults of each scenario, as steps placed on the run's clock (fractions of the submitting window),
and what the cluster's parts must do for each. A step marked ``fault`` gets a time-to-recover line."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.chaos.timeline import Timeline

SCENARIOS = ("rabbit", "redis", "hosts")


@dataclass(frozen=True)
class Step:
    at: float  # fraction of the submitting window (0..1)
    label: str
    action: Callable[[], str | None]  # returns a note for the event log
    fault: bool = True  # a fault (measured: time to recover), or a repair
    after: float = 0.0  # at least this many seconds after the previous step ended


class Faults:
    """Runs the steps in order on a thread of its own; records when each fault began."""

    def __init__(self, steps: list[Step], window_s: float, timeline: Timeline) -> None:
        self.steps = steps
        self.window_s = window_s
        self.timeline = timeline
        self.began: list[tuple[str, float]] = []  # (label, run seconds) of each fault
        self.failures: list[str] = []
        self.thread = threading.Thread(target=self._run, name="faults", daemon=True)

    def start(self) -> None:
        self.started = self.timeline.now()  # the steps' fractions count from the first submit
        self.thread.start()

    def _run(self) -> None:
        previous_end = self.started
        for step in self.steps:
            due = max(self.started + step.at * self.window_s, previous_end + step.after)
            time.sleep(max(0.0, due - self.timeline.now()))
            began = self.timeline.now()
            if step.fault:
                self.began.append((step.label, began))
                self.timeline.down(step.label)
            try:
                note = step.action()
            except Exception as exc:  # a step that fails is reported, and fails the scenario
                self.failures.append(f"{step.label}: {type(exc).__name__}: {exc}")
                self.timeline.log(f"FAILED: {step.label}: {exc}")
                note = None
            previous_end = self.timeline.now()
            took = f" ({previous_end - began:.1f}s)" if previous_end - began >= 0.5 else ""
            self.timeline.log(f"{step.label}{took}" + (f": {note}" if note else ""))
            if not step.fault:
                for label, _ in self.began:
                    self.timeline.up(label)

    def done(self) -> bool:
        return not self.thread.is_alive()
