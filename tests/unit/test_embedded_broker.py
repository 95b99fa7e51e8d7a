"""The embedded broker's message file appears only when whole (app/embedded_broker.py).

A consumer polls the folder while a producer writes: the test lets the consumer look at the very
moment the producer's bytes are being made, which is when kombu's own file already exists, empty.
"""

from __future__ import annotations

import json
from pathlib import Path
from queue import Empty
from typing import Any

import pytest
from kombu import Connection
from kombu.transport import filesystem
from kombu.transport.virtual import Channel as VirtualChannel

from app import embedded_broker


def _channel(folder: Path, transport: str) -> VirtualChannel:
    for sub in ("queue", "control"):
        (folder / sub).mkdir(exist_ok=True)
    conn = Connection(
        "filesystem://",
        transport=transport,
        transport_options={
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "control_folder": str(folder / "control"),
        },
    )
    return conn.default_channel


def _look_while_writing(monkeypatch: pytest.MonkeyPatch, module: Any, consumer: VirtualChannel) -> list[Any]:
    """Make ``module``'s ``dumps`` (called between creating and writing kombu's file) first let the
    consumer take whatever message it can see; returns what it saw (an exception, or Empty)."""
    seen: list[Any] = []
    real = module.dumps

    def dumps_while_consumer_looks(payload: Any) -> str:
        try:
            seen.append(consumer._get("liaison.calls"))
        except (Empty, json.JSONDecodeError) as exc:  # nothing to take, or a half-written file
            seen.append(exc)
        return real(payload)

    monkeypatch.setattr(module, "dumps", dumps_while_consumer_looks)
    return seen


def test_a_consumer_never_reads_a_message_that_is_still_being_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    producer = _channel(tmp_path, "app.embedded_broker:Transport")
    consumer = _channel(tmp_path, "app.embedded_broker:Transport")
    seen = _look_while_writing(monkeypatch, embedded_broker, consumer)

    producer._put("liaison.calls", {"body": "whole"})

    assert len(seen) == 1 and isinstance(seen[0], Empty), seen  # nothing visible mid-write
    assert consumer._get("liaison.calls") == {"body": "whole"}
    assert sorted(p.name for p in (tmp_path / "queue").iterdir()) == []  # no partial file left


def test_kombus_own_transport_lets_a_consumer_read_a_half_written_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Why app/embedded_broker.py exists: kombu's file is there, empty, before its bytes are. When
    this fails, kombu writes atomically itself and the subclass can go."""
    producer = _channel(tmp_path, "filesystem")
    consumer = _channel(tmp_path, "filesystem")
    seen = _look_while_writing(monkeypatch, filesystem, consumer)

    producer._put("liaison.calls", {"body": "whole"})

    assert len(seen) == 1 and isinstance(seen[0], json.JSONDecodeError), seen
