"""RabbitMQ queue types: the arguments a queue Liaison declares carries, by LIAISON_RABBITMQ_QUEUE_TYPE.

A classic queue lives on one RabbitMQ node; a quorum queue is replicated (Raft) over the cluster and
is RabbitMQ's only replicated type (classic mirrored queues are gone in RabbitMQ 4). The type is
fixed when a queue is first declared: declaring it again with another type fails with
PRECONDITION_FAILED, so a deploy switches type under new queue names (docs/runbook.md, "HA brokers").
"""

from __future__ import annotations

from collections.abc import Mapping

CLASSIC = "classic"
QUORUM = "quorum"
QUEUE_TYPES = (CLASSIC, QUORUM)


def queue_arguments(
    queue_type: str, arguments: Mapping[str, object] | None = None, *, delivery_limit: int | None = None
) -> dict[str, object]:
    """``arguments`` (dead-letter routes and the like), plus what the type needs.

    Classic: ``arguments`` as given, nothing added, so queues declared before this setting existed
    are declared with the very same arguments. Quorum: ``x-queue-type`` and, when given, the
    broker's ``x-delivery-limit`` (a message returned more often than this is dead-lettered by
    RabbitMQ itself; RabbitMQ 4 applies 20 when unset, 3.x none: stated, it is the same on both)."""
    if queue_type not in QUEUE_TYPES:
        raise ValueError(f"unknown queue type {queue_type!r}")
    result = dict(arguments or {})
    if queue_type == QUORUM:
        result["x-queue-type"] = QUORUM
        if delivery_limit is not None:
            result["x-delivery-limit"] = delivery_limit
    return result


def is_sentinel_url(url: str) -> bool:
    """kombu's Redis Sentinel broker: ``sentinel://host:26379;sentinel://host2:26379``."""
    return url.split(";", 1)[0].strip().startswith("sentinel://")
