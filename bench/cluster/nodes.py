"""The brokers of the simulated cluster, each node in the namespace of its own host, on the default ports
of its own address, with its own data directory under the run's folder:

- a three-node RabbitMQ cluster (the machine's RabbitMQ installation started once per host, long node
  names on the hosts' addresses, one Erlang cookie, joined with ``rabbitmqctl join_cluster``);
- Redis with Sentinel: a primary on ``rd1``, a replica on ``rd2``, a Sentinel on each ``rd`` host.

Every process runs as ``ip netns exec <host> ...`` in a process group of its own; killing a node kills
every process in its host's namespace (``epmd`` too), as a machine that dies does.
"""

from __future__ import annotations

import os
import secrets
import shlex
import subprocess
import time
from pathlib import Path

from bench.chaos.procs import Proc
from bench.cluster.net import Network
from bench.cluster.plan import Host, Plan

RABBITMQ_BIN = Path(os.environ.get("LIAISON_RABBITMQ_BIN", "/usr/lib/rabbitmq/bin"))
SENTINEL_MASTER = "liaison"


def in_netns(host: Host, command: str) -> str:
    """``command`` (a shell line) run in the host's namespace."""
    return f"ip netns exec {host.netns} {command}"


def wait_tcp(host: Host, port: int, timeout: float, proc: Proc | None = None) -> None:
    """Until something listens on ``host.address:port`` (probed from the service host, over the bridge)."""
    import socket

    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host.address, port), timeout=1):
                return
        except OSError:
            pass
        if proc is not None and not proc.running():
            raise RuntimeError(f"{proc.name} exited at start-up (log: {proc.log})")
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {host.address}:{port} after {timeout:g}s")
        time.sleep(0.3)


class RabbitCluster:
    def __init__(self, plan: Plan, net: Network, base: Path, logs: Path) -> None:
        self.plan, self.net, self.logs = plan, net, logs
        self.base = base / "rabbitmq"
        self.cookie = secrets.token_hex(16)
        self.procs: dict[str, Proc] = {}
        for host in plan.rabbit:
            home = self.base / host.name
            home.mkdir(parents=True)
            cookie = home / ".erlang.cookie"
            cookie.write_text(self.cookie)
            cookie.chmod(0o400)
            # The machine's /etc/rabbitmq/rabbitmq-env.conf may pin epmd and the distribution to
            # 127.0.0.1: each node reads an env file of its own instead.
            (home / "rabbitmq-env.conf").write_text("# bin/cluster-sim: nothing from /etc/rabbitmq\n")
            (home / "rabbitmq.conf").write_text(
                "listeners.tcp.default = 5672\n"
                "loopback_users = none\n"  # guest from the Liaison hosts' addresses (this subnet only)
                "cluster_name = cluster-sim\n"
            )
            (home / "enabled_plugins").write_text("[].\n")
            command = in_netns(host, shlex.quote(str(RABBITMQ_BIN / "rabbitmq-server")))
            self.procs[host.name] = Proc(f"rabbitmq-{host.name}", command, self.env(host), logs)

    def env(self, host: Host) -> dict[str, str]:
        home = self.base / host.name
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RABBITMQ_", "ERL_"))}
        env.update(
            HOME=str(home),
            RABBITMQ_CONF_ENV_FILE=str(home / "rabbitmq-env.conf"),
            RABBITMQ_NODENAME=self.plan.rabbit_node(host),
            RABBITMQ_USE_LONGNAME="true",
            RABBITMQ_CONFIG_FILE=str(home / "rabbitmq.conf"),
            RABBITMQ_ENABLED_PLUGINS_FILE=str(home / "enabled_plugins"),
            RABBITMQ_MNESIA_BASE=str(home / "mnesia"),
            RABBITMQ_LOG_BASE=str(self.logs / f"rabbitmq-{host.name}"),
            RABBITMQ_PID_FILE=str(home / "pid"),
            ERL_CRASH_DUMP=str(home / "erl_crash.dump"),
        )
        return env

    def ctl(self, host: Host, *args: str, timeout: float = 120.0) -> str:
        """``rabbitmqctl -n <the host's node> ARGS``, from inside the host's namespace."""
        argv = ["ip", "netns", "exec", host.netns, str(RABBITMQ_BIN / "rabbitmqctl"), "-q"]
        argv += ["-n", self.plan.rabbit_node(host), *args]
        done = subprocess.run(
            argv, env=self.env(host), cwd=self.base / host.name, capture_output=True, text=True, timeout=timeout
        )
        if done.returncode != 0:
            raise RuntimeError(f"rabbitmqctl {' '.join(args)} on {host.name}: {done.stdout}{done.stderr}")
        return done.stdout

    def start(self, host: Host) -> None:
        proc = self.procs[host.name]
        proc.start()
        wait_tcp(host, 5672, 120, proc)  # the AMQP listener opens last

    def start_all(self) -> None:
        first, *others = self.plan.rabbit
        for host in self.plan.rabbit:
            self.procs[host.name].start()
        for host in self.plan.rabbit:
            wait_tcp(host, 5672, 120, self.procs[host.name])
        for host in others:
            self.ctl(host, "stop_app")
            self.ctl(host, "join_cluster", self.plan.rabbit_node(first))
            self.ctl(host, "start_app")
        self.ctl(first, "await_online_nodes", str(len(self.plan.rabbit)))

    def kill(self, host: Host) -> None:
        """SIGKILL every process of the node's host (the Erlang VM and epmd): no shutdown at all."""
        proc = self.procs[host.name]
        with proc.lock:
            proc.killed = True
            self.net.kill_all(host)
            if proc.popen is not None:
                proc.popen.wait()

    def restart(self, host: Host) -> None:
        """A graceful stop (``rabbitmqctl stop``), then a start: the node rejoins with its data."""
        proc = self.procs[host.name]
        with proc.lock:
            proc.killed = True
            self.ctl(host, "stop")
            if proc.popen is not None:
                proc.popen.wait(timeout=60)
            self.net.kill_all(host)  # epmd, which outlives the node
        self.start(host)

    def queues(self, host: Host) -> str:
        return self.ctl(host, "list_queues", "name", "type", "messages", "leader", "members", "--no-table-headers")


