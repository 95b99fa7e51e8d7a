"""The floor plan holds: every import points down (docs/architecture.md#layers).

The contracts live in pyproject.toml (``[tool.importlinter]``); ``lint-imports`` checks every
import in the seven packages (the six layers and the client), direct or through others. The two
top-level modules import-linter cannot take as roots (celeryconfig.py, beat_schedule.py) are
checked here, and so is the promise the layering exists for: importing the pure core loads
nothing but the standard library.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The pure core: what a newcomer can import and unit-test with nothing installed.
PURE = (
    "core.states",
    "core.retry_policy",
    "core.classify",
    "core.errors",
    "core.outbound_guard",
    "core.origins",
    "core.rate_limit",
    "core.endpoint_health",
    "core.fair_share",
    "webhooks.signing",
    "webhooks.events",
    "webhooks.bounded_json",
    "webhooks.urls",
)
HEAVY = (
    "sqlalchemy",
    "flask",
    "werkzeug",
    "celery",
    "kombu",
    "requests",
    "urllib3",
    "alembic",
    "structlog",
    "prometheus_client",
    "models",
    "workers",
    "app",
    "foundation",
)


def test_import_contracts_are_kept() -> None:
    """``lint-imports`` exits 0 only when every contract is kept; its report names the broken import."""
    result = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; sys.exit(lint_imports())"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def _project_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names & {"app", "workers", "webhooks", "models", "foundation", "core", "beat_schedule", "celeryconfig"}


def test_celery_config_and_beat_schedule_sit_below_the_roots() -> None:
    """Celery's configuration reads settings only; the beat schedule is plain data."""
    assert _project_imports(ROOT / "celeryconfig.py") <= {"foundation", "beat_schedule"}
    assert _project_imports(ROOT / "beat_schedule.py") == set()


def test_importing_the_pure_core_loads_only_the_standard_library() -> None:
    """In a fresh interpreter: no third-party library and no upper layer comes along."""
    code = (
        "import json, sys\n"
        f"for name in {PURE!r}: __import__(name)\n"
        f"print(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r}))))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == []
