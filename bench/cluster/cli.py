"""``bin/cluster-sim``: the cluster test by simulation (issue 41, point 4). For each scenario it builds,
in network namespaces of its own on a private subnet, three Liaison hosts running the Procfile's
processes, a broker cluster (RabbitMQ with quorum queues, or Redis with Sentinel) and, on the service
host, PostgreSQL, the vendor simulator, a load balancer and a recording domain app; drives jobs through
it while it kills broker nodes and Liaison hosts; then judges every job: 0 lost, 0 done twice at the
vendor, 0 completed twice, every task's callbacks in order, no process exited on its own, and the time
to recover from each fault. Exit 0 only when every scenario passes. Not a test: bin/test and CI never
run it (it takes minutes and needs root). docs/runbook.md, "Cluster simulation"."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import os
import random
import secrets
import shutil
import signal
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests

from bench.chaos.domain import DomainApp
from bench.chaos.driver import Driver, make_jobs
from bench.chaos.platform import TUNING
from bench.chaos.procs import Proc, procfile
from bench.chaos.report import account, listing
from bench.chaos.timeline import Timeline
from bench.cluster.balancer import Balancer
from bench.cluster.hosts import WEB_PORT, LiaisonCluster
from bench.cluster.net import Network, clean_leftovers, leftovers
from bench.cluster.nodes import SENTINEL_MASTER, RabbitCluster, RedisSentinel
from bench.cluster.plan import SUBNET, Plan, make_plan
from bench.cluster.scenarios import SCENARIOS, Faults, Step
from bench.cluster.verdict import Verdict, completions, disorder, recovery
from bench.postgres_cluster import PostgresCluster
from bench.services import free_port
from webhooks.signing import generate_secret

SETTLE_S = 10.0  # listening on after the last task.completed: a second one would show here
RECONCILE_EVERY_S = 30.0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bin/cluster-sim",
        description="Cluster test by simulation (needs root: network namespaces on the private subnet "
        f"{SUBNET}, nothing routed elsewhere): three Liaison hosts running the Procfile's processes, a "
        "three-node RabbitMQ cluster with quorum queues or Redis with Sentinel, one PostgreSQL; jobs driven "
        "through them while broker nodes and Liaison hosts are killed and cut off. Scenarios: rabbit (a "
        "RabbitMQ node SIGKILLed, brought back, then another restarted), redis (the Sentinel primary "
        "SIGKILLed, the replica promoted), hosts (on RabbitMQ: every process of one Liaison host SIGKILLed, "
        "another host cut off, then reconnected). Prints per scenario the lost, done twice at the vendor, "
        "completed twice and out-of-order counts, the processes that exited on their own and the time to "
        "recover from each fault; exit status 0 only when every scenario has all of them 0.",
    )
    parser.add_argument("--scenario", choices=(*SCENARIOS, "all"), default="all", help="default: all, in order")
    parser.add_argument("--tasks", type=int, default=120, help="jobs per scenario (default 120)")
    parser.add_argument("--rate", type=float, default=1.5, help="jobs submitted per second (default 1.5)")
    parser.add_argument("--cut-s", type=float, default=30.0, help="hosts: how long a host stays cut off (default 30)")
    parser.add_argument("--seed", type=int, default=None, help="the job mix's seed (default: random)")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds after the last submit to wait for stragglers (300)"
    )
    parser.add_argument("--keep-logs", action="store_true", help="keep every process's log (kept on failure)")
    parser.add_argument(
        "--clean-leftovers",
        action="store_true",
        help="remove the namespaces and bridge a killed run left behind (and their processes), then exit",
    )
    args = parser.parse_args(argv)
    if args.tasks < 10 or args.rate <= 0 or args.cut_s <= 0:
        parser.error("--tasks must be at least 10, --rate and --cut-s above 0")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    return args


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM, SIGHUP too: clean up every process, namespace and folder


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if os.geteuid() != 0:
        print("bin/cluster-sim needs root (it makes network namespaces)", file=sys.stderr)
        return 2
    if args.clean_leftovers:
        print(f"removed: {', '.join(clean_leftovers()) or 'nothing'}")
        return 0
    if found := leftovers():  # before anything is made: a refused run leaves nothing behind either
        print(
            f"a previous run left {', '.join(found)} behind: is another bin/cluster-sim running? If not, "
            "bin/cluster-sim --clean-leftovers removes them",
            file=sys.stderr,
        )
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _interrupted)
    scenarios = list(SCENARIOS) if args.scenario == "all" else [args.scenario]
    plan = make_plan()
    tmp = Path(tempfile.mkdtemp(prefix="liaison-cluster-sim-"))
    logs = tmp / "logs"
    logs.mkdir()
    print(
        f"== bin/cluster-sim: {', '.join(scenarios)}; {args.tasks} jobs each at {args.rate:g}/s, seed {args.seed};"
        f" subnet {SUBNET}; logs in {logs}",
        flush=True,
    )
    results: list[Verdict] = []
    try:
        _build_and_run(args, scenarios, plan, tmp, results)
    except BaseException:  # every process, namespace and data folder is gone by now (the stack unwound)
        print(f"bin/cluster-sim stopped early; logs of every process: {logs}", file=sys.stderr, flush=True)
        raise
    print("", flush=True)
    print("== bin/cluster-sim: every scenario", flush=True)
    for verdict in results:
        print(verdict.summary(), flush=True)
    ok = bool(results) and all(v.passed for v in results)
    print(f"{'PASS' if ok else 'FAIL'}: bin/cluster-sim {', '.join(scenarios)}", flush=True)
    if ok and not args.keep_logs:
        shutil.rmtree(tmp, ignore_errors=True)
    else:
        print(f"logs of every process: {logs}", flush=True)
    return 0 if ok else 1


def _build_and_run(
    args: argparse.Namespace, scenarios: list[str], plan: Plan, tmp: Path, results: list[Verdict]
) -> None:
    """The network, PostgreSQL and the vendor, then each scenario; everything undone on the way out."""
    logs = tmp / "logs"
    with ExitStack() as stack:
        net = Network(plan)
        atexit.register(net.destroy)  # even if the stack below is not unwound (it is, normally)
        stack.callback(net.destroy)
        net.build()
        pg = PostgresCluster(
            {"listen_addresses": f"127.0.0.1,{plan.service}", "max_connections": "600"},
            hba=(f"host all all {SUBNET} trust",),
        )
        stack.callback(pg.cleanup)
        stack.callback(_copy, pg.log, logs / "postgres.log")
        pg.start()
        vendor_secret = generate_secret()
        vendor = _vendor(plan, vendor_secret, logs)
        stack.callback(vendor.stop)
        vendor.start()
        _wait_http(f"{_vendor_url(plan, vendor)}/healthz")
        for name in scenarios:
            results.append(_scenario(name, args, plan, net, pg, vendor, vendor_secret, tmp))


def _vendor(plan: Plan, secret: str, logs: Path) -> Proc:
    """The Procfile's ``vendor`` (the simulator) on the service host: its line binds 127.0.0.1, here the
    bridge's address, the one the Liaison hosts reach."""
    port = free_port()
    line = procfile()["vendor"].replace("--bind 127.0.0.1:", f"--bind {plan.service}:")
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
        "PYTHONUNBUFFERED": "1",
        "SIMULATOR_PORT": str(port),
        "SIMULATOR_WEBHOOK_SECRET": secret,
    }
    return Proc("vendor", line, env, logs)


