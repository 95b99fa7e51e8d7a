"""The middle layer in-process: service, lifecycle, failures, outbox, credentials, leases and the
operator actions, on a SQLite file built by the real migrations, with a publisher that records
what it would send instead of talking to a broker. No server, no worker, no network: each test
runs in milliseconds.

A test that asks for ``published`` gets the one publish path the app has: the session hook of
:mod:`models.publishing`, installed on the test's database as ``create_app`` installs it, hands
every committed outbox row to the real :class:`runtime.outbox.Publisher` over the stub broker. So
a test reads what went out after commit; no call site publishes by hand.

The schema is migrated once per session (the same Alembic scripts production runs, which
``tests/integration/test_wiring.py`` checks against the models) and copied for each test, so every
test has a database of its own and watches only its own rows.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import pytest
from kombu.exceptions import OperationalError
from sqlalchemy import event

from models import publishing
from models.db import Database
from models.messages import OutboxMessage
from runtime.outbox import Publisher

if TYPE_CHECKING:
    from celery import Celery


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def both_databases(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Database]:
    """One contract, both stores: a fresh database for the module on SQLite and on the machine's
    PostgreSQL (``tests/integration/services.py``; that half skips where PostgreSQL is absent, and
    fails under CI, which starts it), its tables made from the models. The store's contract tests
    (``test_store_*.py``, ``test_read_models.py``) take it as their ``db``, so the fast tier runs
    the statements production runs."""
    from models.base import Base
    from tests.integration.services import create_postgres_database, drop_postgres_database

    name = None
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('store') / 'store.db'}"
    else:
        url, name = create_postgres_database()
    database = Database(url)
    Base.metadata.create_all(database.engine)
    yield database
    database.dispose()
    if name is not None:
        drop_postgres_database(name)


@pytest.fixture(scope="session")
def migrated_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty database at the migrations' head, built once."""
    from alembic import command

    from app.cli import alembic_config

    path = tmp_path_factory.mktemp("middle-template") / "template.db"
    command.upgrade(alembic_config(f"sqlite:///{path}"), "head")
    return path


@pytest.fixture
def db(migrated_template: Path, tmp_path: Path) -> Iterator[Database]:
    path = tmp_path / "liaison.db"
    shutil.copyfile(migrated_template, path)
    database = Database(f"sqlite:///{path}")

    @event.listens_for(database.engine, "connect")
    def _no_fsync(dbapi_conn: Any, _record: Any) -> None:
        # A throwaway file: durability buys nothing here, and an fsync per commit is most of a test's time.
        dbapi_conn.execute("PRAGMA synchronous=OFF")

    yield database
    database.dispose()


# --- The stub publisher: the one place these tests meet the broker -----------------------------


@dataclass
class RecordingCelery:
    """Stands in for the Celery app behind :class:`runtime.outbox.Publisher`: records each message
    instead of sending it. ``down`` makes every send fail the way a broker outage does."""

    sent: list[tuple[str, int]] = field(default_factory=list)
    down: bool = False

    def send_task(self, name: str, args: list[Any], **_: Any) -> None:
        if self.down:
            raise OperationalError("broker down (stub)")
        self.sent.append((name, args[0]))


@dataclass
class Published:
    """What would have reached the broker: the real Publisher's stamping and sweep logic, with
    :class:`RecordingCelery` where the broker would be."""

    publisher: Publisher
    broker: RecordingCelery
    #: False: the process "died" right after commit, so the hook's rows never reach the publisher.
    at_commit: bool = True

    def forget(self) -> None:
        """Drop what the set-up's commits published: the test reads what its action publishes."""
        self.broker.sent.clear()

    def after_commit(self, rows: list[OutboxMessage]) -> None:
        """What the publish hook calls with each commit's outbox rows (as ``create_app`` wires it)."""
        if self.at_commit:
            self.publisher.publish(rows)

    @property
    def ids(self) -> list[int]:
        return [outbox_id for _, outbox_id in self.broker.sent]

    @property
    def sent(self) -> list[tuple[str, int]]:
        return self.broker.sent


@pytest.fixture
def published(db: Database) -> Published:
    broker = RecordingCelery()
    published = Published(Publisher(cast("Celery", broker), db), broker)
    publishing.install(db.sessionmaker, published.after_commit)
    return published
