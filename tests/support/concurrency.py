"""Run the same job from two threads at once, as two beat processes would."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def twice_at_once(job: Callable[[], Any]) -> list[Any]:
    """Run ``job`` in two threads released together, as two beats would."""
    barrier, results, errors = threading.Barrier(2), [], []

    def run() -> None:
        barrier.wait()
        try:
            results.append(job())
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results
