"""What the tests that run Liaison as real processes (gunicorn, ``celery worker``) share: waiting
for a condition, a process's children from /proc, stopping a process group, and reading a metrics
exposition."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import suppress
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

#: (name, labels) -> value of every sample in an exposition
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def poll(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    diagnose: Callable[[], str] = lambda: "",
    *,
    interval: float = 0.1,
) -> Any:
    """``check()`` until it returns something truthy; fail naming ``what`` (and the diagnosis)."""
    deadline = time.monotonic() + timeout
    while not (result := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}\n{diagnose()}")
        time.sleep(interval)
    return result


def poll_while_moving(
    what: str,
    check: Callable[[], Any],
    progress: Callable[[], Any],
    stall_s: float,
    diagnose: Callable[[], str] = lambda: "",
    *,
    interval: float = 0.2,
) -> Any:
    """:func:`poll` for work that moves at the machine's pace: ``check()`` until truthy, failing
    only once ``progress()`` (a count of work done, a set of states) has not changed for ``stall_s``
    seconds. A busy machine gets as long as it keeps moving; a stuck one fails as soon as it stops."""
    last, moved = progress(), time.monotonic()
    while not (result := check()):
        now = time.monotonic()
        if (seen := progress()) != last:
            last, moved = seen, now
        elif now - moved > stall_s:
            raise AssertionError(f"{what}: nothing moved for {stall_s}s (at {last!r})\n{diagnose()}")
        time.sleep(interval)
    return result


def children(pid: int) -> set[int]:
    """Live child pids of ``pid`` (from /proc: no psutil here)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with suppress(OSError, IndexError):  # gone meanwhile
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(stat.parent.name))
    return found


def liaison_command(command: str, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``flask --app app liaison <command>`` as a process of its own (its own session, so
    :func:`stop` reaches its children), output captured."""
    flask = os.path.join(os.path.dirname(sys.executable), "flask")
    return subprocess.Popen(
        [flask, "--app", "app", "liaison", command],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


def stop(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM, timeout: float = 30) -> None:
    """Ask ``proc`` to stop and wait; if it will not (or died on its own earlier), kill what is left
    of its session: it was started in a new one, so that is exactly it and its children (gunicorn
    workers, prefork children), never anything else of this machine."""
    if proc.poll() is None:
        proc.send_signal(sig)
        with suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=timeout)
            return
    with suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)


def parse_samples(text: str) -> Samples:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
