"""The console's server-drawn chart (a pure function of the counts), and the browser tests' rule
for a missing Chromium: skip with the reason outside CI, fail under CI."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest

from app.console.chart import _nice_max, finished_chart
from tests.integration import browser

START = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


def _minutes(counts: list[tuple[int, int]]) -> list[tuple[datetime, int, int]]:
    return [(START + timedelta(minutes=i), s, f) for i, (s, f) in enumerate(counts)]


@pytest.mark.parametrize(("value", "top"), [(0, 1), (1, 1), (2, 2), (3, 5), (7, 10), (11, 20), (51, 100), (999, 1000)])
def test_the_axis_top_is_a_round_number_at_or_above_the_peak(value: int, top: int) -> None:
    assert _nice_max(value) == top


def test_bars_stack_failures_on_successes_and_scale_to_the_axis() -> None:
    svg = finished_chart(_minutes([(0, 0)] * 58 + [(6, 4), (3, 0)]))
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert 'aria-label="tasks finished per minute, last 60 minutes: 9 succeeded, 4 failed"' in svg
    rects = re.findall(r'height="([0-9.]+)" fill="#[0-9a-f]+" class="(succeeded|failed)"', svg)
    assert [kind for _, kind in rects] == ["succeeded", "failed", "succeeded"]
    assert "<title>12:58 succeeded: 6</title>" in svg and "<title>12:58 failed: 4</title>" in svg
    six, four, three = (float(h) for h, _ in rects)
    assert six == pytest.approx(four * 1.5) and six == pytest.approx(three * 2)  # axis top 10: 6, 4, 3
    assert ">10</text>" in svg and "12:00" in svg and "12:59" in svg


def test_an_empty_hour_draws_axes_and_no_bar() -> None:
    svg = finished_chart(_minutes([(0, 0)] * 60))
    assert "<rect" not in svg and "0 succeeded, 0 failed" in svg


def test_missing_chromium_skips_outside_ci_and_fails_under_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(browser, "CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match="run bin/setup-browser"):
        browser.require_chromium()
    monkeypatch.setenv("CI", "1")
    with pytest.raises(pytest.fail.Exception, match="CI runs bin/test"):
        browser.require_chromium()
