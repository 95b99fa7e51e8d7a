"""The conformance kit for an adapter written in Python (``workers.providers.plugin``): what its
author's own tests run, against a fake of the vendor on loopback that they supply (docs/design.md §5,
"Adapters in Python"; examples/acme_adapter runs it in Liaison's CI).

Two ways in. Subclass :class:`AdapterConformance` in a test module and give it a ``kit`` fixture
returning a :class:`Kit`; pytest then runs every check as a test of yours. Or call the ``check_*``
functions yourself. Each check builds the adapter as Liaison does (``plugin.build``: the real guarded
caller, the real bounds on its answers; the inbound side with a caller that refuses) and proves one
promise:

- ``check_idempotent_submit``: the same reference submitted twice is one job at the vendor.
- ``check_lost_submit_answer``: a submit whose answer is lost raises ``UncertainError`` and is
  settled: ``find`` names the job (or says a resend is safe, and the resend makes no second job).
- ``check_status_mapping``: each vendor status maps to Liaison's; an unknown one is refused.
- ``check_cancel``: cancel reaches the vendor; cancelling again is no error.
- ``check_events``: a signed event verifies and reads as what the vendor meant.
- ``check_refusals``: a forged signature, a stale one (if the vendor dates them) and malformed bodies
  are refused with ``SignatureError``, ``StaleTimestamp`` and ``MalformedEvent``.
- ``check_inbound_totality``: (hypothesis) whatever the headers and body, verify and interpret
  return or raise their typed error, nothing else.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import pytest

from core.errors import PermanentError, TransientError, UncertainError
from core.outbound_guard import AllowList
from core.states import EventType
from foundation.provider_settings import ProviderSettings
from runtime.provider import SubmitJob
from webhooks.events import MalformedEvent, Parsed, bounded
from webhooks.schemes import Verified
from webhooks.signing import SignatureError, StaleTimestamp
from wire.bounded_json import JsonLimits
from workers.providers.plugin import PluginProvider, build

#: The event kinds a fake vendor can write a body for (``LoopbackVendor.event``).
EVENT_KINDS: dict[str, tuple[EventType | None, str | None]] = {
    "accepted": (EventType.ACCEPTED, None),
    "succeeded": (EventType.COMPLETED, "succeeded"),
    "failed": (EventType.COMPLETED, "failed"),
    "canceled": (EventType.COMPLETED, "canceled"),
    "unknown": (None, None),  # a type that means nothing to Liaison: read as Parsed(None, ...)
}


class LoopbackVendor(Protocol):
    """A fake of the vendor on loopback, written by the adapter's author (who knows its API)."""

    @property
    def base_url(self) -> str:
        """Where its API listens, e.g. ``http://127.0.0.1:43211``."""

    @property
    def secrets(self) -> tuple[str, ...]:
        """The secrets its events are signed with, as ``LIAISON_PROVIDER_<NAME>_WEBHOOK_SECRETS`` holds them."""

    @property
    def statuses(self) -> Mapping[str, str]:
        """Its job statuses and what each means to Liaison (queued, running, succeeded, failed, canceled)."""

    @property
    def dated(self) -> bool:
        """Whether its signatures carry a time (then one older than the tolerance must be refused)."""

    def jobs_for(self, reference: str) -> int:
        """How many jobs it holds for our reference."""

    def lose_next_submit_answer(self) -> None:
        """The next submit creates its job, then the connection closes before any answer."""

    def set_status(self, job_id: str, status: str) -> None:
        """Put a job in one of its statuses (a key of ``statuses``, or one it never documented)."""

    def canceled(self, job_id: str) -> bool:
        """Whether a cancel of the job reached it."""

    def event(self, kind: str, job_id: str, reference: str) -> bytes:
        """The body of an event of one of :data:`EVENT_KINDS` about the job."""

    def sign(self, body: bytes, now_s: float, secret: str | None = None) -> dict[str, str]:
        """The headers of the request carrying ``body`` as it sends it at ``now_s`` (signed with
        ``secret``, by default its own first)."""


