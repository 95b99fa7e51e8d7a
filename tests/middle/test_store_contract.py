"""One contract, both stores (``models/store``): the same tests drive the store's verbs on SQLite and
on PostgreSQL, so the fast tier runs the statements production runs. PostgreSQL is the machine's
(a fresh database for this module, ``tests/integration/services.py``); where it is absent its half
skips (and fails under CI, which must start it).

Each move is checked against the pure core: after the verb, the row's columns read back
(``core.outbox_states.state_of``) as the state ``core.outbox_states.MOVES`` says the move leads to.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, text
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from core.outbox_states import (
    HOLDING,
    MOVES,
    NOT_DONE,
    SIGNATURES,
    SWEPT,
    Move,
    ParkedReason,
    RowState,
    state_of,
)
from models import publishing
from models.attention import OrphanEvent
from models.client import Client
from models.db import Database
from models.leases import Lease
from models.messages import OutboxKind, OutboxMessage
from models.store import POSTGRESQL, SQLITE, Store, store_of
from models.store.outbox import holding, in_states
from models.task import ExternalTask, TaskEvent

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)


@pytest.fixture(scope="module")
def db(both_databases: Database) -> Database:
    """This module's database, on SQLite and on PostgreSQL (``tests/middle/conftest.py``)."""
    return both_databases


def _task(session: Session, **columns: Any) -> ExternalTask:  # columns: e.g. a vendor_job_id
    client = Client(name=f"c-{uuid.uuid4().hex[:10]}", callback_secrets=["s"], callback_url="https://a.example/cb")
    session.add(client)
    session.flush()
    task = ExternalTask(
        correlation_id=f"t-{uuid.uuid4().hex[:10]}",
        client_id=client.id,
        input={"a": 1},
        **{"provider": "sim", **columns},
    )
    session.add(task)
    session.flush()
    return task


def _row(
    session: Session, task: ExternalTask, state: RowState = RowState.PUBLISHED, kind: str = OutboxKind.RELAY
) -> OutboxMessage:
    """A relay row of ``task`` in ``state``, its columns as the state's signature has them."""
    signature = SIGNATURES[state]
    reason = signature.parked_reason
    row = OutboxMessage(
        message_id=f"msg_{uuid.uuid4().hex}",
        kind=kind,
        task_id=task.id,
        correlation_id=task.correlation_id,
        payload={"type": "task.accepted"},
        created_at=NOW,
        done_at=NOW if signature.done else None,
        parked_reason=reason if isinstance(reason, ParkedReason) else None,
        dispatched_at=NOW if signature.dispatched else None,
        next_attempt_at=LATER if signature.due else None,
    )
    session.add(row)
    session.flush()
    return row


def _state(db: Database, outbox_id: int) -> RowState:
    """The row's state as committed, read off its columns in a transaction of its own."""
    with db.transaction() as session:
        row = session.get(OutboxMessage, outbox_id)
        assert row is not None
        return state_of(
            done=row.done_at is not None,
            parked_reason=row.parked_reason,
            dispatched=row.dispatched_at is not None,
            due=row.next_attempt_at is not None,
        )


def test_the_store_is_chosen_once_from_the_database(db: Database):
    assert db.store is (SQLITE if db.engine.dialect.name == "sqlite" else POSTGRESQL)
    with db.transaction() as session:
        assert store_of(session) is db.store
    with Session(db.engine) as session:  # a session made on the engine directly finds it too
        assert store_of(session) is db.store


# --- moves: each verb leads where the core says ------------------------------------------------------

Verb = Callable[[Store, Session, OutboxMessage], None]

