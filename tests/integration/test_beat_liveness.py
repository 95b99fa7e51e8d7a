"""Beat liveness (issue 12): a real ``celery beat`` process (as in the Procfile, plus
``--max-interval 1`` so it wakes every second and counts as stale after 3 s rather than 90 s)
writes its heartbeat at every tick; ``/readyz``, ``/metrics`` and ``liaison beat check`` say it is
ticking; once it is stopped, all three say it is stale. Both brokers (``pair_stack``: sqlite-redis,
postgres-rabbitmq): beat publishes its jobs to the stack's own queue, which the stack's worker runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.processes import parse_samples, poll, stop
from tests.integration.stack import METRICS_AUTH, Stack, liaison_env

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
#: beat wakes at least this often (``--max-interval``), so it is stale 3 x this after its last tick
MAX_INTERVAL_S = 1
BOOT_TIMEOUT_S = 40


def _env(stack: Stack, vendor_secret: str, tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "PROMETHEUS_"))}
    env.update(
        liaison_env(
            database_url=stack.settings.database_url,
            broker_url=stack.settings.broker_url,
            vendor_url=stack.vendor_url,
            vendor_secret=vendor_secret,
            public_url=stack.settings.public_url,
        ),
        LIAISON_QUEUE=stack.queue,
        LIAISON_VAR_DIR=str(tmp),
    )
    return env


@pytest.fixture
def beat(pair_stack: Stack, vendor_secret: str, tmp_path: Path) -> Iterator[subprocess.Popen[bytes]]:
    args = [sys.executable, "-m", "celery", "-A", "app.make_celery", "--quiet", "beat"]
    args += ["--schedule", str(tmp_path / "celerybeat-schedule"), "--max-interval", str(MAX_INTERVAL_S)]
    log = tmp_path / "beat.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=_env(pair_stack, vendor_secret, tmp_path),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    proc.log = log  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        stop(proc)


def _readyz(stack: Stack) -> dict[str, Any]:
    response = requests.get(f"{stack.web.url}/readyz", headers=METRICS_AUTH, timeout=10)
    assert response.status_code == 200, response.text  # a stale beat never takes the web out of rotation
    body: dict[str, Any] = response.json()
    return body


def _beat_metrics(stack: Stack) -> dict[str, float]:
    response = requests.get(f"{stack.web.url}/metrics", headers=METRICS_AUTH, timeout=10)
    assert response.status_code == 200, response.text
    return {name: v for (name, _), v in parse_samples(response.text).items() if name.startswith("liaison_beat_")}


def _beat_lines(stack: Stack) -> str:
    response = requests.get(f"{stack.web.url}/metrics", headers=METRICS_AUTH, timeout=10)
    return "\n".join(line for line in response.text.splitlines() if line.startswith("liaison_beat_"))


def _cli_check(stack: Stack, *args: str) -> Any:
    return stack.app.test_cli_runner().invoke(args=["liaison", "beat", "check", *args])


def test_a_stopped_beat_is_reported_stale(
    pair_stack: Stack, beat: subprocess.Popen[bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    def diagnose() -> str:
        return beat.log.read_text()[-3000:]  # type: ignore[attr-defined]

    def ticking() -> dict[str, Any] | None:
        assert beat.poll() is None, f"beat exited with {beat.returncode}\n{diagnose()}"
        state = _readyz(pair_stack)["beat"]
        return state if state["last_tick_at"] and not state["stale"] else None

    alive = poll("beat's first heartbeat", ticking, BOOT_TIMEOUT_S, diagnose, interval=0.2)
    assert alive["stale_after_s"] == 3 * MAX_INTERVAL_S
    first = alive["last_tick_at"]
    poll("a later tick", lambda: _readyz(pair_stack)["beat"]["last_tick_at"] > first, 10, diagnose)
    assert _beat_metrics(pair_stack)["liaison_beat_stale"] == 0
    assert _cli_check(pair_stack).exit_code == 0

    stop(beat)
    stale = poll("beat to be reported stale", lambda: _readyz(pair_stack)["beat"]["stale"] or None, 15)
    assert stale is True
    body = _readyz(pair_stack)
    assert body["status"] == "ready" and body["beat"]["age_s"] > body["beat"]["stale_after_s"]
    samples = _beat_metrics(pair_stack)
    assert samples["liaison_beat_stale"] == 1
    assert samples["liaison_beat_stale_after_seconds"] == 3 * MAX_INTERVAL_S
    checked = _cli_check(pair_stack, "--json")
    assert checked.exit_code == 1 and json.loads(checked.output)["stale"] is True
    with capsys.disabled():  # what the closing note shows
        print(f"\n[{pair_stack.name}] /readyz with beat stopped: {json.dumps(body)}")
        print(f"[{pair_stack.name}] /metrics with beat stopped:\n{_beat_lines(pair_stack)}")
        print(f"[{pair_stack.name}] liaison beat check: {_cli_check(pair_stack).output.strip()}")
