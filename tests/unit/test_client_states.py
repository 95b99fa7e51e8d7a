"""The typed client's task states are the server's: the ``Literal`` a type checker holds a domain
app's code to (``liaison_client.TaskState``), the OpenAPI document's task ``state`` enum and
``core.states.State`` are one list, so ``"cancelled"`` is a type error, never a silent miss."""

from __future__ import annotations

import json
from dataclasses import fields
from datetime import UTC, datetime
from typing import cast, get_args

import jsonschema_rs
import pytest

from app.api.openapi import document
from core.states import TERMINAL, State
from liaison_client import FINAL_STATES, STATES, Task, TaskState, UnexpectedResponse
from tests.unit.test_client import TASK, client_with


def test_the_literal_the_openapi_document_and_the_state_machine_name_the_same_states() -> None:
    documented = document()["components"]["schemas"]["Task"]["properties"]["state"]["enum"]
    assert list(get_args(TaskState)) == documented == [s.value for s in State]
    assert get_args(TaskState) == STATES
    assert {s.value for s in TERMINAL} == FINAL_STATES


def test_a_state_the_client_does_not_know_is_an_unexpected_answer() -> None:
    assert Task.from_json(TASK).state == "requested"
    with pytest.raises(TypeError, match="state is not one of"):
        Task.from_json({**TASK, "state": "cancelled"})
    client, _ = client_with(lambda r: (200, {**TASK, "state": "cancelled"}, {}))
    with pytest.raises(UnexpectedResponse, match="state is not one of"):
        client.get("order-42")


def test_the_clients_task_and_submission_are_the_documents() -> None:
    """Every member the typed client reads from a task is one the document's ``Task`` declares, and
    what its ``submit`` sends (every keyword given) is a body the document's ``SubmitTask`` takes."""
    schemas = document()["components"]["schemas"]
    assert {f.name for f in fields(Task)} - {"raw"} <= set(schemas["Task"]["properties"])
    assert TASK.keys() <= set(schemas["Task"]["properties"])
    client, adapter = client_with(lambda r: (202, TASK, {"Location": "/api/v1/tasks/order-42"}))
    client.submit(
        {"sku": "A1"},
        correlation_id="order-42",
        provider="sim",
        callback_url="https://hooks.shop.example.com/cb",
        execution_deadline=datetime(2030, 1, 1, 12, 0, 0, 250_000, tzinfo=UTC),
        on_deadline="cancel",
        heartbeat_timeout_s=600,
        priority=1,
        concurrency_key="account-7",
    )
    sent = json.loads(cast(bytes, adapter.sent[0].body))
    check = jsonschema_rs.Draft202012Validator(
        {"$ref": "#/components/schemas/SubmitTask", "components": document()["components"]}, validate_formats=True
    )
    assert check.is_valid(sent), sent