MOVE_VERBS: dict[Move, tuple[RowState, Verb]] = {
    Move.HOLD_UNTIL: (RowState.PUBLISHED, lambda store, session, row: store.outbox.hold_until(row, LATER)),
    Move.RETRY_BY_COUNTDOWN: (RowState.PUBLISHED, lambda store, session, row: store.outbox.lease_start(row, LATER)),
    Move.AWAIT_EARLIER: (RowState.PUBLISHED, lambda store, session, row: store.outbox.await_earlier(row, LATER)),
    Move.RESUME: (RowState.AWAITING_EARLIER, lambda store, session, row: _published(row, store.outbox.resume)),
    Move.RECHECK: (RowState.AWAITING_EARLIER, lambda store, session, row: _stamped(session, row, store.outbox.due_now)),
    Move.PARK: (RowState.PUBLISHED, lambda store, session, row: store.outbox.park(row, "https://a.example/cb")),
    Move.UNPARK: (RowState.PARKED, lambda store, session, row: _stamped(session, row, store.outbox.unpark)),
    Move.REQUEUE: (RowState.PUBLISHED, lambda store, session, row: store.outbox.queue(row)),
    Move.PUBLISH: (RowState.HELD, lambda store, session, row: _stamped(session, row, store.outbox.due_now)),
    Move.FINISH: (RowState.PUBLISHED, lambda store, session, row: store.outbox.finish(row, NOW)),
    Move.DEAD_LETTER: (RowState.PUBLISHED, lambda store, session, row: store.outbox.finish(row, NOW)),
    Move.REPLAY: (RowState.DEAD, lambda store, session, row: store.outbox.replay(row, NOW)),
}


def _published(row: OutboxMessage, verb: Callable[[OutboxMessage], None]) -> None:
    """A held relay that runs: its message is out (the sweep's recheck, or the release's)."""
    row.dispatched_at = NOW
    verb(row)


def _stamped(session: Session, row: OutboxMessage, verb: Callable[[OutboxMessage], None]) -> None:
    """The verb, then the publication's stamp (the store's ``publish``, which the publish hook
    stamps with), as every caller of it does."""
    verb(row)
    store_of(session).outbox.publish(session, row, NOW)


@pytest.mark.parametrize("move", list(MOVE_VERBS), ids=str)
def test_each_move_leads_where_the_core_says(db: Database, move: Move):
    source, verb = MOVE_VERBS[move]
    assert source in MOVES[move].sources
    with db.transaction() as session:
        row = _row(session, _task(session), source)
        verb(db.store, session, row)
    expected = MOVES[move].target
    assert _state(db, row.id) in ({RowState.DONE} if expected is RowState.DEAD else {expected})


@pytest.mark.parametrize("kind", [OutboxKind.SUBMIT, OutboxKind.CANCEL])
def test_publish_stamps_the_row_and_its_start_lease_when_its_kind_has_one(db: Database, kind: str):
    with db.transaction() as session:
        row = _row(session, _task(session), RowState.UNSENT, kind=kind)
        session.info[publishing.START_LEASES] = {OutboxKind.SUBMIT: 90.0}
        db.store.outbox.publish(session, row, NOW)
    assert _state(db, row.id) is MOVES[Move.PUBLISH].target
    with db.transaction() as session:
        again = session.get(OutboxMessage, row.id)
        assert again is not None and again.dispatched_at == NOW
        assert again.start_lease_until == (NOW + timedelta(seconds=90) if kind == OutboxKind.SUBMIT else None)


def test_the_moves_the_table_lists_have_a_verb_here_or_a_statement_test():
    """RELEASE and UNSTAMP are statements (below); every other move is driven above."""
    assert set(MOVE_VERBS) | {Move.RELEASE, Move.UNSTAMP} == set(Move)


def test_release_queued_unparks_the_tasks_queued_submit_rows(db: Database):
    with db.transaction() as session:
        task = _task(session)
        queued = _row(session, task, RowState.QUEUED, kind=OutboxKind.SUBMIT)
        other = _row(session, _task(session), RowState.QUEUED, kind=OutboxKind.SUBMIT)
        released = db.store.outbox.release_queued(session, [task.id])
        assert [row.id for row in released] == [queued.id]
        publishing.publish_after_commit(session, released)
    assert _state(db, queued.id) is MOVES[Move.RELEASE].target
    assert _state(db, other.id) is RowState.QUEUED


def test_unstamp_clears_only_the_stamp_it_names(db: Database):
    with db.transaction() as session:
        task = _task(session)
        mine, restamped = _row(session, task), _row(session, task)
        restamped.dispatched_at = LATER  # published again since: not this stamp's to undo
    with db.transaction() as session:
        db.store.outbox.unstamp(session, [mine.id, restamped.id], NOW)
    assert _state(db, mine.id) is MOVES[Move.UNSTAMP].target
    assert _state(db, restamped.id) is RowState.PUBLISHED


