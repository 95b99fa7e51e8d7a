"""Every entry point, run as in the Procfile, with a bad setting or an unreachable service: one line
naming the setting or the host (never a password), no traceback, a non-zero exit. And migrations
run with only DATABASE_URL set, whatever the providers' settings. Subprocesses; loopback only."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy

from app.startup import EXIT_CONFIG, EXIT_UNAVAILABLE

ROOT = Path(__file__).resolve().parents[2]
CLOSED = 1  # nothing listens on 127.0.0.1:1 (a privileged port no test opens)
PASSWORD = "pw-3f9c1e"

ENTRY_POINTS = {
    "cli": ["flask", "--app", "app", "liaison", "clients", "list"],
    "web": ["gunicorn", "--bind", "127.0.0.1:0", "--workers", "1", "app:create_app()"],
    "worker": ["celery", "-A", "app.make_celery", "--quiet", "worker", "--pool", "solo"],
    "beat": ["celery", "-A", "app.make_celery", "--quiet", "beat", "--schedule", "{tmp}/celerybeat-schedule"],
}


def run(args: list[str], tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The command in a clean environment (nothing of the test run's LIAISON_* leaks in), from the
    repository root (gunicorn reads ./gunicorn.conf.py), bounded by a timeout."""
    base = {"PATH": os.environ["PATH"], "HOME": str(tmp), "LIAISON_VAR_DIR": str(tmp), "LIAISON_STARTUP_WAIT_S": "0"}
    argv = [sys.executable, "-m", args[0], *(a.format(tmp=tmp) for a in args[1:])]
    return subprocess.run(argv, cwd=ROOT, env=base | env, capture_output=True, text=True, timeout=120)


def one_line(result: subprocess.CompletedProcess[str], *named: str) -> str:
    output = result.stdout + result.stderr
    assert "Traceback" not in output, output
    lines = [line for line in output.splitlines() if all(n in line for n in named)]
    assert len(lines) == 1, output
    assert PASSWORD not in output
    return lines[0]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_bad_setting_is_one_line_naming_it(entry: str, tmp_path: Path) -> None:
    result = run(ENTRY_POINTS[entry], tmp_path, LIAISON_PROVIDERS="foo")
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    line = one_line(result, "LIAISON_PROVIDER_FOO_BASE_URL")
    assert line == "liaison: configuration error: LIAISON_PROVIDER_FOO_BASE_URL is required for provider 'foo'"


@pytest.mark.parametrize("entry", ["web", "worker"])
def test_a_misspelt_plugin_adapter_is_one_line_naming_it(entry: str, tmp_path: Path) -> None:
    """An adapter written in Python (docs/design.md §5) is loaded with the settings: a name no
    installed package declares stops the process in one line, before anything connects."""
    env = {
        "LIAISON_PROVIDERS": "acme",
        "LIAISON_PROVIDER_ACME_KIND": "plugin",
        "LIAISON_PROVIDER_ACME_ADAPTER": "acmee",
        "LIAISON_PROVIDER_ACME_BASE_URL": f"http://127.0.0.1:{CLOSED}",
        "LIAISON_PROVIDER_ACME_WEBHOOK_SECRETS": "s",
    }
    result = run(ENTRY_POINTS[entry], tmp_path, **env)
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    assert one_line(result, "LIAISON_PROVIDER_ACME_ADAPTER") == (
        "liaison: configuration error: LIAISON_PROVIDER_ACME_ADAPTER: no installed package declares 'acmee' in "
        "the entry point group liaison.adapters"
    )


MIGRATE = ["flask", "--app", "app", "liaison", "db", "upgrade"]
ALEMBIC = ["alembic", "upgrade", "head"]


@pytest.mark.parametrize("args", [*ENTRY_POINTS.values(), MIGRATE, ALEMBIC], ids=[*ENTRY_POINTS, "migrate", "alembic"])
def test_a_database_password_with_a_raw_at_sign_is_one_line_saying_to_percent_encode(
    args: list[str], tmp_path: Path
) -> None:
    """Read as SQLAlchemy reads it, ``liaison:pw@3f9c1e@127.0.0.1`` is the password ``pw`` at the
    host ``3f9c1e@127.0.0.1``: refused before anything connects, never half-masked."""
    url = f"postgresql://liaison:{PASSWORD.replace('-', '@')}@127.0.0.1:{CLOSED}/x"
    result = run(args, tmp_path, DATABASE_URL=url)
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    line = one_line(result, "DATABASE_URL")
    assert line.startswith("liaison: configuration error: DATABASE_URL has a raw @, #, / or ? in its user name or ")
    assert "percent-encode" in line and "3f9c1e" not in result.stdout + result.stderr


