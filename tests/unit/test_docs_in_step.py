"""Docs that must not drift from the code: every setting is documented, every metric the docs name
exists, the error trees' docstrings list every error class. (That every beat job names a registered
task needs the Celery app: tests/integration/test_wiring.py.)"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

import pytest

import app.errors
import core.errors
import foundation.settings as settings
from app import settings_docs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("path", "render", "flag"),
    [
        (".env.example", settings_docs.render_env_example, "--env-example"),
        ("docs/settings.md", settings_docs.render_markdown, "--markdown"),
    ],
)
def test_settings_files_are_what_the_table_generates(path: str, render: Callable[[], str], flag: str) -> None:
    """Names, defaults and docs of every setting come from foundation/setting_table.py's table, nowhere else."""
    assert (ROOT / path).read_text() == render(), f"regenerate: python -m app.settings_docs {flag} > {path}"


def test_generated_settings_files_name_every_setting_with_its_default() -> None:
    """The generator itself leaves nothing out: each variable appears with its default (or demo) value."""
    env_example, markdown = settings_docs.render_env_example(), settings_docs.render_markdown()
    for option in (*settings.OPTIONS, *settings.PROVIDER_OPTIONS):
        name = option.env.replace("<NAME>", settings_docs.EXAMPLE_PROVIDER)
        shown = option.example if option.example is not None else ("" if option.derive else option.default)
        assert f"# {name}={shown} " in env_example
        assert f"| `{option.env}` |" in markdown
        assert not option.default or option.default in markdown.replace("&lt;", "<").replace("&gt;", ">")


def test_settings_page_is_linked_from_the_readme_and_architecture() -> None:
    for doc in ("README.md", "docs/architecture.md"):
        assert "settings.md" in (ROOT / doc).read_text(), doc


def test_every_metric_named_in_the_docs_exists() -> None:
    code = "".join(
        p.read_text() for p in [*(ROOT / "app" / "observability").glob("*.py"), ROOT / "foundation" / "metrics.py"]
    )
    defined = set(re.findall(r'"(liaison_[a-z_]+)"', code))
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        named = set(re.findall(r"\b(liaison_[a-z_]+)", doc.read_text())) - {"liaison_client"}  # the package
        # histograms and counters are exposed with suffixes the client library adds
        missing = sorted(n for n in named if re.sub(r"_(bucket|count|sum)$", "", n) not in defined)
        assert not missing, f"{doc.name} names metrics the code does not define: {missing}"


def _tree_names(module: object, root: type) -> set[str]:
    return {name for name, cls in inspect.getmembers(module, inspect.isclass) if issubclass(cls, root)}


def test_error_trees_in_docstrings_name_every_class() -> None:
    for module, root in ((app.errors, app.errors.ApiError), (core.errors, core.errors.CallError)):
        doc = module.__doc__ or ""
        missing = sorted(n for n in _tree_names(module, root) if n != root.__name__ and n not in doc)
        assert not missing, f"{module.__name__} docstring misses {missing}"
