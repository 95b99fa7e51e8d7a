"""Processes for the end-to-end benchmark: the Procfile's command lines, starting and stopping
process trees with their logs kept, and what /proc says about them (CPU seconds, peak RSS).

Pure helpers (``procfile``, ``percentile``, ``parse_stat``, ``parse_status_kb``) are unit-tested in
tests/unit/test_bench_helpers.py; the rest reads /proc and starts processes.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def procfile(text: str) -> dict[str, str]:
    """``name: command`` lines of a Procfile (comments and blank lines skipped)."""
    entries = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, sep, command = line.partition(":")
        if sep:
            entries[name.strip()] = command.strip()
    return entries


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0–100) by the nearest-rank method; NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def parse_stat(text: str) -> tuple[int, float]:
    """(parent pid, CPU seconds) from a /proc/<pid>/stat line. The CPU seconds are utime + stime +
    cutime + cstime: a live process's own time plus that of the children it has reaped, so a tree's
    total stays right when backends or pool children come and go during a run."""
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    ppid = int(fields[1])
    utime, stime, cutime, cstime = (int(f) for f in fields[11:15])
    return ppid, (utime + stime + cutime + cstime) / CLOCK_TICKS


def parse_status_kb(text: str, key: str) -> int:
    """A ``Key:   123 kB`` value of /proc/<pid>/status, in kB (0 when absent: a kernel thread)."""
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


def process_table() -> dict[int, tuple[int, float]]:
    """pid → (parent pid, CPU seconds) of every process now."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            text = _read(f"/proc/{entry}/stat")
            if text:
                table[int(entry)] = parse_stat(text)
    return table


def tree(roots: Iterable[int], table: dict[int, tuple[int, float]]) -> set[int]:
    """``roots`` and all their live descendants."""
    members = {pid for pid in roots if pid in table}
    grew = True
    while grew:
        found = {pid for pid, (ppid, _) in table.items() if ppid in members} - members
        members |= found
        grew = bool(found)
    return members


@dataclass
class Usage:
    """CPU seconds of a group of process trees, and the largest peak RSS of any process in them."""

    cpu_s: float
    peak_rss_kb: int
    processes: int


def usage(roots: Iterable[int], table: dict[int, tuple[int, float]] | None = None) -> Usage:
    table = table if table is not None else process_table()
    members = tree(roots, table)
    peak = 0
    for pid in members:
        status = _read(f"/proc/{pid}/status")
        if status:
            peak = max(peak, parse_status_kb(status, "VmHWM"))
    return Usage(sum(table[pid][1] for pid in members), peak, len(members))


def pids_named(name: str) -> list[int]:
    """Processes whose command name (``comm``) is ``name``, e.g. ``beam.smp`` for RabbitMQ."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (_read(f"/proc/{entry}/comm") or "").strip() == name:
            found.append(int(entry))
    return found


class Proc:
    """One Procfile-style process: ``sh -c 'exec <command>'`` in the repository root, its own
    session (so Ctrl-C reaches only the driver, which stops it in order), output to a log file."""

    def __init__(self, name: str, command: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.command = command
        self.log = log_dir / f"{name}.log"
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                ["/bin/sh", "-c", "exec " + command],
                cwd=ROOT,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM (gunicorn and Celery shut down warm, reaping their children), then SIGKILL of
        the whole process group if it lingers."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        with contextlib.suppress(ProcessLookupError, PermissionError):  # children that outlived their parent
            os.killpg(self.popen.pid, signal.SIGKILL)

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait()

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])


def run(command: str, env: dict[str, str], log: Path) -> None:
    """Run a one-off Procfile command (``release``: migrations) to completion in the repository
    root, through the shell as the Procfile's other lines; fail loudly."""
    with log.open("ab") as out:
        done = subprocess.run(["/bin/sh", "-c", command], cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        raise RuntimeError(f"{command} failed ({done.returncode}); see {log}")


def wait_until(predicate: Callable[[], object], timeout: float, what: str, procs: Sequence[Proc] = ()) -> None:
    """Poll ``predicate()`` until true; fail early, with its log, if one of ``procs`` died."""
    deadline = time.monotonic() + timeout
    while not predicate():
        for proc in procs:
            if not proc.alive():
                raise RuntimeError(f"{proc.name} exited while waiting for {what}:\n{proc.tail()}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.1)


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@contextlib.contextmanager
def bench_run(logs: Path, keep_logs: bool, say: Callable[[str], None]) -> Iterator[None]:
    """A benchmark's whole run: Ctrl-C and SIGTERM unwind the stack, so every ``finally`` inside stops
    its processes (SIGINT explicitly: a shell starting us in the background would have left it
    ignored); the load average is printed at the end, and the process logs are removed unless the
    run failed or ``keep_logs``."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    failed = True
    try:
        yield
        failed = False
    except KeyboardInterrupt:
        say("\ninterrupted: stopping every process")
    finally:
        say(f"load average at end: {load_average()}")
        if failed or keep_logs:
            say(f"process logs kept in {logs}")
        else:
            shutil.rmtree(logs, ignore_errors=True)
