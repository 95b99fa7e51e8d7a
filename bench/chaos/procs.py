"""The Procfile's processes, run without honcho: each in a process group of its own, so the suite can
SIGKILL a whole worker (main process and prefork children) or one prefork child alone, and read the
memory of a process tree from /proc."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import threading
import time
from pathlib import Path

from bench.services import become_subreaper, child_pids

ROOT = Path(__file__).resolve().parents[2]
_LINE = re.compile(r"^([A-Za-z0-9_-]+):\s*(.+)$")


def procfile(path: Path = ROOT / "Procfile") -> dict[str, str]:
    """``name -> command`` of every ``name: command`` line (the format honcho and foreman read)."""
    entries = {}
    for line in path.read_text().splitlines():
        match = _LINE.match(line.strip())
        if match and not line.lstrip().startswith("#"):
            entries[match.group(1)] = match.group(2)
    return entries


def on_loopback(command: str) -> str:
    """The one change the suite makes to a Procfile line: ``web`` binds 0.0.0.0 (unless
    ``WEB_ADDRESS`` says otherwise); the suite's run listens on 127.0.0.1 only."""
    return command.replace("--bind ${WEB_ADDRESS:-0.0.0.0}:", "--bind 127.0.0.1:")


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children, their children, ...), read from /proc."""
    found, todo = [], [pid]
    while todo:
        for child in child_pids(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


def rss_kib(pids: list[int]) -> int:
    """The sum of ``VmRSS`` (KiB) of the processes still alive among ``pids``."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total


def group_members(pgid: int) -> list[int]:
    """Processes whose process group is ``pgid`` (field 5 of /proc/<pid>/stat)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()  # after "pid (comm) "
            if int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


def reap(pids: list[int], timeout: float = 10.0) -> None:
    """Wait for adopted orphans (we are their subreaper) to exit, and reap them: this machine's init
    does not, and a zombie would keep its pid (and a prefork child's slot in our counts)."""
    deadline = time.monotonic() + timeout
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        for pid in list(pending):
            try:
                done, _ = os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:  # not our child: it is gone once /proc forgets it
                done = 0 if Path(f"/proc/{pid}").exists() else pid
            if done:
                pending.discard(pid)
        if pending:
            time.sleep(0.05)


class Proc:
    """One Procfile process: ``bash -c 'exec <line>'`` in a new session (its own process group)."""

    def __init__(self, name: str, command: str, env: dict[str, str], log_dir: Path) -> None:
        self.name = name
        self.command = command
        self.env = env
        self.log = log_dir / f"{name}.log"
        self.popen: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.killed = False  # by the suite, on purpose: not to be restarted by the supervisor
        self.lock = threading.RLock()  # the chaos plan and the supervisor both start and kill

    @property
    def pid(self) -> int:
        assert self.popen is not None, f"{self.name} was never started"
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def start(self) -> Proc:
        with self.lock:
            return self._start()

    def _start(self) -> Proc:
        become_subreaper()  # a killed group's children are re-parented to us, and we reap them
        with self.log.open("ab") as log:
            log.write(f"==== chaos: start #{self.starts + 1}: {self.command}\n".encode())
            log.flush()
            self.popen = subprocess.Popen(
                ["bash", "-c", f"exec {self.command}"],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.starts += 1
        self.killed = False
        return self

    def children(self) -> list[int]:
        return child_pids(self.pid) if self.running() else []

    def tree(self) -> list[int]:
        return [self.pid, *descendants(self.pid)] if self.running() else []

    def kill_group(self) -> list[int]:
        """SIGKILL every process of the group at once (a host losing the process, no shutdown at
        all); returns the pids killed."""
        with self.lock:
            return self._kill_group()

    def _kill_group(self) -> list[int]:
        members = group_members(self.pid)
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)
        assert self.popen is not None
        self.popen.wait()
        reap([pid for pid in members if pid != self.pid])
        return members

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to the group (warm shutdown), then SIGKILL what is left after ``timeout``."""
        with self.lock:
            self._stop(timeout)

    def _stop(self, timeout: float) -> None:
        if not self.running():
            return
        members = group_members(self.pid)
        self.killed = True
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGTERM)
        assert self.popen is not None
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.popen.wait()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.pid, signal.SIGKILL)  # children that outlived their parent
        reap([pid for pid in members if pid != self.pid])
