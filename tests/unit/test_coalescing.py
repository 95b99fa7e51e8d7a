"""Progress coalescing across a callback's copies (core/coalescing.py), over every interleaving.

A small model of the two ways a callback goes (HTTP relays, a broker channel) drives the pure
rule: reports arrive, and each way starts and finishes its rows in order at a pace hypothesis
picks. Whatever the pace, a ``message_id`` must name one body across both ways, each way's
sequence numbers must only grow, and each way's last progress must be the newest report.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from core.coalescing import Copy, Plan, copy_of, plan
from core.ordering import PendingProgress


def test_the_plan_for_every_mix_of_copies() -> None:
    for size in (1, 2, 3):
        for copies in itertools.product(Copy, repeat=size):
            expected = Plan.NEW if Copy.OPEN not in copies else Plan.RENAMED if Copy.SENT in copies else Plan.IN_PLACE
            assert plan(copies) is expected, copies
    assert plan([Copy.OPEN]) is Plan.IN_PLACE  # HTTP alone: latest wins, as before channels
    assert plan([Copy.UNSENT, Copy.OPEN]) is Plan.IN_PLACE  # a channel-only client: the skipped relay is no copy


@given(st.integers(1, 20), st.integers(1, 20), st.booleans(), st.booleans(), st.booleans())
def test_a_copy_is_open_unsent_or_sent(sequence: int, last: int, attempted: bool, done: bool, left: bool) -> None:
    pending = PendingProgress(sequence, attempted=attempted, done=done)
    found = copy_of(pending, last, may_have_left=left)
    if sequence == last and not attempted and not done:
        assert found is Copy.OPEN
    elif sequence == last and done and not left:
        assert found is Copy.UNSENT
    else:
        assert found is Copy.SENT
    assert copy_of(None, last) is Copy.SENT  # locked by a worker starting it: as if sent


@dataclass
class Row:
    message_id: str
    sequence: int
    body: float
    started: bool = False
    sent_body: float | None = None
    done: bool = False


@dataclass
class Way:
    rows: list[Row] = field(default_factory=list)
    received: list[tuple[str, int, float]] = field(default_factory=list)
    skips: bool = False  # a channel-only client's HTTP relays: ended at their start, nothing sent

    def copy(self) -> Copy:
        latest = self.rows[-1]
        if not latest.started:
            return Copy.OPEN
        return Copy.UNSENT if self.skips and latest.done else Copy.SENT

    def start(self) -> None:
        row = next((r for r in self.rows if not r.done), None)
        if row is None or row.started:
            return
        row.started = True
        if self.skips:
            row.done = True
        else:
            row.sent_body = row.body  # what a worker reads at its start is what it sends

    def finish(self) -> None:
        row = next((r for r in self.rows if r.started and not r.done), None)
        if row is not None and row.sent_body is not None:
            row.done = True
            self.received.append((row.message_id, row.sequence, row.sent_body))


@dataclass
class Task:
    ways: list[Way]
    last: int = 0
    ids: itertools.count[int] = field(default_factory=itertools.count)

    def report(self, figure: float) -> None:
        """What ``service.progress.relay_progress`` does, row for row."""
        chosen = plan(w.copy() for w in self.ways) if self.last else Plan.NEW
        if chosen is Plan.IN_PLACE:
            for way in self.ways:
                if way.copy() is Copy.OPEN:
                    way.rows[-1].body = figure
            return
        self.last += 1
        message_id = f"m{next(self.ids)}"
        for way in self.ways:
            if chosen is Plan.RENAMED and way.copy() is Copy.OPEN:
                way.rows[-1] = Row(message_id, self.last, figure)
            else:
                way.rows.append(Row(message_id, self.last, figure))


STEPS = st.lists(st.sampled_from(["report", "start0", "finish0", "start1", "finish1"]), max_size=60)


@given(STEPS, st.booleans())
def test_one_message_id_one_body_and_each_way_hears_the_newest(steps: list[str], channel_only: bool) -> None:
    task = Task([Way(skips=channel_only), Way()])
    figure = 0.0
    for step in steps:
        if step == "report":
            figure += 1
            task.report(figure)
        else:
            way = task.ways[int(step[-1])]
            way.start() if step.startswith("start") else way.finish()
    if figure == 0:
        return
    for way in task.ways:  # every earlier event through
        while not all(r.done for r in way.rows):
            way.start()
            way.finish()
    bodies: dict[str, float] = {}
    for way in task.ways:
        for message_id, _, body in way.received:
            assert bodies.setdefault(message_id, body) == body, f"{message_id} carried two bodies"
        sequences = [sequence for _, sequence, _ in way.received]
        assert sequences == sorted(set(sequences))  # only grows
    last_ways = task.ways[1:] if channel_only else task.ways
    for way in last_ways:
        assert way.received[-1][2] == figure  # the newest figure, once its earlier events are through
