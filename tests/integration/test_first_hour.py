"""A newcomer's first hour (issue 43): each mistake a newcomer makes is one line naming its fix --
never a traceback, never a 500. Real services on loopback, real processes where the mistake is a
start-up one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest

from app import create_app, web_health
from app.demo import run_demo
from app.startup import EXIT_CONFIG, EXIT_UNAVAILABLE
from foundation.settings import Settings
from tests.integration import services
from tests.integration.stack import Stack
from tests.integration.test_startup_errors import CLOSED, PASSWORD, ROOT, one_line, run
from tests.support.servers import ServerThread

UPGRADE = "run `liaison db upgrade` (or `flask --app app liaison db upgrade`)"


@pytest.fixture(params=["sqlite", "postgres"])
def unmigrated_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database no `liaison db upgrade` has touched: what a newcomer who skipped it has. On
    PostgreSQL one of its own (the session's shared database is migrated by the first stack)."""
    if request.param == "postgres":
        url, name = services.create_postgres_database()
        yield url
        services.drop_postgres_database(name)
        return
    yield f"sqlite:///{tmp_path / 'never-migrated.db'}"


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


ENTRY_POINTS = {
    "web": ["gunicorn", "--bind", "127.0.0.1:0", "--workers", "1", "app:create_app()"],
    "worker": ["celery", "-A", "app.make_celery", "--quiet", "worker", "--pool", "solo"],
    "cli": ["flask", "--app", "app", "liaison", "clients", "list"],
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_broker_url_with_a_misspelt_scheme_is_one_line_naming_it(entry: str, tmp_path: Path) -> None:
    """``reddis://`` was ``KeyError: 'No such transport: reddis'`` with a traceback: now a
    configuration error, like a ``DATABASE_URL`` of an unknown scheme (exit 78)."""
    result = run(ENTRY_POINTS[entry], tmp_path, CELERY_BROKER_URL=f"reddis://:{PASSWORD}@127.0.0.1:{CLOSED}/0")
    assert result.returncode == EXIT_CONFIG, result.stdout + result.stderr
    line = one_line(result, "CELERY_BROKER_URL")
    assert line.startswith("liaison: configuration error: CELERY_BROKER_URL names the transport 'reddis', ")
    assert "Did you mean redis?" in line and line.endswith(
        "use redis://, rediss://, amqp://, amqps:// or filesystem://"
    )


def _wrong_amqp_password() -> str:
    """The real local RabbitMQ (loopback), with a password it refuses."""
    url = services.RABBITMQ_URL
    services.require(url, "RabbitMQ")
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"{parts.username}:{PASSWORD}@{parts.hostname}:{parts.port}"))


@pytest.mark.parametrize("entry", ["web", "worker"])
def test_a_wrong_broker_password_is_one_line_saying_so(entry: str, tmp_path: Path) -> None:
    """A refused AMQP login was an ``AccessRefused`` traceback (kombu passes it through unwrapped):
    now one line naming CELERY_BROKER_URL and what to check, exit 69 like a refused database login."""
    url = _wrong_amqp_password()
    result = run(ENTRY_POINTS[entry], tmp_path, CELERY_BROKER_URL=url)
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    line = one_line(result, "CELERY_BROKER_URL")
    host = urlsplit(url).netloc.rsplit("@", 1)[1]
    assert line.startswith(
        f"liaison: the broker at {host} refused the login (CELERY_BROKER_URL): check the user name and password"
    )
    assert "ACCESS_REFUSED" in line


def test_a_wrong_broker_password_in_the_cli_is_one_line_saying_so(pair_stack: Stack, tmp_path: Path) -> None:
    """The CLI reaches the broker only when it publishes: ``sweep-outbox`` with a row to publish."""
    api_key, _, _ = pair_stack.new_client()
    pair_stack.unpublished_task(api_key, {"correlation_id": f"fh-{uuid.uuid4().hex[:8]}", "input": "x"})
    env = {k: v for k, v in pair_stack.env.items() if k not in ("PATH", "HOME")}
    env |= {"CELERY_BROKER_URL": _wrong_amqp_password(), "LIAISON_OUTBOX_GRACE_S": "0"}
    env.pop("LIAISON_RATE_LIMIT_REDIS_URL", None)
    result = run(["flask", "--app", "app", "liaison", "sweep-outbox"], tmp_path, **env)
    assert result.returncode == EXIT_UNAVAILABLE, result.stdout + result.stderr
    assert one_line(result, "CELERY_BROKER_URL").startswith("liaison: the broker at ")
    assert "refused the login (CELERY_BROKER_URL): check the user name and password" in result.stderr


