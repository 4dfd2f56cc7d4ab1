"""The event engine: one clock, events in (time, phase, seq) order, cancellation (agentreplay.engine)."""

from __future__ import annotations

import heapq

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentreplay.engine import PHASE_COMPLETE, PHASE_RELEASE, PHASE_SCHEDULE, Engine


def test_events_run_in_time_phase_and_scheduling_order() -> None:
    eng, seen = Engine(), []
    eng.at(1.0, PHASE_SCHEDULE, seen.append, "schedule@1")
    eng.at(1.0, PHASE_COMPLETE, seen.append, "complete@1")
    eng.at(0.5, PHASE_SCHEDULE, seen.append, "schedule@0.5")
    eng.at(1.0, PHASE_RELEASE, seen.append, "release@1 a")
    eng.at(1.0, PHASE_RELEASE, seen.append, "release@1 b")
    eng.run()
    assert seen == ["schedule@0.5", "complete@1", "release@1 a", "release@1 b", "schedule@1"]
    assert eng.now == 1.0 and eng.events_processed == 5


def test_a_cancelled_event_does_not_run_but_is_counted_when_due() -> None:
    eng, seen = Engine(), []
    stale = eng.at(2.0, PHASE_COMPLETE, seen.append, "stale")
    eng.at(1.0, PHASE_COMPLETE, lambda _: stale.cancel())
    eng.at(3.0, PHASE_COMPLETE, seen.append, "later")
    eng.run()
    assert seen == ["later"]
    assert eng.events_processed == 3  # lazy deletion: popped like any other (the summary's event count)
    stale.cancel()  # cancelling again, or after it was due, is harmless
    assert stale.cancelled


def test_nothing_else_now_and_no_event_in_the_past() -> None:
    eng = Engine()
    assert eng.nothing_else_now()
    ev = eng.at(0.0, PHASE_SCHEDULE, lambda _: None)
    assert not eng.nothing_else_now()
    ev.cancel()
    assert not eng.nothing_else_now()  # a cancelled event is still in the heap until popped
    eng.run()
    with pytest.raises(ValueError, match="in the past"):
        eng.at(-1.0, PHASE_SCHEDULE, lambda _: None)
    assert eng.peek_time() is None


class _TupleEngine:
    """The reference: events as (time, phase, seq, handler, arg) tuples in :mod:`heapq` (the order the engine
    documents)."""

    def __init__(self) -> None:
        self.now, self.heap, self.seq = 0.0, [], 0

    def at(self, t: float, phase: int, handler, arg) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, phase, self.seq, handler, arg))

    def run(self) -> None:
        while self.heap:
            t, _, _, handler, arg = heapq.heappop(self.heap)
            self.now = t
            handler(arg)


def _replay(eng, plan: list[tuple[float, int, int]]) -> list[int]:
    """Run ``plan`` on ``eng``: the first events up front, each handler scheduling the next planned ones (never
    in the past), so pushes interleave with pops; returns the labels in the order they ran."""
    seen: list[int] = []
    pending = list(reversed(plan))

    def handler(label: int) -> None:
        seen.append(label)
        for _ in range(label % 3):
            if pending:
                t, phase, nxt = pending.pop()
                eng.at(max(t, eng.now), phase, handler, nxt)

    for _ in range(3):
        if pending:
            t, phase, nxt = pending.pop()
            eng.at(t, phase, handler, nxt)
    eng.run()
    return seen


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0.0, 0.5, 1.0, 1.5, 2.0, 7.25]), st.sampled_from([0, 1, 2])), max_size=80))
def test_the_heap_runs_events_in_the_order_of_heapq_on_time_phase_seq_tuples(plan: list[tuple[float, int]]) -> None:
    """The engine's own heap (events compared by time, then phase * 2**48 + seq) against heapq on tuples, with
    many ties in time and phase, and pushes interleaved with pops."""
    labelled = [(t, phase, k + 1) for k, (t, phase) in enumerate(plan)]
    assert _replay(Engine(), labelled) == _replay(_TupleEngine(), labelled)