# --- the predicates written from the core's sets -------------------------------------------------------


@pytest.mark.parametrize("name", ["HOLDING", "SWEPT", "NOT_DONE"])
def test_the_state_predicates_select_the_cores_sets(db: Database, name: str):
    chosen = {"HOLDING": HOLDING, "SWEPT": SWEPT, "NOT_DONE": NOT_DONE}[name]
    with db.transaction() as session:
        task = _task(session)
        rows = {state: _row(session, task, state) for state in RowState}
        found = set(
            session.scalars(
                select(OutboxMessage.id).where(OutboxMessage.task_id == task.id, in_states(OutboxMessage, chosen))
            )
        )
    assert found == {rows[state].id for state in chosen}


def test_holding_is_the_core_ordering_set(db: Database):
    with db.transaction() as session:
        task = _task(session)
        rows = {state: _row(session, task, state) for state in RowState}
        found = set(
            session.scalars(select(OutboxMessage.id).where(OutboxMessage.task_id == task.id, holding(OutboxMessage)))
        )
    assert found == {rows[state].id for state in HOLDING}


def test_flag_holding_back_flags_only_a_row_that_holds(db: Database):
    with db.transaction() as session:
        task = _task(session)
        held, parked = _row(session, task, RowState.PUBLISHED), _row(session, task, RowState.PARKED)
    with db.transaction() as session:
        assert db.store.outbox.flag_holding_back(session, held.id)
        assert not db.store.outbox.flag_holding_back(session, parked.id)
    with db.transaction() as session:
        assert session.get(OutboxMessage, held.id).holds_back  # type: ignore[union-attr]
        assert not session.get(OutboxMessage, parked.id).holds_back  # type: ignore[union-attr]


# --- statements: what each writes, on both databases ---------------------------------------------------


def _timeline(db: Database, task_id: int) -> list[str]:
    with db.transaction() as session:
        return list(session.scalars(select(TaskEvent.kind).where(TaskEvent.task_id == task_id).order_by(TaskEvent.id)))


def _new_row(task: ExternalTask) -> OutboxMessage:
    return OutboxMessage(
        message_id=f"msg_{uuid.uuid4().hex}",
        kind=OutboxKind.SUBMIT,
        task_id=task.id,
        correlation_id=task.correlation_id,
        payload={},
        created_at=NOW,
    )


def test_add_new_task_writes_the_task_its_entry_and_its_row_and_reports_a_conflict(db: Database):
    correlation_id = f"t-{uuid.uuid4().hex[:10]}"
    with db.transaction() as session:
        client = _task(session).client_id
        task = ExternalTask(correlation_id=correlation_id, client_id=client, provider="sim", input={})
        row = _new_row(task)
        assert db.store.outbox.add_new_task(session, task, row, ("task.submitted", NOW, {"a": 1}))
        assert row.id is not None and row.task_id == task.id
    assert _timeline(db, task.id) == ["task.submitted"]
    assert _state(db, row.id) is RowState.UNSENT  # no publish hook on this session: not stamped
    again = ExternalTask(correlation_id=correlation_id, client_id=client, provider="sim", input={})
    if db.store.outbox.new_task_reports_conflict:
        with db.transaction() as session:
            assert not db.store.outbox.add_new_task(session, again, _new_row(again), ("task.submitted", NOW, {}))
    else:
        with pytest.raises(IntegrityError), db.transaction() as session:
            db.store.outbox.add_new_task(session, again, _new_row(again), ("task.submitted", NOW, {}))


def test_add_row_writes_the_row_its_entry_and_the_tasks_pending_changes(db: Database):
    with db.transaction() as session:
        task = _task(session)
    with db.transaction() as session:
        task = session.get(ExternalTask, task.id)  # type: ignore[assignment]
        task.relay_seq = 7
        row = db.store.outbox.add_row(session, _new_row(task), task, (task.id, "relay.queued", NOW, {"n": 7}))
        assert row.id is not None
    assert _timeline(db, task.id) == ["relay.queued"]
    with db.transaction() as session:
        assert session.get(ExternalTask, task.id).relay_seq == 7  # type: ignore[union-attr]