@pytest.mark.parametrize(
    "args", [[], ["clients"], ["clients", "create"], ["db", "upgrade"], ["dead-letters", "replay"]], ids=" ".join
)
def test_the_liaison_commands_help_creates_nothing(args: list[str], tmp_path: Path) -> None:
    """``liaison clients --help`` built the app, so it made ./var/liaison.db and ./var/broker/ in
    the folder it ran in (the default LIAISON_VAR_DIR). A help text now builds nothing."""
    folder = tmp_path / "anywhere"
    folder.mkdir()
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "app.cli.main", *args, "--help"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith(f"Usage: {' '.join(['liaison', *args])} [OPTIONS]")
    assert list(folder.iterdir()) == []


def test_the_demo_with_keep_ends_with_a_key_and_a_curl_that_work(
    pair_stack: Stack, capsys: pytest.CaptureFixture[str]
) -> None:
    """``bin/demo --keep`` printed no API key and no way to make a first call. Now the demo ends with
    two lines to paste -- the demo client's key, and a curl submitting a task -- and its domain app
    keeps listening: pasted into a shell, they make a task whose signed callback that app prints."""
    keep = threading.Event()
    outcome: list[bool] = []
    demo = threading.Thread(
        target=lambda: outcome.append(
            run_demo(
                pair_stack.app,
                web_url=pair_stack.web.url,
                vendor_url=pair_stack.vendor_url,
                timeout_s=60,
                callback_port=pair_stack.spare_port,
                keep=keep,
            )
        ),
        daemon=True,
    )
    demo.start()
    printed = ""
    try:
        printed += _output_until(capsys, lambda text: "\ncurl " in text, demo)
        key_line, curl_line = (line for line in printed.splitlines() if line.startswith(("export ", "curl ")))
        assert key_line.startswith("export LIAISON_API_KEY=") and "$LIAISON_API_KEY" in curl_line
        shell = subprocess.run(
            ["bash", "-c", f"{key_line}\n{curl_line}"], capture_output=True, text=True, timeout=30, check=False
        )
        assert shell.returncode == 0, shell.stderr
        assert json.loads(shell.stdout)["correlation_id"] == "my-first-task"
        printed += _output_until(capsys, lambda text: "task.completed for my-first-task" in text, demo)
    finally:
        keep.set()
        demo.join(timeout=60)
    assert outcome == [True]
    assert "demo finished: 7/7 tasks final" in printed
    assert "  domain app: task.completed for my-first-task (signature verified)" in printed


def _output_until(capsys: pytest.CaptureFixture[str], seen: Callable[[str], bool], demo: threading.Thread) -> str:
    """What the demo prints until ``seen`` holds of it (the demo bounds its own wait: 60 s)."""
    text = ""
    for _ in range(600):
        text += capsys.readouterr().out
        if seen(text) or not demo.is_alive():
            return text
        time.sleep(0.2)
    return text


def test_a_loopback_callback_url_is_refused_once_naming_the_setting(tmp_path: Path) -> None:
    """The CLI said "refused by the outbound guard: callback URL refused by the outbound guard: …"."""
    url = f"sqlite:///{tmp_path / 'liaison.db'}"
    assert run(["flask", "--app", "app", "liaison", "db", "upgrade"], tmp_path, DATABASE_URL=url).returncode == 0
    args = ["flask", "--app", "app", "liaison", "clients", "create", "shop", "--callback-url", "http://127.0.0.1:9/cb"]
    result = run(args, tmp_path, DATABASE_URL=url)
    assert result.returncode == 1
    assert result.stderr.count("refused by the outbound guard") == 1, result.stderr
    line = one_line(result, "refused by the outbound guard")
    assert line.startswith("Error: --callback-url refused by the outbound guard: address not public (")
    assert "LIAISON_OUTBOUND_ALLOW" in line


def test_the_images_web_healthcheck_asks_the_web_in_its_container(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The image's HEALTHCHECK (``python -m app.web_health``): 0 while the web on ``PORT`` answers
    ``/healthz``, 1 with one line when nothing listens there. A proxy of the environment is ignored."""
    app = create_app(
        Settings.from_env({"DATABASE_URL": f"sqlite:///{tmp_path / 'h.db'}", "LIAISON_VAR_DIR": str(tmp_path)})
    )
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{CLOSED}")
    with ServerThread(app) as web:
        monkeypatch.setenv("PORT", web.url.rsplit(":", 1)[1])
        assert web_health.main([]) == 0
        assert capsys.readouterr().out == f"web healthy: {web.url}/healthz\n"
    app.extensions["liaison"].db.engine.dispose()
    monkeypatch.setenv("PORT", str(CLOSED))
    assert web_health.main(["--timeout", "2"]) == 1
    assert capsys.readouterr().out.startswith(f"web unhealthy: http://127.0.0.1:{CLOSED}/healthz: ")
