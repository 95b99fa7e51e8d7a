"""Where the real services are, and how tests get a clean corner of each.

Locally a service that is down skips the tests that need it; under CI (``CI`` set) it fails them,
so a green CI run always means the services were really exercised.
"""

from __future__ import annotations

import os
import socket
import uuid
from urllib.parse import urlsplit

import psycopg
import pytest

POSTGRES_ADMIN_URL = os.environ.get("LIAISON_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("LIAISON_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
RABBITMQ_URL = os.environ.get("LIAISON_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
BROKERS = {"redis": REDIS_URL, "rabbitmq": RABBITMQ_URL}


def reachable(url: str) -> bool:
    parts = urlsplit(url)
    default_port = {"postgresql": 5432, "redis": 6379, "amqp": 5672}[parts.scheme.split("+")[0]]
    try:
        with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or default_port), timeout=2):
            return True
    except OSError:
        return False


def require(url: str, what: str) -> None:
    if reachable(url):
        return
    message = f"{what} is not reachable at {urlsplit(url).netloc}"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI must start it: see .ci/run)")
    pytest.skip(message)


def create_postgres_database() -> tuple[str, str]:
    """A fresh database for this test session; returns (SQLAlchemy URL, name)."""
    require(POSTGRES_ADMIN_URL, "PostgreSQL")
    name = f"liaison_test_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    base = POSTGRES_ADMIN_URL.rsplit("/", 1)[0].replace("postgresql://", "postgresql+psycopg://", 1)
    return f"{base}/{name}", name


def drop_postgres_database(name: str) -> None:
    with psycopg.connect(POSTGRES_ADMIN_URL, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
