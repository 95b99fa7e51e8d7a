"""The chaos: what is broken, when, and how it comes back. Spread over the submission window (the
fraction of it at which each event starts), logged with timestamps."""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from bench.chaos.platform import Platform
from bench.chaos.procs import rss_kib
from bench.chaos.timeline import Timeline

RESTART_AFTER_S = 3.0  # a supervisor's restart delay after the worker died
REDIS_DOWN_S = 8.0
POSTGRES_DOWN_S = 3.0  # between the fast shutdown and the start (data kept)
FLAPS, FLAP_DOWN_S, FLAP_UP_S = 3, 4.0, 4.0


@dataclass(frozen=True)
class Event:
    at: float  # fraction of the submission window
    name: str
    action: Callable[[], None]


class Chaos:
    def __init__(self, platform: Platform, timeline: Timeline, window_s: float, seed: int) -> None:
        self.platform = platform
        self.timeline = timeline
        self.window_s = window_s
        self.rng = random.Random(seed)
        self.stop = threading.Event()
        self.failures: list[str] = []  # chaos actions that did not do what they meant to
        self.plan = [
            Event(0.10, "flap the simulator", self.flap_vendor),
            Event(0.20, "SIGKILL the worker's and the calls process's groups (1 of 2)", self.kill_worker),
            Event(0.35, "SIGKILL one prefork child of the worker", self.kill_child),
            Event(0.50, "kill redis-server, start it again empty", self.kill_redis),
            Event(0.65, "restart the PostgreSQL cluster", self.restart_postgres),
            Event(0.80, "SIGKILL the worker's and the calls process's groups (2 of 2)", self.kill_worker),
            Event(0.90, "flap the simulator", self.flap_vendor),
        ]
        self.thread = threading.Thread(target=self._run, name="chaos", daemon=True)

    def start(self) -> None:
        """Start the plan's clock (with the driver: the window is the driver's)."""
        self.begin = self.timeline.now()
        self.thread.start()

    def _run(self) -> None:
        for event in self.plan:
            due = self.begin + event.at * self.window_s
            if self.stop.wait(max(0.0, due - self.timeline.now())):
                return
            self.timeline.log(f"chaos: {event.name}")
            try:
                event.action()
            except Exception as exc:  # keep going: the report names what could not be done
                self.failures.append(f"{event.name}: {type(exc).__name__}: {exc}")
                self.timeline.log(f"chaos: {event.name} FAILED: {type(exc).__name__}: {exc}")

    # --- the events ------------------------------------------------------------------------------
    def kill_worker(self) -> None:
        """What a host's crash does to the work it holds: the worker (beat's jobs) and the calls
        process (submissions in the middle of their vendor call) die together."""
        procs = [self.platform.procs[name] for name in ("worker", "calls")]
        for proc in procs:
            rss = rss_kib(proc.tree()) / 1024
            killed = proc.kill_group()
            self.timeline.log(
                f"  SIGKILL {proc.name}'s process group {proc.pid}: {len(killed)} processes {sorted(killed)},"
                f" {rss:.1f} MiB RSS"
            )
        time.sleep(RESTART_AFTER_S)
        for proc in procs:
            proc.start()
            self.timeline.log(f"  {proc.name} started again (pid {proc.pid}, start #{proc.starts})")
            took = self.platform.wait_worker(proc.name)
            self.timeline.log(f"  {proc.name} answers a ping ({took:.1f}s after its start)")

    def kill_child(self) -> None:
        worker = self.platform.procs["worker"]
        before = worker.children()
        if not before:
            raise RuntimeError("the worker has no prefork child")
        child = self.rng.choice(before)
        os.kill(child, signal.SIGKILL)
        self.timeline.log(f"  SIGKILL prefork child {child} (worker {worker.pid}'s children: {before})")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            after = worker.children()
            if child not in after and len(after) >= len(before):
                self.timeline.log(f"  the worker replaced it: children now {after}")
                return
            time.sleep(0.2)
        raise RuntimeError(f"the worker did not replace child {child}: children {worker.children()}")

    def kill_redis(self) -> None:
        redis = self.platform.redis
        pid = redis.pid
        self.timeline.down("broker")
        redis.kill()
        self.timeline.log(f"  SIGKILL redis-server {pid} (no persistence: every queue and key is gone)")
        time.sleep(REDIS_DOWN_S)
        redis.start()
        self.timeline.up("broker")
        self.timeline.log(f"  redis-server started again, empty (pid {redis.pid}, port {redis.port})")

    def restart_postgres(self) -> None:
        pg = self.platform.pg
        self.timeline.down("database")
        pg.stop("fast")
        self.timeline.log("  PostgreSQL stopped (fast: open transactions rolled back)")
        time.sleep(POSTGRES_DOWN_S)
        pg.start()
        self.timeline.up("database")
        self.timeline.log(f"  PostgreSQL started again on its data (pid {pg.pid})")

    def flap_vendor(self) -> None:
        for flap in range(1, FLAPS + 1):
            self.timeline.down("vendor")
            self.platform.vendor_down(True)
            self.timeline.log(f"  simulator down ({flap}/{FLAPS}): POST /jobs answers 503")
            time.sleep(FLAP_DOWN_S)
            self.platform.vendor_down(False)
            self.timeline.up("vendor")
            self.timeline.log(f"  simulator up ({flap}/{FLAPS})")
            time.sleep(FLAP_UP_S)
