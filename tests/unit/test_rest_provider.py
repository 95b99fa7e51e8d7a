"""The REST provider's request paths and job ids (workers.providers.rest): a vendor's job id is
escaped into one path segment and must be a short printable token to be recorded. No network:
``call`` is replaced by a recorder."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import given
from hypothesis import strategies as st

from core.errors import PermanentError
from foundation.provider_settings import ProviderSettings
from webhooks.signing import generate_secret
from workers.providers import rest

SETTINGS = ProviderSettings(
    name="acme", kind="rest", base_url="http://vendor.example", webhook_secrets=(generate_secret(),)
)


def provider(monkeypatch: pytest.MonkeyPatch, answer: dict) -> tuple[rest.RestProvider, list[tuple[str, str, dict]]]:
    calls: list[tuple[str, str, dict]] = []

    def recording_call(method: str, url: str, **kwargs):
        calls.append((method, url, kwargs))
        response = requests.Response()
        response.status_code = 200
        response._content = json.dumps(answer).encode()
        return response

    monkeypatch.setattr(rest, "call", recording_call)
    return rest.RestProvider(SETTINGS, "http://liaison.example/webhooks/acme", max_response_bytes=2048), calls


@pytest.mark.parametrize("job_id", ["../admin", "a/b", "a?b=1", "a#b", "%2e%2e", "a b"])
def test_a_job_id_stays_one_path_segment(monkeypatch, job_id):
    acme, calls = provider(monkeypatch, {"job_id": "j-1", "status": "running"})
    acme.status(job_id)
    acme.cancel(job_id)
    for _, url, kwargs in calls:
        tail = url.removeprefix("http://vendor.example/jobs/")
        assert "/" not in tail.removesuffix("/cancel") and "?" not in url and "#" not in url and " " not in url
        assert kwargs["deadline_s"] == SETTINGS.call_deadline_s and kwargs["max_body_bytes"] == 2048


@pytest.mark.parametrize("job_id", ["", "x" * 201, "a b", "a\nb", "job\x00", "jöb", "tab\there"])
def test_a_job_id_that_is_not_a_short_printable_token_is_a_broken_contract(monkeypatch, job_id):
    acme, _ = provider(monkeypatch, {"job_id": job_id, "status": "queued"})
    with pytest.raises(PermanentError):
        acme.status("j-1")


@given(st.text(alphabet=st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=200))
def test_a_printable_token_is_recorded_as_given(job_id):
    assert rest.JOB_ID.fullmatch(job_id)
    assert "/" not in rest.job_path(job_id) and "?" not in rest.job_path(job_id)
