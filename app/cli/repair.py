"""Repair: dead letters, incidents (and their notifications) and disabled callback endpoints. The
tasks retrying right now are ``tasks retrying`` (``app/cli/tasks.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import click
from flask.cli import AppGroup

from app.api.representation import dead_letter_body, endpoint_body, incident_body, mute_body
from app.cli.output import cli_actor, emit, emit_one, json_option
from core.classify import Fault
from core.urls import strip_url
from models.base import utcnow
from models.messages import DEAD_LETTER_KINDS
from models.read_models import lists
from models.read_models.lists import DeadLetterFilter
from models.store import store_of
from runtime.context import liaison
from service.incidents import IncidentKind
from service.operator_actions import (
    CALLER_FAULT_WARNING,
    Ambiguous,
    NotFoundError,
    NotReplayable,
    bulk_includes_caller_fault,
    caller_fault_matching,
    discard_one,
    enable_callback_endpoint,
    mute_notifications,
    replay_matching,
    replay_one,
    unmute_notifications,
    update_incident,
)


def register(group: AppGroup) -> None:
    for command in (dead_letters, incidents, notifications, endpoints):
        group.add_command(command)


T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


def _run(action: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    try:
        return action(liaison().db, *args, utcnow(), actor=cli_actor(), **kwargs)
    except (NotFoundError, NotReplayable, Ambiguous) as exc:
        raise click.ClickException(str(exc)) from None


def filter_options(func: F) -> F:
    for option in reversed(
        [
            click.option("--kind", type=click.Choice(DEAD_LETTER_KINDS), help="What failed."),
            click.option("--fault", type=click.Choice(["caller", "system"]), help="Whose fault it is."),
            click.option("--provider", help="The external system's name."),
            click.option(
                "--older-than",
                "older_than_s",
                type=click.IntRange(0),
                help="Last failed at least this many seconds ago.",
            ),
            click.option(
                "--newer-than",
                "newer_than_s",
                type=click.IntRange(0),
                help="Last failed at most this many seconds ago.",
            ),
        ]
    ):
        func = option(func)
    return func


@click.group("dead-letters", cls=AppGroup)
def dead_letters() -> None:
    """Work that could not be done: list, show, replay (one or by filter), discard."""


@dead_letters.command("list")
@filter_options
@click.option("--state", type=click.Choice(["open", "replayed", "discarded", "all"]), default="open", show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
def dl_list(state: str, limit: int, as_json: bool, **flt: Any) -> None:
    """List dead letters, oldest first."""
    with liaison().db.transaction() as session:
        flt_ = DeadLetterFilter(state=None if state == "all" else state, **flt)
        rows = [dead_letter_body(d) for d in lists.dead_letters(session, flt_, utcnow(), limit)]
    emit(
        rows,
        ["id", "kind", "fault", "state", "correlation_id", "provider", "attempts", "last_failed_at", "error"],
        as_json,
        "no dead letters",
    )


@dead_letters.command("show")
@click.argument("letter_id", type=int)
@json_option
def dl_show(letter_id: int, as_json: bool) -> None:
    """Everything about one dead letter, payload included."""
    with liaison().db.transaction() as session:
        letter = lists.dead_letter(session, letter_id)
        if letter is None:
            raise click.ClickException(f"no dead letter {letter_id}")
        emit_one(dead_letter_body(letter), as_json)


@dead_letters.command("replay")
@click.argument("letter_id", type=int)
def dl_replay(letter_id: int) -> None:
    """Re-drive one dead letter with its original message id."""
    letter = _run(replay_one, letter_id)
    click.echo(f"dead letter {letter.id} replayed ({letter.kind} for {letter.correlation_id or '-'})")
    if letter.fault == Fault.CALLER:
        click.echo(f"warning: dead letter {letter.id} is the caller's fault: {CALLER_FAULT_WARNING}", err=True)


@dead_letters.command("replay-many")
@filter_options
@click.option("--limit", type=click.IntRange(1), help="Replay at most this many.")
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def dl_replay_many(limit: int | None, yes: bool, **flt: Any) -> None:
    """Replay every open dead letter matching the filter, in batches, showing progress. Letters of
    the caller's fault (the vendor refused what the caller gave) are replayed only with
    ``--fault caller``, after a warning that counts them; any other filter leaves them open."""
    chosen = DeadLetterFilter(**flt)
    takes_caller = bulk_includes_caller_fault(chosen)
    with liaison().db.transaction() as session:
        caller = caller_fault_matching(session, chosen, utcnow())
    if caller and takes_caller:
        click.echo(f"warning: {caller} matching dead letters are the caller's fault: {CALLER_FAULT_WARNING}", err=True)
    elif caller:
        click.echo(
            f"{caller} matching dead letters of the caller's fault are left open (--fault caller replays them)",
            err=True,
        )
    if not yes:
        question = "Replay every open dead letter matching this filter"
        if caller and takes_caller:
            question += f", {caller} of them the caller's fault"
        click.confirm(question + "?", abort=True)
    replayed, skipped = _run(
        replay_matching,
        chosen,
        limit=limit,
        progress=lambda done, skip: click.echo(f"  replayed {done}, skipped {skip} so far", err=True),
        caller_fault=takes_caller,
    )
    left = f", left {caller} of the caller's fault" if caller and not takes_caller else ""
    click.echo(f"replayed {replayed} dead letters, skipped {skipped}{left}")


@dead_letters.command("discard")
@click.argument("letter_id", type=int)
def dl_discard(letter_id: int) -> None:
    """Close a dead letter without redoing it (kept for the record)."""
    _run(discard_one, letter_id)
    click.echo(f"dead letter {letter_id} discarded")


@click.group("incidents", cls=AppGroup)
def incidents() -> None:
    """Things a person must look at: list, assign, resolve."""


@incidents.command("list")
@click.option("--state", type=click.Choice(["open", "resolved", "all"]), default="open", show_default=True)
@click.option("--kind", help="e.g. submit_failed, relay_failed, poison_message, callback_endpoint_disabled")
@click.option("--limit", type=click.IntRange(1, 10_000), default=100, show_default=True)
@json_option
def inc_list(state: str, kind: str | None, limit: int, as_json: bool) -> None:
    """List incidents, oldest first."""
    with liaison().db.transaction() as session:
        rows = [incident_body(i) for i in lists.incidents(session, state, kind, limit)]
    emit(rows, ["id", "kind", "correlation_id", "owner", "opened_at", "resolved_at", "detail"], as_json, "no incidents")


@incidents.command("assign")
@click.argument("incident_id", type=int)
@click.argument("owner")
def inc_assign(incident_id: int, owner: str) -> None:
    """Give an incident an owner."""
    _run(update_incident, incident_id, owner=owner)
    click.echo(f"incident {incident_id} assigned to {owner}")


@incidents.command("resolve")
@click.argument("incident_id", type=int)
@click.option("--note", help="What was done; appended to the incident's detail.")
def inc_resolve(incident_id: int, note: str | None) -> None:
    """Resolve an incident (it stays in the history)."""
    _run(update_incident, incident_id, resolve=True, note=note)
    click.echo(f"incident {incident_id} resolved")


@click.group("endpoints", cls=AppGroup)
def endpoints() -> None:
    """Callback endpoints disabled after answering 410 Gone."""


@endpoints.command("list")
@json_option
def ep_list(as_json: bool) -> None:
    """Disabled endpoints (their relays wait, none is dropped)."""
    with liaison().db.transaction() as session:
        rows = [endpoint_body(e) for e in lists.disabled_endpoints(session)]
    emit(rows, ["id", "client", "url", "disabled_at", "reason"], as_json, "no disabled endpoints")


@endpoints.command("enable")
@click.argument("url")
@click.option("--client", "client_name", help="Whose endpoint (required when several clients have this URL disabled).")
def ep_enable(url: str, client_name: str | None) -> None:
    """Re-enable a client's endpoint and deliver the relays that waited for it."""
    released = _run(enable_callback_endpoint, url, client_name=client_name)
    click.echo(f"{strip_url(url)} enabled; {released} waiting relays released")


