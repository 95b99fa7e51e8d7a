"""Adapters in Python (``KIND=plugin``): the class is found and checked with the settings (a typo stops
the start naming the variable), its calls go only through Liaison's bounded, guarded caller, what it
returns is held to the built-in adapters' bounds, and the conformance kit fails an adapter that
breaks a promise (each check against a broken variant of the example adapter and the fake Acme on
loopback)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import OutboundRefused, PermanentError
from core.outbound_guard import AllowList
from core.states import EventType
from foundation.adapter_plugins import AdapterContext, NoCalls
from foundation.options import ConfigError
from foundation.provider_settings import ProviderSettings
from liaison_acme.adapter import AcmeAdapter
from liaison_acme.fake_vendor import FakeAcme
from runtime.provider import JobSnapshot, SubmitJob
from webhooks.events import EventTooLarge, MalformedEvent, Parsed, Progress, VendorEvent, bounded
from webhooks.schemes import Verified
from wire.bounded_json import JsonLimits
from workers.providers import ADAPTERS, conformance
from workers.providers.plugin import PluginProvider, VendorHttp

V = "LIAISON_PROVIDER_ACME_"


def _settings(**env: str) -> ProviderSettings:
    base = {V + "KIND": "plugin", V + "BASE_URL": "http://127.0.0.1:9", V + "WEBHOOK_SECRETS": "s3cret"}
    return ProviderSettings.from_env({**base, **{V + k: v for k, v in env.items()}}, "acme")


# --- loading ---


@pytest.mark.parametrize("name", ["acme", "liaison_acme.adapter:AcmeAdapter"])
def test_the_adapter_is_found_by_entry_point_or_module_and_class(name: str) -> None:
    settings = _settings(ADAPTER=name)
    assert settings.adapter is AcmeAdapter and "plugin" in ADAPTERS
    assert settings.webhook_secrets == ("s3cret",)  # a plugin's secrets are its own form, read by its verify


@pytest.mark.parametrize(
    ("adapter", "says"),
    [
        ("acmee", "no installed package declares 'acmee' in the entry point group liaison.adapters"),
        ("liaison_acmee.adapter:AcmeAdapter", "cannot import 'liaison_acmee.adapter'"),
        ("liaison_acme.adapter:AcmeAdaptor", "'liaison_acme.adapter' has no 'AcmeAdaptor'"),
        ("liaison_acme.adapter:STATES", "is not a class"),
        ("workers.providers.rest:RestProvider", "lacks verify, interpret"),
        ("not a name", "must be an entry point name or package.module:Class"),
    ],
)
def test_a_wrong_adapter_stops_the_start_in_one_line_naming_the_variable(adapter: str, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        _settings(ADAPTER=adapter)
    message = str(caught.value)
    assert message.startswith(V + "ADAPTER: ") and says in message and "\n" not in message
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


@pytest.mark.parametrize(
    ("env", "says"),
    [
        ({}, V + "ADAPTER is required"),
        ({"ADAPTER": "acme", "KIND": "rest"}, V + "ADAPTER is for a plugin provider only"),
        ({"ADAPTER": "acme", "WEBHOOK_SCHEME": "github"}, V + "WEBHOOK_SCHEME is not read for a plugin provider"),
        ({"ADAPTER": "acme", "BASE_URL": ""}, V + "BASE_URL is required"),
    ],
)
def test_a_plugin_provider_block_is_checked(env: dict[str, str], says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        _settings(**env)


def test_settings_the_adapter_refuses_stop_the_start_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """Its constructor runs when the settings are read (here: Acme needs a signing secret)."""
    monkeypatch.setattr(AcmeAdapter, "__init__", _refusing_init)
    with pytest.raises(ConfigError) as caught:
        _settings(ADAPTER="acme")
    assert str(caught.value) == (
        V + "ADAPTER: the adapter refuses the settings of provider 'acme': no secret of the form wanted"
    )


def _refusing_init(self: AcmeAdapter, settings: ProviderSettings, context: AdapterContext) -> None:
    raise ValueError("no secret of the form wanted")


def test_its_events_may_be_of_the_media_type_its_adapter_declares() -> None:
    assert _settings(ADAPTER="acme").media_types == ("application/xml",)
    rest = ProviderSettings(name="r", kind="rest", base_url="http://127.0.0.1:9", webhook_secrets=())
    assert rest.media_types == ("application/json",)


# --- the caller: bounded and guarded ---


def _http() -> VendorHttp:
    return VendorHttp(_settings(ADAPTER="acme"), 1024, AllowList())


@pytest.mark.parametrize("path", ["//evil.example/x", "@evil.example/x", "x", "/a b", "/a\r\nX: y", "/a#b"])
def test_a_path_cannot_name_another_host(path: str) -> None:
    with pytest.raises(PermanentError, match="must start with one /"):
        _http().request("GET", path, idempotent=True)


def test_an_address_the_vendor_gave_goes_through_the_outbound_guard() -> None:
    with pytest.raises(OutboundRefused):  # loopback is not in the (empty) allow list: refused unsent
        _http().request_url("GET", "http://127.0.0.1:9/result", idempotent=True)


@pytest.mark.parametrize("widening", ["timeout", "deadline_s", "max_body_bytes", "guard", "verify", "stream"])
def test_an_adapter_cannot_widen_the_bounds_of_a_call(widening: str) -> None:
    with pytest.raises(TypeError, match="passes on"):
        _http().request("GET", "/x", idempotent=True, **{widening: None})


def test_the_inbound_side_makes_no_calls() -> None:
    adapter = _settings(ADAPTER="acme").inbound_adapter
    assert isinstance(adapter.context.http, NoCalls)
    with pytest.raises(OutboundRefused):
        adapter.submit(SubmitJob("r-1", {}))


# --- what an adapter returns is bounded ---


class _Answers:
    """An adapter whose answers a test sets."""

    def __init__(self, job_id: Any = "job-1", snapshot: Any = None) -> None:
        self.job_id, self.snapshot = job_id, snapshot

    def submit(self, job: SubmitJob) -> Any:
        return self.job_id

    def status(self, job_id: str) -> Any:
        return self.snapshot

    def find(self, reference: str) -> Any:
        return self.job_id


LIMITS = JsonLimits(max_depth=4, max_bytes=200)


@pytest.mark.parametrize("job_id", ["", "a b", "x" * 201, 7, "é", None])
def test_a_job_id_that_is_no_short_printable_token_is_refused(job_id: Any) -> None:
    provider = PluginProvider(_Answers(job_id=job_id), "acme", LIMITS)
    with pytest.raises(PermanentError):
        provider.submit(SubmitJob("r", {}))
    if job_id is not None:  # find's None means "no such job"
        with pytest.raises(PermanentError):
            provider.find("r")


@pytest.mark.parametrize(
    "snapshot",
    [
        JobSnapshot("job-1", "done"),
        JobSnapshot("job 1", "running"),
        JobSnapshot("job-1", "succeeded", [1]),
        JobSnapshot("job-1", "succeeded", {"a": {"b": {"c": {"d": {"e": 1}}}}}),
        JobSnapshot("job-1", "succeeded", {"a": "x" * 300}),
        JobSnapshot("job-1", "succeeded", {"a": {1, 2}}),
        {"job_id": "job-1", "status": "running"},
    ],
)
def test_a_status_out_of_bounds_is_refused(snapshot: Any) -> None:
    with pytest.raises(PermanentError):
        PluginProvider(_Answers(snapshot=snapshot), "acme", LIMITS).status("job-1")


def test_a_status_within_bounds_is_passed_on() -> None:
    snapshot = JobSnapshot("job-1", "succeeded", {"a": 1})
    assert PluginProvider(_Answers(snapshot=snapshot), "acme", LIMITS).status("job-1") == snapshot


@pytest.mark.parametrize(
    "parsed",
    [
        VendorEvent(EventType.ACCEPTED, "job-1"),
        Parsed(VendorEvent(EventType.ACCEPTED, "")),
        Parsed(VendorEvent(EventType.ACCEPTED, "j" * 201)),
        Parsed(VendorEvent(EventType.ACCEPTED, "job-1"), reference="ref-1"),
        Parsed(VendorEvent(EventType.COMPLETED, "job-1", "done")),
        Parsed(VendorEvent(EventType.COMPLETED, "job-1", "succeeded", [1])),
        Parsed(VendorEvent(EventType.COMPLETED, "job-1", "succeeded", {"a": {"b": {"c": {"d": {"e": 1}}}}})),
        Parsed(VendorEvent(EventType.PROGRESS, "job-1")),
        Parsed(VendorEvent(EventType.PROGRESS, "job-1", progress=Progress(percent=140))),
        Parsed(VendorEvent(EventType.PROGRESS, "job-1", progress=Progress(message="\n" * 3))),
    ],
)
def test_an_interpretation_out_of_bounds_is_malformed(parsed: Any) -> None:
    with pytest.raises(MalformedEvent):
        bounded(parsed, LIMITS)


def test_an_outcome_past_the_size_limit_is_too_large() -> None:
    with pytest.raises(EventTooLarge):
        bounded(Parsed(VendorEvent(EventType.COMPLETED, "job-1", "succeeded", {"a": "x" * 300})), LIMITS)


@given(st.text(max_size=400))
def test_an_ignored_type_is_kept_short(vendor_type: str) -> None:
    assert bounded(Parsed(None, vendor_type), LIMITS) == Parsed(None, vendor_type[:200])


# --- the kit fails an adapter that breaks a promise ---


class _NewJobEachTime(AcmeAdapter):
    """Forgets idempotency: a fresh ref per submit."""

    n = 0

    def submit(self, job: SubmitJob) -> str:
        _NewJobEachTime.n += 1
        return super().submit(replace(job, reference=f"{job.reference}-{self.n}"))


class _FindsNothing(AcmeAdapter):
    def find(self, reference: str) -> str | None:
        return None


class _RunningIsQueued(AcmeAdapter):
    def status(self, job_id: str) -> JobSnapshot:
        snapshot = super().status(job_id)
        return replace(snapshot, status="queued") if snapshot.status == "running" else snapshot


class _GuessesUnknownStatus(AcmeAdapter):
    def status(self, job_id: str) -> JobSnapshot:
        try:
            return super().status(job_id)
        except PermanentError:
            return JobSnapshot(job_id, "running")


class _CancelsNothing(AcmeAdapter):
    def cancel(self, job_id: str) -> None:
        return None


class _TrustsEverything(AcmeAdapter):
    def verify(self, headers: Any, body: bytes, now_s: float, tolerance_s: int) -> Verified:
        return Verified("any")


class _NoTimeLimit(AcmeAdapter):
    def verify(self, headers: Any, body: bytes, now_s: float, tolerance_s: int) -> Verified:
        return super().verify(headers, body, now_s, 10**12)


class _EverythingAccepted(AcmeAdapter):
    def interpret(self, body: bytes) -> Parsed:
        try:
            return super().interpret(body)
        except MalformedEvent:
            return Parsed(None, "garbage")


class _LeaksKeyError(AcmeAdapter):
    def interpret(self, body: bytes) -> Parsed:
        if b"\x00" in body:
            raise KeyError("oops")
        return super().interpret(body)


class _WrongMeaning(AcmeAdapter):
    def interpret(self, body: bytes) -> Parsed:
        parsed = super().interpret(body)
        if parsed.event is not None and parsed.event.status == "failed":
            return Parsed(replace(parsed.event, status="succeeded"), parsed.vendor_type)
        return parsed


@pytest.fixture
def vendor() -> Iterator[FakeAcme]:
    fake = FakeAcme().start()
    yield fake
    fake.stop()


BROKEN: list[tuple[type, Callable[..., None]]] = [
    (_NewJobEachTime, conformance.check_idempotent_submit),
    (_FindsNothing, conformance.check_lost_submit_answer),
    (_RunningIsQueued, conformance.check_status_mapping),
    (_GuessesUnknownStatus, conformance.check_status_mapping),
    (_CancelsNothing, conformance.check_cancel),
    (_WrongMeaning, conformance.check_events),
    (_TrustsEverything, conformance.check_refusals),
    (_NoTimeLimit, conformance.check_refusals),
    (_EverythingAccepted, conformance.check_refusals),
    (_LeaksKeyError, conformance.check_inbound_totality),
]


@pytest.mark.parametrize(("adapter", "check"), BROKEN, ids=[f"{a.__name__}-{c.__name__}" for a, c in BROKEN])
def test_the_kit_fails_a_broken_adapter(vendor: FakeAcme, adapter: type, check: Callable[..., None]) -> None:
    with pytest.raises((AssertionError, pytest.fail.Exception, KeyError)):
        check(conformance.Kit(adapter, vendor))
    check(conformance.Kit(AcmeAdapter, vendor))  # the same check passes the adapter it was broken from


def test_an_adapter_is_built_with_its_settings_and_context() -> None:
    settings = _settings(ADAPTER="acme")
    context = AdapterContext(webhook_url="http://127.0.0.1:9/webhooks/acme")
    assert AcmeAdapter(settings, context).context.webhook_url.endswith("/webhooks/acme")
