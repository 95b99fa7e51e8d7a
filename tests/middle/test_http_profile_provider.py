"""The http kind's provider (workers.providers.http_profile) against a loopback vendor of another
shape (tests.support.profile_vendor), over real sockets: what its profile says is what is sent, and
the answers are read through the profile's pointers and statuses."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from core.errors import PermanentError, TransientError, UncertainError
from foundation.provider_settings import ProviderSettings
from tests.support.profile_vendor import ProfileVendor
from tests.support.servers import ServerThread
from wire.profiles import load_profile, parse_profile
from workers.providers import SubmitJob
from workers.providers.http_profile import HttpProfileProvider

ROOT = Path(__file__).resolve().parents[2]
PROFILE = load_profile(str(ROOT / "docs" / "profiles" / "stripe-like.toml"))
HOOK = "http://127.0.0.1:9/webhooks/acme"


@pytest.fixture
def vendor() -> Iterator[tuple[ProfileVendor, str]]:
    app = ProfileVendor()
    with ServerThread(app) as server:
        yield app, server.url


def _provider(url: str, profile=PROFILE) -> HttpProfileProvider:
    settings = ProviderSettings(
        name="acme", kind="http", base_url=url, webhook_secrets=("s",), api_key="sk_test_1", vendor_profile=profile
    )
    return HttpProfileProvider(settings, profile, HOOK)


def test_submit_sends_the_profiles_request_and_reads_the_job_id(vendor) -> None:
    app, url = vendor
    job_id = _provider(url).submit(SubmitJob("ref-1", {"prompt": 'a "quoted" {x}'}, callback_token="tok"))
    assert job_id == "job_1"
    [seen] = app.seen
    assert (seen.method, seen.path) == ("POST", "/v1/jobs")
    assert seen.headers["Authorization"] == "Bearer sk_test_1"  # the key from settings, not the file
    assert seen.headers["Idempotency-Key"] == "ref-1"
    assert seen.body == {
        "params": {"prompt": 'a "quoted" {x}'},
        "metadata": {"reference": "ref-1"},
        "webhook_url": HOOK + "/t/tok",
        "priority": "normal",
    }


def test_status_maps_the_vendors_names_onto_ours(vendor) -> None:
    app, url = vendor
    acme = _provider(url)
    app.states["job_9"] = "DONE"
    snapshot = acme.status("job_9")
    assert (snapshot.job_id, snapshot.status, snapshot.outcome) == ("job_9", "succeeded", {"n": 1})
    app.states["job_9"] = "PENDING"
    assert acme.status("job_9").status == "queued"


def test_an_unknown_vendor_status_is_an_error_that_says_so(vendor) -> None:
    app, url = vendor
    app.state = "HIBERNATING"
    with pytest.raises(PermanentError, match=r"status 'HIBERNATING' is not in the profile's \[statuses\]"):
        _provider(url).status("job_1")


def test_a_job_id_stays_one_path_segment(vendor) -> None:
    app, url = vendor
    _provider(url).cancel("../admin?x=1#f")
    [seen] = app.seen
    assert (seen.method, seen.path, seen.query) == ("POST", "/v1/jobs/..%2Fadmin%3Fx%3D1%23f/cancel", "")


def test_find_reads_the_job_or_none(vendor) -> None:
    app, url = vendor
    acme = _provider(url)
    assert acme.find("ref&x=1") is None
    assert app.seen[-1].query == "reference=ref%26x%3D1"
    acme.submit(SubmitJob("ref-2", {}))
    assert acme.find("ref-2") == "job_1"


def test_errors_are_classified_as_rests_are(vendor) -> None:
    app, url = vendor
    acme = _provider(url)
    app.fail["/v1/jobs/job_1"] = 503
    with pytest.raises(TransientError):
        acme.status("job_1")
    app.fail["/v1/jobs/job_1"] = 404
    with pytest.raises(PermanentError) as refused:
        acme.status("job_1")
    assert refused.value.status == 404


@pytest.mark.parametrize(("uncertain", "error"), [("resend", TransientError), ("operator", PermanentError)])
def test_without_find_the_profile_settles_an_uncertain_submit(vendor, uncertain, error) -> None:
    import tomllib

    data = tomllib.loads((ROOT / "docs" / "profiles" / "stripe-like.toml").read_text())
    del data["find"]
    data["uncertain"] = uncertain
    app, url = vendor
    with pytest.raises(error, match="no find"):
        _provider(url, parse_profile(data)).find("ref-1")
    assert app.seen == []  # nothing was asked of the vendor


@pytest.mark.parametrize(
    ("uncertain", "outcome"),
    [
        ("find", "job_1"),  # find settles it: the job the vendor made
        ("resend", UncertainError),  # retried: the next attempt resends under the same Idempotency-Key
        ("operator", PermanentError),  # dead-lettered at once, with an incident, for an operator
    ],
)
def test_a_submit_whose_answer_is_lost_is_settled_as_the_profile_says(vendor, uncertain, outcome) -> None:
    """Through the submission's own call (``workers.tasks.submission.Submit.call``): the vendor
    creates the job but its answer never comes within the read timeout."""
    import tomllib
    from dataclasses import replace

    from core.retry_policy import RetryPolicy
    from workers.tasks.attempt import Attempt
    from workers.tasks.submission import Submit

    data = tomllib.loads((ROOT / "docs" / "profiles" / "stripe-like.toml").read_text())
    if uncertain != "find":
        del data["find"]
        data["uncertain"] = uncertain
    app, url = vendor
    app.lose_submits = 1
    acme = _provider(url, parse_profile(data))
    acme.settings = replace(acme.settings, read_timeout_s=0.2)
    acme._timeout = (1.0, 0.2)
    job = SubmitJob("ref-9", {"n": 1})
    try:
        if isinstance(outcome, str):
            assert Submit().call(None, Attempt((acme, job), RetryPolicy())) == outcome  # type: ignore[arg-type]
        else:
            with pytest.raises(outcome):
                Submit().call(None, Attempt((acme, job), RetryPolicy()))  # type: ignore[arg-type]
    finally:
        app.release.set()
    if uncertain == "resend":  # the retry: the vendor answers with the job the lost submit made
        assert acme.submit(job) == "job_1"
        assert [s.headers["Idempotency-Key"] for s in app.seen if s.method == "POST"] == ["ref-9", "ref-9"]
