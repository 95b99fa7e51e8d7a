"""A task that kills its worker process: loaded only by the poison test's worker (``--include``)."""

from __future__ import annotations

import os

from celery import shared_task

from workers.runtime import liaison
from workers.tasks.outcomes import start_delivery


@shared_task(name="liaison.test.kill_worker")
def kill_worker(outbox_id: int) -> str:
    if not start_delivery(liaison(), outbox_id):
        return "skipped"
    os._exit(13)  # what a segfault or the OOM killer does to a prefork child
