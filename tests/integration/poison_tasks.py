"""A task that kills its worker process: loaded only by the poison test's worker (``--include``).

It runs in the same skeleton as submit, relay and cancel (``workers.tasks.attempt``): the delivery
is counted in the start transaction, then the call kills the worker.
"""

from __future__ import annotations

import os

from celery import Task, shared_task
from sqlalchemy.orm import Session

from core.retry_policy import RetryPolicy
from models.messages import OutboxMessage
from runtime.context import Liaison, liaison
from workers.tasks.attempt import Attempt, OutboxTask, run


class KillWorker(OutboxTask[None, None]):
    def prepare(self, ctx: Liaison, session: Session, row: OutboxMessage) -> Attempt[None]:
        return Attempt(None, RetryPolicy())

    def call(self, ctx: Liaison, attempt: Attempt[None]) -> None:
        os._exit(13)  # what a segfault or the OOM killer does to a prefork child


@shared_task(bind=True, name="liaison.test.kill_worker")
def kill_worker(self: Task, outbox_id: int) -> str:
    return run(self, liaison(), outbox_id, KillWorker())
