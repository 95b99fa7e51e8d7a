"""What the demo submits where: the seven scenarios to the default provider (all it has with one
provider, as before), and two tasks, one told to fail, to each other configured vendor."""

from __future__ import annotations

from collections import Counter

from app.demo import ELSEWHERE, SCENARIOS, plan


def test_one_provider_gets_the_seven_scenarios() -> None:
    tasks = plan("r1", ["simulator"], "simulator")
    assert [t.correlation_id for t in tasks] == [f"demo-r1-{name}" for name, _, _ in SCENARIOS]
    assert {t.provider for t in tasks} == {"simulator"}


def test_each_other_vendor_gets_a_success_and_a_failure() -> None:
    tasks = plan("r2", ["polled", "simulator", "stripe"], "simulator")
    assert Counter(t.provider for t in tasks) == {"simulator": len(SCENARIOS), "stripe": 2, "polled": 2}
    stripe = [t for t in tasks if t.provider == "stripe"]
    assert [t.correlation_id for t in stripe] == [f"demo-r2-stripe-{name}" for name, _, _ in ELSEWHERE]
    assert sorted(t.final for t in stripe) == ["failed", "succeeded"]
    assert len({t.correlation_id for t in tasks}) == len(tasks)


def test_without_a_default_the_first_provider_gets_the_scenarios() -> None:
    tasks = plan("r3", ["a", "b"], None)
    assert Counter(t.provider for t in tasks) == {"a": len(SCENARIOS), "b": len(ELSEWHERE)}
