"""The objects web, worker and beat share, built once by ``create_app``."""

from __future__ import annotations

from dataclasses import dataclass

from flask import current_app

from app.settings import Settings
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
