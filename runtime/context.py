"""The runtime context: the objects web, worker and beat share, built once by ``create_app`` (the
composition root) and read by the edges through :func:`liaison` (tasks run in the Flask app context).

It sits below both edges, so the views read it without importing the worker edge. The parts only
workers use (the vendors' adapters, the channel sender, the call slots) are built by the composition
root from ``workers`` and typed here by what the context promises of them: the adapter contract
(``runtime.provider``) and the two protocols below."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from flask import current_app

from foundation.settings import Settings
from models.db import Database
from runtime.limiter import Limiter
from runtime.outbox import Publisher
from runtime.provider import Provider
from wire.channel_messages import ChannelEvent


class ChannelSender(Protocol):
    """Events to domain apps' broker channels (``workers.channels.ChannelPublisher``): its
    connections are made on first use."""

    def publish(self, event: ChannelEvent, now_ts: float) -> str:
        """Send one event; returns where it went (routing key, or the stream entry id)."""


class CallSlots(Protocol):
    """Calls to each vendor running in this process (``workers.call_slots.CallSlots``: a calls
    process's share per vendor)."""

    def take(self, provider: str, limit: int) -> bool: ...

    def give_back(self, provider: str) -> None: ...

    def running(self, provider: str) -> int: ...


@dataclass
class Liaison:
    settings: Settings
    db: Database
    providers: dict[str, Provider]
    publisher: Publisher
    limiter: Limiter  # shared rate limits (runtime.limiter)
    #: events to domain apps' broker channels
    channels: ChannelSender
    #: calls to each vendor running in this process
    call_slots: CallSlots


def liaison() -> Liaison:
    return current_app.extensions["liaison"]
