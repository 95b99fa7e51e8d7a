"""Liaison's tables, the engine and sessions (``models.db``), and the publish-after-commit hook
(``models.publishing``).

Import the mapped classes from here or from their modules. The use cases that change the tables
live one floor up, in ``service``; a table's module here keeps its table and its own rows'
primitives (beat's heartbeat), or only what is read off its rows, its statements being the store's
(a lease's take and give-back, a notice's record, an endpoint's health).
``models.store`` is the store: the statements behind domain verbs, a PostgreSQL and a SQLite class
per table family, chosen once when the database is built (``models.db.Database.store``).
``models.read_models`` are the read models: what the views, the CLI and the gauges read, one module
per view, standing on the tables and the store (nothing else here imports them).
This package imports only ``core`` and SQLAlchemy.
"""

from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.audit import OperatorEvent
from models.base import Base
from models.callback_tokens import CallbackToken
from models.client import ApiKey, Client
from models.console_sessions import ConsoleSession
from models.endpoint_health import EndpointHealth
from models.heartbeats import BeatHeartbeat
from models.leases import Lease
from models.messages import DeadLetter, OutboxMessage, ProcessedMessage
from models.notifications import Notification, NotificationMute
from models.rate_limits import RateLimitState
from models.task import ExternalTask, TaskEvent

__all__ = [
    "ApiKey",
    "Base",
    "BeatHeartbeat",
    "CallbackEndpoint",
    "CallbackToken",
    "Client",
    "ConsoleSession",
    "DeadLetter",
    "EndpointHealth",
    "ExternalTask",
    "Incident",
    "Lease",
    "Notification",
    "NotificationMute",
    "OperatorEvent",
    "OrphanEvent",
    "OutboxMessage",
    "ProcessedMessage",
    "RateLimitState",
    "TaskEvent",
]
