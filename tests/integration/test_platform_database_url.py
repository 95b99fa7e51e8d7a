"""A Heroku-style ``DATABASE_URL=postgres://…`` on a fresh PostgreSQL database: the release step
migrates it and the web process, as the Procfile starts it, answers ready. Subprocesses in a clean
environment, loopback only (tests/integration/test_startup_errors.py runs the failures)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration import services

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def platform_url() -> Iterator[str]:
    """A fresh database, named the way a PaaS names it: ``postgres://user@host:port/name``."""
    url, name = services.create_postgres_database()
    yield url.replace("postgresql+psycopg://", "postgres://", 1)
    services.drop_postgres_database(name)


def _env(tmp: Path, **extra: str) -> dict[str, str]:
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp), "LIAISON_VAR_DIR": str(tmp), "LIAISON_STARTUP_WAIT_S": "5"}
    return base | extra


def test_a_postgres_scheme_url_migrates_and_serves(platform_url: str, tmp_path: Path) -> None:
    assert platform_url.startswith("postgres://")
    release = subprocess.run(
        [sys.executable, "-m", "flask", "--app", "app", "liaison", "db", "upgrade"],
        cwd=ROOT,
        env=_env(tmp_path, DATABASE_URL=platform_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    print("$ DATABASE_URL=postgres://… flask --app app liaison db upgrade\n" + release.stdout + release.stderr)
    assert release.returncode == 0, release.stdout + release.stderr
    assert "database is at the latest migration" in release.stdout

    token, port = secrets.token_urlsafe(32), services.free_port()
    # The Procfile's web line, on loopback and one worker.
    web_line = ["gunicorn", "-c", "gunicorn.conf.py", "--no-control-socket", "--bind", f"127.0.0.1:{port}"]
    web = subprocess.Popen(
        [sys.executable, "-m", *web_line, "--workers", "1", "app:create_app()"],
        cwd=ROOT,
        env=_env(tmp_path, DATABASE_URL=platform_url, LIAISON_METRICS_TOKEN=token),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        answer = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and web.poll() is None:
            try:
                answer = requests.get(
                    f"http://127.0.0.1:{port}/readyz", headers={"Authorization": f"Bearer {token}"}, timeout=5
                )
                break
            except requests.ConnectionError:
                time.sleep(0.3)
        assert answer is not None, f"the web process did not answer (exit {web.poll()})"
        print(f"$ curl /readyz  → {answer.status_code} {answer.text.strip()}")
        assert answer.status_code == 200, answer.text
        assert answer.json()["status"] == "ready"
    finally:
        web.terminate()
        output, _ = web.communicate(timeout=30)
    assert "NoSuchModuleError" not in output and "Traceback" not in output, output
