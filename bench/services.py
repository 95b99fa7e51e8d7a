"""Throwaway servers for benchmarks, endurance runs and tests that restart a server: a PostgreSQL
cluster, a Redis server and a RabbitMQ node of their own, on free loopback ports, in temporary
directories.

Why not the machine's PostgreSQL on :5432: a benchmark counts statements with pg_stat_statements,
which needs ``shared_preload_libraries`` (a server restart), and an endurance run may restart or
kill the server; neither may touch the server the tests share. Why not Redis on :6379: ``kill`` and
``restart`` must hit only our own server. The same goes for RabbitMQ on :5672, which the whole test
suite shares as a Celery broker.

Stable interface (other suites reuse it)::

    with PostgresCluster({"shared_preload_libraries": "pg_stat_statements"}) as pg:
        url = pg.create_database("liaison")     # postgresql+psycopg://postgres@127.0.0.1:PORT/liaison
        pg.restart(); pg.kill(); pg.start()      # kill = SIGKILL of the postmaster (a crash)
        pg.pid                                   # the postmaster's pid (its children are the backends)
    with RedisServer() as redis:
        redis.url                                # redis://127.0.0.1:PORT/0
        redis.kill(); redis.start(); redis.restart()
    with RedisServer(persist=True) as redis:     # append-only file, fsync always: a restart keeps data
        ...
    with RabbitMQNode() as rabbit:
        rabbit.url                               # amqp://guest:guest@127.0.0.1:PORT//
        rabbit.restart()                         # a graceful stop of the node, then a start

All bind 127.0.0.1 only. PostgreSQL refuses to run as root: when we are root, initdb, pg_ctl and
postgres run as the ``postgres`` user (``runuser``), and the directory is chowned to it.
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

PG_BIN = Path(os.environ.get("LIAISON_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"


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


class PostgresCluster:
    """A PostgreSQL cluster of its own: initdb into a temporary directory, served on a free port.

    ``settings`` are extra server settings (``postgresql.conf`` lines), e.g.
    ``{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}``.
    Authentication is ``trust`` for user ``postgres``, over TCP on 127.0.0.1 only.
    """

    def __init__(self, settings: dict[str, str] | None = None, port: int | None = None) -> None:
        self.settings = dict(settings or {})
        self.port = port or free_port()
        self.dir = Path(tempfile.mkdtemp(prefix="liaison-pg-"))
        self.data = self.dir / "data"
        self.log = self.dir / "postgres.log"
        self._initialised = False
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """SQLAlchemy URL of the ``postgres`` database (``create_database`` gives others)."""
        return self.database_url("postgres")

    @property
    def admin_url(self) -> str:
        """libpq/psycopg URL of the ``postgres`` database (no ``+psycopg``)."""
        return f"postgresql://{PG_USER}@127.0.0.1:{self.port}/postgres"

    def database_url(self, name: str) -> str:
        return f"postgresql+psycopg://{PG_USER}@127.0.0.1:{self.port}/{name}"

    @property
    def pid(self) -> int | None:
        """The postmaster's pid while it runs (its children are the backends), else None."""
        return self.process.pid if self.process is not None and self.process.poll() is None else None

    def _as_postgres(self) -> dict[str, str]:
        """Popen arguments that drop root for the postgres user (postgres refuses to run as root)."""
        return {"user": PG_USER, "group": PG_USER} if os.geteuid() == 0 else {}

    def _init(self) -> None:
        if os.geteuid() == 0:
            shutil.chown(self.dir, PG_USER, PG_USER)
        argv = [str(PG_BIN / "initdb"), "-D", str(self.data), "-U", PG_USER, "--auth=trust", "-E", "UTF8", "--no-sync"]
        done = subprocess.run(argv, capture_output=True, cwd=self.dir, check=False, **self._as_postgres())  # type: ignore[call-overload]
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
        lines = {
            "listen_addresses": "'127.0.0.1'",
            "port": str(self.port),
            "unix_socket_directories": f"'{self.dir}'",
            "fsync": "off",  # a throwaway cluster: durability across an OS crash is not what we measure
            "max_connections": "200",
        }
        lines.update({key: _quote(value) for key, value in self.settings.items()})
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.writelines(f"{key} = {value}\n" for key, value in lines.items())
        self._initialised = True

    def start(self) -> PostgresCluster:
        """initdb on first use, then start the postmaster and wait until it accepts connections.

        The postmaster is our direct child (not daemonised by pg_ctl): on a machine whose init does
        not reap orphans, a daemonised postmaster would linger as a zombie after it exits, and its
        pid in postmaster.pid would keep the next start from running.
        """
        if not self._initialised:
            self._init()
        log = self.log.open("ab")
        self.process = subprocess.Popen(  # type: ignore[call-overload]
            [str(PG_BIN / "postgres"), "-D", str(self.data)],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.dir,
            start_new_session=True,  # Ctrl-C reaches the driver only, which shuts us down in order
            **self._as_postgres(),
        )
        log.close()
        try:
            wait_for_port(self.port, timeout=60, process=self.process)
        except (TimeoutError, RuntimeError) as exc:
            raise RuntimeError(f"{exc}\n{self.log.read_text()[-2000:]}") from None
        return self

    def stop(self, mode: str = "fast") -> None:
        """Shut down (``fast``: roll back open transactions; ``immediate``: no checkpoint);
        nothing if not running."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal({"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode])
        try:
            self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill()

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL the postmaster (a crash): backends exit, the next start runs crash recovery."""
        if self.process is None or self.process.poll() is not None:
            return
        become_subreaper()  # the orphaned backends become our children, so we can reap them
        children = child_pids(self.process.pid)
        self.process.kill()
        self.process.wait()
        for pid in children:  # a new postmaster refuses to start while old backends live
            _reap(pid)

    def create_database(self, name: str) -> str:
        """CREATE DATABASE ``name``; returns its SQLAlchemy URL."""
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.database_url(name)

    def cleanup(self) -> None:
        """Stop the server (killing it if a stop fails) and delete its directory."""
        self.stop(mode="immediate")
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PostgresCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.cleanup()


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


def _quote(value: str) -> str:
    """A postgresql.conf value: numbers and booleans bare, everything else single-quoted."""
    if value.replace(".", "", 1).isdigit() or value in ("on", "off", "true", "false"):
        return value
    return "'" + value.replace("'", "''") + "'"


def become_subreaper() -> None:
    """Make this process adopt its orphaned descendants (Linux PR_SET_CHILD_SUBREAPER), so that it
    can reap them: this machine's init does not, and unreaped they stay zombies."""
    import ctypes

    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)


def _reap(pid: int, timeout: float = 30.0) -> None:
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
