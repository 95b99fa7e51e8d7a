"""Running a process's broker consumers (``vendor-events``, ``channel-commands``): one thread each,
until SIGTERM or Ctrl-C, or until one of them fails, which ends the whole process so that a process
manager restarts it whole (whatever it had not acked is redelivered to the process that takes over)."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from types import FrameType
from typing import Protocol

from flask import current_app

from app.observability import tracing


class Consumer(Protocol):
    should_stop: bool

    def run(self) -> None: ...


def run_until_stopped(consumers: Sequence[Consumer], names: Sequence[str], process: str) -> list[str]:
    """Run every consumer in a thread of its own (``<process>-<name>``, in the app's context); the
    names of those that ended on an error (empty after a clean stop). With
    ``OTEL_EXPORTER_OTLP_ENDPOINT`` set the process traces as ``liaison-<process>``."""
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    tracing.start(app.extensions["liaison"].settings, f"liaison-{process}")
    stopped: set[int] = set()

    def run(index: int) -> None:
        with app.app_context():
            consumers[index].run()
        stopped.add(index)  # not reached when run() raised (threading prints it)

    def stop(signum: int, frame: FrameType | None) -> None:
        for consumer in consumers:
            consumer.should_stop = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    threads = [threading.Thread(target=run, args=(i,), name=f"{process}-{name}") for i, name in enumerate(names)]
    for thread in threads:
        thread.start()
    while all(t.is_alive() for t in threads):  # until SIGTERM, or one consumer fails
        threads[0].join(timeout=0.5)
    stop(signal.SIGTERM, None)
    for thread in threads:
        thread.join()
    return [name for i, name in enumerate(names) if i not in stopped]