def _vendor_url(plan: Plan, vendor: Proc) -> str:
    return f"http://{plan.service}:{vendor.env['SIMULATOR_PORT']}"


def _scenario(
    name: str,
    args: argparse.Namespace,
    plan: Plan,
    net: Network,
    pg: PostgresCluster,
    vendor: Proc,
    vendor_secret: str,
    tmp: Path,
) -> Verdict:
    timeline = Timeline()
    base = tmp / name
    logs = tmp / "logs" / name
    logs.mkdir(parents=True)
    print(f"\n== scenario {name}", flush=True)
    vendor_url = _vendor_url(plan, vendor)
    requests.post(f"{vendor_url}/_sim/reset", timeout=10).raise_for_status()
    admin_token = secrets.token_urlsafe(32)
    with ExitStack() as stack:
        # the brokers' and hosts' data folders go, whatever happens, after their processes (logs stay)
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        domain = DomainApp(plan.service)
        stack.callback(domain.close)
        balancer = Balancer(plan.service, [(h.address, WEB_PORT) for h in plan.liaison])
        stack.callback(balancer.close)
        env: dict[str, str] = {
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}",
            "PYTHONUNBUFFERED": "1",
            "DATABASE_URL": pg.create_database(f"liaison_{name}"),
            "LIAISON_PUBLIC_URL": balancer.url,
            "LIAISON_PROVIDERS": "sim",
            "LIAISON_PROVIDER_SIM_BASE_URL": vendor_url,
            "LIAISON_PROVIDER_SIM_WEBHOOK_SECRETS": vendor_secret,
            "LIAISON_OUTBOUND_ALLOW": f"{plan.service}:{domain.port}",
            "LIAISON_ADMIN_TOKEN": admin_token,
            "LIAISON_METRICS_TOKEN": secrets.token_urlsafe(32),
            **{key: value for key, value, _ in TUNING},
        }
        env["DATABASE_URL"] = env["DATABASE_URL"].replace("@127.0.0.1:", f"@{plan.service}:")
        rabbit: RabbitCluster | None = None
        redis: RedisSentinel | None = None
        if name in ("rabbit", "hosts"):
            rabbit = RabbitCluster(plan, net, base, logs)
            stack.callback(_stop_all, rabbit.procs.values(), net, plan.rabbit)
            rabbit.start_all()
            env |= {"CELERY_BROKER_URL": plan.amqp_url(), "LIAISON_RABBITMQ_QUEUE_TYPE": "quorum"}
            timeline.log(f"RabbitMQ cluster up: {', '.join(plan.rabbit_node(h) for h in plan.rabbit)}")
        else:
            redis = RedisSentinel(plan, net, base, logs)
            stack.callback(_stop_all, redis.procs().values(), net, plan.redis)
            redis.start_all()
            env |= {"CELERY_BROKER_URL": plan.sentinel_url(), "LIAISON_REDIS_SENTINEL_MASTER": SENTINEL_MASTER}
            timeline.log(f"Redis primary {redis.primary()}, replica {plan.redis[1].address}, 3 Sentinels")
        cluster = LiaisonCluster(plan, net, env, base, logs)
        stack.callback(cluster.stop)
        stack.callback(_restore_links, net, plan)  # a host cut off when the run failed: stop it cleanly
        cluster.migrate()
        cluster.start()
        timeline.log(f"Liaison hosts up: {', '.join(f'{h.name} {h.address}' for h in plan.liaison)}")
        api_key, secret = cluster.create_client(domain.url)
        domain.serve(secret)

        jobs = make_jobs(args.tasks, args.seed, f"{name}-{uuid.uuid4().hex[:6]}")
        window_s = args.tasks / args.rate
        steps = _steps(name, args, plan, net, cluster, rabbit, redis, timeline)
        driver = Driver(balancer.url, api_key, jobs, 4, args.rate, timeline)
        faults = Faults(steps, window_s, timeline)
        exits: list[str] = []
        driver.start()
        faults.start()
        _follow(args, timeline, driver, faults, domain, cluster, balancer.url, admin_token, len(jobs), exits)

        received = domain.snapshot()
        accounting = account(jobs, _task_states(balancer.url, api_key), received, _vendor_jobs(vendor_url))
        done_at = completions(received, timeline.t0)
        recoveries = [recovery(label, at, driver.accepted, done_at) for label, at in faults.began]
        verdict = Verdict(name, accounting, disorder(received), exits + faults.failures, recoveries)
        print(_details(verdict, timeline, domain, balancer), flush=True)
        return verdict


