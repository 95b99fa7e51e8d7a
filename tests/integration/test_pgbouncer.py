"""Liaison behind PgBouncer in ``pool_mode=transaction`` (``LIAISON_DATABASE_POOLER=pgbouncer-transaction``).

Each stack's database is reached only through a PgBouncer of the module's own (tests/integration/
pgbouncer.py) with four server connections for every web, worker and test thread: each transaction
may run on another server connection than the one before, beside other clients' transactions. The
flow and every part that takes a lock run here unchanged -- the same test functions the other
modules run on a direct connection: the whole flow (submit -> vendor -> webhook -> callback), the
per-client cap on open tasks (the admission lock), the submit and provider rate limits kept in the
database (``DatabaseLimiter``), fair dispatch's concurrency key (the releases lock), and the beat
jobs' claims and leases. Migrations run through it too (the stack builder's ``migrate``).

The last tests show what the setting is for: with psycopg's default ``prepare_threshold`` two
clients sharing a server connection collide on its prepared statement's name."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from models.db import NO_POOLER, PGBOUNCER_TRANSACTION, Database
from tests.integration import services, test_beat_safety, test_fair_dispatch, test_flow, test_limits
from tests.integration.pgbouncer import running_pgbouncer
from tests.integration.stack import Stack, build_stack
from tests.support.servers import ServerThread

pytestmark = pytest.mark.integration

BEHIND_PGBOUNCER = {
    **test_limits.LIMITS_ENV,
    "LIAISON_RATE_LIMIT_STORAGE": "database",  # the database limiter on either broker
    "LIAISON_DATABASE_POOLER": PGBOUNCER_TRANSACTION,
}


@pytest.fixture(scope="module", params=["rabbitmq", "redis"])
def bouncer_stack(
    request: pytest.FixtureRequest, vendor: ServerThread, vendor_secret: str, tmp_path_factory
) -> Iterator[Stack]:
    """A PostgreSQL database of its own, reached only through PgBouncer, on either broker."""
    broker_url = services.BROKERS[request.param]
    services.require(broker_url, request.param)
    direct_url, name = services.create_postgres_database()
    try:
        with running_pgbouncer(direct_url, pool_size=4) as bouncer_url:
            stack = build_stack(
                f"pgbouncer-{request.param}",
                database_url=bouncer_url,
                broker_url=broker_url,
                vendor_url=vendor.url,
                vendor_secret=vendor_secret,
                tmp=tmp_path_factory.mktemp(f"pgbouncer-{request.param}"),
                extra_env=BEHIND_PGBOUNCER,
            )
            try:
                yield stack
            finally:
                stack.close()
    finally:
        services.drop_postgres_database(name)


#: What psycopg's prepared statements raise behind a transaction pooler: a name another client's
#: statement holds on this server connection, or one prepared on another server connection.
PREPARED_STATEMENT_ERRORS = (psycopg.errors.DuplicatePreparedStatement, psycopg.errors.InvalidSqlStatementName)


@pytest.fixture(autouse=True)
def no_prepared_statement_error(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every statement the stack's web, worker and beat jobs ran during the test, retried ones
    included (a task retries a failed transaction, so the flow could pass over such an error),
    raised no prepared-statement error."""
    if "bouncer_stack" not in request.fixturenames:
        yield
        return
    engine = request.getfixturevalue("bouncer_stack").db.engine
    seen: list[str] = []

    def record(context: Any) -> None:
        if isinstance(context.original_exception, PREPARED_STATEMENT_ERRORS):
            seen.append(str(context.original_exception))

    event.listen(engine, "handle_error", record)
    try:
        yield
    finally:
        event.remove(engine, "handle_error", record)
    assert seen == []


def test_the_stack_reaches_postgresql_only_through_pgbouncer_and_prepares_nothing(bouncer_stack: Stack) -> None:
    url = urlsplit(bouncer_stack.db.url)
    assert url.port != urlsplit(services.POSTGRES_ADMIN_URL).port
    with bouncer_stack.db.engine.connect() as conn:
        assert conn.scalar(text("SELECT inet_server_port()")) == (urlsplit(services.POSTGRES_ADMIN_URL).port or 5432)
        driver = conn.connection.driver_connection
        assert isinstance(driver, psycopg.Connection)
        assert driver.prepare_threshold is None
    assert bouncer_stack.settings.rate_limit_storage == "database"


def test_the_whole_flow_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_flow.test_submit_to_completion_relays_signed_callbacks(bouncer_stack)


def test_a_webhook_five_times_at_once_behind_pgbouncer(bouncer_stack: Stack, vendor_secret: str) -> None:
    test_flow.test_duplicate_webhook_five_times_in_parallel_applies_once(bouncer_stack, vendor_secret)


def test_the_open_task_cap_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_limits.test_the_open_task_cap_holds_under_concurrent_submits_and_frees_as_tasks_end(bouncer_stack)


def test_the_submit_rate_limit_in_the_database_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_limits.test_a_burst_from_one_client_gets_429s_with_retry_after_and_another_client_is_unaffected(bouncer_stack)


def test_the_provider_rate_limit_in_the_database_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_limits.test_a_submit_refused_a_provider_slot_waits_without_using_an_attempt(bouncer_stack)


@pytest.mark.timeout(240)
def test_a_concurrency_key_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_fair_dispatch.test_a_concurrency_key_keeps_one_job_open_at_a_time(bouncer_stack)


def test_beat_claims_behind_pgbouncer(bouncer_stack: Stack) -> None:
    test_beat_safety.test_two_sweeps_at_once_publish_each_row_once(bouncer_stack)
    test_beat_safety.test_two_deadline_checks_at_once_escalate_each_task_once(bouncer_stack)
    test_beat_safety.test_two_runs_taking_a_missing_lease_at_once_get_it_once(bouncer_stack)
    test_beat_safety.test_a_lease_is_held_by_one_run_until_released_or_expired(bouncer_stack)


# --- what the setting is for --------------------------------------------------------------------

#: psycopg prepares a statement on its 5th run on one connection (its default ``prepare_threshold``).
RUNS = 6


@pytest.fixture
def one_server_connection() -> Iterator[str]:
    """A PgBouncer whose every client shares one server connection."""
    direct_url, name = services.create_postgres_database()
    try:
        with running_pgbouncer(direct_url, pool_size=1) as bouncer_url:
            yield bouncer_url
    finally:
        services.drop_postgres_database(name)


def _errors_of_two_clients_taking_turns(url: str, pooler: str) -> list[str]:
    """Two processes' engines (two PgBouncer clients) run the same statement in turn, one
    transaction each time; returns the errors the database raised."""
    first, second = Database(url, pooler=pooler), Database(url, pooler=pooler)
    errors: list[str] = []
    try:
        for _ in range(RUNS):
            for db in (first, second):
                try:
                    with db.transaction() as session:
                        assert session.scalar(text("SELECT count(*) FROM pg_class WHERE relname = :n"), {"n": "x"}) == 0
                except DBAPIError as exc:
                    errors.append(str(exc.orig))
    finally:
        first.dispose()
        second.dispose()
    return errors


def test_without_the_setting_clients_collide_on_prepared_statements(one_server_connection: str) -> None:
    errors = _errors_of_two_clients_taking_turns(one_server_connection, NO_POOLER)
    assert errors, "psycopg prepared nothing: the setting would be moot"
    assert all('prepared statement "_pg3_' in error for error in errors), errors


def test_with_the_setting_clients_share_server_connections_cleanly(one_server_connection: str) -> None:
    assert _errors_of_two_clients_taking_turns(one_server_connection, PGBOUNCER_TRANSACTION) == []
