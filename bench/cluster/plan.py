"""The simulated cluster's topology: which namespaces the run makes, the addresses on its private subnet,
and the URLs the Liaison hosts are given. Pure (no I/O): tests/unit/test_cluster_sim.py checks it.

Every address is on one /24 that exists only between the run's own namespaces and a bridge in the root
namespace (the "service host": the driver, the domain app, the load balancer, the vendor simulator and
PostgreSQL). No namespace gets a default route, so nothing the hosts run can reach anything else.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

SUBNET = ipaddress.IPv4Network("10.241.0.0/24")
BRIDGE = "csim0"  # in the root namespace, holding the service host's address
PREFIX = "csim-"  # every namespace and host-side veth the run makes starts with this

#: role -> the last octet of its first member: Liaison hosts .11-, RabbitMQ nodes .21-, Redis .31-
FIRST_OCTET = {"lh": 11, "rmq": 21, "rd": 31}
SERVICE_OCTET = 1  # the bridge: the service host


@dataclass(frozen=True)
class Host:
    """One simulated machine: a network namespace with one veth into the bridge."""

    name: str  # lh1, rmq2, rd3 ...
    address: str

    @property
    def netns(self) -> str:
        return f"{PREFIX}{self.name}"

    @property
    def veth(self) -> str:
        """The host-side end in the root namespace (on the bridge); dropping it cuts the host off."""
        return f"{PREFIX}{self.name}"


@dataclass(frozen=True)
class Plan:
    liaison: tuple[Host, ...]
    rabbit: tuple[Host, ...]
    redis: tuple[Host, ...]
    service: str  # the bridge's address: the service host

    @property
    def hosts(self) -> tuple[Host, ...]:
        return (*self.liaison, *self.rabbit, *self.redis)

    @property
    def prefix_len(self) -> int:
        return SUBNET.prefixlen

    def rabbit_node(self, host: Host) -> str:
        """The Erlang node name: long names on the host's address (no name resolution needed)."""
        return f"rabbit@{host.address}"

    def amqp_url(self) -> str:
        """Kombu's failover list, every node of the cluster (a connection moves to the next one)."""
        return ";".join(f"amqp://guest:guest@{h.address}:5672//" for h in self.rabbit)

    def sentinel_url(self) -> str:
        """Every Sentinel (with LIAISON_REDIS_SENTINEL_MASTER): kombu asks them for the primary."""
        return ";".join(f"sentinel://{h.address}:26379" for h in self.redis)


def make_plan(liaison_hosts: int = 3, rabbit_nodes: int = 3, redis_hosts: int = 3) -> Plan:
    """The address plan: ``lh1..`` (Liaison), ``rmq1..`` (RabbitMQ), ``rd1..`` (Redis: the first holds the
    primary, the second a replica, each one a Sentinel), all on :data:`SUBNET`."""
    counts = {"lh": liaison_hosts, "rmq": rabbit_nodes, "rd": redis_hosts}
    groups: dict[str, tuple[Host, ...]] = {}
    for role, count in counts.items():
        if not 1 <= count <= 9:
            raise ValueError(f"{role}: between 1 and 9 hosts")
        first = FIRST_OCTET[role]
        groups[role] = tuple(Host(f"{role}{n + 1}", str(SUBNET.network_address + first + n)) for n in range(count))
    return Plan(groups["lh"], groups["rmq"], groups["rd"], str(SUBNET.network_address + SERVICE_OCTET))
