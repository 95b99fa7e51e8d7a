"""HA brokers, read off settings and an unconnected Celery app: what LIAISON_RABBITMQ_QUEUE_TYPE
declares (classic: exactly what deployments have today; quorum: every queue replicated), and what
a ``sentinel://`` broker URL needs."""

from __future__ import annotations

from typing import Any, cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.celery_app import broker_options, dead_letter_queue, work_queues
from core.queue_types import CLASSIC, QUORUM, is_sentinel_url, queue_arguments
from foundation.options import ConfigError
from foundation.settings import Settings

AMQP = "amqp://guest:guest@127.0.0.1:5672//"
SENTINEL = "sentinel://127.0.0.1:26379;sentinel://127.0.0.1:26380"


def settings(**env: str) -> Settings:
    return Settings.from_env({"CELERY_BROKER_URL": AMQP, "LIAISON_QUEUE": "jobs", **env})


def test_classic_is_the_default_and_declares_what_deployments_already_have() -> None:
    """Redeclaring a queue with other arguments fails (PRECONDITION_FAILED): the default keeps them."""
    s = settings()
    assert s.rabbitmq_queue_type == CLASSIC
    queues: list[Any] = work_queues(s)  # kombu's Queue has no stubs for queue_arguments
    assert [(q.name, q.exchange.name, q.exchange.type, q.routing_key) for q in queues] == [
        ("jobs", "jobs", "direct", "jobs"),
        ("jobs.relay", "jobs.relay", "direct", "jobs.relay"),
        ("jobs.calls", "jobs.calls", "direct", "jobs.calls"),
    ]
    assert all(
        q.queue_arguments == {"x-dead-letter-exchange": "jobs.dlx", "x-dead-letter-routing-key": "jobs.dead"}
        for q in queues
    )
    assert not cast(Any, dead_letter_queue("jobs")).queue_arguments
    assert "confirm_publish" not in broker_options(s, {})


def test_quorum_declares_every_queue_quorum_behind_topic_exchanges_with_confirms() -> None:
    s = settings(LIAISON_RABBITMQ_QUEUE_TYPE="quorum", LIAISON_MAX_DELIVERIES="4")
    quorum_queues: list[Any] = work_queues(s)
    for queue in quorum_queues:
        assert queue.exchange.type == "topic"  # Celery's native delayed delivery skips direct ones
        assert queue.queue_arguments == {
            "x-dead-letter-exchange": "jobs.dlx",
            "x-dead-letter-routing-key": "jobs.dead",
            "x-queue-type": "quorum",
            "x-delivery-limit": 5,  # one above ours: our count decides first
        }
    assert cast(Any, dead_letter_queue("jobs", QUORUM)).queue_arguments == {"x-queue-type": "quorum"}
    assert broker_options(s, {})["confirm_publish"] is True


def test_an_unknown_queue_type_is_refused() -> None:
    with pytest.raises(ConfigError, match="LIAISON_RABBITMQ_QUEUE_TYPE"):
        settings(LIAISON_RABBITMQ_QUEUE_TYPE="mirrored")


@given(st.dictionaries(st.text(min_size=1), st.text()), st.one_of(st.none(), st.integers(1, 100)))
def test_classic_adds_nothing_and_quorum_adds_only_its_type_and_limit(base: dict[str, str], limit: int | None) -> None:
    assert queue_arguments(CLASSIC, base, delivery_limit=limit) == base
    added = {"x-queue-type": "quorum"} | ({} if limit is None else {"x-delivery-limit": limit})
    assert queue_arguments(QUORUM, base, delivery_limit=limit) == base | added


def test_a_sentinel_broker_needs_the_master_name_and_hands_it_to_kombu() -> None:
    with pytest.raises(ConfigError, match="LIAISON_REDIS_SENTINEL_MASTER"):
        settings(CELERY_BROKER_URL=SENTINEL)
    s = settings(CELERY_BROKER_URL=SENTINEL, LIAISON_REDIS_SENTINEL_MASTER="mymaster")
    assert broker_options(s, {"visibility_timeout": 1})["master_name"] == "mymaster"
    assert "master_name" not in broker_options(settings(CELERY_BROKER_URL="redis://127.0.0.1:6379/0"), {})


@pytest.mark.parametrize(
    ("url", "sentinel"),
    [(SENTINEL, True), (" sentinel://h:1", True), ("redis://h:6379/0", False), (AMQP, False), ("", False)],
)
def test_is_sentinel_url(url: str, sentinel: bool) -> None:
    assert is_sentinel_url(url) is sentinel
