"""The run's network: a bridge in the root namespace holding the service host's address, and one network
namespace per simulated host, joined to the bridge by a veth pair. Loopback and veth only; no default
route anywhere, so a host reaches the subnet's own addresses and nothing else.

:meth:`Network.destroy` kills every process still in the run's namespaces (``ip netns pids``), deletes the
namespaces (which deletes their veths) and the bridge; it is safe to call twice and after a failed build.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time

from bench.cluster.plan import BRIDGE, PREFIX, Host, Plan


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


def leftovers() -> list[str]:
    """Namespaces and links a run left behind (a run killed with SIGKILL cannot clean up)."""
    names = [line.split()[0] for line in ip("netns", "list").stdout.splitlines() if line.startswith(PREFIX)]
    links = ip("-o", "link", "show").stdout
    if f": {BRIDGE}:" in links or f": {BRIDGE}@" in links:
        names.append(BRIDGE)
    return names


class Network:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.made: list[str] = []  # namespaces, in the order made
        self.bridge = False

    def build(self) -> None:
        if found := leftovers():
            raise RuntimeError(
                f"a previous run left {', '.join(found)} behind: is another bin/cluster-sim running? "
                "If not, bin/cluster-sim --clean-leftovers removes them"
            )
        ip("link", "add", BRIDGE, "type", "bridge")
        self.bridge = True
        ip("addr", "add", f"{self.plan.service}/{self.plan.prefix_len}", "dev", BRIDGE)
        ip("link", "set", BRIDGE, "up")
        for host in self.plan.hosts:
            self.add(host)

    def add(self, host: Host) -> None:
        ip("netns", "add", host.netns)
        self.made.append(host.netns)
        ip("link", "add", host.veth, "type", "veth", "peer", "name", "eth0", "netns", host.netns)
        ip("link", "set", host.veth, "master", BRIDGE, "up")
        ip("-n", host.netns, "addr", "add", f"{host.address}/{self.plan.prefix_len}", "dev", "eth0")
        ip("-n", host.netns, "link", "set", "lo", "up")
        ip("-n", host.netns, "link", "set", "eth0", "up")

    def cut(self, host: Host) -> None:
        """The host's link dropped: packets to and from it go nowhere (no reset, no refusal)."""
        ip("link", "set", host.veth, "down")

    def restore(self, host: Host) -> None:
        ip("link", "set", host.veth, "up")

    def kill_all(self, host: Host) -> list[int]:
        """SIGKILL every process in the host's namespace at once (the machine lost); returns the pids."""
        return kill_netns(host.netns)

    def destroy(self) -> None:
        for netns in reversed(self.made):
            kill_netns(netns)
            ip("netns", "del", netns, check=False)
        self.made.clear()
        if self.bridge:
            ip("link", "del", BRIDGE, check=False)
            self.bridge = False


def kill_netns(netns: str) -> list[int]:
    """SIGKILL every process in ``netns`` until none is left (a dying one may have forked). The caller
    reaps its own children (``Popen.wait``): reaping here would hide their exit from ``Popen``."""
    killed: list[int] = []
    for _ in range(50):
        pids = [int(p) for p in ip("netns", "pids", netns, check=False).stdout.split()]
        if not pids:
            break
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        time.sleep(0.1)
    return sorted(set(killed))


def clean_leftovers() -> list[str]:
    """Remove what :func:`leftovers` lists (after a run that could not clean up)."""
    found = leftovers()
    for name in found:
        if name == BRIDGE:
            ip("link", "del", BRIDGE, check=False)
        else:
            kill_netns(name)
            ip("netns", "del", name, check=False)
    return found
