"""The error tree for calls to other systems (providers and domain apps).

    CallError
    ├── TransientError   retry later (connect errors, 408/425/429/5xx); may carry Retry-After
    ├── PermanentError   never retry (other 4xx, a response that breaks the contract)
    └── UncertainError   the request may have been acted on (timeout after sending): settle first

Tasks raise these; ``workers.tasks.base`` maps them onto Celery's retry or onto dead-lettering.
"""

from __future__ import annotations


class CallError(Exception):
    """Root: a call to another system did not succeed. ``str()`` never carries a secret."""

    def __init__(self, message: str, *, status: int | None = None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class TransientError(CallError):
    pass


class PermanentError(CallError):
    pass


class UncertainError(CallError):
    pass
