"""A job's life after submission: accept, complete or cancel, and the webhooks each step sends.

Steps run on daemon timers so request threads only change state and answer. A step first makes
its state change in the store (one locked check-and-set), and only the thread that won it sends
the webhook; so a cancel racing the completion timer yields exactly one ``job.completed``.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from simulator.behaviour import EVENT_ACCEPTED, EVENT_COMPLETED, EVENT_PROGRESS
from simulator.dispatch import Dispatcher
from simulator.settings import Settings
from simulator.store import ACTIVE_STATUSES, Job, Store

FINAL_STATUSES = ("succeeded", "failed", "canceled")


def _later(delay_s: float, fn: Callable[..., None], *args: Any) -> None:
    timer = threading.Timer(delay_s, fn, args=args)
    timer.daemon = True
    timer.start()


def _in_background(fn: Callable[..., None], *args: Any) -> None:
    threading.Thread(target=fn, args=args, daemon=True).start()


def default_outcome(job: Job, status: str) -> dict[str, Any]:
    """What a job reports when its knobs do not say (``outcome_payload``)."""
    if status == "succeeded":
        return {"result": "ok", "reference": job.reference}
    if status == "canceled":
        return {"reason": "canceled"}
    return {"error": "simulated failure"}


class Engine:
    def __init__(self, settings: Settings, store: Store, dispatcher: Dispatcher) -> None:
        self._settings = settings
        self._store = store
        self._dispatcher = dispatcher

    def start(self, job: Job) -> None:
        """Schedule acceptance of a freshly created job."""
        delay = job.behaviour.accept_delay_s
        _later(self._settings.accept_delay_s if delay is None else delay, self._accept, job.job_id)

    def finish(self, job_id: str, status: str, outcome: Any = None) -> tuple[Job | None, bool]:
        """Complete an active job now (cancel, manual completion); the webhook goes out async.

        Returns ``(job, changed)`` like :meth:`Store.transition`.
        """
        job, changed = self._finish(job_id, status, outcome)
        if changed:
            _in_background(self._announce_completion, job)
        return job, changed

    # timer steps ------------------------------------------------------------------------------
    def _accept(self, job_id: str) -> None:
        job, changed = self._store.transition(job_id, {"queued"}, "running", accepted_at=time.time())
        if not changed or job is None:
            return  # canceled/completed meanwhile, or reset
        # A job's webhooks go out in order: the acceptance (its re-sends included), the progress
        # reports, then the completion, timed from the last of them. Only ``reorder`` sends them out
        # of order; a vendor that raced them would let a loaded machine reorder any job's webhooks,
        # and a test could not tell which order it was testing.
        if not job.behaviour.reorder:  # with reorder, accepted is held until after completed
            self._dispatcher.deliver(job, EVENT_ACCEPTED, self._accepted_payload(job))
        if job.behaviour.progress:
            self._report_progress(job_id)
        delay = job.behaviour.complete_delay_s
        _later(self._settings.complete_delay_s if delay is None else delay, self._complete, job_id)

    def _report_progress(self, job_id: str) -> None:
        """Each of the job's ``progress`` percentages as a ``job.progress`` webhook of its own (a new
        webhook-id each), one every ``progress_interval_s``, while the job is running."""
        job = self._store.get(job_id)
        if job is None:
            return
        for percent in job.behaviour.progress:
            time.sleep(job.behaviour.progress_interval_s)
            current, changed = self._store.transition(job_id, {"running"}, "running", progress=percent)
            if current is None or not changed:
                return
            payload = {"type": EVENT_PROGRESS, "job_id": job_id, "percent": percent, "message": f"{percent:g}% done"}
            self._dispatcher.deliver(current, EVENT_PROGRESS, payload, webhook_id="msg_" + uuid.uuid4().hex)

    def _complete(self, job_id: str) -> None:
        job = self._store.get(job_id)
        if job is None:
            return
        finished, changed = self._finish(job_id, job.behaviour.outcome)
        if changed and finished is not None:
            self._announce_completion(finished)

    # helpers ----------------------------------------------------------------------------------
    def _finish(self, job_id: str, status: str, outcome: Any = None) -> tuple[Job | None, bool]:
        job = self._store.get(job_id)
        if job is None:
            return None, False
        if outcome is None:
            payload = job.behaviour.outcome_payload
            use_payload = payload is not None and status != "canceled"
            outcome = dict(payload or {}) if use_payload else default_outcome(job, status)
        return self._store.transition(job_id, ACTIVE_STATUSES, status, outcome=outcome, finished_at=time.time())

    def _announce_completion(self, job: Job) -> None:
        payload = {
            "type": EVENT_COMPLETED,
            "job_id": job.job_id,
            "status": job.status,
            "outcome": job.outcome,
        }
        self._dispatcher.deliver(job, EVENT_COMPLETED, payload)
        if job.behaviour.reorder and job.accepted_at is not None:
            self._dispatcher.deliver(job, EVENT_ACCEPTED, self._accepted_payload(job))

    @staticmethod
    def _accepted_payload(job: Job) -> dict[str, Any]:
        return {"type": EVENT_ACCEPTED, "job_id": job.job_id}
