"""The console's dead letters: the filtered list, one letter's page (payload, error, operator
history), and its replay and discard; replaying every match of a filter, a bounded batch a click."""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for
from werkzeug.wrappers import Response as BaseResponse

from app.api.admin_params import CHOICES, dead_letter_filter
from app.console import access
from app.console.blueprint import ID, PAGE, act, asking, bp, confirm, stored_json
from app.errors import NotFound, ValidationFailed
from app.session import db_session
from core.classify import Fault
from models.base import utcnow
from models.messages import DeadLetter
from models.read_models import console_pages, lists
from runtime.context import liaison
from service.operator_actions import (
    CALLER_FAULT_WARNING,
    bulk_includes_caller_fault,
    caller_fault_matching,
    discard_one,
    replay_matching,
    replay_one,
)

AGES = [("", "any"), ("300", "5 minutes"), ("3600", "1 hour"), ("86400", "1 day"), ("604800", "7 days")]
#: the most one replay-matching form replays (the CLI and the admin API take larger batches)
REPLAY_MATCHING_LIMIT = 1000


def _letter_filter() -> tuple[lists.DeadLetterFilter, dict[str, str]]:
    args = {k: v for k, v in request.values.items() if v and k != access.CSRF_FIELD}
    return dead_letter_filter(args), args


@bp.get("/dead-letters")
def dead_letters() -> str:
    flt, args = _letter_filter()
    after = None
    if request.args.get("after_id"):
        try:
            after = int(request.args["after_id"])
        except ValueError:
            raise ValidationFailed("after_id: a whole number") from None
    items = lists.dead_letters(db_session(), flt, utcnow(), PAGE, after)
    next_args: dict[str, Any] = {k: v for k, v in args.items() if k != "after_id"}
    next_url = (
        url_for("console.dead_letters", **{**next_args, "after_id": str(items[-1].id)}) if len(items) == PAGE else None
    )
    return render_template(
        "console/dead_letters.html",
        items=items,
        letter_tasks=console_pages.letter_tasks(db_session(), items),
        args=args,
        choices=CHOICES,
        ages=AGES,
        providers=sorted(liaison().settings.providers),
        next_url=next_url,
    )


def _letter(letter_id: int) -> DeadLetter:
    letter = console_pages.dead_letter_without_payload(db_session(), letter_id)
    if letter is None:
        raise NotFound(f"no dead letter {letter_id}")
    return letter


@bp.get(f"/dead-letters/<{ID}:letter_id>")
def dead_letter(letter_id: int) -> str:
    page = console_pages.dead_letter_page(db_session(), letter_id)
    if page is None:
        raise NotFound(f"no dead letter {letter_id}")
    return render_template(
        "console/dead_letter.html",
        letter=page.letter,
        task_id=page.task_id,
        payload_text=stored_json(page.payload_text),
        history=page.history,
    )


@bp.route(f"/dead-letters/<{ID}:letter_id>/replay", methods=["GET", "POST"])
def dead_letter_replay(letter_id: int) -> str | BaseResponse:
    letter = _letter(letter_id)
    if asking():
        caution = None
        if letter.fault == Fault.CALLER:
            said = f" It answered: {letter.answer}" if letter.answer else ""
            caution = f"This letter is the caller's fault: {CALLER_FAULT_WARNING}.{said}"
        return confirm(
            "Replay dead letter",
            f"Replay dead letter {letter.id} ({letter.kind}, {letter.fault}) for {letter.correlation_id or '-'}?",
            caution,
        )
    act(replay_one, letter_id)
    return redirect(url_for("console.dead_letter", letter_id=letter_id, done="replayed"))


@bp.route(f"/dead-letters/<{ID}:letter_id>/discard", methods=["GET", "POST"])
def dead_letter_discard(letter_id: int) -> str | BaseResponse:
    letter = _letter(letter_id)
    if asking():
        return confirm(
            "Discard dead letter",
            f"Discard dead letter {letter.id} ({letter.kind} for {letter.correlation_id or '-'}) without redoing it?",
        )
    act(discard_one, letter_id)
    return redirect(url_for("console.dead_letter", letter_id=letter_id, done="discarded"))


@bp.route("/dead-letters/replay", methods=["GET", "POST"])
def dead_letters_replay() -> str | BaseResponse:
    flt, args = _letter_filter()
    takes_caller = bulk_includes_caller_fault(flt)
    if asking():
        now = utcnow()
        matching = console_pages.open_matching(db_session(), flt, now)
        caller = caller_fault_matching(db_session(), flt, now)
        shown = ", ".join(f"{k}={v}" for k, v in sorted(args.items()) if k != "state") or "no filter"
        if caller and takes_caller:
            caution = f"{caller} of them are the caller's fault: {CALLER_FAULT_WARNING}."
        elif caller:
            caution = f"{caller} of them are the caller's fault and are left open: filter fault=caller to replay them."
            matching -= caller
        else:
            caution = None
        return confirm(
            "Replay matching dead letters",
            f"Replay every open dead letter matching {shown}: {matching} now (at most {REPLAY_MATCHING_LIMIT})?",
            caution,
            **args,
        )
    replayed, skipped = act(
        lambda db, now, actor: replay_matching(
            db, flt, now, REPLAY_MATCHING_LIMIT, actor=actor, caller_fault=takes_caller
        )
    )
    return redirect(url_for("console.dead_letters", done="replayed_many", replayed=replayed, skipped=skipped))
