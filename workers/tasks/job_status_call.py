"""What a probe and a check share: a vendor ``status`` call about one task, its outbox row claimed
with the task's lock (its payload left unread: a status answer needs none of the task's input)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from models.messages import OutboxMessage
from models.task import ExternalTask
from runtime.context import Liaison
from runtime.provider import JobSnapshot
from service import claims
from service.probes import lock_task_without_payload
from workers.tasks.vendor_call import VendorCall


class JobStatusCall(VendorCall[str, JobSnapshot]):
    def __init__(self) -> None:
        self.task: ExternalTask | None = None  # locked with the row, at each stage

    def claim(self, ctx: Liaison, session: Session, outbox_id: int, stage: str) -> OutboxMessage | None:
        row = claims.claim_outbox(session, outbox_id)
        if row is None:
            return None
        assert row.task_id is not None  # a probe's or a check's row always names its task
        self.task = lock_task_without_payload(session, row.task_id)
        self.traceparent = self.task.traceparent
        return row
