"""The store's attention family (``models/store/attention.py``: one class, the same statements on
both databases) on SQLite and PostgreSQL: a bulk replay's batches of dead letters, incidents by
their open key, orphans left unbound, disabled callback endpoints and the relays parked on them,
the clients operators name. PostgreSQL is the machine's (a fresh database for this module); where
it is absent its half skips (and fails under CI).
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Select
from sqlalchemy.orm import Session

from core.classify import Fault
from core.outbox_states import ParkedReason
from models.attention import CallbackEndpoint, Incident, OrphanEvent
from models.client import Client
from models.db import Database
from models.messages import DeadLetter, OutboxKind
from models.store import POSTGRESQL, SQLITE
from models.task import ExternalTask
from tests.middle.builders import NOW, add_client, add_outbox_row, add_task


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


@dataclass(frozen=True)
class Provider:
    """A letter scope, as ``service.queries.DeadLetterFilter`` is one: open letters of a provider."""

    provider: str

    def apply(self, query: Select[Any], now: datetime) -> Select[Any]:
        return query.where(DeadLetter.state == "open", DeadLetter.provider == self.provider)


def _letter(session: Session, provider: str, fault: str = Fault.SYSTEM, state: str = "open") -> DeadLetter:
    letter = DeadLetter(
        kind=OutboxKind.RELAY,
        message_id=uuid.uuid4().hex,
        provider=provider,
        error="e",
        fault=fault,
        state=state,
        first_failed_at=NOW,
        last_failed_at=NOW,
    )
    session.add(letter)
    session.flush()
    return letter


def test_one_class_serves_both_stores():
    assert POSTGRESQL.attention.__class__ is SQLITE.attention.__class__


# --- dead letters ---------------------------------------------------------------------------------


def test_letters_to_replay_pages_the_scope_in_id_order(db: Database):
    provider = f"p-{uuid.uuid4().hex[:6]}"
    with db.transaction() as session:
        system = [_letter(session, provider).id for _ in range(3)]
        caller = _letter(session, provider, Fault.CALLER).id
        _letter(session, provider, state="replayed")
        _letter(session, "elsewhere")
    scope = Provider(provider)
    with db.transaction() as session:
        attention = db.store.attention
        first = [letter.id for letter in attention.letters_to_replay(session, scope, NOW, 0, 2)]
        rest = [letter.id for letter in attention.letters_to_replay(session, scope, NOW, first[-1], 10)]
        assert first + rest == [*system, caller]
        without = attention.letters_to_replay(session, scope, NOW, 0, 10, caller_fault=False)
        assert [letter.id for letter in without] == system
        assert attention.count_caller_fault(session, scope, NOW) == 1


def test_letters_to_replay_skips_the_letters_another_transaction_holds(db: Database):
    if db.is_sqlite:
        pytest.skip("SQLite serialises writers (BEGIN IMMEDIATE): a second batch waits, it skips nothing")
    provider = f"p-{uuid.uuid4().hex[:6]}"
    with db.transaction() as session:
        held, free = _letter(session, provider).id, _letter(session, provider).id
    with db.transaction() as holder:
        assert holder.get(DeadLetter, held, with_for_update=True) is not None
        with db.transaction() as session:
            found = db.store.attention.letters_to_replay(session, Provider(provider), NOW, 0, 10)
            assert [letter.id for letter in found] == [free]


# --- incidents ------------------------------------------------------------------------------------


def _incident(key: str) -> Incident:
    return Incident(kind="k", subject="s", open_key=key, detail="d", opened_at=NOW)


def test_an_incident_is_found_by_its_open_key_while_open(db: Database):
    key = uuid.uuid4().hex
    with db.transaction() as session:
        assert db.store.attention.open_incident(session, key) is None
        added = db.store.attention.add_incident(session, _incident(key))
    with db.transaction() as session:
        found = db.store.attention.open_incident(session, key)
        assert found is not None and found.id == added.id
        found.open_key, found.resolved_at = None, NOW
    with db.transaction() as session:
        assert db.store.attention.open_incident(session, key) is None


def test_add_incident_answers_the_row_that_holds_its_open_key(db: Database):
    key = uuid.uuid4().hex
    with db.transaction() as session:
        first = db.store.attention.add_incident(session, _incident(key))
    with db.transaction() as session:
        loser = _incident(key)
        winner = db.store.attention.add_incident(session, loser)  # its savepoint rolled back alone
        assert winner is not loser and winner.id == first.id
        session.add(_incident(uuid.uuid4().hex))  # the transaction goes on
    with db.transaction() as session:
        assert session.query(Incident).filter(Incident.open_key == key).count() == 1


def test_concurrent_openers_meet_at_the_open_key(db: Database):
    if db.is_sqlite:
        pytest.skip("SQLite serialises writers: the second opener sees the first's row before it adds")
    key, barrier, answers = uuid.uuid4().hex, threading.Barrier(2), []

    def open_one() -> None:
        with db.transaction() as session:
            assert db.store.attention.open_incident(session, key) is None
            barrier.wait()
            row = db.store.attention.add_incident(session, _incident(key))
            answers.append(row.id)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 2 and answers[0] == answers[1]


# --- orphans --------------------------------------------------------------------------------------


def test_stale_orphans_are_the_open_unflagged_ones_past_the_window_and_flagging_takes_them_off(db: Database):
    source = f"s-{uuid.uuid4().hex[:6]}"

    def orphan(session: Session, received: datetime, **columns: Any) -> int:
        row = OrphanEvent(
            source=source,
            message_id=uuid.uuid4().hex,
            vendor_job_id="job-1",
            payload={"type": "job.done", "outcome": {"big": 1}},
            received_at=received,
            **columns,
        )
        session.add(row)
        session.flush()
        return row.id

    with db.transaction() as session:
        older = orphan(session, NOW - timedelta(minutes=20))
        old = orphan(session, NOW - timedelta(minutes=10))
        orphan(session, NOW - timedelta(minutes=1))  # within the window
        orphan(session, NOW - timedelta(minutes=30), state="discarded")
        orphan(session, NOW - timedelta(minutes=30), flagged_at=NOW)
    with db.transaction() as session:
        found = [tuple(row) for row in db.store.attention.stale_orphans(session, NOW, 300, 1000) if row[1] == source]
        assert found == [(older, source, "job-1", "job.done"), (old, source, "job-1", "job.done")]
        db.store.attention.flag_orphans(session, [older, old], NOW)
        db.store.attention.flag_orphans(session, [], NOW)
    with db.transaction() as session:
        assert [row for row in db.store.attention.stale_orphans(session, NOW, 300, 1000) if row[1] == source] == []
        flagged = session.get(OrphanEvent, older)
        assert flagged is not None and flagged.flagged_at == NOW


# --- callback endpoints ---------------------------------------------------------------------------


def _endpoint(session: Session, client: Client, url: str, disabled: bool = True) -> CallbackEndpoint:
    shown = url.split("?")[0]
    row = CallbackEndpoint(
        client_id=client.id,
        url_hash=hashlib.sha256(url.encode()).hexdigest(),
        url=shown,
        disabled_at=NOW if disabled else None,
    )
    session.add(row)
    session.flush()
    return row


def test_disabled_endpoints_are_found_per_client_and_stripped_url(db: Database):
    shown = f"https://{uuid.uuid4().hex[:8]}.example/cb"
    with db.transaction() as session:
        client, other, third = add_client(session), add_client(session), add_client(session)
        one = _endpoint(session, client, f"{shown}?a=1")
        two = _endpoint(session, client, f"{shown}?a=2")
        _endpoint(session, client, f"{shown}?a=3", disabled=False)
        _endpoint(session, other, shown)
        _endpoint(session, third, shown, disabled=False)
    with db.transaction() as session:
        attention = db.store.attention
        assert attention.endpoint(session, client.id, f"{shown}?a=1") is None  # found by its hash, not its URL
        found = attention.endpoint(session, client.id, one.url_hash)
        assert found is not None and found.id == one.id
        assert attention.disabled_count(session, client.id) == 2
        assert {e.id for e in attention.disabled_endpoints(session, client.id, shown)} == {one.id, two.id}
        assert set(attention.disabled_endpoint_ids(session, client.id, shown)) == {one.id, two.id}
        assert attention.clients_disabling(session, shown) == {client.id, other.id}
        assert attention.clients_disabling(session, "https://nowhere.example/") == set()


def test_parked_relays_are_the_clients_not_done_relays_parked_on_the_url(db: Database):
    shown = f"https://{uuid.uuid4().hex[:8]}.example/cb"
    with db.transaction() as session:
        client, other = add_client(session), add_client(session)
        task, others = add_task(session, client), add_task(session, other)

        def relay(of: ExternalTask, **columns: Any) -> int:
            parked = {"target": shown, "parked_reason": ParkedReason.ENDPOINT_GONE.value}
            return add_outbox_row(session, of, **{**parked, **columns}).id

        parked = [relay(task), relay(task)]
        relay(task, done_at=NOW)
        relay(task, parked_reason=None)
        relay(others)
    with db.transaction() as session:
        assert [row.id for row in db.store.attention.parked_relays(session, client.id, shown)] == parked


# --- the clients operators name -------------------------------------------------------------------


def test_clients_are_found_by_name_and_named_sorted(db: Database):
    with db.transaction() as session:
        b, a = add_client(session), add_client(session)
        a.name, b.name = f"a-{uuid.uuid4().hex[:8]}", f"b-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        found = db.store.attention.client_named(session, a.name)
        assert found is not None and found.id == a.id
        assert db.store.attention.client_named(session, "nobody") is None
        assert db.store.attention.client_names(session, {b.id, a.id}) == [a.name, b.name]
