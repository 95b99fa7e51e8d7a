"""Sending a job's webhooks the way the vendor the simulator plays would (``simulator.personality``):
signed and enveloped as that vendor does, to the job's ``callback_url`` or to the endpoint
registered at the vendor; the ``poll-only`` vendor sends none.

``deliver`` blocks (re-sends included), so callers run it in a background thread, never in a
request thread. Each event keeps one webhook-id for all duplicates and re-sends: that is what lets
the receiver deduplicate, and what the tests check. Every attempt is recorded in the store.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import requests

from simulator import personality
from simulator.amqp_publish import publish_signed
from simulator.settings import Settings
from simulator.store import Delivery, Job, Store

#: A job's callback_url for a job submitted over AMQP: the prefix, then its reply-to queue.
AMQP_PREFIX = "amqp:"


def encode(payload: dict[str, Any]) -> bytes:
    """The exact bytes that are signed and sent (compact, so the signature covers what arrives)."""
    return json.dumps(payload, separators=(",", ":")).encode("utf-8")


class Dispatcher:
    def __init__(self, settings: Settings, store: Store) -> None:
        self._settings = settings
        self._store = store

    def deliver(self, job: Job, event_type: str, payload: dict[str, Any], webhook_id: str | None = None) -> None:
        """Send one event (``behaviour.duplicate`` concurrent copies); return when all are done.
        ``webhook_id``: an event that is not one of the job's two (a progress report) names its own."""
        webhook_id = webhook_id or job.webhook_ids[event_type]
        if job.behaviour.silent:
            self._record(job, event_type, webhook_id, 1, 0, None, None, "silenced")
            return
        if event_type in job.behaviour.drop:
            self._record(job, event_type, webhook_id, 1, 0, None, None, "dropped")
            return
        if not personality.sends_webhooks(self._settings.personality):  # poll-only: ask GET /jobs/<id>
            self._record(job, event_type, webhook_id, 1, 0, None, None, "not_sent")
            return
        body = encode(personality.envelope(self._settings.personality, job, payload, webhook_id, time.time()))
        copies = job.behaviour.duplicate
        if copies == 1:
            self._send_with_retries(job, event_type, webhook_id, body, 1)
            return
        threads = [
            threading.Thread(
                target=self._send_with_retries,
                args=(job, event_type, webhook_id, body, copy),
                name=f"sim-webhook-{job.job_id}-{copy}",
                daemon=True,
            )
            for copy in range(1, copies + 1)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    def _send_with_retries(self, job: Job, event_type: str, webhook_id: str, body: bytes, copy: int) -> None:
        backoff = self._settings.retry_backoff_s
        attempts = len(backoff) + 1
        for attempt in range(1, attempts + 1):
            if self._store.get(job.job_id) is None:  # reset while we were retrying
                return
            if job.callback_url.startswith(AMQP_PREFIX):  # a job submitted over the broker
                status, error = self._publish(job, event_type, webhook_id, body)
            else:
                status, error = self._post(personality.target(self._settings, job), webhook_id, body)
            if status is not None and 200 <= status < 300:
                self._record(job, event_type, webhook_id, copy, attempt, status, None, "delivered")
                return
            last = attempt == attempts
            result = "gave_up" if last else "retrying"
            self._record(job, event_type, webhook_id, copy, attempt, status, error, result)
            if not last:
                time.sleep(backoff[attempt - 1])

    def _post(self, url: str, webhook_id: str, body: bytes) -> tuple[int | None, str | None]:
        headers = personality.headers(self._settings, webhook_id, body)
        try:
            with requests.Session() as session:
                # A vendor's egress is its own: the proxy, CA bundle and ~/.netrc of whoever runs
                # the simulator (a test process that set HTTP_PROXY for Liaison) are not its route.
                session.trust_env = False
                response = session.post(
                    url,
                    data=body,
                    headers=headers,
                    timeout=self._settings.webhook_timeout_s,
                    allow_redirects=False,  # a vendor does not follow redirects with a signed POST
                )
        except requests.RequestException as exc:
            return None, f"{type(exc).__name__}: {exc}"
        status = response.status_code
        return status, None if 200 <= status < 300 else f"HTTP {status}"

    def _publish(self, job: Job, event_type: str, webhook_id: str, body: bytes) -> tuple[int | None, str | None]:
        """The event to the job's reply-to queue, signed in its headers; 200 once the broker confirmed."""
        try:
            publish_signed(
                self._settings,
                job.callback_url.removeprefix(AMQP_PREFIX),
                body,
                message_id=webhook_id,
                type_=event_type,
                correlation_id=job.reference,
            )
        except OSError as exc:  # BrokerError is one: the publish was not confirmed
            return None, f"{type(exc).__name__}: {exc}"
        return 200, None

    def _record(
        self,
        job: Job,
        event_type: str,
        webhook_id: str,
        copy: int,
        attempt: int,
        status: int | None,
        error: str | None,
        result: str,
    ) -> None:
        self._store.record_delivery(
            Delivery(
                job_id=job.job_id,
                type=event_type,
                webhook_id=webhook_id,
                copy=copy,
                attempt=attempt,
                status=status,
                error=error,
                result=result,
            )
        )
