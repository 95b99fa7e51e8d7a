"""The dependency pins agree with each other: ``pyproject.toml`` declares the same runtime pins as
``requirements.txt`` (what ``bin/_venv.sh`` installs), and ``constraints.txt`` (which pins every
transitive dependency) pins each of them, and the static checkers, at the very same version."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

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


def test_the_venv_script_installs_the_lock_with_hashes() -> None:
    """It installed ``-r requirements*.txt -c constraints.txt``: versions pinned, files unchecked (pip
    takes no hashes in a constraints file). Now the requirements file's lock, every hash required."""
    script = (ROOT / "bin" / "_venv.sh").read_text()
    assert 'local lock="${req%.txt}.lock"' in script
    assert '--require-hashes -r "$lock"' in script
    assert "-c constraints.txt" not in script
    # a change to any requirements, lock or constraints file re-installs
    assert "requirements*.txt requirements*.lock constraints.txt" in script.split("want=", 1)[1].splitlines()[0]


#: Each requirements file and its hashed lock (bin/lock).
LOCKS = {"requirements.txt": "requirements.lock", "requirements-demo.txt": "requirements-demo.lock"}
LOCKS["requirements-dev.txt"] = "requirements-dev.lock"
_LOCKED = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+) \\\n((?:    --hash=sha256:[0-9a-f]{64}(?: \\)?\n)+)", re.MULTILINE)


def _closure(path: Path) -> list[str]:
    """The requirement lines of ``path`` and of every file it includes with ``-r``."""
    lines = path.read_text().splitlines()
    included = [line.split(None, 1)[1] for line in lines if line.startswith("-r ")]
    return _requirements(path) + [line for name in included for line in _closure(ROOT / name)]


@pytest.mark.parametrize("requirements", LOCKS)
def test_each_lock_is_its_requirements_at_the_constraints_versions_with_hashes(requirements: str) -> None:
    """The lock holds every direct requirement at its pinned version, every other entry at
    constraints.txt's version, and at least one sha256 for each entry (pip refuses to install a lock
    with an unhashed line under --require-hashes: the check is complete)."""
    text = (ROOT / LOCKS[requirements]).read_text()
    locked = {_name(m[1]): m[2] for m in _LOCKED.finditer(text)}
    entries = [line for line in text.splitlines() if line and not line.startswith((" ", "#"))]
    assert len(entries) == len(locked), "an entry without hashes"
    direct = _pins(_closure(ROOT / requirements))
    assert {name: locked.get(name) for name in direct} == direct
    constraints = _pins(_requirements(ROOT / "constraints.txt"))
    assert {name: constraints.get(name) for name in locked} == locked
    assert f"--output-file={LOCKS[requirements]}" in text and f" {requirements}\n" in text  # bin/lock made it


def test_the_demo_and_dev_locks_contain_the_servers_lock() -> None:
    """bin/test and bin/demo run the server on exactly the image's versions."""
    server = _entries(ROOT / "requirements.lock")
    for lock in ("requirements-demo.lock", "requirements-dev.lock"):
        other = _entries(ROOT / lock)
        assert {name: other.get(name) for name in server} == server, lock  # versions and hashes alike


def _entries(lock: Path) -> dict[str, tuple[str, str]]:
    return {_name(m[1]): (m[2], m[3]) for m in _LOCKED.finditer(lock.read_text())}


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
