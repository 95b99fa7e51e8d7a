"""A PgBouncer of a test's own, in ``pool_mode=transaction``, in front of the test PostgreSQL.

Debian's ``pgbouncer``, installed by ``bin/setup-pgbouncer`` (which ``bin/test`` runs). When it is
missing the tests skip with the reason, or fail under CI (``CI`` set), like a service that is down
(tests/integration/services.py). Each one listens on a free loopback port with a throwaway
configuration (trust auth, no Unix socket, any database of the test PostgreSQL), and is stopped and
its folder removed when the ``with`` ends, a failure included."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.integration import services

PGBOUNCER = os.environ.get("LIAISON_TEST_PGBOUNCER", "/usr/sbin/pgbouncer")
START_WAIT_S = 30.0


def require_pgbouncer() -> None:
    if os.access(PGBOUNCER, os.X_OK):
        return
    message = f"PgBouncer is not installed ({PGBOUNCER} missing): run bin/setup-pgbouncer"
    if os.environ.get("CI"):
        pytest.fail(message + " (CI runs bin/test, which installs it)")
    pytest.skip(message)


def _config(folder: Path, port: int, pool_size: int) -> str:
    postgres = urlsplit(services.POSTGRES_ADMIN_URL)
    user = postgres.username or "postgres"
    return "\n".join(
        [
            "[databases]",
            f"* = host={postgres.hostname or '127.0.0.1'} port={postgres.port or 5432} user={user}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {folder / 'users.txt'}",
            "pool_mode = transaction",
            # few server connections for many clients: every client's transactions move between them
            f"default_pool_size = {pool_size}",
            "max_client_conn = 500",
            "",
        ]
    )


@contextmanager
def running_pgbouncer(database_url: str, *, pool_size: int = 4) -> Iterator[str]:
    """A PgBouncer in transaction pooling in front of ``database_url``'s server; yields the same
    URL aimed at it. At most ``pool_size`` server connections serve all of its clients."""
    require_pgbouncer()
    folder = Path(tempfile.mkdtemp(prefix="liaison-pgbouncer-"))
    process: subprocess.Popen[bytes] | None = None
    try:
        folder.chmod(0o755)  # run as root, PgBouncer drops to the postgres user, who reads these
        user = urlsplit(services.POSTGRES_ADMIN_URL).username or "postgres"
        (folder / "users.txt").write_text(f'"{user}" ""\n')
        port = services.free_port()
        (folder / "pgbouncer.ini").write_text(_config(folder, port, pool_size))
        command = [PGBOUNCER, str(folder / "pgbouncer.ini")]
        if os.getuid() == 0:  # PgBouncer will not run as root
            command[1:1] = ["-u", "postgres"]
        with open(folder / "pgbouncer.log", "wb") as log:
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        _wait_until_listening(process, port, folder)
        parts = urlsplit(database_url)
        yield parts._replace(netloc=f"{parts.username}@127.0.0.1:{port}").geturl()
    finally:
        if process is not None:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        shutil.rmtree(folder, ignore_errors=True)


def _wait_until_listening(process: subprocess.Popen[bytes], port: int, folder: Path) -> None:
    deadline = time.monotonic() + START_WAIT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"pgbouncer exited: {(folder / 'pgbouncer.log').read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{port}")
