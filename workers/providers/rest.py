"""The built-in generic REST provider; the bundled simulator implements the same contract."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import requests

from app.observability.metrics import timed_provider_call
from app.settings import ProviderSettings
from workers.errors import PermanentError
from workers.http import call
from workers.providers.base import JobSnapshot, SubmitJob

STATUSES = frozenset({"queued", "running", "succeeded", "failed", "canceled"})
#: A vendor's job id as we record it: a short printable token (it goes into request paths and the
#: ``vendor_job_id`` column of 200 characters); anything else is a broken contract.
JOB_ID = re.compile(r"[\x21-\x7e]{1,200}")


def job_path(job_id: str) -> str:
    """The job id as one path segment: escaped, so ``../x`` or ``a?b`` stays inside ``/jobs/``."""
    return quote(job_id, safe="")


class RestProvider:
    def __init__(self, settings: ProviderSettings, webhook_url: str, max_response_bytes: int = 1024 * 1024) -> None:
        self.name = settings.name
        self.settings = settings
        self.webhook_url = webhook_url
        self._timeout = (settings.connect_timeout_s, settings.read_timeout_s)
        self.max_response_bytes = max_response_bytes

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json", **extra}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        return headers

    def _bounds(self) -> dict[str, Any]:
        """The whole call's deadline and the body cap (the base URL is the operator's: not guarded)."""
        return {"deadline_s": self.settings.call_deadline_s, "max_body_bytes": self.max_response_bytes}

    def _json(self, response: requests.Response) -> dict[str, Any]:
        try:
            data = response.json()
        except ValueError:
            raise PermanentError(f"{self.name}: response is not JSON") from None
        if not isinstance(data, dict):
            raise PermanentError(f"{self.name}: response is not a JSON object")
        return data

    def _snapshot(self, data: dict[str, Any]) -> JobSnapshot:
        job_id, status = data.get("job_id"), data.get("status")
        if not isinstance(job_id, str) or not job_id or status not in STATUSES:
            raise PermanentError(f"{self.name}: job without job_id or a known status")
        if not JOB_ID.fullmatch(job_id):
            raise PermanentError(f"{self.name}: job_id is not a printable token of at most 200 characters")
        return JobSnapshot(job_id, status, data.get("outcome"))

    def submit(self, job: SubmitJob) -> str:
        with timed_provider_call(self.name, "submit"):
            return self._submit(job)

    def _submit(self, job: SubmitJob) -> str:
        response = call(
            "POST",
            f"{self.settings.base_url}/jobs",
            timeout=self._timeout,
            idempotent=False,
            **self._bounds(),
            headers=self._headers(**{"Idempotency-Key": job.correlation_id}),
            json={"reference": job.correlation_id, "input": job.input, "callback_url": self.webhook_url},
        )
        return self._snapshot(self._json(response)).job_id

    def cancel(self, job_id: str) -> None:
        with timed_provider_call(self.name, "cancel"):
            self._cancel(job_id)

    def _cancel(self, job_id: str) -> None:
        call(
            "POST",
            f"{self.settings.base_url}/jobs/{job_path(job_id)}/cancel",
            timeout=self._timeout,
            idempotent=True,  # cancelling twice is harmless
            **self._bounds(),
            headers=self._headers(),
        )

    def status(self, job_id: str) -> JobSnapshot:
        with timed_provider_call(self.name, "status"):
            return self._status(job_id)

    def _status(self, job_id: str) -> JobSnapshot:
        response = call(
            "GET", f"{self.settings.base_url}/jobs/{job_path(job_id)}", timeout=self._timeout,
            idempotent=True, headers=self._headers(), **self._bounds(),
        )
        return self._snapshot(self._json(response))

    def find(self, correlation_id: str) -> str | None:
        with timed_provider_call(self.name, "find"):
            return self._find(correlation_id)

    def _find(self, correlation_id: str) -> str | None:
        response = call(
            "GET", f"{self.settings.base_url}/jobs", timeout=self._timeout, idempotent=True,
            headers=self._headers(), params={"reference": correlation_id}, **self._bounds(),
        )
        jobs = self._json(response).get("jobs")
        if not isinstance(jobs, list):
            raise PermanentError(f"{self.name}: job list without 'jobs'")
        for item in jobs:
            if isinstance(item, dict):
                return self._snapshot(item).job_id
        return None
