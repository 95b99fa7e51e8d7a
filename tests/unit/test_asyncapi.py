"""docs/asyncapi.yaml stays honest: it parses as AsyncAPI 3.0, every $ref resolves, and it names
every message type, queue, stream and routing key the code produces or consumes, by the code's own
naming functions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from flask import Flask

from app import create_app
from core.states import RELAYED, EventType
from foundation.settings import Settings
from wire import broker_messages
from wire.channel_messages import (
    COMMANDS,
    EVENT_TYPES,
    command_queue,
    command_stream,
    events_exchange,
    events_stream,
    routing_key,
)

ROOT = Path(__file__).resolve().parents[2]
DOC: dict[str, Any] = yaml.safe_load((ROOT / "docs" / "asyncapi.yaml").read_text())


def names(channel: str) -> set[str]:
    """The ``name`` of every message of a channel (each a $ref to components)."""
    out = set()
    for message in DOC["channels"][channel]["messages"].values():
        out.add(resolve(message["$ref"])["name"])
    return out


def resolve(ref: str) -> Any:
    assert ref.startswith("#/"), ref
    node: Any = DOC
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def refs(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [v for k, v in node.items() if k == "$ref"] + [r for v in node.values() for r in refs(v)]
    if isinstance(node, list):
        return [r for v in node for r in refs(v)]
    return []


def test_it_is_asyncapi_3_and_every_reference_resolves() -> None:
    assert DOC["asyncapi"].startswith("3.")
    for ref in refs(DOC):
        resolve(ref)
    for op in DOC["operations"].values():
        assert op["action"] in ("send", "receive")


def test_domain_app_channels_carry_every_command_and_event_the_code_knows() -> None:
    assert set(RELAYED.values()) | {"task.progress", "task.deadline_exceeded"} <= set(EVENT_TYPES)
    for channel in ("amqpCommands", "redisCommands"):
        assert names(channel) == set(COMMANDS), channel
    for channel in ("amqpEvents", "redisEvents"):
        assert names(channel) == set(EVENT_TYPES), channel


def test_the_addresses_are_the_codes_names() -> None:
    channels = DOC["channels"]
    assert channels["amqpCommands"]["address"] == command_queue("{prefix}", "{client}")
    assert channels["amqpEvents"]["address"] == events_exchange("{prefix}")
    assert channels["redisCommands"]["address"] == command_stream("{prefix}", "{client}")
    assert channels["redisEvents"]["address"] == events_stream("{prefix}", "{client}")
    assert "`<client>.<event type>`" in channels["amqpEvents"]["description"]
    example = routing_key("shop", "task.completed")
    assert f"`{example}`" in channels["amqpEvents"]["description"]


def test_the_amqp_providers_messages_are_all_there() -> None:
    assert names("vendorCommands") == set(broker_messages.COMMANDS)
    assert names("vendorEvents") == {t.value for t in EventType}
    reply = resolve(DOC["channels"]["vendorStatusReplies"]["messages"]["statusReply"]["$ref"])
    assert set(reply["payload"]["properties"]["status"]["enum"]) == broker_messages.STATUSES


def test_the_signed_messages_name_the_three_headers() -> None:
    headers = DOC["components"]["messageTraits"]["signed"]["headers"]["required"]
    assert headers == ["webhook-id", "webhook-timestamp", "webhook-signature"]


def test_the_app_serves_it() -> None:
    env = {"DATABASE_URL": "sqlite:///:memory:", "CELERY_BROKER_URL": "redis://127.0.0.1:1/0"}
    app: Flask = create_app(Settings.from_env(env))
    response = app.test_client().get("/api/v1/asyncapi.yaml")
    assert response.status_code == 200 and response.mimetype == "application/yaml"
    assert yaml.safe_load(response.get_data(as_text=True)) == DOC