@click.group("notifications", cls=AppGroup)
def notifications() -> None:
    """Messages to people about incidents: mute or unmute an incident kind."""


@notifications.command("mutes")
@json_option
def nt_mutes(as_json: bool) -> None:
    """Muted incident kinds."""
    with liaison().db.transaction() as session:
        rows = [mute_body(m) for m in store_of(session).notices.mutes(session)]
    emit(rows, ["kind", "muted_by", "muted_at", "note"], as_json, "nothing is muted")


@notifications.command("mute")
@click.argument("kind", type=click.Choice(IncidentKind.ALL))
@click.option("--by", help="Who mutes it (kept with the mute); default: your login.")
@click.option("--note", help="Why.")
def nt_mute(kind: str, by: str, note: str | None) -> None:
    """Stop notifying an incident kind (its notices are kept, marked muted; incidents open as before)."""
    _, created = _run(mute_notifications, kind, by=by, note=note)
    click.echo(f"{kind} muted" if created else f"{kind} was muted already")


@notifications.command("unmute")
@click.argument("kind", type=click.Choice(IncidentKind.ALL))
def nt_unmute(kind: str) -> None:
    """Notify an incident kind again (from its next notice on)."""
    _run(unmute_notifications, kind)
    click.echo(f"{kind} unmuted")
