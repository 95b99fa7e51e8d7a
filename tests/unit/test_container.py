"""The container image (Dockerfile) and compose.yaml, checked without a container runtime: every
command is the Procfile's line for that process, every variable they set is a declared setting
(the settings table, the provider block, or a documented variable of another program), the image
installs the pinned requirements and runs as a user without privileges, and ports are published on
loopback only. (Built and run: see README.md, "Running it for real".)"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

from app.settings_docs import OTHER_SECTIONS
from foundation.provider_setting_table import PROVIDER_SECTION
from foundation.setting_table import SECTIONS

ROOT = Path(__file__).resolve().parents[2]
PROCFILE = dict(line.split(": ", 1) for line in (ROOT / "Procfile").read_text().splitlines() if ": " in line)
COMPOSE: dict[str, Any] = yaml.safe_load((ROOT / "compose.yaml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
#: Services built from this repository's image, by Procfile process name.
OURS = {name: s for name, s in COMPOSE["services"].items() if s.get("image") == "liaison:latest"}
#: The Procfile's processes compose.yaml leaves out, and why.
NOT_IN_COMPOSE = {"vendor": "the demo's simulator, bound to 127.0.0.1: no other container could reach it"}


def _declared(name: str) -> bool:
    table = {o.env for section in (*SECTIONS, *OTHER_SECTIONS) for o in section.options}
    provider = [re.escape(o.env).replace(re.escape("<NAME>"), "[A-Z0-9_]+") for o in PROVIDER_SECTION.options]
    return name in table or any(re.fullmatch(p, name) for p in provider)


def _dockerfile_instructions(keyword: str) -> list[str]:
    """Each ``KEYWORD …`` instruction's text, continuation lines joined."""
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    return [line.split(None, 1)[1] for line in joined.splitlines() if line.startswith(keyword + " ")]


def test_each_service_runs_its_procfile_line() -> None:
    for name, service in OURS.items():
        shell, flag, line = service["command"]
        assert (shell, flag) == ("bash", "-c"), name
        assert line.replace("$$", "$") == PROCFILE[name], name  # $$: a $ Compose leaves to the container
        assert "$" not in line.replace("$$", ""), name  # a single $ would be Compose's, expanded on the host


def test_compose_runs_every_procfile_process_that_applies() -> None:
    assert set(OURS) == set(PROCFILE) - set(NOT_IN_COMPOSE)
    by_default = {name for name, s in OURS.items() if not s.get("profiles")}
    assert by_default == {"release", "web", "worker", "calls", "relay", "beat", "flower"}
    assert {s["image"] for name, s in COMPOSE["services"].items() if name not in OURS} == {"postgres:16", "redis:7"}


def test_every_variable_compose_sets_for_liaison_is_a_declared_setting() -> None:
    for name, service in OURS.items():
        undeclared = [v for v in service["environment"] if not _declared(v)]
        assert undeclared == [], name
    assert OURS["web"]["environment"]["DATABASE_URL"].startswith("postgres://")  # as a PaaS hands it out


def test_the_processes_start_after_the_migrations() -> None:
    assert OURS["release"]["restart"] == "no"
    assert OURS["release"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for name, service in OURS.items():
        if name != "release":
            assert service["depends_on"]["release"] == {"condition": "service_completed_successfully"}, name


def test_ports_are_published_on_loopback_only() -> None:
    published = [port for s in COMPOSE["services"].values() for port in s.get("ports", [])]
    assert published and all(port.startswith("127.0.0.1:") for port in published)


def test_the_image_is_slim_pinned_unprivileged_and_runs_the_web_by_default() -> None:
    assert _dockerfile_instructions("FROM") == ["python:3.11-slim"]
    assert any("pip install --require-hashes -r requirements.lock" in run for run in _dockerfile_instructions("RUN"))
    (user,) = _dockerfile_instructions("USER")
    assert user not in ("root", "0")
    assert any(f"useradd --system --create-home --uid 10001 {user}" in run for run in _dockerfile_instructions("RUN"))
    (cmd,) = _dockerfile_instructions("CMD")
    assert json.loads(cmd) == ["bash", "-c", PROCFILE["web"]]
    for env in _dockerfile_instructions("ENV"):
        for name in re.findall(r"(\w+)=", env):
            assert _declared(name) or name.startswith(("PYTHON", "PIP_")), name


def test_the_image_leaves_out_local_state_and_secrets() -> None:
    ignored = set((ROOT / ".dockerignore").read_text().split())
    assert {".git", ".venv", "var", ".env", ".env.*"} <= ignored  # .env.production and the like too


#: Services of the image with no health check of their own, and why.
UNCHECKED = {
    "release": "runs once (the migrations) and exits",
    "flower": "Flower's own page, behind basic auth; nothing depends on it",
    "vendor-events": "a broker consumer with no probe yet",
    "channel-commands": "a broker consumer with no probe yet",
}


def test_each_long_running_process_has_its_own_health_check() -> None:
    """The image's HEALTHCHECK is the web's (its default command); each Celery worker pings its own
    node (``-n NAME@%h``: the container's host name), beat checks its heartbeat, and a service the
    web's check would wrongly fail turns it off."""
    (check,) = _dockerfile_instructions("HEALTHCHECK")
    assert check.endswith('CMD ["python", "-m", "app.web_health"]'), check
    assert "healthcheck" not in OURS["web"]
    for name, service in OURS.items():
        command = service["command"][-1]
        node = re.search(r" worker .*-n (\w+)@%h", command)
        if node:
            test = service["healthcheck"]["test"]
            assert test == ["CMD-SHELL", f"python -m app.worker_health --worker {node[1]}@$$HOSTNAME"], name
        elif name == "beat":
            assert service["healthcheck"]["test"] == ["CMD", "liaison", "beat", "check"]
        elif name != "web":
            assert service["healthcheck"] == {"disable": True}, name
            assert name in UNCHECKED, name
    assert {name for name, s in OURS.items() if re.search(r" worker .*-n \w+@%h", s["command"][-1])} == {
        "worker",
        "calls",
        "relay",
    }
