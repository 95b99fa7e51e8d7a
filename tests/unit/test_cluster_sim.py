"""bin/cluster-sim's pure parts (bench/cluster): the address plan, which must keep every address on the
run's private subnet, and the verdict over what a run recorded (lost, done twice, completed twice,
callbacks out of order, the time to recover). The simulation itself needs root and minutes: it is a
script (docs/runbook.md, "Cluster simulation"), never run as a test."""

from __future__ import annotations

import ipaddress
from collections import Counter

from bench.chaos.domain import COMPLETED, Received
from bench.chaos.driver import make_jobs
from bench.chaos.report import Accounting, account
from bench.cluster.plan import BRIDGE, PREFIX, SUBNET, make_plan
from bench.cluster.verdict import Verdict, disorder, order_fault, recovery


def test_every_address_is_on_the_private_subnet_and_distinct() -> None:
    plan = make_plan()
    addresses = [plan.service, *(h.address for h in plan.hosts)]
    assert len(set(addresses)) == len(addresses) == 10
    assert all(ipaddress.IPv4Address(a) in SUBNET for a in addresses)
    assert SUBNET.is_private and SUBNET.prefixlen == 24
    assert [h.name for h in plan.liaison] == ["lh1", "lh2", "lh3"]
    assert [h.address for h in plan.rabbit] == ["10.241.0.21", "10.241.0.22", "10.241.0.23"]
    # everything the run makes carries its prefix, within the kernel's 15 characters for a link
    assert all(h.netns.startswith(PREFIX) and len(h.veth) <= 15 for h in plan.hosts) and len(BRIDGE) <= 15


def test_the_broker_urls_name_every_node_of_the_cluster() -> None:
    plan = make_plan()
    assert plan.amqp_url() == ";".join(
        f"amqp://guest:guest@10.241.0.2{n}:5672//" for n in (1, 2, 3)
    )  # kombu's failover list
    assert (
        plan.sentinel_url() == "sentinel://10.241.0.31:26379;sentinel://10.241.0.32:26379;sentinel://10.241.0.33:26379"
    )
    assert plan.rabbit_node(plan.rabbit[1]) == "rabbit@10.241.0.22"  # long names: no name resolution


def _arrivals(*events: tuple[str, int | None, str]) -> list[tuple[float, str, int | None, str]]:
    return [(float(n), kind, seq, mid) for n, (kind, seq, mid) in enumerate(events)]


def test_callbacks_in_sequence_are_in_order_and_a_redelivery_of_the_latest_is_allowed() -> None:
    assert order_fault(_arrivals(("task.accepted", 1, "a"), (COMPLETED, 2, "b"))) is None
    assert order_fault(_arrivals(("task.accepted", 1, "a"), ("task.accepted", 1, "a"), (COMPLETED, 2, "b"))) is None
    assert order_fault(_arrivals((COMPLETED, 2, "b"), (COMPLETED, 2, "b"))) is not None  # #1 never came


def test_callbacks_out_of_order_missing_or_unnumbered_are_found() -> None:
    later_first = _arrivals((COMPLETED, 2, "b"), ("task.accepted", 1, "a"))
    assert order_fault(later_first) == "task.accepted #1 after #2"
    old_again = _arrivals(("task.accepted", 1, "a"), (COMPLETED, 2, "b"), ("task.accepted", 1, "a"))
    assert order_fault(old_again) == "task.accepted #1 after #2"
    assert (
        order_fault(_arrivals(("task.accepted", 1, "a"), (COMPLETED, 3, "c"))) == "sequence 2 never came (got [1, 3])"
    )
    assert order_fault(_arrivals((COMPLETED, None, "c"))) == "task.completed c without a sequence"
    assert order_fault(_arrivals(("task.accepted", 1, "a"), ("task.accepted", 2, "a"))) is not None
    received = {"ok": Received(arrivals=_arrivals(("x", 1, "a"))), "bad": Received(arrivals=later_first)}
    assert disorder(received) == {"bad": "task.accepted #1 after #2"}


def test_recovery_measures_the_first_new_completion_and_the_jobs_in_flight() -> None:
    accepted = {"before-done": 1.0, "in-flight-1": 8.0, "in-flight-2": 9.0, "after-1": 12.0, "after-2": 11.0}
    completed = {"before-done": 5.0, "in-flight-1": 30.0, "in-flight-2": 14.0, "after-1": 13.0, "after-2": 25.0}
    r = recovery("node killed", 10.0, accepted, completed)
    assert (r.first_new, r.backlog, r.in_flight) == (3.0, 20.0, 2)
    assert "3.0s later" in r.line() and "the 2 jobs in flight" in r.line()
    never = recovery("host lost", 10.0, accepted, {"before-done": 5.0})
    assert (never.first_new, never.backlog) == (None, None)
    assert "never" in never.line()


def _accounting(**changes: object) -> Accounting:
    base: dict[str, object] = {
        "jobs": 3, "states": Counter({"succeeded": 3}), "final": 3, "lost": [], "doubled": {},
        "completed_twice": {}, "redeliveries": 0, "not_succeeded": {},
    }  # fmt: skip
    return Accounting(**{**base, **changes})  # type: ignore[arg-type]


def test_the_verdict_fails_on_any_loss_double_disorder_or_exit() -> None:
    assert Verdict("rabbit", _accounting(), {}, []).passed
    failing = [
        Verdict("rabbit", _accounting(lost=["x"]), {}, []),
        Verdict("rabbit", _accounting(doubled={"x": 2}), {}, []),
        Verdict("rabbit", _accounting(completed_twice={"x": ["a", "b"]}), {}, []),
        Verdict("rabbit", _accounting(), {"x": "task.accepted #1 after #2"}, []),
        Verdict("rabbit", _accounting(), {}, ["lh1-worker (pid 7) exited with 1"]),
    ]
    assert [v.passed for v in failing] == [False] * 5
    assert all(v.summary().startswith("FAIL rabbit: 3 jobs") for v in failing)
    line = Verdict(
        "redis", _accounting(), {}, [], [recovery("primary killed", 2.0, {"a": 1.0, "b": 3.0}, {"a": 4.0, "b": 5.0})]
    )
    assert line.summary() == (
        "PASS redis: 3 jobs, 0 lost, 0 done twice at the vendor, 0 completed twice, 0 out of order, 0 process exits;"
        " recovered (first new completion/in-flight all done): primary killed 3.0s/2.0s"
    )


def test_the_verdict_reads_a_job_done_twice_at_the_vendor_from_its_record() -> None:
    jobs = make_jobs(2, seed=1, run_id="t")
    one, two = (job.correlation_id for job in jobs)
    done = {cid: Received(ids={COMPLETED: {f"m-{cid}"}}, state="succeeded") for cid in (one, two)}
    vendor = [{"job_id": "v1", "status": "succeeded", "input": {"job": one}}]
    vendor += [{"job_id": f"v{n}", "status": "succeeded", "input": {"job": two}} for n in (2, 3)]
    acc = account(jobs, {one: "succeeded", two: "succeeded"}, done, vendor)
    assert acc.doubled == {two: 2} and not acc.lost
    assert not Verdict("hosts", acc, {}, []).passed