def test_add_event_writes_the_entry_with_the_task_and_the_row_it_finishes(db: Database):
    with db.transaction() as session:
        task = _task(session)
        row = _row(session, task)
    with db.transaction() as session:
        task = session.get(ExternalTask, task.id)  # type: ignore[assignment]
        row = session.get(OutboxMessage, row.id)  # type: ignore[assignment]
        task.state = "submitted"
        db.store.outbox.finish_unattempted(row, NOW)
        db.store.timeline.add(session, task.id, "state.submitted", NOW, {}, (task, row))
        db.store.timeline.add(session, task.id, "event.duplicate", NOW, {"n": 1})  # a lone entry
    assert _timeline(db, task.id) == ["state.submitted", "event.duplicate"]
    assert _state(db, row.id) is RowState.DONE
    with db.transaction() as session:
        assert session.get(ExternalTask, task.id).state == "submitted"  # type: ignore[union-attr]


@pytest.mark.parametrize("kind", [OutboxKind.RELAY, OutboxKind.NOTIFY])
def test_new_row_is_unsent_or_queued(db: Database, kind: str):
    with db.transaction() as session:
        task = _task(session)
        args = (kind, f"msg_{uuid.uuid4().hex}", {"type": "x"}, NOW)
        unsent = db.store.outbox.new_row(*args, task_id=task.id, correlation_id=task.correlation_id, target="email")
        queued = db.store.outbox.new_row(
            kind, f"msg_{uuid.uuid4().hex}", {}, NOW, task_id=task.id, parked_reason=ParkedReason.QUEUED.value
        )
        session.add_all([unsent, queued])
        session.flush()
        assert (unsent.task_id, unsent.target, unsent.payload) == (task.id, "email", {"type": "x"})
    assert _state(db, unsent.id) is RowState.UNSENT  # no publish hook on this session
    assert _state(db, queued.id) is RowState.QUEUED


@pytest.mark.parametrize("with_input", [False, True])
def test_start_delivery_locks_counts_and_leases_it(db: Database, with_input: bool):
    with db.transaction() as session:
        task = _task(session)
        row, done = _row(session, task), _row(session, task, RowState.DONE)
    with db.transaction() as session:
        claimed = db.store.outbox.start_delivery(session, row.id, with_input, LATER)
        assert claimed is not None
        assert claimed[1].id == task.id
        assert (json.loads(claimed[2]) if claimed[2] is not None else None) == ({"a": 1} if with_input else None)
        assert db.store.outbox.start_delivery(session, done.id, with_input, LATER) is None
        assert db.store.outbox.start_delivery(session, 10**9, with_input, LATER) is None
    with db.transaction() as session:
        again = session.get(OutboxMessage, row.id)
        assert again is not None and (again.deliveries, again.start_lease_until) == (1, LATER)


def _slots(db: Database) -> set[str]:
    with db.transaction() as session:
        return set(session.scalars(select(Lease.name).where(Lease.name.like("contract:%"))))


def test_relay_slots_then_finish_delivered(db: Database):
    group = f"contract:{uuid.uuid4().hex[:6]}"
    with db.transaction() as session:
        task = _task(session)
        row = _row(session, task)
    with db.transaction() as session:
        row = session.get(OutboxMessage, row.id)  # type: ignore[assignment]
        groups = [(f"{group}:a", 1), (f"{group}:b", 1)]
        taken, counted = db.store.slots.take_for_delivery(
            session, row, groups, "holder-1", NOW, 60.0, "https://a.example/cb", LATER
        )
        assert taken is not None and set(taken) == {f"{group}:a:0", f"{group}:b:0"}
        assert counted is (db.store is POSTGRESQL)  # SQLite: the caller counts with the flush
        if not counted:
            db.store.outbox.count_start(row, LATER)
            row.target = "https://a.example/cb"
    with db.transaction() as session:
        after = session.get(OutboxMessage, row.id)
        assert after is not None and (after.deliveries, after.target, after.start_lease_until) == (
            1,
            "https://a.example/cb",
            LATER,
        )
    assert {f"{group}:a:0", f"{group}:b:0"} <= _slots(db)
    event = ("relay.delivered", {"status": 200})
    with db.transaction() as session:
        finished = db.store.outbox.finish_delivered(session, row.id, NOW, event, list(taken), "holder-1")
        assert finished is not None and finished.attempts == 1
    assert _state(db, row.id) is RowState.DONE
    assert _timeline(db, task.id) == ["relay.delivered"]
    assert not {f"{group}:a:0", f"{group}:b:0"} & _slots(db)
    with db.transaction() as session:  # done already: nothing more written
        assert db.store.outbox.finish_delivered(session, row.id, NOW, event, [], "holder-1") is None
    assert _timeline(db, task.id) == ["relay.delivered"]


