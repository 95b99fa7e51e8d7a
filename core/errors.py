"""The error tree for calls to other systems (providers and domain apps).

    CallError
    ├── TransientError   retry later (connect errors, 408/425/429/5xx); may carry Retry-After
    ├── PermanentError   never retry (other 4xx, a response that breaks the contract)
    │   └── OutboundRefused  the outbound guard refused a client-supplied URL: nothing was sent
    └── UncertainError   the request may have been acted on (timeout after sending): settle first

Tasks raise these; ``workers.tasks.outcomes`` maps them onto Celery's retry or onto dead-lettering,
labelled with ``fault()``.
"""

from __future__ import annotations

from typing import ClassVar

from core.classify import Failure, Kind, classify_failure, fault_of


class CallError(Exception):
    """Root: a call to another system did not succeed. ``str()`` never carries a secret."""

    kind: ClassVar[Kind]

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        failure: Failure | None = None,
        answer: str | None = None,
    ) -> None:
        super().__init__(message)
        #: the other side's answer with its status, bounded and redacted (``core.reasons.answer_excerpt``):
        #: for the dead letter only, never in ``str()`` (which reaches logs and ``task.last_error``)
        self.answer = answer
        self.status = status
        self.retry_after_s = retry_after_s
        self.failure = failure  # what went wrong when no HTTP status says it

    @property
    def unanswered(self) -> bool:
        """The request went out and no answer came back (uncertain, or a transport failure that
        happened after sending, such as an attempt cut off by its time limit): the other side may
        have acted on it."""
        failed_after_sending = self.failure is not None and classify_failure(self.failure) is Kind.UNCERTAIN
        return self.kind is Kind.UNCERTAIN or failed_after_sending

    def fault(self, *, callers_endpoint: bool = False) -> str:
        """``caller`` or ``system``, for the dead letter: see ``core.classify.fault_of``."""
        return fault_of(self.kind, self.status, self.failure, callers_endpoint=callers_endpoint)


class TransientError(CallError):
    kind = Kind.TRANSIENT


class PermanentError(CallError):
    kind = Kind.PERMANENT


class UncertainError(CallError):
    kind = Kind.UNCERTAIN


class OutboundRefused(PermanentError):
    """The outbound guard refused the URL (``core.outbound_guard``): nothing was sent. Its message
    is the guard's fixed reason, naming no host, address or port."""
