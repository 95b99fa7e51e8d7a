"""The operators' Flask CLI: ``flask --app app liaison <group> <verb>``, one module a group (clients
and their credentials, tasks, repair, lifecycle, maintenance, and the two consumer processes). Every
command has --help; listings print a table by default and JSON with --json. The app factory
registers ``liaison``; nothing imports the command modules.

A start-up problem is one line, never a traceback: a bad setting names its variable (only ``db``
runs without the full configuration: migrations need just ``DATABASE_URL``), a database or broker
that does not answer names its host (app/startup.py), and a database whose migrations have not run
names ``liaison db upgrade``."""

from __future__ import annotations

from typing import Any

import click
from flask import current_app, has_app_context
from flask.cli import AppGroup, ScriptInfo
from sqlalchemy.exc import SQLAlchemyError

from app import startup
from app.cli import channel_commands, clients, lifecycle, maintenance, providers, repair, tasks, vendor_events
from app.observability.migrations import alembic_config, missing_schema, pending_message, pending_migrations
from runtime.context import liaison

#: Commands that need only the database URL, so they run while other settings are still wrong.
DATABASE_ONLY = ("db",)
#: Commands that report a configuration error themselves, more precisely (``providers check``
#: names the provider's variable, profile file and key even when another setting is wrong too).
OWN_CONFIG_CHECK = ("providers",)


def _broker_errors() -> tuple[type[BaseException], ...]:
    """The broker's errors, including those of its transport that kombu passes through unwrapped
    (py-amqp's refused login); none before the app is built (nothing can have used the broker).
    Not a bare ``OSError``: a command's own file error is no broker's (kombu wraps socket errors)."""
    if not has_app_context():
        return ()
    return tuple(e for e in startup.broker_errors(liaison().settings.broker_url) if not issubclass(e, OSError))


#: ``ctx.meta`` key: the command line asks only for a help text.
HELP_ONLY = "liaison.help_only"


def asks_for_help(args: list[str], help_names: list[str]) -> bool:
    """True when ``--help`` comes before any ``--`` in what follows ``liaison``: click prints the help
    text of the command it belongs to and runs nothing, so nothing need be built for it."""
    for arg in args:
        if arg == "--":
            return False
        if arg in help_names:
            return True
    return False


class LiaisonGroup(AppGroup):
    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        # Called with the subcommand's words before this group's callback runs (click's Group.invoke).
        ctx.meta[HELP_ONLY] = asks_for_help(args, ctx.help_option_names)
        return super().resolve_command(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except SQLAlchemyError as exc:
            pending = pending_migrations(liaison().db.engine) if missing_schema(exc) else None
            if pending is not None:
                startup.fail(pending_message(pending), startup.EXIT_UNAVAILABLE)
            startup.fail(startup.database_failure(liaison().settings.database_url, exc), startup.EXIT_UNAVAILABLE)
        except _broker_errors() as exc:  # evaluated only once something is raised
            startup.fail(startup.broker_failure(liaison().settings.broker_url, exc), startup.EXIT_UNAVAILABLE)


@click.group(
    "liaison",
    cls=LiaisonGroup,
    help="Operate Liaison: clients, tasks, dead letters, incidents, providers, maintenance, demo.",
)
@click.pass_context
def group(ctx: click.Context) -> None:
    """Build the app (its SQLite file and broker folder among it) for a command that runs, not for
    ``--help``: a help text has no side effects, and needs no settings."""
    if ctx.meta.get(HELP_ONLY):
        return
    if not current_app:  # as flask.cli.with_appcontext: the context lasts while the command runs
        ctx.with_resource(ctx.ensure_object(ScriptInfo).load_app().app_context())
    error = current_app.extensions.get("liaison_config_error")
    if error and ctx.invoked_subcommand not in (*DATABASE_ONLY, *OWN_CONFIG_CHECK):
        startup.fail(f"configuration error: {error}", startup.EXIT_CONFIG)


for module in (clients, repair, tasks, lifecycle, maintenance, providers, vendor_events, channel_commands):
    module.register(group)

__all__ = ["alembic_config", "group"]
