"""Adapters in Python: the interface for a vendor that no profile can describe (docs/design.md §5,
"Adapters in Python"). An adapter's author imports from here only.

An adapter is a class, named by ``LIAISON_PROVIDER_<NAME>_ADAPTER`` (an entry point in the group
``liaison.adapters`` of an installed package, or ``package.module:Class``), built as
``Adapter(settings, context)``: its :class:`ProviderSettings` (``base_url``, ``api_key``,
``webhook_secrets`` …) and an :class:`AdapterContext` whose ``http`` is the adapter's only way to call
out (:class:`VendorHttp`). It keeps the :class:`VendorAdapter` protocol: the outbound side (submit,
cancel, status, find: as ``base.Provider``) and the inbound side (verify, interpret a request).

What Liaison holds an adapter to, whatever it does:

- **Calls**: only through ``context.http``. ``request`` goes under the operator's base URL, bounded by
  the provider's deadline and body cap, its failure classified (``core.errors``); ``request_url``
  (an address the vendor gave) goes through the outbound guard as well. An adapter never gets a session.
- **Answers**: what it returns is checked (:class:`PluginProvider`): a job id is a printable token of at
  most 200 characters, a status one of ``STATUSES``, an outcome an object within the outcome limits;
  anything else is the vendor's broken contract (a permanent error).
- **Events**: ``verify`` raises :class:`SignatureError` (``StaleTimestamp`` for an old one) or
  returns a :class:`Verified` naming the event id; ``interpret`` raises :class:`MalformedEvent` or
  returns a :class:`Parsed` (``event=None``: a type that means nothing to us), bounded again by
  ``webhooks.events.bounded``. Both read the request only (the inbound instance's caller refuses).

``workers.providers.conformance`` is the kit an adapter's own tests run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import requests

from core.classify import Failure
from core.errors import CallError, OutboundRefused, PermanentError, TransientError, UncertainError
from core.outbound_guard import AllowList
from core.states import EventType
from foundation.adapter_plugins import GROUP, AdapterContext, HttpCaller
from foundation.metrics import timed_provider_call
from foundation.provider_settings import ProviderSettings
from runtime.provider import JobSnapshot, SubmitJob
from webhooks.events import MalformedEvent, Parsed, Progress, VendorEvent
from webhooks.schemes import Verified
from webhooks.signing import HeaderItems, SignatureError, StaleTimestamp
from wire.bounded_json import InvalidJson, JsonLimits, check_bounds
from workers.http import call
from workers.providers.rest import JOB_ID, STATUSES

__all__ = [
    "GROUP",
    "STATUSES",
    "AdapterContext",
    "CallError",
    "EventType",
    "HttpCaller",
    "JobSnapshot",
    "MalformedEvent",
    "OutboundRefused",
    "Parsed",
    "PermanentError",
    "PluginProvider",
    "Progress",
    "ProviderSettings",
    "SignatureError",
    "StaleTimestamp",
    "SubmitJob",
    "TransientError",
    "UncertainError",
    "VendorAdapter",
    "VendorEvent",
    "VendorHttp",
    "Verified",
]


@runtime_checkable
class VendorAdapter(Protocol):
    """A vendor adapter written in Python; built as ``Adapter(settings, context)``, once for the
    inbound side when the settings are read (a ``ValueError`` from the constructor, naming what is
    wrong but never a secret's value, stops the start-up in one line) and once per worker process.
    Optional class attribute ``media_types``: the ``Content-Type`` its events may have (default
    ``("application/json",)``)."""

    name: str

    # --- outbound: as runtime.provider.Provider ---

    def submit(self, job: SubmitJob) -> str:
        """Start the job, idempotent on ``job.reference`` (send it as the vendor's idempotency key, or
        look it up first): the same reference twice is one job. Return the vendor's job id. A call
        that may have reached the vendor and lost its answer raises ``UncertainError`` (what
        ``context.http`` raises), which Liaison settles with :meth:`find`."""

    def cancel(self, job_id: str) -> None:
        """Ask the vendor to stop the job; cancelling twice, or a finished job, is no error."""

    def status(self, job_id: str) -> JobSnapshot:
        """The job now, its vendor status mapped to one of ``STATUSES`` (and its outcome if final)."""

    def find(self, reference: str) -> str | None:
        """The job id the vendor holds for ``reference``, or None: settles a submit whose answer was
        lost. A vendor that cannot be asked raises ``TransientError`` if a resend of the submit is safe
        (it honours the idempotency key), else ``PermanentError`` (an operator decides)."""

    # --- inbound: one request the vendor sent to /webhooks/<provider> ---

    def verify(self, headers: HeaderItems, body: bytes, now_s: float, tolerance_s: int) -> Verified:
        """Prove the request is the vendor's (its signature, with ``context``'s secrets in
        ``settings.webhook_secrets``), refusing one older than ``tolerance_s`` seconds if it is
        dated; return its event id (deduplicated on). Total: any input either returns or raises
        ``SignatureError``."""

    def interpret(self, body: bytes) -> Parsed:
        """What a verified body means: ``Parsed(VendorEvent(...), vendor_type)``, ``Parsed(None,
        vendor_type)`` for a type that means nothing to us, or MalformedEvent. Total likewise."""


_PASSED_ON = frozenset({"headers", "params", "json", "data"})


class VendorHttp:
    """An adapter's one way to call its vendor (``context.http``): ``workers.http.call`` with the
    provider's timeouts, whole-call deadline (``CALL_DEADLINE_S``) and body cap, and nothing an
    adapter can widen: it passes ``headers``, ``params``, ``json`` and ``data`` only."""

    def __init__(self, settings: ProviderSettings, max_response_bytes: int, guard: AllowList) -> None:
        self.settings = settings
        self.max_response_bytes = max_response_bytes
        self.guard = guard

    def _bounds(self, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        unknown = set(kwargs) - _PASSED_ON
        if unknown:
            raise TypeError(f"VendorHttp passes on {sorted(_PASSED_ON)} only, not {sorted(unknown)}")
        return {
            "timeout": (self.settings.connect_timeout_s, self.settings.read_timeout_s),
            "deadline_s": self.settings.call_deadline_s,
            "max_body_bytes": self.max_response_bytes,
            **kwargs,
        }

    def request(self, method: str, path: str, *, idempotent: bool, **kwargs: Any) -> requests.Response:
        """``method`` the base URL (the operator's) followed by ``path``, which starts with one ``/``
        (so it cannot name another host). Returns a 2xx response, its body read, or raises the
        classified ``CallError``."""
        if not path.startswith("/") or path.startswith("//") or any(c in path for c in "\\\r\n\t #"):
            raise PermanentError(f"{self.settings.name}: an adapter's path must start with one / and hold no host")
        url = self.settings.base_url.rstrip("/") + path
        return call(method, url, idempotent=idempotent, **self._bounds(kwargs))

    def request_url(self, method: str, url: str, *, idempotent: bool, **kwargs: Any) -> requests.Response:
        """``method`` an absolute URL the vendor gave (a result link, a next page): through the outbound
        guard (``LIAISON_OUTBOUND_ALLOW``), as a client's callback URL is; refused: ``OutboundRefused``."""
        return call(method, url, idempotent=idempotent, guard=self.guard, **self._bounds(kwargs))


class PluginProvider:
    """An adapter as the workers see a provider (``base.Provider``): each call timed, and each answer
    held to the bounds the built-in adapters keep (its job ids, statuses and outcomes)."""

    def __init__(self, adapter: Any, name: str, outcome_limits: JsonLimits) -> None:
        self.adapter = adapter
        self.name = name
        self.outcome_limits = outcome_limits

    def _refused(self, reason: str) -> PermanentError:
        return PermanentError(f"{self.name}: {reason}", failure=Failure.BAD_RESPONSE)

    def _job_id(self, job_id: object) -> str:
        if not isinstance(job_id, str) or not JOB_ID.fullmatch(job_id):
            raise self._refused("job id is not a printable token of at most 200 characters")
        return job_id

    def submit(self, job: SubmitJob) -> str:
        with timed_provider_call(self.name, "submit"):
            return self._job_id(self.adapter.submit(job))

    def cancel(self, job_id: str) -> None:
        with timed_provider_call(self.name, "cancel"):
            self.adapter.cancel(job_id)

    def status(self, job_id: str) -> JobSnapshot:
        with timed_provider_call(self.name, "status"):
            snapshot = self.adapter.status(job_id)
            if not isinstance(snapshot, JobSnapshot) or snapshot.status not in STATUSES:
                raise self._refused("status is not a JobSnapshot with a known status")
            self._job_id(snapshot.job_id)
            if snapshot.outcome is not None:
                if not isinstance(snapshot.outcome, dict):
                    raise self._refused("outcome is not an object")
                try:
                    check_bounds(snapshot.outcome, self.outcome_limits, "outcome")
                except (InvalidJson, TypeError, ValueError) as exc:
                    raise self._refused(f"status of job refused: {exc}") from None
            return snapshot

    def find(self, reference: str) -> str | None:
        with timed_provider_call(self.name, "find"):
            found = self.adapter.find(reference)
            return None if found is None else self._job_id(found)


def build(
    settings: ProviderSettings,
    *,
    webhook_url: str,
    max_response_bytes: int,
    guard: AllowList,
    outcome_limits: JsonLimits,
) -> PluginProvider:
    """A plugin provider's adapter for the workers: its class (loaded and checked with the settings)
    given its settings and a context whose caller is :class:`VendorHttp`."""
    assert settings.adapter is not None  # required for kind plugin (foundation.provider_setting_table)
    http: HttpCaller = VendorHttp(settings, max_response_bytes, guard)
    context = AdapterContext(http, webhook_url, outcome_limits)
    return PluginProvider(settings.adapter(settings, context), settings.name, outcome_limits)
