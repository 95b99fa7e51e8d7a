"""Liaison's tables and the one place that changes them (``models.service``)."""

from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.audit import OperatorEvent
from models.base import Base
from models.client import ApiKey, Client
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
    "Client",
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
