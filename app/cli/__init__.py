"""The operators' Flask CLI: ``flask --app app liaison <group> <verb>``. Every command has --help;
listings print a table by default and JSON with --json."""

from __future__ import annotations

from flask.cli import AppGroup

from app.cli import clients, lifecycle, maintenance, repair
from app.observability.migrations import alembic_config

group = AppGroup("liaison", help="Operate Liaison: clients, tasks, dead letters, incidents, maintenance, demo.")
for module in (clients, repair, lifecycle, maintenance):
    module.register(group)

__all__ = ["alembic_config", "group"]
