"""The contract every external-system adapter keeps (docs/design.md §5). Adapters raise the
``core.errors`` tree, so the core never sees a vendor's own exception types.

Here, below the worker edge, so the runtime context and the CLI's ``providers check`` know a
provider by this contract alone; the adapters themselves are ``workers.providers``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass(frozen=True)
class SubmitJob:
    """What a provider needs to start a job: plain data, not an ORM row.

    ``reference`` is the task's vendor reference (``ExternalTask.reference``), not its correlation
    id: globally unique (two clients may use the same correlation id) and stable across retries and
    replays, so it is also the Idempotency-Key."""

    reference: str
    input: Any
    #: the token-url scheme's per-task token (``service.callback_tokens``), put in the callback URL
    callback_token: str | None = None


@dataclass(frozen=True)
class JobSnapshot:
    job_id: str
    status: str  # queued | running | succeeded | failed | canceled
    outcome: Any = None
    #: the vendor's own status name, where it differs from ours (an ``http`` profile's ``[statuses]``
    #: key): shown by ``liaison providers check --job``; None where the vendor speaks ours
    vendor_status: str | None = field(default=None, compare=False)


class Provider(Protocol):
    name: str

    def submit(self, job: SubmitJob) -> str:
        """Start the job (idempotent on ``job.reference``); return the vendor's job id."""

    def cancel(self, job_id: str) -> None: ...

    def status(self, job_id: str) -> JobSnapshot: ...

    def find(self, reference: str) -> str | None:
        """The job id for a reference, to settle a submit whose answer was lost."""
