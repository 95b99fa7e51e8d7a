"""Broker queue depth and oldest-message age, read without consuming: a passive declare (AMQP and
kombu's virtual transports), the Redis list's oldest entry, or the filesystem broker's folder.
``app.observability.collectors`` reports them as gauges."""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kombu import Connection

from foundation.metrics import PUBLISHED_AT_HEADER

log = logging.getLogger(__name__)


class BrokerProbeError(Exception):
    """The broker answered, but not in a way we can read a queue depth from."""


@dataclass
class QueueStats:
    name: str
    messages: int
    oldest_age_s: float | None = None  # None: this broker cannot tell without consuming


def queue_stats(conn: Connection, queue: str) -> QueueStats:
    channel = conn.channel()  # one per queue: a passive declare of a missing queue closes it (AMQP)
    try:
        messages = _passive_count(conn, channel, queue)
        oldest = _redis_oldest_age(channel, queue) if conn.transport.driver_type == "redis" else None
    finally:
        _close_quietly(channel, conn)
    return QueueStats(queue, messages, oldest)


def _passive_count(conn: Connection, channel: Any, queue: str) -> int:
    """Ready messages, by a passive declare (AMQP and kombu's virtual transports alike).

    "Not found" (404) means zero here: Redis deletes an empty list, and a queue no worker has
    declared yet holds nothing either.
    """
    try:
        return int(channel.queue_declare(queue=queue, passive=True).message_count)
    except conn.channel_errors as exc:
        if str(getattr(exc, "reply_code", "")) == "404":
            return 0
        raise


def _redis_oldest_age(channel: Any, queue: str) -> float | None:
    """Kombu's Redis transport LPUSHes and BRPOPs: the oldest message is at index -1. Its age comes
    from the publish-time header we stamp; messages without one (older code) give no answer."""
    raw = channel.client.lindex(queue, -1)
    if raw is None:
        return 0.0  # empty: nothing is waiting
    try:
        headers = json.loads(raw).get("headers") or {}
        published = float(headers[PUBLISHED_AT_HEADER])
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return max(time.time() - published, 0.0)


def filesystem_stats(options: dict[str, Any], queue: str) -> QueueStats:
    """kombu's filesystem transport: one ``<ms>_<uuid>.<queue>.msg`` file per message."""
    folder = options.get("data_folder_in")
    if not folder:
        raise BrokerProbeError("filesystem broker without data_folder_in")
    mtimes: list[float] = []
    with os.scandir(Path(folder)) as entries:
        for entry in entries:
            if entry.name.partition(".")[2] == f"{queue}.msg":
                try:
                    mtimes.append(entry.stat().st_mtime)
                except FileNotFoundError:
                    continue  # consumed while we looked
    oldest = max(time.time() - min(mtimes), 0.0) if mtimes else 0.0
    return QueueStats(queue, len(mtimes), oldest)


def _close_quietly(channel: Any, conn: Connection) -> None:
    try:
        channel.close()
    except (*conn.connection_errors, *conn.channel_errors, OSError) as exc:
        log.debug("metrics: closing a probe channel failed: %s", type(exc).__name__)
