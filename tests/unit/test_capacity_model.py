"""The capacity model's arithmetic (bench/capacity_model.py), which the runbook's "Capacity model"
quotes: a wrong formula there would size a deployment wrong without any run showing it. The
measurements themselves (bench/capacity.py) are never run as a test; its /proc reading is."""

from __future__ import annotations

import math

import pytest

from bench import capacity_model as model
from bench.capacity import ESTABLISHED, connections_to, parse_proc_net_tcp
from bench.stacks import PROCFILE
from models.db import POOL_SIZE


def test_a_core_does_a_thousand_ms_a_second() -> None:
    assert model.jobs_per_core_second(8.0) == 125
    assert model.jobs_per_core_second(0) == math.inf


def test_the_primary_ceiling_scales_with_its_cores_at_the_planned_utilisation() -> None:
    # 10 ms of PostgreSQL CPU per job: 100 jobs/s a core, 70 at 70 %, 560 on 8 cores
    assert model.primary_ceiling(10.0, 1, 0.7) == pytest.approx(70)
    assert model.primary_ceiling(10.0, 8, 0.7) == pytest.approx(560)
    assert model.primary_ceiling(10.0, 8, 1.0) == pytest.approx(800)
    # and back: 560 jobs/s at 10 ms need 8 cores at 70 %, 561 need 9
    assert model.primary_cores_for_rate(560, 10.0, 0.7) == 8
    assert model.primary_cores_for_rate(561, 10.0, 0.7) == 9
    assert model.primary_cores_for_rate(1, 10.0, 0.7) == 1


def test_redis_caps_a_deployment_at_one_core_whatever_the_machine() -> None:
    assert model.single_core_ceiling(1.25, 0.7) == pytest.approx(560)
    assert model.single_core_ceiling(1.25, 1.0) == pytest.approx(800)


def test_a_host_is_limited_by_its_cores_or_by_a_class_of_one_process() -> None:
    ms = {"web": 16.0, "worker": 1.0, "calls": 8.0, "relay": 12.0}  # 37 ms a job
    processes = {"web": 2, "worker": 2, "calls": 1, "relay": 1}
    rate, limit = model.host_rate(ms, processes, cores=2, utilisation=1.0)
    assert rate == pytest.approx(2000 / 37) and limit == "2 cores"
    # on 8 cores the relay's one process (one core at most: the GIL) fills first: 1000 / 12 a second
    rate, limit = model.host_rate(ms, processes, cores=8, utilisation=1.0)
    assert rate == pytest.approx(1000 / 12) and limit.startswith("relay")
    rate, _ = model.host_rate(ms, processes, cores=8, utilisation=0.5)
    assert rate == pytest.approx(500 / 12)


def test_hosts_for_a_rate_round_up_and_never_fall_below_one() -> None:
    assert model.hosts_for_rate(100, 40) == 3
    assert model.hosts_for_rate(120, 40) == 3  # exactly three, not four
    assert model.hosts_for_rate(0.5, 40) == 1
    assert model.hosts_for_rate(0, 40) == 1


def test_max_connections_bounds_the_hosts_one_primary_takes() -> None:
    assert model.hosts_within_connections(100, 10, 35) == 2  # 90 / 35
    assert model.hosts_within_connections(500, 10, 35) == 14
    assert model.hosts_within_connections(20, 10, 35) == 0


def test_littles_law_for_the_pgbouncer_pool() -> None:
    # 4.5 transactions in flight at 25 jobs/s × 9 commits: each holds its connection 20 ms
    seconds = model.transaction_seconds(4.5, 25.0, 9.0)
    assert seconds == pytest.approx(0.02)
    # at 500 jobs/s the same transactions keep 90 server connections busy
    assert model.server_connections(500, 9.0, seconds) == pytest.approx(90)
    assert model.transaction_seconds(3, 0, 9) == 0
    assert model.commits_per_s(500, 9.0) == 4500


def test_the_procfile_lines_shapes_and_their_pools_bound() -> None:
    assert model.process_shape(PROCFILE["web"]) == (2, 4)  # --workers 2 --threads 4
    assert model.process_shape(PROCFILE["worker"]) == (2, 1)  # prefork, --concurrency 2
    assert model.process_shape(PROCFILE["calls"]) == (1, 16)  # threads, ${LIAISON_CALL_THREADS:-16}
    assert model.process_shape(PROCFILE["relay"]) == (1, 64)
    assert model.process_shape(PROCFILE["beat"]) == (1, 1)
    bounds = [model.pool_bound(PROCFILE[name], POOL_SIZE) for name in ("web", "worker", "calls", "relay")]
    assert bounds == [8, 2, 15, 15]
    assert model.pool_bound("celery -A x worker --pool threads --concurrency 4", 15) == 4


def test_proc_net_tcp_sockets_are_matched_by_inode_remote_port_and_state() -> None:
    table = parse_proc_net_tcp(
        "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
        "   0: 0100007F:D431 0100007F:1538 01 00000000:00000000 00:00000000 00000000     0        0 4711 1\n"
        "   1: 0100007F:D432 0100007F:1538 06 00000000:00000000 00:00000000 00000000     0        0 4712 1\n"
        "   2: 0100007F:D433 0100007F:18EB 01 00000000:00000000 00:00000000 00000000     0        0 4713 1\n"
    )
    assert table == {4711: (0x1538, ESTABLISHED), 4712: (0x1538, "06"), 4713: (0x18EB, ESTABLISHED)}
    assert 0x1538 == 5432
    # a TIME_WAIT socket and a socket of another process (not among the inodes) are not connections
    assert connections_to({4711, 4712}, 5432, table) == 1
    assert connections_to({4711, 4712, 4713, 9999}, 6379, table) == 1
