"""Flower as the Procfile starts it (issue 12): the ``flower:`` line itself, run by bash with the
address from ``FLOWER_ADDRESS`` (loopback here, as in bin/demo; the Procfile's default is all
interfaces), a ``FLOWER_URL_PREFIX`` as a proxy forwarding ``/flower/`` would need, and basic auth,
which stays mandatory: pages under the prefix answer 200 with the credentials and 401 without, and
a weak password stops the line before Flower starts. Redis only: Flower's serving does not depend on
the broker (test_worker_metrics_hosts and the stacks cover both brokers)."""

from __future__ import annotations

import os
import re
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration import services
from tests.integration.processes import poll, stop

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
PREFIX = "flower"
USER, PASSWORD = "ops", "flower-" + secrets.token_urlsafe(18)


def procfile_line(name: str) -> str:
    for line in (ROOT / "Procfile").read_text().splitlines():
        if line.startswith(f"{name}:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError(f"no {name}: line in the Procfile")


def _env(tmp: Path, port: int, basic_auth: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIAISON_", "DATABASE_", "CELERY_", "FLOWER_"))}
    env.update(
        PATH=f"{Path(sys.executable).parent}:{env.get('PATH', '')}",
        CELERY_BROKER_URL=services.BROKERS["redis"],
        LIAISON_VAR_DIR=str(tmp),
        LIAISON_QUEUE=f"liaison-flower-{secrets.token_hex(4)}",
        FLOWER_ADDRESS="127.0.0.1",
        FLOWER_PORT=str(port),
        FLOWER_URL_PREFIX=PREFIX,
        FLOWER_BASIC_AUTH=basic_auth,
    )
    return env


def test_the_procfile_binds_flower_from_configuration_all_interfaces_by_default() -> None:
    line = procfile_line("flower")
    assert line.startswith("python -m workers.flower_check && ")  # basic auth checked first, always
    assert "--address=${FLOWER_ADDRESS:-0.0.0.0}" in line
    assert re.search(r"^export FLOWER_ADDRESS=127\.0\.0\.1$", (ROOT / "bin" / "demo").read_text(), re.MULTILINE)


@pytest.fixture
def flower(tmp_path: Path) -> Iterator[tuple[str, subprocess.Popen[bytes], Path]]:
    services.require(services.BROKERS["redis"], "redis")
    port = services.free_port()
    log = tmp_path / "flower.log"
    with log.open("w") as out:
        proc = subprocess.Popen(
            ["bash", "-c", procfile_line("flower")],
            cwd=ROOT,
            env=_env(tmp_path, port, f"{USER}:{PASSWORD}"),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        yield f"http://127.0.0.1:{port}", proc, log
    finally:
        stop(proc)


def test_flower_serves_under_its_url_prefix_with_basic_auth(flower: tuple[str, subprocess.Popen[bytes], Path]) -> None:
    base, proc, log = flower

    def up() -> requests.Response | None:
        assert proc.poll() is None, f"flower exited with {proc.returncode}\n{log.read_text()[-3000:]}"
        try:
            return requests.get(f"{base}/{PREFIX}/workers", auth=(USER, PASSWORD), timeout=5)
        except requests.ConnectionError:
            return None

    page = poll("Flower to answer", up, 40, lambda: log.read_text()[-3000:], interval=0.3)
    assert page.status_code == 200, page.text[:500]
    assert f"/{PREFIX}/static/" in page.text  # its links point under the prefix, as a proxy needs
    assert requests.get(f"{base}/{PREFIX}/workers", timeout=5).status_code == 401
    assert requests.get(f"{base}/{PREFIX}/workers", auth=(USER, "wrong-" + PASSWORD), timeout=5).status_code == 401
    assert requests.get(f"{base}/{PREFIX}/", auth=(USER, PASSWORD), timeout=5).status_code == 200
    assert requests.get(f"{base}/workers", auth=(USER, PASSWORD), timeout=5).status_code == 404  # only under it


def test_a_weak_password_stops_the_line_before_flower_starts(tmp_path: Path) -> None:
    result = subprocess.run(
        ["bash", "-c", procfile_line("flower")],
        cwd=ROOT,
        env=_env(tmp_path, services.free_port(), "ops:short"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "FLOWER_BASIC_AUTH passwords must be at least 16 characters" in result.stderr