def _steps(
    name: str,
    args: argparse.Namespace,
    plan: Plan,
    net: Network,
    cluster: LiaisonCluster,
    rabbit: RabbitCluster | None,
    redis: RedisSentinel | None,
    timeline: Timeline,
) -> list[Step]:
    if name == "rabbit":
        assert rabbit is not None
        first, second = plan.rabbit[0], plan.rabbit[1]

        def back() -> str:
            rabbit.start(first)
            rabbit.ctl(first, "await_online_nodes", str(len(plan.rabbit)))
            return "rejoined the cluster"

        def restart() -> str:
            rabbit.restart(second)
            rabbit.ctl(second, "await_online_nodes", str(len(plan.rabbit)))
            return "stopped, started, rejoined"

        return [
            # rmq1 is the first of every process's failover list: every connection moves
            Step(0.2, f"RabbitMQ node {first.name} SIGKILLed", lambda: _pids(net.kill_all(first))),
            Step(0.2, f"RabbitMQ node {first.name} started again", back, fault=False, after=15.0),
            Step(0.55, f"RabbitMQ node {second.name} restarted (rabbitmqctl stop, start)", restart, after=10.0),
        ]
    if name == "redis":
        assert redis is not None

        def kill_primary() -> str:
            host = redis.kill_primary()
            return f"redis-server on {host.name} ({host.address})"

        def promoted() -> str:
            deadline = time.monotonic() + 60
            while (primary := redis.primary()) == plan.redis[0].address and time.monotonic() < deadline:
                time.sleep(0.2)
            return f"Sentinel's primary is now {primary}"

        return [
            Step(0.35, "Redis primary SIGKILLed", kill_primary),
            Step(0.35, "replica promoted", promoted, fault=False),
        ]
    lost, cut = plan.liaison[1], plan.liaison[2]
    return [
        Step(0.25, f"Liaison host {lost.name} lost (every process SIGKILLed)", lambda: _pids(cluster.kill_host(lost))),
        Step(0.5, f"Liaison host {cut.name} cut off (its link dropped)", lambda: net.cut(cut)),
        Step(0.5, f"Liaison host {cut.name} reconnected", lambda: net.restore(cut), fault=False, after=args.cut_s),
    ]


