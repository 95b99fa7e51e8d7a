"""A newcomer's first hour (issue 43): each mistake a newcomer makes is one line naming its fix --
never a traceback, never a 500. Real services on loopback, real processes where the mistake is a
start-up one."""

from __future__ import annotations

from pathlib import Path

import pytest

from app import create_app
from app.startup import EXIT_UNAVAILABLE
from foundation.settings import Settings
from tests.integration.test_startup_errors import one_line, run

UPGRADE = "run `liaison db upgrade` (or `flask --app app liaison db upgrade`)"


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A database no `liaison db upgrade` has touched: what a newcomer who skipped it has."""
    if request.param == "postgres":
        url: str = request.getfixturevalue("postgres_url")
        return url
    return f"sqlite:///{tmp_path / 'never-migrated.db'}"


def test_the_api_on_an_unmigrated_database_is_a_503_naming_the_upgrade(
    unmigrated_url: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    app = create_app(Settings.from_env({"DATABASE_URL": unmigrated_url, "LIAISON_VAR_DIR": str(tmp_path)}))
    client = app.test_client()
    auth = {"Authorization": "Bearer lsn_not-a-key-yet"}
    try:
        submitted = client.post("/api/v1/tasks", json={"correlation_id": "first", "input": "x"}, headers=auth)
        read = client.get("/api/v1/tasks/first", headers=auth)
    finally:
        app.extensions["liaison"].db.engine.dispose()
    for response in (submitted, read):
        assert response.status_code == 503, response.get_data(as_text=True)
        assert response.mimetype == "application/problem+json"
        detail = response.get_json()["detail"]
        assert detail.startswith("database migrations pending (database at none, code at ")
        assert detail.endswith(UPGRADE)
    log = capfd.readouterr().err  # the app's log: one warning a request, no traceback, no error
    assert "Traceback" not in log and "[error" not in log, log
    assert len([line for line in log.splitlines() if "[warning  ] database migrations pending:" in line]) == 2, log


@pytest.mark.parametrize(
    "args",
    [
        ["flask", "--app", "app", "liaison", "clients", "list"],
        ["app.cli.main", "clients", "create", "shop", "--callback-url", "https://shop.example/cb"],
    ],
    ids=["flask-list", "liaison-create"],
)
def test_the_cli_on_an_unmigrated_database_is_one_line_naming_the_upgrade(
    args: list[str], unmigrated_url: str, tmp_path: Path
) -> None:
    result = run(args, tmp_path, DATABASE_URL=unmigrated_url)
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    line = one_line(result, "liaison db upgrade")
    assert line.startswith("liaison: database migrations pending (database at none, code at ")
    assert line.endswith(UPGRADE)
