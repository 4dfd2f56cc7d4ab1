"""The event engine: one clock, events in (time, phase, seq) order, cancellation (agentreplay.engine)."""

from __future__ import annotations

import pytest

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
