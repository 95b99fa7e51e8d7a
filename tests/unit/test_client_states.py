"""The typed client's task states are the server's: the ``Literal`` a type checker holds a domain
app's code to (``liaison_client.TaskState``), the OpenAPI document's task ``state`` enum and
``core.states.State`` are one list, so ``"cancelled"`` is a type error, never a silent miss."""

from __future__ import annotations

from typing import get_args

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
