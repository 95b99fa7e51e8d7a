"""The design contract lives in the repository (docs/design.md) and the repository points nowhere
outside itself: its section numbers are the ones code comments cite, and every relative link in the
docs reaches a file that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SKIP = {".git", ".venv", "var", "__pycache__", ".pytest_cache", ".hypothesis", ".schemathesis", "node_modules"}
TEXT = {".py", ".md", ".toml", ".txt", ".ini", ".cfg", ".example", ".mako", ".sh", ""}
SECTIONS = [
    "Flow",
    "Domain model",
    "HTTP API",
    "Webhooks",
    "External systems",
    "Failure handling",
    "Beat",
    "Operations",
    "Layout",
]


def _files() -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        if path.is_file() and not SKIP & set(path.relative_to(ROOT).parts) and path.suffix in TEXT:
            found.append(path)
    return found


def test_nothing_refers_to_a_design_outside_the_repository() -> None:
    outside = re.compile(r"\.\./shared|shared/DESIGN|DESIGN\.md")
    this = Path(__file__).resolve()
    hits = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in _files()
        if p.resolve() != this
        for n, line in enumerate(p.read_text(errors="replace").splitlines(), 1)
        if outside.search(line)
    ]
    assert not hits, f"points outside the repository: {hits}"


def test_design_keeps_the_section_numbers_code_cites() -> None:
    headings = re.findall(r"^## (\d+)\. (.+)$", (ROOT / "docs" / "design.md").read_text(), re.M)
    assert [int(n) for n, _ in headings] == list(range(1, 10))
    for (_, title), expected in zip(headings, SECTIONS, strict=True):
        assert title.startswith(expected), (title, expected)
    cited = {
        int(n)
        for p in _files()
        if p.suffix == ".py"
        for n in re.findall(r"(?:DESIGN|design\.md) §(\d+)", p.read_text(errors="replace"))
    }
    assert cited <= set(range(1, 10)), cited


def test_relative_links_in_the_docs_reach_files() -> None:
    for doc in (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # a web address, not a path
            assert (doc.parent / target).resolve().exists(), f"{doc.name} links to missing {target}"
