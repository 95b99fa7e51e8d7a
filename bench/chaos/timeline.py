"""The run's clock, its event log, and the windows during which a service was down."""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass


@dataclass
class Window:
    what: str  # broker, database, vendor
    start: float
    end: float | None = None


class Timeline:
    #: an answer this soon after a service came back still counts as "while it was down"
    GRACE_S = 2.0

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.wall0 = time.time()  # to place the processes' log lines (wall-clock stamps) on the run's clock
        self.events: list[tuple[float, str]] = []
        self.windows: list[Window] = []
        self._lock = threading.Lock()

    def now(self) -> float:
        """Seconds since the run started."""
        return time.monotonic() - self.t0

    def log(self, text: str) -> None:
        """An entry of the event log, printed at once too."""
        at = self.now()
        with self._lock:
            self.events.append((at, text))
        print(f"[{at:7.1f}s] {text}", file=sys.stderr, flush=True)

    def note(self, text: str) -> None:
        """Printed only (progress lines): not part of the event log."""
        print(f"[{self.now():7.1f}s] {text}", file=sys.stderr, flush=True)

    def down(self, what: str) -> None:
        with self._lock:
            self.windows.append(Window(what, self.now()))

    def up(self, what: str) -> None:
        with self._lock:
            for window in reversed(self.windows):
                if window.what == what and window.end is None:
                    window.end = self.now()
                    break

    def down_during(self, start: float, end: float) -> frozenset[str]:
        """What was down at some moment between ``start`` and ``end`` (run seconds)."""
        with self._lock:
            return frozenset(
                w.what for w in self.windows if w.start <= end and (w.end is None or start <= w.end + self.GRACE_S)
            )
