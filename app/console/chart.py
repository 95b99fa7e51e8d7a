"""The overview's chart, drawn on the server as SVG: completions and failures per minute over the
last hour. A plain function of the counts (no I/O), so it is tested on its own; no script, no
library, nothing fetched."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

WIDTH, HEIGHT = 720, 180
LEFT, RIGHT, TOP, BOTTOM = 44, 8, 10, 24
COLOURS = {"succeeded": "#2e7d32", "failed": "#c62828"}


def _nice_max(value: int) -> int:
    """The axis top: the smallest of 1, 2, 5, 10, 20, 50, … at or above ``value``."""
    top = 1
    while top < value:
        top = top * 5 // 2 if str(top)[0] == "2" else top * 2
    return top


def finished_chart(minutes: Sequence[tuple[datetime, int, int]]) -> str:
    """``minutes``: (minute start, succeeded, failed), oldest first. Bars stack failed on succeeded."""
    n = max(len(minutes), 1)
    peak = max((s + f for _, s, f in minutes), default=0)
    top = _nice_max(peak)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    bar_w = plot_w / n
    total_s = sum(s for _, s, _ in minutes)
    total_f = sum(f for _, _, f in minutes)
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" width="{WIDTH}" height="{HEIGHT}"'
        f' role="img" aria-label="tasks finished per minute, last {n} minutes: {total_s} succeeded, {total_f} failed">',
        f'<line x1="{LEFT}" y1="{TOP + plot_h}" x2="{WIDTH - RIGHT}" y2="{TOP + plot_h}" stroke="#888"/>',
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + plot_h}" stroke="#888"/>',
        f'<text x="{LEFT - 4}" y="{TOP + 8}" text-anchor="end" font-size="10">{top}</text>',
        f'<text x="{LEFT - 4}" y="{TOP + plot_h}" text-anchor="end" font-size="10">0</text>',
    ]
    for i, (start, succeeded, failed) in enumerate(minutes):
        x = LEFT + i * bar_w
        base = float(TOP + plot_h)
        for series, count in (("succeeded", succeeded), ("failed", failed)):
            if count <= 0:
                continue
            h = plot_h * count / top
            base -= h
            label = escape(f"{start:%H:%M} {series}: {count}")
            parts.append(
                f'<rect x="{x + 0.5:.1f}" y="{base:.1f}" width="{max(bar_w - 1, 1):.1f}" height="{h:.1f}"'
                f' fill="{COLOURS[series]}" class="{series}"><title>{label}</title></rect>'
            )
        if i % 10 == 0 or i == n - 1:
            parts.append(
                f'<text x="{x + bar_w / 2:.1f}" y="{HEIGHT - 8}" text-anchor="middle" font-size="10">'
                f"{start:%H:%M}</text>"
            )
    parts.append("</svg>")
    return "".join(parts)
