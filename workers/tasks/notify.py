"""liaison.notify: send one message to people (an email, or a chat post) from its outbox row.

The message was rendered when beat dispatched it (``service.notices``): the row carries all
the task sends, so a retry sends the same words. It is retried like any outbound call, and a
message that cannot be sent is dead-lettered with a ``notification_failed`` incident, which is
never itself notified.
"""

from __future__ import annotations

from typing import Any

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.classify import Fault
from core.errors import CallError, PermanentError
from core.notifications import CHAT, EMAIL
from models.base import utcnow
from models.messages import OutboxMessage
from runtime.context import Liaison, liaison
from service import transitions
from workers.notifiers import email, post_chat, send_email
from workers.policies import notify_policy
from workers.tasks.attempt import Attempt, OutboxTask, run


@shared_task(bind=True, name="liaison.notify", max_retries=None)
def notify(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, Notify())


class Notify(OutboxTask[dict[str, Any], None]):
    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[dict[str, Any]] | str:
        channel = row.payload.get("channel")
        settings = ctx.settings
        configured = {
            EMAIL: bool(settings.smtp_host and settings.notify_email_to),
            CHAT: bool(settings.notify_chat_url),
        }
        if not configured.get(str(channel)):
            # Dispatched while the channel was configured, and it is no longer: nothing can be sent
            # now, and a retry would not change that. Kept as a dead letter, replayable once it is.
            return Attempt(
                dict(row.payload),
                notify_policy(ctx.settings),
                refused=PermanentError(f"notification channel {channel!r} is not configured"),
                refused_fault=Fault.SYSTEM,
            )
        return Attempt(dict(row.payload), notify_policy(ctx.settings))

    def call(self, ctx: Liaison, attempt: Attempt[dict[str, Any]]) -> None:
        work = attempt.work
        if work["channel"] == CHAT:
            post_chat(ctx.settings, work["body"])
        else:
            send_email(ctx.settings, email(ctx.settings, work["key"], work["subject"], work["text"]))

    def record(
        self, ctx: Liaison, session: Session, row: OutboxMessage, attempt: Attempt[dict[str, Any]], result: None
    ) -> str:
        transitions.mark_done(session, row, utcnow(), "notify.sent")
        return "sent"

    def fault(self, attempt: Attempt[dict[str, Any]], exc: CallError) -> str:
        return Fault.SYSTEM  # the operator's own mail server or chat: never a tenant's fault

    def fallback(self, ctx: Liaison, outbox_id: int) -> Attempt[None]:
        return Attempt(None, notify_policy(ctx.settings))
