"""The pure parts of the console's task page (``models.read_models.task_page``): where a task's callbacks go,
whose error its last error is, and which outbox rows are retrying."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from models.messages import OutboxKind, OutboxMessage
from models.read_models.task_page import CallbackTarget, callback_target, error_source, is_failing

LATER = datetime(2030, 1, 1, tzinfo=UTC)


def test_callbacks_go_to_the_tasks_url_else_the_clients_default_stripped_of_secrets() -> None:
    own = callback_target("https://u:p@own.example/cb?token=t#f", "https://client.example/cb", None)
    assert own == CallbackTarget("https://own.example/cb", "task", None)
    default = callback_target(None, "https://client.example/cb?key=k", "amqp")
    assert default == CallbackTarget("https://client.example/cb", "client", "amqp")
    assert callback_target(None, None, "redis") == CallbackTarget(None, None, "redis")


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        (OutboxKind.RELAY, "callback"),
        (OutboxKind.CHANNEL, "callback"),
        (OutboxKind.SUBMIT, "vendor"),
        (OutboxKind.CANCEL, "vendor"),
        (OutboxKind.PROBE, "vendor"),
        (None, None),
    ],
)
def test_a_last_error_is_the_callbacks_or_the_vendors(kind: str | None, source: str | None) -> None:
    assert error_source(kind) == source


def test_a_row_is_retrying_once_an_attempt_failed_and_another_is_due() -> None:
    def row(**fields: object) -> OutboxMessage:
        values: dict[str, object] = {"attempts": 1, "next_attempt_at": LATER, "done_at": None, "parked_reason": None}
        return OutboxMessage(kind=OutboxKind.RELAY, **{**values, **fields})

    assert is_failing(row())
    assert not is_failing(row(attempts=0))  # waiting its turn (a paused endpoint, a slot), not failing
    assert not is_failing(row(next_attempt_at=None))
    assert not is_failing(row(done_at=LATER))
    assert not is_failing(row(parked_reason="awaiting_earlier"))  # held for an earlier callback
