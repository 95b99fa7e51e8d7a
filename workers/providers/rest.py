"""The built-in generic REST provider; the bundled simulator implements the same contract."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import quote

import requests

from core.classify import Failure
from core.errors import PermanentError
from foundation.metrics import timed_provider_call
from foundation.provider_settings import ProviderSettings
from runtime.provider import JobSnapshot, SubmitJob
from wire.bounded_json import InvalidJson, JsonLimits, TooDeep, check_bounds, strict_loads
from workers.http import call

STATUSES = frozenset({"queued", "running", "succeeded", "failed", "canceled"})
#: A vendor's job id as we record it: a short printable token (it goes into request paths and the
#: ``vendor_job_id`` column of 200 characters); anything else is a broken contract.
JOB_ID = re.compile(r"[\x21-\x7e]{1,200}")


def job_path(job_id: str) -> str:
    """The job id as one path segment: escaped, so ``../x`` or ``a?b`` stays inside ``/jobs/``."""
    return quote(job_id, safe="")


class RestProvider:
    def __init__(
        self,
        settings: ProviderSettings,
        webhook_url: str,
        outcome_limits: JsonLimits | None = None,
        max_response_bytes: int = 1024 * 1024,
    ) -> None:
        self.name = settings.name
        self.settings = settings
        self.webhook_url = webhook_url
        self.outcome_limits = outcome_limits or JsonLimits()
        self._timeout = (settings.connect_timeout_s, settings.read_timeout_s)
        self.max_response_bytes = max_response_bytes

    def callback_url(self, job: SubmitJob) -> str:
        """Where the vendor sends this job's events: the provider's webhook URL, or under the
        token-url scheme that URL with the task's token (``/t/<token>``), which proves the sender."""
        return f"{self.webhook_url}/t/{job.callback_token}" if job.callback_token else self.webhook_url

    def _headers(self, **extra: str) -> dict[str, str]:
        headers = {"Accept": "application/json", **extra}
        if self.settings.api_key:
            headers["Authorization"] = f"Bearer {self.settings.api_key}"
        return headers

    def _refused(self, reason: str) -> PermanentError:
        """An answer that breaks the contract: the vendor's (``system``), never retried."""
        return PermanentError(f"{self.name}: {reason}", failure=Failure.BAD_RESPONSE)

    def _bounds(self) -> dict[str, Any]:
        """The whole call's deadline and the body cap (the base URL is the operator's: not guarded)."""
        return {"deadline_s": self.settings.call_deadline_s, "max_body_bytes": self.max_response_bytes}

    def _json(self, response: requests.Response) -> dict[str, Any]:
        """The body, its depth checked on the text before parsing: a job list nests an outcome two
        levels down (``{"jobs": [{"outcome": …}]}``), so anything deeper cannot be a valid answer."""
        limit = self.outcome_limits.max_depth
        try:
            data = strict_loads(response.content, max_depth=limit + 2, what="response")
        except TooDeep as exc:
            raise self._refused(
                f"response refused: nested {exc.depth} levels deep, an outcome may have at most {limit}"
            ) from None
        except InvalidJson as exc:
            raise self._refused(f"response refused: {exc}") from None
        if not isinstance(data, dict):
            raise self._refused("response is not a JSON object")
        return data

    def _snapshot(self, data: dict[str, Any]) -> JobSnapshot:
        job_id, status = data.get("job_id"), data.get("status")
        if not isinstance(job_id, str) or not job_id or status not in STATUSES:
            raise self._refused("job without job_id or a known status")
        if not JOB_ID.fullmatch(job_id):
            raise self._refused("job_id is not a printable token of at most 200 characters")
        outcome = data.get("outcome")
        if outcome is not None:
            try:
                check_bounds(outcome, self.outcome_limits, "outcome")
            except InvalidJson as exc:
                raise self._refused(f"status of job refused: {exc}") from None
        return JobSnapshot(job_id, status, outcome)

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
            headers=self._headers(**{"Idempotency-Key": job.reference}),
            json={"reference": job.reference, "input": job.input, "callback_url": self.callback_url(job)},
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
            "GET",
            f"{self.settings.base_url}/jobs/{job_path(job_id)}",
            timeout=self._timeout,
            idempotent=True,
            headers=self._headers(),
            **self._bounds(),
        )
        return self._snapshot(self._json(response))

    def find(self, reference: str) -> str | None:
        with timed_provider_call(self.name, "find"):
            return self._find(reference)

    def _find(self, reference: str) -> str | None:
        response = call(
            "GET",
            f"{self.settings.base_url}/jobs",
            timeout=self._timeout,
            idempotent=True,
            headers=self._headers(),
            params={"reference": reference},
            **self._bounds(),
        )
        jobs = self._json(response).get("jobs")
        if not isinstance(jobs, list):
            raise self._refused("job list without 'jobs'")
        for item in jobs:
            if isinstance(item, dict):
                return self._snapshot(item).job_id
        return None