def _pids(killed: int | list[int]) -> str:
    return f"{killed if isinstance(killed, int) else len(killed)} processes"


def _follow(
    args: argparse.Namespace,
    timeline: Timeline,
    driver: Driver,
    faults: Faults,
    domain: DomainApp,
    cluster: LiaisonCluster,
    front: str,
    admin_token: str,
    total: int,
    exits: list[str],
) -> None:
    """Until every job has its task.completed (and a little longer), or the timeout after the last submit."""
    last_progress = last_reconcile = time.monotonic()
    submitted_at: float | None = None
    while True:
        time.sleep(1.0)
        now = time.monotonic()
        completed = len(domain.completed())
        for restarted in cluster.supervise():
            exits.append(restarted)
            timeline.log(f"UNEXPECTED: {restarted}")
        if driver.done() and submitted_at is None:
            submitted_at = now
            timeline.log(f"all {len(driver.accepted)} jobs submitted")
        if now - last_reconcile >= RECONCILE_EVERY_S:
            last_reconcile = now  # the operator's "reconcile now": finds the jobs whose webhooks were dropped
            with contextlib.suppress(requests.RequestException):
                headers = {"Authorization": f"Bearer {admin_token}"}
                requests.post(f"{front}/admin/v1/reconcile", headers=headers, timeout=30)
        if now - last_progress >= 20.0:
            last_progress = now
            timeline.note(f"progress: {len(driver.accepted)}/{total} submitted, {completed} completed")
        if submitted_at is not None and faults.done():
            if completed >= total:
                timeline.log(f"all {total} jobs have their task.completed; listening {SETTLE_S:g}s more")
                time.sleep(SETTLE_S)
                return
            if now - submitted_at > args.timeout:
                timeline.log(f"timeout: {total - completed} jobs without task.completed {args.timeout:g}s after")
                return