def test_slots_one_of_each_group_or_none_and_given_back(db: Database):
    group = f"contract:{uuid.uuid4().hex[:6]}"
    groups = [(f"{group}:c", 2), (f"{group}:e", 1)]
    with db.transaction() as session:
        assert db.store.slots.take(session, groups, "h1", NOW, 60.0, [1, 0]) == [f"{group}:c:1", f"{group}:e:0"]
    with pytest.raises(LookupError), db.transaction() as session:  # the endpoint's one slot is held
        if db.store.slots.take(session, groups, "h2", NOW, 60.0, [1, 0]) is None:
            raise LookupError("no slot: the caller rolls back, and the slot it took before goes with it")
    assert _slots(db) >= {f"{group}:c:1", f"{group}:e:0"} and f"{group}:c:0" not in _slots(db)
    with db.transaction() as session:  # one group alone goes round it
        assert db.store.slots.take(session, [(f"{group}:c", 2)], "h3", NOW, 60.0, [1]) == [f"{group}:c:0"]
    with db.transaction() as session:
        db.store.slots.give_back(session, [f"{group}:c:1", f"{group}:e:0"], "h1")
        db.store.slots.give_back(session, f"{group}:c:0", "h3")
    assert not {name for name in _slots(db) if name.startswith(group)}
    later = NOW + timedelta(seconds=61)
    with db.transaction() as session:
        assert db.store.slots.take(session, groups, "h4", NOW, 60.0, [0, 0]) == [f"{group}:c:0", f"{group}:e:0"]
    with db.transaction() as session:  # a free slot first, else an expired holder's is taken over
        assert db.store.slots.take(session, groups, "h5", later, 60.0, [0, 0]) == [f"{group}:c:1", f"{group}:e:0"]


def test_claim_finished_finishes_once(db: Database):
    with db.transaction() as session:
        row = _row(session, _task(session))
    with db.transaction() as session:
        assert db.store.outbox.claim_finished(session, row.id, NOW) is not None
    with db.transaction() as session:
        assert db.store.outbox.claim_finished(session, row.id, NOW) is None
    assert _state(db, row.id) is RowState.DONE


# --- locks ---------------------------------------------------------------------------------------------


def test_locks_serialise_writers_one_way_or_the_other(db: Database):
    key = int(uuid.uuid4().int % 2**62)
    with db.transaction() as session:
        assert db.store.locks.lock(session, key) is (not db.store.locks.serialises_writers)
        assert db.store.locks.try_lock(session, key)
        if db.store.locks.serialises_writers:
            return  # SQLite: BEGIN IMMEDIATE holds every other writer off already
        with db.transaction() as other:
            assert not db.store.locks.try_lock(other, key)  # held by the first transaction
    with db.transaction() as session:
        assert db.store.locks.try_lock(session, key)  # let go at its commit


# --- the inbox -----------------------------------------------------------------------------------------


def test_record_and_find_records_once_and_finds_the_jobs_task(db: Database):
    source, job = "sim", f"job-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        task = _task(session, vendor_job_id=job)
    message = f"m-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        found = db.store.inbox.record_and_find(session, source, message, "job.accepted", job, NOW)
        assert (found.first, found.task_id) == (True, task.id) and found.task is not None
    with db.transaction() as session:
        again = db.store.inbox.record_and_find(session, source, message, "job.accepted", job, NOW)
        assert (again.first, again.task_id) == (False, task.id)
    with db.transaction() as session:
        unknown = db.store.inbox.record_and_find(session, source, f"m-{uuid.uuid4().hex}", "job.accepted", "nope", NOW)
        assert (unknown.first, unknown.task, unknown.task_id) == (True, None, None)