@dataclass
class Kit:
    """What the checks need: the adapter's class and a running fake of its vendor."""

    adapter: type
    vendor: LoopbackVendor
    name: str = "conformance"
    tolerance_s: int = 300
    now_s: float = 1_700_000_000.0
    outcome_limits: JsonLimits = field(default_factory=JsonLimits)
    webhook_url: str = "http://127.0.0.1:9/webhooks/conformance"  # given to the vendor, never called here

    def settings(self) -> ProviderSettings:
        return ProviderSettings(
            name=self.name,
            kind="plugin",
            base_url=self.vendor.base_url,
            webhook_secrets=tuple(self.vendor.secrets),
            adapter=self.adapter,
            call_deadline_s=10.0,
        )

    def provider(self) -> PluginProvider:
        """The adapter as the workers build it; the vendor is the operator's base URL (loopback), so
        no guard exception is needed for it, and any address the vendor gives is refused."""
        return build(
            self.settings(),
            webhook_url=self.webhook_url,
            max_response_bytes=1024 * 1024,
            guard=AllowList(),
            outcome_limits=self.outcome_limits,
        )

    def inbound(self) -> Any:
        """The adapter as the web process builds it (its caller refuses every call)."""
        return self.settings().inbound_adapter


_counter = itertools.count(1)


def _reference(tag: str) -> str:
    return f"conformance-{tag}-{next(_counter)}"


def check_idempotent_submit(kit: Kit) -> None:
    provider, reference = kit.provider(), _reference("idempotent")
    job = SubmitJob(reference, {"n": 1})
    first, second = provider.submit(job), provider.submit(job)
    assert first == second, "the same reference submitted twice must name the same vendor job"
    assert kit.vendor.jobs_for(reference) == 1, "the same reference submitted twice must make one vendor job"


def check_lost_submit_answer(kit: Kit) -> None:
    provider, reference = kit.provider(), _reference("lost")
    job = SubmitJob(reference, {"n": 2})
    kit.vendor.lose_next_submit_answer()
    with pytest.raises(UncertainError):
        provider.submit(job)
    assert kit.vendor.jobs_for(reference) == 1
    try:
        found = provider.find(reference)
    except TransientError:  # no find: a resend under the same reference is safe
        found = provider.submit(job)
    assert found is not None, "find must name the job a lost submit answer made"
    assert provider.submit(job) == found, "a resend after the settling must name the same job"
    assert kit.vendor.jobs_for(reference) == 1, "settling a lost submit answer must not make a second job"
    assert provider.find(_reference("never-submitted")) is None


def check_status_mapping(kit: Kit) -> None:
    provider = kit.provider()
    job_id = provider.submit(SubmitJob(_reference("status"), {"n": 3}))
    for vendor_status, ours in kit.vendor.statuses.items():
        kit.vendor.set_status(job_id, vendor_status)
        snapshot = provider.status(job_id)
        assert (snapshot.job_id, snapshot.status) == (job_id, ours), f"vendor status {vendor_status!r}"
    kit.vendor.set_status(job_id, "NEVER-DOCUMENTED-STATUS")
    with pytest.raises(PermanentError):  # a status it does not know is the vendor's broken contract
        provider.status(job_id)


def check_cancel(kit: Kit) -> None:
    provider = kit.provider()
    job_id = provider.submit(SubmitJob(_reference("cancel"), {"n": 4}))
    provider.cancel(job_id)
    assert kit.vendor.canceled(job_id)
    provider.cancel(job_id)  # twice is harmless


def _read(kit: Kit, inbound: Any, body: bytes) -> Parsed:
    """What ingress does with a verified body: the adapter's reading, bounded again."""
    return bounded(inbound.interpret(body), kit.outcome_limits)


