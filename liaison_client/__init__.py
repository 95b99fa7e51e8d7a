"""A typed Python client for Liaison: submit, get, list and cancel tasks, and verify callbacks.

    from liaison_client import LiaisonClient, verify_callback

It depends on ``requests`` and ``standardwebhooks`` only, and imports nothing of Liaison's server.
"""

from liaison_client.callbacks import verify_callback
from liaison_client.client import DEFAULT_TIMEOUT, LiaisonClient, __version__
from liaison_client.errors import (
    CallbackVerificationError,
    Conflict,
    Forbidden,
    LiaisonError,
    NotFound,
    ProblemError,
    TooManyRequests,
    TransportError,
    Unauthorized,
    UnexpectedResponse,
    ValidationFailed,
)
from liaison_client.models import (
    FINAL_STATES,
    STATES,
    Callback,
    Page,
    Task,
    TaskState,
    TimelineEntry,
    TimelinePage,
)

__all__ = [
    "DEFAULT_TIMEOUT",
    "FINAL_STATES",
    "STATES",
    "Callback",
    "CallbackVerificationError",
    "Conflict",
    "Forbidden",
    "LiaisonClient",
    "LiaisonError",
    "NotFound",
    "Page",
    "ProblemError",
    "Task",
    "TaskState",
    "TimelineEntry",
    "TimelinePage",
    "TooManyRequests",
    "TransportError",
    "Unauthorized",
    "UnexpectedResponse",
    "ValidationFailed",
    "__version__",
    "verify_callback",
]
