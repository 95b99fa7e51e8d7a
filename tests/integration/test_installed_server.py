"""The real wheel: ``pip wheel .`` builds it, ``pip install --no-deps --target`` installs it apart
from the checkout, and its ``liaison`` command runs there: ``--help`` lists the groups and ``db
upgrade`` migrates from the installed package. Nothing is downloaded: the build runs on this venv's
setuptools and ``wheel`` (requirements-dev.txt) without build isolation, the install takes the wheel
alone, and pip is told to use no index. Slow (a build and an install), hence here.
tests/unit/test_packaging.py checks the same layout without building."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

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


def test_the_wheel_holds_the_server_and_the_liaison_command(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"app/console/templates/console/task.html", "app/console/static/console.css"} <= names
    assert {"app/migrations/env.py", "app/migrations/script.py.mako", "app/docs/asyncapi.yaml"} <= names
    assert {f"app/migrations/versions/{p.name}" for p in (ROOT / "migrations" / "versions").glob("*.py")} <= names
    assert {"celeryconfig.py", "beat_schedule.py", "app/cli/main.py"} <= names
    assert not any(n.startswith(("liaison_client/", "simulator/", "tests/", "bench/")) for n in names)
    (entry_points,) = (n for n in names if n.endswith(".dist-info/entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "[console_scripts]\nliaison = app.cli.main:main" in text


def test_the_installed_liaison_command_runs_apart_from_the_checkout(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    installed = _run([sys.executable, "-m", "pip", "install", *OFFLINE, "--target", str(target), str(wheel)], tmp_path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
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
