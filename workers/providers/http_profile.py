"""The ``http`` kind: a vendor's own REST API, described by its profile (``wire.profiles``) rather than
coded. Same calling path as ``rest`` (``workers.http.call``: the deadline, the body cap, 4xx
permanent, 5xx and timeouts transient, a lost submit answer uncertain), same bounds on every answer.

Every address is the provider's base URL (settings, the operator's) followed by the profile's path,
whose variables are percent-encoded segments: neither the profile nor the vendor can name a host.
"""

from __future__ import annotations

import json
from typing import Any

import requests

from core.classify import Failure
from core.errors import PermanentError, TransientError
from foundation.metrics import timed_provider_call
from foundation.provider_settings import ProviderSettings
from runtime.provider import JobSnapshot, SubmitJob
from wire.bounded_json import InvalidJson, JsonLimits, TooDeep, check_bounds, strict_loads
from wire.json_pointer import PointerMissing, resolve
from wire.profiles import (
    Operation,
    UnsafeValue,
    VendorProfile,
    render_header,
    render_json,
    render_path,
    render_query,
)
from workers.http import call
from workers.providers.rest import JOB_ID

#: How deep an answer may nest around the outcome: a vendor's envelope (``{"data": {"result": …}}``).
ENVELOPE_DEPTH = 4


class HttpProfileProvider:
    def __init__(
        self,
        settings: ProviderSettings,
        profile: VendorProfile,
        webhook_url: str,
        outcome_limits: JsonLimits | None = None,
        max_response_bytes: int = 1024 * 1024,
    ) -> None:
        self.name = settings.name
        self.settings = settings
        self.profile = profile
        self.webhook_url = webhook_url
        self.outcome_limits = outcome_limits or JsonLimits()
        self.max_response_bytes = max_response_bytes
        self._timeout = (settings.connect_timeout_s, settings.read_timeout_s)

    # --- the Provider protocol ---

    def submit(self, job: SubmitJob) -> str:
        with timed_provider_call(self.name, "submit"):
            callback = f"{self.webhook_url}/t/{job.callback_token}" if job.callback_token else self.webhook_url
            values = {
                "reference": job.reference,
                "idempotency_key": job.reference,
                "input": job.input,
                "callback_url": callback,
            }
            data = self._call(self.profile.submit, values, idempotent=False)
            return self._job_id(data, self.profile.submit, "submit")

    def cancel(self, job_id: str) -> None:
        with timed_provider_call(self.name, "cancel"):
            self._send(self.profile.cancel, {"job_id": job_id}, idempotent=True)

    def status(self, job_id: str) -> JobSnapshot:
        with timed_provider_call(self.name, "status"):
            operation = self.profile.status
            data = self._call(operation, {"job_id": job_id}, idempotent=True)
            found = self._job_id(data, operation, "status") if operation.job_id else job_id
            name, state = self._state(data, operation)
            return JobSnapshot(found, state, self._outcome(data, operation), vendor_status=name)

    def find(self, reference: str) -> str | None:
        with timed_provider_call(self.name, "find"):
            operation = self.profile.find
            if operation is None:
                raise self._unsettled()
            data = self._call(operation, {"reference": reference}, idempotent=True)
            assert operation.job_id is not None  # required of find (wire.profiles)
            try:
                resolve(data, operation.job_id)
            except PointerMissing:
                return None  # the vendor holds no job for the reference
            return self._job_id(data, operation, "find")

    def _unsettled(self) -> TransientError | PermanentError:
        """No find: the profile's ``uncertain`` decides. ``resend``: the vendor honours our
        Idempotency-Key, so the submit is simply tried again (a transient error, retried by the
        provider's policy). ``operator``: no safe way to know; a permanent error dead-letters the
        submit with an incident, and an operator checks the vendor and replays or lets it fail."""
        if self.profile.uncertain == "resend":
            return TransientError(f"{self.name}: no find: the submit is sent again under the same Idempotency-Key")
        return PermanentError(
            f"{self.name}: no find and no idempotent resend: an operator must check whether the vendor holds the job",
            failure=Failure.BAD_RESPONSE,
        )

    # --- requests and answers ---

    def _request(self, operation: Operation, values: dict[str, Any]) -> dict[str, Any]:
        """The arguments of one call: every variable escaped for its slot (wire.profiles)."""
        values = {**values, "api_key": self.settings.api_key}
        spec = operation.request
        url = self.settings.base_url + render_path(spec.path, values)
        if spec.query:
            url += "?" + render_query(spec.query, values)
        try:
            headers = {name: render_header(t, values) for name, t in spec.headers}
        except UnsafeValue as exc:
            raise PermanentError(f"{self.name}: {exc}") from None
        kwargs: dict[str, Any] = {"headers": {"Accept": "application/json", **headers}}
        if spec.body is not None:
            kwargs["data"] = json.dumps(render_json(spec.body, values), separators=(",", ":")).encode()
            kwargs["headers"].setdefault("Content-Type", "application/json")
        return {"method": spec.method, "url": url, **kwargs}

    def _send(self, operation: Operation, values: dict[str, Any], *, idempotent: bool) -> requests.Response:
        request = self._request(operation, values)
        return call(
            request.pop("method"),
            request.pop("url"),
            timeout=self._timeout,
            idempotent=idempotent,
            deadline_s=self.settings.call_deadline_s,
            max_body_bytes=self.max_response_bytes,
            **request,
        )

    def _call(self, operation: Operation, values: dict[str, Any], *, idempotent: bool) -> Any:
        response = self._send(operation, values, idempotent=idempotent)
        limit = self.outcome_limits.max_depth
        try:
            return strict_loads(response.content, max_depth=limit + ENVELOPE_DEPTH, what="response")
        except TooDeep as exc:
            raise self._refused(f"response refused: nested {exc.depth} levels deep") from None
        except InvalidJson as exc:
            raise self._refused(f"response refused: {exc}") from None

    def _refused(self, reason: str) -> PermanentError:
        return PermanentError(f"{self.name}: {reason}", failure=Failure.BAD_RESPONSE)

    def _at(self, data: Any, pointer: str, what: str) -> Any:
        try:
            return resolve(data, pointer)
        except PointerMissing:
            raise self._refused(f"{what}: nothing at {pointer}") from None

    def _job_id(self, data: Any, operation: Operation, what: str) -> str:
        assert operation.job_id is not None
        job_id = self._at(data, operation.job_id, f"{what} answer's job id")
        if isinstance(job_id, int) and not isinstance(job_id, bool):
            job_id = str(job_id)
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            raise self._refused(f"{what} answer's job id is not a printable token of at most 200 characters")
        return job_id

    def _state(self, data: Any, operation: Operation) -> tuple[str, str]:
        """The vendor's status name and ours (through the profile's ``[statuses]``)."""
        assert operation.status is not None  # required of status (wire.profiles)
        name = self._at(data, operation.status, "status answer's status")
        state = self.profile.state_of.get(name) if isinstance(name, str) else None
        if state is None:
            shown = name[:40] if isinstance(name, str) else type(name).__name__
            raise self._refused(f"status {shown!r} is not in the profile's [statuses] ({self.profile.path})")
        assert isinstance(name, str)
        return name, state

    def _outcome(self, data: Any, operation: Operation) -> Any:
        if operation.outcome is None:
            return None
        try:
            outcome = resolve(data, operation.outcome)
        except PointerMissing:
            return None
        if outcome is not None:
            try:
                check_bounds(outcome, self.outcome_limits, "outcome")
            except InvalidJson as exc:
                raise self._refused(f"status of job refused: {exc}") from None
        return outcome
