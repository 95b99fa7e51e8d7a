"""The dependency pins agree with each other: ``pyproject.toml`` declares the same runtime pins as
``requirements.txt`` (what ``bin/_venv.sh`` installs), and ``constraints.txt`` (which pins every
transitive dependency) pins each of them, and the static checkers, at the very same version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PIN = re.compile(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==(\S+)$")


def _requirements(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("-r")]


def _name(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _pins(lines: list[str]) -> dict[str, str]:
    pins = {}
    for line in lines:
        match = PIN.match(line)
        assert match, f"not an exact pin: {line!r}"
        pins[_name(match[1])] = match[2]
    return pins


def test_pyproject_declares_the_runtime_requirements() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert declared == _requirements(ROOT / "requirements.txt")


def test_constraints_pin_every_direct_requirement_at_its_version() -> None:
    constraints = _pins(_requirements(ROOT / "constraints.txt"))
    direct = _pins(
        _requirements(ROOT / "requirements.txt")
        + _requirements(ROOT / "requirements-demo.txt")
        + _requirements(ROOT / "requirements-dev.txt")
    )
    assert {name: constraints.get(name) for name in direct} == direct
    assert "liaison" not in constraints  # the project itself is never a constraint


def test_the_venv_script_installs_with_the_constraints() -> None:
    script = (ROOT / "bin" / "_venv.sh").read_text()
    assert "-c constraints.txt" in script
    assert "constraints.txt" in script.split("want=", 1)[1].splitlines()[0]  # a change re-installs


#: Needed by the demo, the endurance suite, the typed client and the tests, never by the server.
NOT_THE_SERVERS = {"honcho", "standardwebhooks"}


def test_the_servers_dependencies_are_only_its_own() -> None:
    """honcho (bin/demo runs the Procfile with it) and standardwebhooks (liaison_client's) are not
    the server's: an installed server has neither, and none of its packages imports them."""
    server = _pins(_requirements(ROOT / "requirements.txt"))
    assert NOT_THE_SERVERS.isdisjoint(server)
    assert set(_pins(_requirements(ROOT / "requirements-demo.txt"))) >= NOT_THE_SERVERS
    assert "-r requirements.txt" in (ROOT / "requirements-demo.txt").read_text().splitlines()
    assert "-r requirements-demo.txt" in (ROOT / "requirements-dev.txt").read_text().splitlines()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    for package in packages:
        folder = ROOT / package.replace(".", "/").replace("app/migrations", "migrations").replace("app/docs", "docs")
        for module in folder.glob("*.py"):
            imports = re.findall(r"^\s*(?:from|import) (\w+)", module.read_text(), re.MULTILINE)
            assert NOT_THE_SERVERS.isdisjoint(imports), module
    for script in ("demo", "chaos"):
        assert "ensure_venv requirements-demo.txt" in (ROOT / "bin" / script).read_text()
