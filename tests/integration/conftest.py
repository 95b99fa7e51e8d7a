"""Fixtures on real services: PostgreSQL, Redis, RabbitMQ, a real worker and the simulator."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

import simulator
from tests.integration import services
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread
from webhooks.signing import generate_secret

COMBOS = [(db, broker) for db in ("sqlite", "postgres") for broker in ("redis", "rabbitmq")]


@pytest.fixture(scope="session")
def vendor_secret() -> str:
    return generate_secret()


@pytest.fixture(scope="session")
def vendor(vendor_secret: str) -> Iterator[ServerThread]:
    app = simulator.create_app(
        {
            "SIMULATOR_WEBHOOK_SECRET": vendor_secret,
            "SIMULATOR_ACCEPT_DELAY_S": 0.1,
            "SIMULATOR_COMPLETE_DELAY_S": 0.3,
            "SIMULATOR_RETRY_BACKOFF_S": "0.1,0.2,0.4,0.8",
        }
    )
    with ServerThread(app) as server:
        yield server
        requests.post(server.url + "/_sim/reset", timeout=5)


@pytest.fixture(scope="session")
def postgres_url() -> Iterator[str]:
    url, name = services.create_postgres_database()
    yield url
    services.drop_postgres_database(name)


#: Where behaviour cannot differ by broker, two stacks still cover both databases and both brokers.
PAIRS = [("sqlite", "redis"), ("postgres", "rabbitmq")]


def _stack(
    request: pytest.FixtureRequest,
    vendor: ServerThread,
    vendor_secret: str,
    tmp_path_factory,
    extra_env: dict[str, str] | None = None,
    relay_in_process: bool = True,
    calls_in_process: bool = True,
    *,
    layout: tuple[str, str] | None = None,
    own_database: bool = False,
) -> Iterator[Stack]:
    """One stack of the parametrized pair (``layout``: a (database, broker) of its own instead of the
    fixture's param). A module uses one such module-scoped fixture: with two, pytest keeps one's last
    stack alive while the other's first runs, and two in-process workers in one process hung a worker
    start and every later one (test_vendor_capacity.py's docstring). ``own_database``: on PostgreSQL,
    a database of its own instead of the session's, for a test that counts every open task (a
    vendor's capacity), which the session's database holds other tests' of."""
    db, broker = layout or request.param
    broker_url = services.BROKERS[broker]
    services.require(broker_url, broker)
    tmp = tmp_path_factory.mktemp(f"{db}-{broker}")
    dropped = None
    if db == "sqlite":
        database_url = f"sqlite:///{tmp / 'liaison.db'}"
    elif own_database:
        database_url, dropped = services.create_postgres_database()
    else:
        database_url = request.getfixturevalue("postgres_url")
    try:
        built = build_stack(
            f"{db}-{broker}",
            database_url=database_url,
            broker_url=broker_url,
            vendor_url=vendor.url,
            vendor_secret=vendor_secret,
            tmp=tmp,
            extra_env=extra_env,
            relay_in_process=relay_in_process,
            calls_in_process=calls_in_process,
        )
        yield built
        built.close()
    finally:
        if dropped is not None:
            services.drop_postgres_database(dropped)


@pytest.fixture(scope="module", params=COMBOS, ids=lambda c: f"{c[0]}-{c[1]}")
def stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    """Every database × every broker: for the flow itself."""
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def pair_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    """Both databases and both brokers, in two stacks: for API and webhook edge cases."""
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory)


@pytest.fixture(scope="module", params=PAIRS, ids=lambda c: f"{c[0]}-{c[1]}")
def held_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    """Relay waits longer than the longest Celery countdown allowed: they are held in the database."""
    extra = {"LIAISON_MAX_COUNTDOWN_S": "1", "LIAISON_RELAY_SCHEDULE_S": "3"}
    yield from _stack(request, vendor, vendor_secret, tmp_path_factory, extra_env=extra)


@pytest.fixture(params=["sqlite", "postgres"])
def migration_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """An empty SQLite file, or a fresh PostgreSQL database (dropped afterwards): for the tests that
    upgrade step by step through old migrations with data written in between."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'm.db'}"
        return
    url, name = services.create_postgres_database()
    yield url
    services.drop_postgres_database(name)


@pytest.fixture
def vendor_down(pair_stack: Stack) -> Iterator[None]:
    """The simulator answers 503 to new jobs for the test's length (the pair stack's vendor)."""
    assert pair_stack.vendor("POST", "/_sim/config", json={"down": True}).status_code == 200
    try:
        yield
    finally:
        pair_stack.vendor("POST", "/_sim/config", json={})