def _details(verdict: Verdict, timeline: Timeline, domain: DomainApp, balancer: Balancer) -> str:
    acc = verdict.accounting
    lines = [
        "",
        f"-- {verdict.scenario}: result",
        f"jobs final:              {acc.final}/{acc.jobs} ({', '.join(f'{k} {n}' for k, n in acc.states.items())})",
        f"lost:                    {len(acc.lost)}  (no task.completed at the domain app)",
        f"done twice at the vendor: {len(acc.doubled)}  (more than one vendor job for one task)",
        f"completed twice:         {len(acc.completed_twice)}  (task.completed under two webhook-ids;"
        f" redeliveries of one webhook-id: {acc.redeliveries}, allowed)",
        f"out of order:            {len(verdict.out_of_order)}  (a task's callbacks not in sequence 1, 2, 3 …)",
        f"process exits:           {len(verdict.unexpected_exits)}  (a process that ended on its own, a failed step)",
        f"callbacks received:      {domain.callbacks} ({domain.bad_signatures} with a bad signature)",
        f"connections the balancer moved past a lost host: {balancer.skipped}",
        "time to recover:",
        *(f"  {r.line()}" for r in verdict.recoveries),
    ]
    lines += listing("lost", acc.details)
    lines += listing("done twice at the vendor (vendor jobs)", {k: str(v) for k, v in acc.doubled.items()})
    lines += listing("completed twice (webhook-ids)", {k: " ".join(v) for k, v in acc.completed_twice.items()})
    lines += listing("out of order", verdict.out_of_order)
    lines += listing("not succeeded", acc.not_succeeded)
    if verdict.unexpected_exits:
        lines += ["  exits and failed steps:", *(f"    {e}" for e in verdict.unexpected_exits)]
    lines += ["", f"-- {verdict.scenario}: event log", *(f"[{at:7.1f}s] {text}" for at, text in timeline.events)]
    lines += ["", verdict.summary()]
    return "\n".join(lines)


def _task_states(front: str, api_key: str) -> dict[str, str]:
    """correlation id -> state of every task of the client (the public list, 200 a page)."""
    states: dict[str, str] = {}
    cursor = None
    with requests.Session() as session:
        session.headers["Authorization"] = f"Bearer {api_key}"
        while True:
            params = {"limit": "200", **({"cursor": cursor} if cursor else {})}
            page = session.get(f"{front}/api/v1/tasks", params=params, timeout=30).json()
            states.update({t["correlation_id"]: t["state"] for t in page["tasks"]})
            if not (cursor := page.get("next_cursor")):
                return states


def _vendor_jobs(vendor_url: str) -> list[dict[str, Any]]:
    jobs: list[dict[str, Any]] = requests.get(f"{vendor_url}/_sim/jobs", timeout=120).json()["jobs"]
    return jobs


def _wait_http(url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(requests.RequestException):
            if requests.get(url, timeout=5).status_code == 200:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not answer 200 within {timeout:g}s")
        time.sleep(0.3)


def _stop_all(procs: Any, net: Network, hosts: Any) -> None:
    """A broker's processes: SIGKILL (its data folder goes with the run's); and anything else left in
    its hosts' namespaces (epmd)."""
    for proc in procs:
        if proc.running():
            proc.kill_group()
    for host in hosts:
        net.kill_all(host)


def _restore_links(net: Network, plan: Plan) -> None:
    for host in plan.liaison:
        net.restore(host)


def _copy(source: Path, target: Path) -> None:
    if source.exists():
        shutil.copyfile(source, target)
