"""``liaison providers check NAME [--job JOB_ID]`` against the real simulator playing Stripe
(``SIMULATOR_PERSONALITY=stripe``) over loopback HTTP, configured as an ``http`` provider with the
shipped profile docs/profiles/simulator-stripe.toml: the check reads the settings and the profile,
and with a job id asks the vendor through the provider's adapter and shared rate limit, showing the
vendor's own status name and the state it maps to. A broken profile is one line naming the file and
the key, exit 78, no traceback; as is a vendor that does not know the job (exit 1)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from click.testing import CliRunner, Result
from flask.cli import ScriptInfo

import simulator
from app import create_app
from app.cli import group
from tests.integration.stack import migrate
from tests.support.servers import CallbackRecorder, ServerThread

pytestmark = pytest.mark.timeout(60)

ROOT = Path(__file__).resolve().parents[2]
PROFILE = ROOT / "docs" / "profiles" / "simulator-stripe.toml"
SECRET = "whsec_" + "provider-check-" * 2


@pytest.fixture(scope="module")
def vendor() -> Iterator[str]:
    """The simulator as a Stripe-shaped vendor; its webhooks go to a recorder nobody reads. Its
    access log is kept out of the command's output (same process, same stdout)."""
    access_log = logging.getLogger("werkzeug")
    level = access_log.level
    access_log.setLevel(logging.WARNING)
    with ServerThread(CallbackRecorder()) as hooks:
        config = {
            "SIMULATOR_PERSONALITY": "stripe",
            "SIMULATOR_WEBHOOK_SECRET": SECRET,
            "SIMULATOR_WEBHOOK_URL": hooks.url + "/webhooks/stripe",
            "SIMULATOR_ACCEPT_DELAY_S": 0.05,
            "SIMULATOR_COMPLETE_DELAY_S": 0.1,
        }
        with ServerThread(simulator.create_app(config)) as server:
            yield server.url
    access_log.setLevel(level)


@pytest.fixture(scope="module")
def env(vendor: str, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    var = tmp_path_factory.mktemp("provider-check")
    url = f"sqlite:///{var / 'liaison.db'}"
    migrate(url)  # the provider's rate limit is kept in the database
    return {
        "DATABASE_URL": url,
        "LIAISON_VAR_DIR": str(var),
        "LIAISON_PROVIDERS": "stripe",
        "LIAISON_PROVIDER_STRIPE_KIND": "http",
        "LIAISON_PROVIDER_STRIPE_PROFILE": str(PROFILE),
        "LIAISON_PROVIDER_STRIPE_BASE_URL": vendor,
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SCHEME": "stripe",
        "LIAISON_PROVIDER_STRIPE_WEBHOOK_SECRETS": SECRET,
        "LIAISON_RATE_LIMIT_STORAGE": "database",
    }


def check(env: dict[str, str], *args: str) -> Result:
    """As ``flask --app app liaison providers check …`` run in that environment."""
    return CliRunner().invoke(group, ["providers", "check", *args], obj=ScriptInfo(create_app=create_app), env=env)


def _job(vendor: str, reference: str, simulate: dict[str, Any], until: str) -> str:
    """A job at the vendor, made the vendor's way, once it reports ``until``."""
    body: dict[str, Any] = {"reference": reference, "input": {"simulate": simulate}}
    job_id = str(requests.post(vendor + "/v1/jobs", json=body, timeout=5).json()["id"])
    deadline = time.monotonic() + 20
    while requests.get(f"{vendor}/v1/jobs/{job_id}", timeout=5).json()["status"] != until:
        assert time.monotonic() < deadline, f"the simulator's job never reached {until}"
        time.sleep(0.05)
    return job_id


def test_check_reads_the_settings_and_the_profile(env: dict[str, str]) -> None:
    result = check(env, "stripe")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("provider stripe: settings and profile OK\n")
    assert str(PROFILE) in result.output and SECRET not in result.output
    report = json.loads(check(env, "stripe", "--json").output)
    assert report["ok"] is True and report["job"] is None and report["notes"] == []
    assert (report["provider"]["kind"], report["provider"]["webhook_scheme"]) == ("http", "stripe")
    listed = CliRunner().invoke(group, ["providers", "list", "--json"], obj=ScriptInfo(create_app=create_app), env=env)
    assert [p["name"] for p in json.loads(listed.output)] == ["stripe"] and SECRET not in listed.output


def test_check_asks_the_vendor_for_a_job_and_maps_its_status(vendor: str, env: dict[str, str]) -> None:
    running = _job(vendor, "check-running", {"complete_delay_s": 60}, until="processing")
    report = json.loads(check(env, "stripe", "--job", running, "--json").output)
    assert report["job"] == {"job_id": running, "vendor_status": "processing", "state": "running", "outcome": None}

    done = _job(vendor, "check-done", {"outcome_payload": {"url": "s3://x"}}, until="succeeded")
    result = check(env, "stripe", "--job", done)
    assert result.exit_code == 0, result.output
    assert f"job {done}: vendor status 'succeeded' -> succeeded" in result.output
    assert '"s3://x"' in result.output


def test_a_job_the_vendor_does_not_know_is_one_line(env: dict[str, str]) -> None:
    result = check(env, "stripe", "--job", "job_nope")
    assert result.exit_code == 1
    [line] = result.output.splitlines()
    assert line.startswith("liaison: provider 'stripe': status of job 'job_nope': PermanentError")
    assert "Traceback" not in result.output


def test_a_broken_profile_is_one_line_naming_the_file_and_the_key(env: dict[str, str], tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text(PROFILE.read_text().replace('status = "/status"', 'status = "status"'))
    result = check({**env, "LIAISON_PROVIDER_STRIPE_PROFILE": str(broken)}, "stripe")
    assert result.exit_code == 78
    [line] = result.output.splitlines()
    assert line.startswith(f"liaison: configuration error: LIAISON_PROVIDER_STRIPE_PROFILE: {broken}: status.status: ")
    assert "Traceback" not in result.output


def test_an_unknown_provider_names_the_configured_ones(env: dict[str, str]) -> None:
    result = check(env, "nope")
    assert result.exit_code == 1
    assert result.output == "liaison: unknown provider 'nope' (LIAISON_PROVIDERS: stripe)\n"
