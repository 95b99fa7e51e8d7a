"""The runtime context: the objects web, worker and beat share, built once by ``create_app`` (the
composition root) and read by the edges through :func:`liaison` (tasks run in the Flask app context).

It lives with the workers because it is made of their parts (providers, publisher, limiter); the
views above read it too, nothing below does."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from foundation.settings import Settings
from models.db import Database
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


def liaison() -> Liaison:
    return current_app.extensions["liaison"]
