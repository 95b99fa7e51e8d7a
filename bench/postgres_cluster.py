"""A PostgreSQL cluster of its own for benchmarks and endurance runs: initdb into a temporary
directory, served on a free loopback port, stopped, restarted or killed at will.

Why not the machine's PostgreSQL on :5432: a benchmark counts statements with pg_stat_statements,
which needs ``shared_preload_libraries`` (a server restart), and an endurance run may restart or
kill the server; neither may touch the server the tests share. Its siblings (a Redis server, a
RabbitMQ node, the port and process helpers) are in ``bench.services``.

Stable interface (other suites reuse it)::

    with PostgresCluster({"shared_preload_libraries": "pg_stat_statements"}) as pg:
        url = pg.create_database("liaison")     # postgresql+psycopg://postgres@127.0.0.1:PORT/liaison
        pg.restart(); pg.kill(); pg.start()      # kill = SIGKILL of the postmaster (a crash)
        pg.pid                                   # the postmaster's pid (its children are the backends)

It binds 127.0.0.1 only. PostgreSQL refuses to run as root: when we are root, initdb, pg_ctl and
postgres run as the ``postgres`` user (``runuser``), and the directory is chowned to it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from bench.services import become_subreaper, child_pids, free_port, reap, wait_for_port

PG_BIN = Path(os.environ.get("LIAISON_PG_BIN", "/usr/lib/postgresql/15/bin"))
PG_USER = "postgres"


class PostgresCluster:
    """A PostgreSQL cluster of its own: initdb into a temporary directory, served on a free port.

    ``settings`` are extra server settings (``postgresql.conf`` lines), e.g.
    ``{"shared_preload_libraries": "pg_stat_statements", "pg_stat_statements.track": "all"}``.
    Authentication is ``trust`` for user ``postgres``, over TCP on 127.0.0.1 only.
    """

    def __init__(
        self, settings: dict[str, str] | None = None, port: int | None = None, hba: tuple[str, ...] = ()
    ) -> None:
        self.settings = dict(settings or {})
        self.hba = hba  # extra pg_hba.conf lines (bin/cluster-sim: trust from its private subnet)
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
        with (self.data / "pg_hba.conf").open("a") as hba:
            hba.writelines(f"{line}\n" for line in self.hba)
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
            reap(pid)

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


def _quote(value: str) -> str:
    """A postgresql.conf value: numbers and booleans bare, everything else single-quoted."""
    if value.replace(".", "", 1).isdigit() or value in ("on", "off", "true", "false"):
        return value
    return "'" + value.replace("'", "''") + "'"