@pytest.mark.parametrize("entry", ["web", "worker"])
def test_a_broker_password_with_a_raw_hash_is_one_line_saying_to_percent_encode(entry: str, tmp_path: Path) -> None:
    result = run(ENTRY_POINTS[entry], tmp_path, CELERY_BROKER_URL=f"amqp://guest:pw#3f9c1e@127.0.0.1:{CLOSED}//")
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    line = one_line(result, "CELERY_BROKER_URL")
    assert line.startswith("liaison: configuration error: CELERY_BROKER_URL has a raw @, #, / or ? in its user name")
    assert "3f9c1e" not in result.stdout + result.stderr


@pytest.mark.parametrize("args", [*ENTRY_POINTS.values(), MIGRATE], ids=[*ENTRY_POINTS, "migrate"])
def test_an_unreachable_database_is_one_line_naming_its_host(args: list[str], tmp_path: Path) -> None:
    url = f"postgresql+psycopg://liaison:{PASSWORD}@127.0.0.1:{CLOSED}/x"
    result = run(args, tmp_path, DATABASE_URL=url)
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    line = one_line(result, f"127.0.0.1:{CLOSED}")
    assert line.startswith(f"liaison: cannot use the database at 127.0.0.1:{CLOSED} (DATABASE_URL): ")


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_sqlite_file_that_cannot_be_made_is_one_line_naming_it(entry: str, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    path = tmp_path / "a-file" / "liaison.db"
    result = run(ENTRY_POINTS[entry], tmp_path, DATABASE_URL=f"sqlite:///{path}")
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    assert one_line(result, str(path)).startswith(f"liaison: cannot use the database at {path} (DATABASE_URL): ")


@pytest.mark.parametrize("entry", ["web", "worker", "beat"])  # the CLI only publishes, and a publish may fail
@pytest.mark.parametrize("scheme", ["amqp", "redis"])
def test_an_unreachable_broker_is_one_line_naming_its_host(entry: str, scheme: str, tmp_path: Path) -> None:
    url = f"{scheme}://guest:{PASSWORD}@127.0.0.1:{CLOSED}/" + ("/" if scheme == "amqp" else "0")
    result = run(ENTRY_POINTS[entry], tmp_path, CELERY_BROKER_URL=url)
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    line = one_line(result, f"127.0.0.1:{CLOSED}")
    assert line.startswith(f"liaison: cannot reach the broker at 127.0.0.1:{CLOSED} (CELERY_BROKER_URL): ")


@pytest.mark.parametrize("db", ["sqlite", "postgres"])
def test_migrations_need_only_the_database_url(db: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A provider named without its base URL or secrets (and another bad setting) does not stop
    `liaison db upgrade`, nor alembic run directly."""
    url = request.getfixturevalue("postgres_url") if db == "postgres" else f"sqlite:///{tmp_path / 'only-db.db'}"
    broken = {
        "LIAISON_PROVIDERS": "foo,bar",
        "LIAISON_PROVIDER_BAR_BASE_URL": "http://127.0.0.1:1",
        "LIAISON_MAX_BODY_BYTES": "lots",
    }
    upgraded = run(["flask", "--app", "app", "liaison", "db", "upgrade"], tmp_path, DATABASE_URL=url, **broken)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    assert "database is at the latest migration" in upgraded.stdout
    direct = run(["alembic", "upgrade", "head"], tmp_path, DATABASE_URL=url, **broken)
    assert direct.returncode == 0, direct.stdout + direct.stderr
    engine = sqlalchemy.create_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar()
    finally:
        engine.dispose()
    other = run(["flask", "--app", "app", "liaison", "clients", "list"], tmp_path, DATABASE_URL=url, **broken)
    assert other.returncode == EXIT_CONFIG and one_line(other, "configuration error:")
