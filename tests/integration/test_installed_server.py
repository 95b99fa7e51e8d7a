"""The real wheel: ``pip wheel .`` builds it, ``pip install --no-deps --target`` installs it apart
from the checkout, and its ``liaison`` command runs there: ``--help`` lists the groups and ``db
upgrade`` migrates from the installed package. Nothing is downloaded: the build runs on this venv's
setuptools and ``wheel`` (requirements-dev.txt) without build isolation, the install takes the wheel
alone, and pip is told to use no index. Slow (a build and an install), hence here.
tests/unit/test_packaging.py checks the same layout without building."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
import requests

from app.startup import EXIT_UNAVAILABLE
from tests.integration.services import free_port

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


#: pip must not reach a package index from a test: only loopback traffic is allowed.
OFFLINE = ["--no-index", "--no-build-isolation", "--no-deps", "--quiet"]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    built = _run([sys.executable, "-m", "pip", "wheel", ".", *OFFLINE, "-w", str(out)], ROOT)
    assert built.returncode == 0, built.stdout + built.stderr
    (found,) = out.glob("liaison-*.whl")
    return found


@pytest.fixture(scope="module")
def site(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel installed once, apart from the checkout (``pip install --target``); each test runs
    it with a home and a var folder of its own."""
    base = tmp_path_factory.mktemp("installed")
    target = base / "site"
    installed = _run([sys.executable, "-m", "pip", "install", *OFFLINE, "--target", str(target), str(wheel)], base)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return target


def test_the_wheel_holds_the_server_and_the_liaison_command(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"app/console/templates/console/task.html", "app/console/static/console.css"} <= names
    assert {"app/migrations/env.py", "app/migrations/script.py.mako", "app/docs/asyncapi.yaml"} <= names
    assert {f"app/migrations/versions/{p.name}" for p in (ROOT / "migrations" / "versions").glob("*.py")} <= names
    assert {"celeryconfig.py", "beat_schedule.py", "app/cli/main.py", "app/gunicorn_config.py"} <= names
    assert not any(n.startswith(("liaison_client/", "simulator/", "tests/", "bench/")) for n in names)
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[console_scripts]\nliaison = app.cli.main:main" in text


def test_the_installed_liaison_command_runs_apart_from_the_checkout(site: Path, tmp_path: Path) -> None:
    target = site
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(target),
        "LIAISON_VAR_DIR": str(tmp_path / "var"),
    }
    liaison = str(target / "bin" / "liaison")

    helped = _run([liaison, "--help"], tmp_path, env)
    assert helped.returncode == 0, helped.stdout + helped.stderr
    assert helped.stdout.startswith("Usage: liaison [OPTIONS] COMMAND [ARGS]...")
    for name in ("clients", "db", "tasks", "dead-letters", "incidents"):
        assert f"\n  {name} " in helped.stdout

    where = _run([sys.executable, "-c", "import app; print(app.__file__)"], tmp_path, env)
    assert where.stdout.strip() == str(target / "app" / "__init__.py")  # the installed copy, not the checkout's

    upgraded = _run([liaison, "db", "upgrade"], tmp_path, env)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert "database is at the latest migration" in upgraded.stdout
    listed = _run([liaison, "clients", "list"], tmp_path, env)
    assert listed.returncode == 0 and listed.stdout.strip() == "no clients yet", listed.stdout + listed.stderr


def test_the_installed_server_runs_the_procfile_web_line_from_any_folder(site: Path, tmp_path: Path) -> None:
    """The Procfile's web line names its gunicorn settings as a module of the package
    (``-c python:app.gunicorn_config``): it was ``-c gunicorn.conf.py``, a file of the checkout's
    root that no wheel has (``Error: 'gunicorn.conf.py' doesn't exist``). Run from a folder with no
    checkout, the installed web has its start-up checks (an unreachable broker is one line, exit 69),
    its structured log and its read-ahead worker class, and serves."""
    target = site
    (web_line,) = (line for line in (ROOT / "Procfile").read_text().splitlines() if line.startswith("web: "))
    config = web_line.split(" -c ", 1)[1].split()[0]
    assert config == "python:app.gunicorn_config"
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(target),
        "LIAISON_VAR_DIR": str(tmp_path / "var"),
        "LIAISON_STARTUP_WAIT_S": "0",
        "LIAISON_LOG_FORMAT": "json",
    }
    port = free_port()
    web = [sys.executable, "-m", "gunicorn", "-c", config, "--no-control-socket", "--bind", f"127.0.0.1:{port}"]
    web.append("app:create_app()")

    refused = _run(web, elsewhere, env | {"CELERY_BROKER_URL": "redis://127.0.0.1:1/0"})
    assert refused.returncode == EXIT_UNAVAILABLE, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr
    assert refused.stderr.startswith("liaison: cannot reach the broker at 127.0.0.1:1 (CELERY_BROKER_URL): ")

    assert _run([str(target / "bin" / "liaison"), "db", "upgrade"], elsewhere, env).returncode == 0
    with subprocess.Popen(web, cwd=elsewhere, env=env, stderr=subprocess.PIPE, text=True) as process:
        try:
            answered = _get_when_up(f"http://127.0.0.1:{port}/healthz", process)
        finally:
            process.terminate()
            _, log = process.communicate(timeout=60)
    assert answered == 200, log
    assert "Traceback" not in log
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    events = [line.get("event", "") for line in lines]
    assert "Using worker: ReadAheadWorker" in events, log  # app/gunicorn_worker.py's
    assert list(elsewhere.iterdir()) == []  # nothing read or written in the folder it ran in


def _get_when_up(url: str, process: subprocess.Popen[str]) -> int:
    """The status of GET ``url`` once the server listens (at most 60 tries, a second apart)."""
    for _ in range(60):
        if process.poll() is not None:
            return -1
        try:
            return requests.get(url, timeout=5).status_code
        except requests.ConnectionError:
            time.sleep(1)
    return -1
