"""The jobs and the domain app's submitting side: a seeded mix of simulator behaviours, submitted at
a steady rate by a few threads, each job retried with its Idempotency-Key until Liaison takes it."""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import requests

from bench.chaos.timeline import Timeline

#: (kind, weight, the simulator's knobs: ``input["simulate"]``, see simulator/behaviour.py)
MIX: tuple[tuple[str, int, dict[str, Any]], ...] = (
    ("ok", 40, {}),
    ("duplicate", 15, {"duplicate": 3}),  # every webhook sent three times at once, one webhook-id
    ("reorder", 15, {"reorder": True}),  # job.accepted held back until after job.completed
    # The vendor sends both webhooks while it is still answering the submit: orphans, bound later.
    ("webhook_first", 10, {"slow_s": 0.5, "accept_delay_s": 0, "complete_delay_s": 0.1}),
    ("transient", 10, {"transient_failures": 2}),  # two 503s before the job is created
    ("dropped", 10, {}),  # webhooks never sent (drop, chosen per job): only reconciliation finds out
)
DROPS = (["job.completed"], ["job.accepted", "job.completed"])
ACCEPTED = (200, 202)  # 200: the same Idempotency-Key again, after a first try that got through


@dataclass(frozen=True)
class Job:
    index: int
    correlation_id: str
    kind: str
    simulate: dict[str, Any]


@dataclass(frozen=True)
class Refusal:
    """One submit that did not answer 202: its status (or the exception), and what was down."""

    correlation_id: str
    start: float
    end: float
    status: str
    down: frozenset[str]


def make_jobs(count: int, seed: int, run_id: str) -> list[Job]:
    rng = random.Random(seed)
    kinds = rng.choices([m[0] for m in MIX], weights=[m[1] for m in MIX], k=count)
    knobs = {m[0]: m[2] for m in MIX}
    jobs = []
    for index, kind in enumerate(kinds):
        simulate = dict(knobs[kind])
        if kind == "dropped":
            simulate["drop"] = rng.choice(DROPS)
        simulate.setdefault("complete_delay_s", round(rng.uniform(0.5, 3.0), 2))
        jobs.append(Job(index, f"chaos-{run_id}-{index:05d}", kind, simulate))
    return jobs


class Driver:
    """Submits every job once, ``rate`` jobs a second over ``concurrency`` threads."""

    TIMEOUT_S = 30.0

    def __init__(
        self, web_url: str, api_key: str, jobs: list[Job], concurrency: int, rate: float, timeline: Timeline
    ) -> None:
        self.url = f"{web_url}/api/v1/tasks"
        self.api_key = api_key
        self.jobs = jobs
        self.concurrency = concurrency
        self.rate = rate
        self.timeline = timeline
        self.accepted: dict[str, float] = {}  # correlation id -> run seconds
        self.answers: Counter[int] = Counter()  # the answer that took each job (200 or 202)
        self.refusals: list[Refusal] = []
        self.throttled = 0  # 429s, waited out as Retry-After said
        self.rejected: list[str] = []  # refused with a 4xx: never retried
        self._next = 0
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        self.started = time.monotonic()
        for n in range(self.concurrency):
            thread = threading.Thread(target=self._work, name=f"submit-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def done(self) -> bool:
        return all(not t.is_alive() for t in self._threads)

    def join(self) -> None:
        for thread in self._threads:
            thread.join()

    def _take(self) -> Job | None:
        with self._lock:
            if self._next >= len(self.jobs):
                return None
            job = self.jobs[self._next]
            self._next += 1
        due = self.started + job.index / self.rate
        time.sleep(max(0.0, due - time.monotonic()))
        return job

    def _work(self) -> None:
        with requests.Session() as session:
            session.headers["Authorization"] = f"Bearer {self.api_key}"
            while (job := self._take()) is not None:
                self._submit(session, job)

    def _submit(self, session: requests.Session, job: Job) -> None:
        body: dict[str, Any] = {
            "correlation_id": job.correlation_id,
            "input": {"job": job.correlation_id, "kind": job.kind, "simulate": job.simulate},
        }
        headers = {"Idempotency-Key": job.correlation_id}
        while True:
            start = self.timeline.now()
            try:
                response = session.post(self.url, json=body, headers=headers, timeout=self.TIMEOUT_S)
                status, wait = str(response.status_code), 1.0
            except requests.RequestException as exc:
                response, status, wait = None, type(exc).__name__, 1.0
            if response is not None and response.status_code == 202:
                break
            end = self.timeline.now()
            with self._lock:
                if response is not None and response.status_code == 429:
                    self.throttled += 1
                    wait = float(response.headers.get("Retry-After") or 1)
                else:
                    self.refusals.append(
                        Refusal(job.correlation_id, start, end, status, self.timeline.down_during(start, end))
                    )
            if response is not None and response.status_code == 200:
                break
            if response is not None and 400 <= response.status_code < 500 and response.status_code not in (408, 429):
                with self._lock:
                    self.rejected.append(job.correlation_id)  # the request itself is wrong: a bug here
                return
            time.sleep(wait)
        with self._lock:
            self.accepted[job.correlation_id] = self.timeline.now()
            self.answers[response.status_code] += 1
