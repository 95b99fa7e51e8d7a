"""How CLI listings look: an aligned table for people, JSON (one document) for scripts."""

from __future__ import annotations

import getpass
import json
from collections.abc import Sequence
from typing import Any

import click

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


def _cell(value: Any, width: int = 60) -> str:
    text = "-" if value is None else str(value)
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 1] + "…"


def emit(rows: Sequence[dict[str, Any]], columns: Sequence[str], as_json: bool, empty: str = "nothing to show") -> None:
    if as_json:
        click.echo(json.dumps(list(rows), indent=2, default=str))
        return
    if not rows:
        click.echo(empty)
        return
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in cells)) for i, c in enumerate(columns)]
    click.echo("  ".join(c.upper().ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    for row in cells:
        click.echo("  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)).rstrip())


def emit_one(row: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(row, indent=2, default=str))
        return
    width = max(len(k) for k in row)
    for key, value in row.items():
        text = json.dumps(value, default=str) if isinstance(value, (dict, list)) else _cell(value, 200)
        click.echo(f"{key.ljust(width)}  {text}")


def echo_json(value: Any) -> None:
    """One compact JSON document on one line (a command's result, for scripts)."""
    click.echo(json.dumps(value))


def cli_actor() -> str:
    """Who the CLI's actions are recorded as: the login running it."""
    try:
        return f"cli:{getpass.getuser()}"
    except (KeyError, OSError):  # no login name (a container without a passwd entry)
        return "cli"
