"""The pure helpers of the end-to-end benchmark (bench/e2e.py): a wrong percentile or a misread
/proc line would make every figure it prints wrong, silently. The benchmark itself is never run
as a test (it measures; it does not pass or fail)."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest

from bench.hot_paths_meter import server_cpu_seconds
from bench.procs import CLOCK_TICKS, parse_stat, parse_status_kb, percentile, procfile
from bench.stacks import NAIVE_WORKERS, PROCFILE, naive_web_command, worker_commands


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 50) == 50
    assert percentile(values, 99) == 99
    assert percentile(values, 100) == 100
    assert percentile([3.0, 1.0, 2.0], 50) == 2
    assert percentile([7.0], 99) == 7
    assert math.isnan(percentile([], 50))


def test_parse_stat_reads_past_a_command_name_with_spaces_and_parentheses() -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime ...
    line = "4242 (celery (worker) x) S 17 4242 4242 0 -1 4194560 900 0 0 0 250 50 80 20 20 0 3 0 100 1000 200"
    ppid, cpu = parse_stat(line)
    assert ppid == 17
    assert cpu == pytest.approx((250 + 50 + 80 + 20) / CLOCK_TICKS)


def test_parse_status_kb() -> None:
    status = "Name:\tgunicorn\nVmPeak:\t  300000 kB\nVmHWM:\t   98400 kB\nVmRSS:\t   90000 kB\n"
    assert parse_status_kb(status, "VmHWM") == 98400
    assert parse_status_kb(status, "VmRSS") == 90000
    assert parse_status_kb("Name:\tkthreadd\n", "VmHWM") == 0


def test_procfile_parsing_and_the_lines_the_benchmark_runs() -> None:
    assert procfile("# comment\n\nweb: gunicorn x:y\nworker: celery -A a worker\n") == {
        "web": "gunicorn x:y",
        "worker": "celery -A a worker",
    }
    for name in ("release", "web", "worker", "calls", "relay"):
        assert name in PROCFILE
    naive = naive_web_command(PROCFILE["web"], "bench.naive.web:create_app()")
    assert "'bench.naive.web:create_app()'" in naive and " -c " not in naive and "gunicorn_config" not in naive
    assert "--workers 2 --threads 4" in naive  # the same gunicorn shape as Liaison's web


def test_second_worker_host_gets_node_names_of_its_own() -> None:
    one = worker_commands(1)
    assert [name for name, _, _ in one] == ["worker", "calls", "relay"]
    two = worker_commands(2, NAIVE_WORKERS)
    assert [(name, host) for name, _, host in two] == [("worker0", 0), ("relay0", 0), ("worker1", 1), ("relay1", 1)]
    assert "worker@%h" in two[0][1] and "worker@host1" in two[2][1] and "relay@host1" in two[3][1]
    assert "calls@host1" in worker_commands(2)[4][1]
    assert worker_commands(0) == []


def test_server_cpu_counts_a_process_tree_that_works_in_nanoseconds() -> None:
    """bench/hot_paths.py reads the PostgreSQL cluster's CPU around each step: a parent's and its
    live children's run time, at a resolution far finer than /proc's 10 ms ticks. The kernel brings
    a task's run time up to date when it stops running, so the reading is exact for a server waiting
    on its next statement; the child here works as a backend does, then waits for its next line."""
    work = "import sys\nfor _ in sys.stdin:\n    sum(range(200_000))\n    print(flush=True)\n"
    child = subprocess.Popen([sys.executable, "-c", work], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    stdin, stdout = child.stdin, child.stdout
    assert stdin is not None and stdout is not None
    try:

        def step() -> None:  # one piece of work, well under one 10 ms tick of CPU, then waiting again
            stdin.write("go\n")
            stdin.flush()
            stdout.readline()

        step()  # past the interpreter's start
        before = server_cpu_seconds(child.pid)
        step()
        after = server_cpu_seconds(child.pid)
        assert 0 < after - before < 1
        assert after <= server_cpu_seconds(os.getpid())  # the child's time is part of its parent's tree
    finally:
        child.communicate("")