def check_events(kit: Kit) -> None:
    inbound, reference = kit.inbound(), _reference("events")
    job_id = kit.provider().submit(SubmitJob(reference, {"n": 5}))
    seen: set[str] = set()
    for kind, (event_type, status) in EVENT_KINDS.items():
        body = kit.vendor.event(kind, job_id, reference)
        verified = inbound.verify(kit.vendor.sign(body, kit.now_s), body, kit.now_s, kit.tolerance_s)
        assert isinstance(verified, Verified) and verified.event_id, f"{kind}: verify must name the event id"
        seen.add(verified.event_id)
        parsed = _read(kit, inbound, body)
        if event_type is None:
            assert parsed.event is None, f"{kind}: an event type Liaison has no use for is ignored"
            continue
        assert parsed.event is not None, f"{kind}: read as nothing"
        assert parsed.event.type is event_type and parsed.event.status == status, kind
        assert parsed.event.job_id == job_id or parsed.reference == reference, f"{kind}: names another job"
    assert len(seen) == len(EVENT_KINDS), "each event must have its own id"


def check_refusals(kit: Kit) -> None:
    inbound, now = kit.inbound(), kit.now_s
    body = kit.vendor.event("succeeded", "job-1", _reference("refusals"))
    headers = kit.vendor.sign(body, now)
    forged = [
        (kit.vendor.sign(body, now, secret="not-the-vendors-secret-0123456789"), body),
        (headers, body + b" "),
        (headers, body.replace(b"succeeded", b"failed") if b"succeeded" in body else body[:-1]),
        ({}, body),
    ]
    for forged_headers, forged_body in forged:
        with pytest.raises(SignatureError):
            inbound.verify(forged_headers, forged_body, now, kit.tolerance_s)
    if kit.vendor.dated:
        old = now - kit.tolerance_s - 60
        with pytest.raises(StaleTimestamp):
            inbound.verify(kit.vendor.sign(body, old), body, now, kit.tolerance_s)
    for malformed in (b"", b"\xff\xfe\x00", b"{", b"<", b"[]", b"null", b"x" * 10_000, b"[" * 5_000):
        with pytest.raises(MalformedEvent):
            _read(kit, inbound, malformed)


def check_inbound_totality(kit: Kit, max_examples: int = 200) -> None:
    """Hypothesis drives verify and interpret with made-up headers and bodies, and with a real
    request changed a little: each returns or raises its typed error, never anything else."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    inbound, now = kit.inbound(), kit.now_s
    real = kit.vendor.event("succeeded", "job-1", "ref-1")
    real_headers = kit.vendor.sign(real, now)
    header_values = st.one_of(st.text(max_size=300), *(st.just(v) for v in real_headers.values()))
    headers = st.one_of(
        st.dictionaries(st.sampled_from([*real_headers, "Content-Type", "X-Other"]), header_values, max_size=4),
        st.just(real_headers),
    )
    bodies = st.one_of(
        st.binary(max_size=2000),
        st.text(max_size=2000).map(str.encode),
        st.integers(0, max(len(real) - 1, 0)).map(lambda i: real[:i] + real[i + 1 :]),
        st.integers(0, max(len(real) - 1, 0)).map(lambda i: real[:i] + b"\x00" + real[i:]),
    )

    @settings(max_examples=max_examples, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(headers, bodies, st.floats(0, 4e9, allow_nan=False))
    def total(headers: dict[str, str], body: bytes, when: float) -> None:
        with contextlib.suppress(SignatureError):
            assert isinstance(inbound.verify(headers, body, when, kit.tolerance_s), Verified)
        with contextlib.suppress(MalformedEvent):
            assert isinstance(_read(kit, inbound, body), Parsed)

    total()


class AdapterConformance:
    """Every check as a test: subclass it in a ``test_*.py`` (named ``Test…``) and define a ``kit``
    fixture returning a :class:`Kit` for your adapter and your running fake vendor."""

    def test_idempotent_submit(self, kit: Kit) -> None:
        check_idempotent_submit(kit)

    def test_lost_submit_answer(self, kit: Kit) -> None:
        check_lost_submit_answer(kit)

    def test_status_mapping(self, kit: Kit) -> None:
        check_status_mapping(kit)

    def test_cancel(self, kit: Kit) -> None:
        check_cancel(kit)

    def test_events(self, kit: Kit) -> None:
        check_events(kit)

    def test_refusals(self, kit: Kit) -> None:
        check_refusals(kit)

    def test_inbound_totality(self, kit: Kit) -> None:
        check_inbound_totality(kit)
