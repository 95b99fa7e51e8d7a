"""The server as a distribution (pyproject.toml): every package of the layers, what the server reads
at run time (templates, static files, migrations, the AsyncAPI document, Celery's configuration
modules), none of the client, simulator, tests or benchmarks, and the ``liaison`` command.

setuptools lays out the wheel's files with its ``build_py`` step, run here into a temporary folder
(no wheel tool, no network); tests/integration/test_installed_server.py builds and installs the
real wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner
from flask.cli import ScriptInfo

from app import create_app
from app.cli import group

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
#: What pyproject's package-dir ships inside ``app`` (app/package_files.py looks there first).
MAPPED = {"app.migrations": "migrations", "app.migrations.versions": "migrations/versions", "app.docs": "docs"}


#: setuptools' build_py on pyproject.toml, in the project folder: the files a wheel holds, in build_lib.
_BUILD_PY = """
import sys, warnings
from setuptools.config.pyprojecttoml import apply_configuration
from setuptools.dist import Distribution
warnings.simplefilter("ignore")  # "[tool.setuptools] is still beta" (setuptools < 68)
dist = Distribution()
dist.script_name = "setup.py"
apply_configuration(dist, "pyproject.toml")
step = dist.get_command_obj("build_py")
step.build_lib, step.compile = sys.argv[1], 0
step.ensure_finalized()
step.run()
"""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files a wheel of this checkout holds (setuptools' build_py, as ``pip wheel`` runs it)."""
    out = tmp_path_factory.mktemp("build") / "lib"
    step = subprocess.run(
        [sys.executable, "-c", _BUILD_PY, str(out)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert step.returncode == 0, step.stdout + step.stderr
    return out


def _files(base: Path) -> set[str]:
    return {str(p.relative_to(base)) for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_every_package_of_the_layers_is_listed() -> None:
    roots = [r for r in PYPROJECT["tool"]["importlinter"]["root_packages"] if r != "liaison_client"]
    on_disk = {
        str(init.parent.relative_to(ROOT)).replace("/", ".")
        for root in roots
        for init in (ROOT / root).rglob("__init__.py")
    }
    listed = set(PYPROJECT["tool"]["setuptools"]["packages"])
    assert listed - set(MAPPED) == on_disk
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {
        k: v for k, v in MAPPED.items() if k != "app.migrations.versions"
    }


def test_the_distribution_holds_what_the_server_reads_at_run_time(built: Path) -> None:
    files = _files(built)
    console = ROOT / "app" / "console"
    for folder in ("templates", "static"):
        assert {f"app/console/{folder}/{f}" for f in _files(console / folder)} <= files
    assert {f"app/migrations/{f}" for f in _files(ROOT / "migrations")} <= files
    assert {"app/migrations/env.py", "app/migrations/script.py.mako", "app/docs/asyncapi.yaml"} <= files
    assert {"celeryconfig.py", "beat_schedule.py", "app/cli/main.py"} <= files
    tops = {f.split("/", 1)[0] for f in files}
    assert tops == {"app", "workers", "runtime", "service", "models", "foundation", "webhooks", "wire", "core"} | {
        "celeryconfig.py",
        "beat_schedule.py",
    }
    assert not any(f.startswith("app/docs/") and f != "app/docs/asyncapi.yaml" for f in files)  # docs stay docs


def test_the_installed_layout_finds_its_migrations_and_documents(built: Path, tmp_path: Path) -> None:
    """Outside the checkout, the built tree alone: app/package_files.py looks inside ``app``, and the
    release step migrates from there."""
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "PYTHONPATH": str(built),
        "LIAISON_VAR_DIR": str(tmp_path),
    }
    script = "import app.package_files as p; print(p.shipped('migrations')); from app.cli.main import main; main()"
    upgrade = subprocess.run(
        [sys.executable, "-c", script, "db", "upgrade"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert upgrade.returncode == 0, upgrade.stdout + upgrade.stderr
    assert upgrade.stdout.splitlines() == [str(built / "app" / "migrations"), "database is at the latest migration"]
    assert (tmp_path / "liaison.db").is_file()


def test_the_liaison_command_is_the_cli_group() -> None:
    assert PYPROJECT["project"]["scripts"] == {"liaison": "app.cli.main:main"}
    result = CliRunner().invoke(group, ["--help"], obj=ScriptInfo(create_app=create_app), prog_name="liaison")
    assert result.exit_code == 0, result.output
    assert result.output.startswith("Usage: liaison [OPTIONS] COMMAND [ARGS]...")
    for name in ("clients", "db", "tasks", "dead-letters", "incidents", "demo"):
        assert f"\n  {name} " in result.output


def test_the_liaison_command_runs_db_upgrade_while_another_setting_is_wrong(tmp_path: Path) -> None:
    """As ``flask --app app liaison``: only ``db`` runs on DATABASE_URL alone."""
    env = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}",
        "LIAISON_VAR_DIR": str(tmp_path),
        "LIAISON_PROVIDERS": "foo",
    }
    runner = CliRunner()
    upgraded = runner.invoke(group, ["db", "upgrade"], obj=ScriptInfo(create_app=create_app), env=env)
    assert upgraded.exit_code == 0, upgraded.output
    listed = runner.invoke(group, ["clients", "list"], obj=ScriptInfo(create_app=create_app), env=env)
    assert listed.exit_code == 78
    assert (
        listed.output.strip()
        == "liaison: configuration error: LIAISON_PROVIDER_FOO_BASE_URL is required for provider 'foo'"
    )


def test_without_the_client_distribution_the_demo_says_what_to_install(monkeypatch, tmp_path: Path) -> None:
    """An installed server has no liaison_client: every other command loads, the demo says so."""
    monkeypatch.setitem(sys.modules, "liaison_client", None)  # import liaison_client → ModuleNotFoundError
    monkeypatch.delitem(sys.modules, "app.demo", raising=False)
    env = {"DATABASE_URL": f"sqlite:///{tmp_path / 'x.db'}", "LIAISON_VAR_DIR": str(tmp_path)}
    result = CliRunner().invoke(group, ["demo"], obj=ScriptInfo(create_app=create_app), env=env)
    assert result.exit_code == 1
    assert result.output.strip() == (
        "Error: the demo needs the typed client: pip install ./liaison_client from a checkout (or run bin/demo there)"
    )
