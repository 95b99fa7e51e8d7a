"""The runtime context: the objects web, worker and beat share, built once by ``create_app`` (the
composition root) and read by the edges through :func:`liaison` (tasks run in the Flask app context).

It lives with the workers because it is made of their parts (providers, publisher, limiter); the
views above read it too, nothing below does."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import current_app

from foundation.settings import Settings
from models.db import Database
from workers.call_slots import CallSlots
from workers.channels import ChannelPublisher
from workers.limiter import Limiter
from workers.outbox import Publisher
from workers.providers import Provider


@dataclass
class Liaison:
    settings: Settings
    db: Database
    providers: dict[str, Provider]
    publisher: Publisher
    limiter: Limiter  # shared rate limits (workers.limiter)
    #: events to domain apps' broker channels; its connections are made on first use
    channels: ChannelPublisher = field(init=False)
    #: calls to each vendor running in this process (a calls process's share per vendor)
    call_slots: CallSlots = field(init=False, default_factory=CallSlots)

    def __post_init__(self) -> None:
        self.channels = ChannelPublisher(self.settings)


def liaison() -> Liaison:
    return current_app.extensions["liaison"]