class RedisSentinel:
    """A primary on the first ``rd`` host, a replica on the second, a Sentinel on each (quorum 2)."""

    DOWN_AFTER_MS = 2000
    FAILOVER_TIMEOUT_MS = 10000

    def __init__(self, plan: Plan, net: Network, base: Path, logs: Path) -> None:
        self.plan, self.net = plan, net
        self.base = base / "redis"
        self.servers: dict[str, Proc] = {}
        self.sentinels: dict[str, Proc] = {}
        primary = plan.redis[0]
        env = dict(os.environ)
        for n, host in enumerate(plan.redis):
            home = self.base / host.name
            home.mkdir(parents=True)
            if n < 2:
                args = [
                    "redis-server", "--bind", host.address, "--port", "6379", "--protected-mode", "no",
                    "--dir", str(home), "--save", "", "--appendonly", "no",
                ]  # fmt: skip
                if n == 1:
                    args += ["--replicaof", primary.address, "6379"]
                command = in_netns(host, shlex.join(args))
                self.servers[host.name] = Proc(f"redis-{host.name}", command, env, logs)
            conf = home / "sentinel.conf"  # Sentinel rewrites its file: one of its own per host
            conf.write_text(
                f"port 26379\nbind {host.address}\nprotected-mode no\ndir {home}\n"
                f"sentinel monitor {SENTINEL_MASTER} {primary.address} 6379 2\n"
                f"sentinel down-after-milliseconds {SENTINEL_MASTER} {self.DOWN_AFTER_MS}\n"
                f"sentinel failover-timeout {SENTINEL_MASTER} {self.FAILOVER_TIMEOUT_MS}\n"
                f"sentinel parallel-syncs {SENTINEL_MASTER} 1\n"
            )
            command = in_netns(host, shlex.join(["redis-server", str(conf), "--sentinel"]))
            self.sentinels[host.name] = Proc(f"sentinel-{host.name}", command, env, logs)

    def start_all(self) -> None:
        for host in self.plan.redis:
            if host.name in self.servers:
                self.servers[host.name].start()
                wait_tcp(host, 6379, 30, self.servers[host.name])
        for host in self.plan.redis:
            self.sentinels[host.name].start()
            wait_tcp(host, 26379, 30, self.sentinels[host.name])
        self.wait_replicated()

    def cli(self, host: Host, port: int, *args: str) -> str:
        argv = ["ip", "netns", "exec", host.netns, "redis-cli", "-h", host.address, "-p", str(port), *args]
        return subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False).stdout

    def wait_replicated(self, timeout: float = 30.0) -> None:
        primary, replica = self.plan.redis[0], self.plan.redis[1]
        deadline = time.monotonic() + timeout
        while "master_link_status:up" not in self.cli(replica, 6379, "info", "replication"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica on {replica.name} did not sync with {primary.name}")
            time.sleep(0.3)

    def primary(self) -> str:
        """The primary's address, as the first Sentinel that answers says."""
        for host in self.plan.redis:
            answer = self.cli(host, 26379, "sentinel", "get-master-addr-by-name", SENTINEL_MASTER).split()
            if answer:
                return answer[0]
        return "?"

    def kill_primary(self) -> Host:
        """SIGKILL the primary's redis-server (its host's Sentinel lives on)."""
        host = next(h for h in self.plan.redis if h.address == self.primary())
        self.servers[host.name].kill_group()
        return host

    def procs(self) -> dict[str, Proc]:
        return {**{p.name: p for p in self.servers.values()}, **{p.name: p for p in self.sentinels.values()}}
