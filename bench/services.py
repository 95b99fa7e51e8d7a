"""Throwaway servers for benchmarks, endurance runs and tests that restart a server: a Redis server
and a RabbitMQ node of their own, on free loopback ports, in temporary directories, and what every
such server needs (a free port, waiting for it to listen, reaping a killed server's orphans). The
PostgreSQL cluster of their own is ``bench.postgres_cluster.PostgresCluster``, built on these.

Why not Redis on :6379: ``kill`` and ``restart`` must hit only our own server. The same goes for
RabbitMQ on :5672, which the whole test suite shares as a Celery broker.

Stable interface (other suites reuse it)::

    with RedisServer() as redis:
        redis.url                                # redis://127.0.0.1:PORT/0
        redis.kill(); redis.start(); redis.restart()
    with RedisServer(persist=True) as redis:     # append-only file, fsync always: a restart keeps data
        ...
    with RabbitMQNode() as rabbit:
        rabbit.url                               # amqp://guest:guest@127.0.0.1:PORT//
        rabbit.restart()                         # a graceful stop of the node, then a start

All bind 127.0.0.1 only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the usual small race is accepted)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, timeout: float = 30.0, process: subprocess.Popen[bytes] | None = None) -> None:
    """Block until something accepts connections on 127.0.0.1:``port``, or raise TimeoutError
    (RuntimeError at once if ``process``, the server meant to listen there, exits)."""
    deadline = time.monotonic() + timeout
    while True:
        if process is not None and process.poll() is not None:
            raise RuntimeError(f"the server for port {port} exited with {process.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout}s") from None
            time.sleep(0.05)


class RedisServer:
    """``redis-server`` on a free loopback port. Without ``persist`` nothing reaches the disk
    (``--save "" --appendonly no``): a restart comes back empty, as a cache-only Redis after a crash.
    With ``persist`` every write is in the append-only file before Redis answers (fsync always), so
    a restart keeps every acknowledged write, as a broker that must not lose messages is run."""

    def __init__(self, port: int | None = None, binary: str = "redis-server", persist: bool = False) -> None:
        self.port = port or free_port()
        self.binary = binary
        self.persist = persist
        self.dir = Path(tempfile.mkdtemp(prefix="liaison-redis-"))
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def start(self) -> RedisServer:
        argv = [self.binary, "--bind", "127.0.0.1", "--port", str(self.port), "--save", ""]
        argv += ["--appendonly", "yes", "--appendfsync", "always"] if self.persist else ["--appendonly", "no"]
        argv += ["--dir", str(self.dir), "--logfile", str(self.dir / "redis.log")]
        self.process = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        wait_for_port(self.port, process=self.process)
        return self

    def kill(self) -> None:
        """SIGKILL: every key is lost (no persistence), as in a crash of a cache-only Redis."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


class RabbitMQNode:
    """A RabbitMQ node of its own: the machine's RabbitMQ installation started a second time, under
    its own node name, on a free AMQP port and a free distribution port, with its own database,
    logs, Erlang cookie (``HOME``) and no plugins, in a temporary directory.

    Durable queues and exchanges and persistent messages live in the node's own database, so
    ``restart`` (a graceful ``rabbitmqctl stop``, then a start) keeps them, as a real restart does,
    while every connection is dropped. Starting takes about five seconds.
    """

    RABBITMQ_BIN = Path(os.environ.get("LIAISON_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))

    def __init__(self) -> None:
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"liaison{self.port}@localhost"
        self.dir = Path(tempfile.mkdtemp(prefix="liaison-rabbitmq-"))
        (self.dir / "rabbitmq.conf").write_text(f"listeners.tcp.local = 127.0.0.1:{self.port}\n")
        (self.dir / "enabled_plugins").write_text("[].\n")
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("RABBITMQ_")}
        env.update(
            HOME=str(self.dir),  # the node's own Erlang cookie, for it and for rabbitmqctl
            RABBITMQ_NODENAME=self.node,
            RABBITMQ_NODE_PORT=str(self.port),
            RABBITMQ_DIST_PORT=str(self.dist_port),
            RABBITMQ_CONFIG_FILE=str(self.dir / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(self.dir / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(self.dir / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.dir / "log"),
            RABBITMQ_PID_FILE=str(self.dir / "pid"),
        )
        return env

    def start(self) -> RabbitMQNode:
        log = (self.dir / "server.out").open("ab")
        self.process = subprocess.Popen(
            [str(self.RABBITMQ_BIN / "rabbitmq-server")],
            env=self.env,
            cwd=self.dir,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_for_port(self.port, timeout=60, process=self.process)  # the AMQP listener opens last
        return self

    def ctl(self, *args: str) -> None:
        """``rabbitmqctl -n <this node> ARGS``."""
        argv = [str(self.RABBITMQ_BIN / "rabbitmqctl"), "-q", "-n", self.node, *args]
        subprocess.run(argv, env=self.env, cwd=self.dir, check=True, capture_output=True, timeout=60)

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            self.ctl("stop")  # returns once the node has shut down
            self.process.wait(timeout=30)
        except (subprocess.SubprocessError, OSError):
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def restart(self) -> None:
        self.stop()
        self.start()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> RabbitMQNode:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


def child_pids(pid: int) -> list[int]:
    """The direct children of ``pid`` (e.g. a postmaster's backends), read from /proc."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def become_subreaper() -> None:
    """Make this process adopt its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), so that it
    can reap them: this machine's init does not, and unreaped they stay zombies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def reap(pid: int, timeout: float = 30.0) -> None:
    """Wait until ``pid`` (an adopted orphan) has exited, and reap it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not ours (adopted by someone else): wait for it to vanish
            if not Path(f"/proc/{pid}").exists():
                return
            done = 0
        if done:
            return
        time.sleep(0.05)