def test_task_or_orphan_keeps_the_event_only_when_no_task_has_the_job(db: Database):
    source, job = "sim", f"job-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        task = _task(session, vendor_job_id=job)
    with db.transaction() as session:
        found = db.store.inbox.task_or_orphan(session, source, "m-1", job, {"type": "job.accepted"}, NOW)
        assert found is not None and found.id == task.id
        lost = f"job-{uuid.uuid4().hex[:8]}"
        assert db.store.inbox.task_or_orphan(session, source, "m-2", lost, {"type": "job.accepted"}, NOW) is None
    with db.transaction() as session:
        kept = session.scalars(select(OrphanEvent.vendor_job_id).where(OrphanEvent.vendor_job_id.in_([job, lost])))
        assert list(kept) == [lost]


# --- fair dispatch -------------------------------------------------------------------------------------


def test_fair_dispatch_counts_chooses_and_releases(db: Database):
    provider = f"fd-{uuid.uuid4().hex[:8]}"
    with db.transaction() as session:
        first = _task(session, provider=provider, dispatched_at=NOW, state="accepted", concurrency_key="k")
        client_id = first.client_id
        _task(session, provider=provider, dispatched_at=NOW, state="requested")  # another client's, on its way

        def queued(n: int, key: str | None) -> int:
            task = ExternalTask(
                correlation_id=f"t-{uuid.uuid4().hex[:10]}",
                client_id=client_id,
                provider=provider,
                input={},
                dispatch_rank=NOW + timedelta(seconds=n),
                concurrency_key=key,
            )
            session.add(task)
            session.flush()
            return task.id

        held, free, later = queued(1, "k"), queued(2, None), queued(3, "other")
    dispatch = db.store.dispatch
    with db.transaction() as session:
        assert dispatch.anything_queued(session, provider, client_id)
        assert dispatch.anything_queued(session, provider, None)
        assert not dispatch.anything_queued(session, f"{provider}-none", None)
        assert dispatch.open_at_vendor(session, provider) == 2  # another client's task on its way counts too
        assert dispatch.open_with_key(session, provider, client_id, "k") == 1
        assert dispatch.key_limit(session, client_id) == 1
        [waiting] = [row for row in dispatch.clients_waiting(session, provider, None) if row.client_id == client_id]
        assert (waiting.open_jobs, waiting.on_the_way, waiting.waiting) == (1, 0, 3)
        page = dispatch.eligible(session, provider, client_id, 1, 10, [], None)
        assert [row[0] for row in page] == [free, later]  # key k is at its limit at the vendor
        assert [row[0] for row in dispatch.eligible(session, provider, client_id, 1, 10, ["other"], None)] == [free]
        after = (page[0][2], page[0][0])
        assert [row[0] for row in dispatch.eligible(session, provider, client_id, 1, 10, [], after)] == [later]
        assert (provider, client_id) in dispatch.queues(session)
        released = dispatch.release(session, [free, held], NOW)
        assert sorted(task_id for task_id, _, _ in released) == sorted([free, held])
        assert dispatch.release(session, [free], NOW) == []  # no longer queued
    with db.transaction() as session:
        assert dispatch.open_at_vendor(session, provider) == 4
        assert dispatch.anything_queued(session, provider, client_id)  # ``later`` still waits


# --- reads -------------------------------------------------------------------------------------------


def test_minutes_group_timeline_entries_alike(db: Database):
    with db.transaction() as session:
        task = _task(session)
        for at in (NOW, NOW + timedelta(seconds=30), NOW + timedelta(minutes=1, seconds=5)):
            session.add(TaskEvent(task_id=task.id, at=at, kind="state.succeeded", detail={}))
    with db.transaction() as session:
        minute = db.store.reads.minute(TaskEvent.at)
        rows = session.execute(
            select(minute, func.count()).where(TaskEvent.task_id == task.id).group_by(minute).order_by(minute)
        ).all()
    assert [n for _, n in rows] == [2, 1]


def test_table_estimate_and_statement_limits(db: Database):
    with db.transaction() as session:
        assert db.store.reads.table_estimate(session, "external_tasks") >= 0
        if db.store is SQLITE:
            assert db.store.reads.table_estimate(session, "external_tasks") == 0  # every count is exact
    with db.engine.connect() as conn, conn.begin():
        db.store.reads.limit_statements(conn, 1500)
        if db.store is POSTGRESQL:
            assert conn.execute(text("SHOW statement_timeout")).scalar() == "1500ms"
