"""The run hides the objects that existed before it from the cyclic garbage collector and collects its youngest
generation less often (agentreplay.sim.run frozen_heap), and gives both back after, whatever way the run ends; a
caller's own freeze is kept."""

from __future__ import annotations

import gc

import pytest

from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace

TRACE = make_trace([[(400, 5, 0.1), (500, 5, None)], [(300, 4, None)]])


@pytest.fixture(autouse=True)
def _nothing_frozen():
    gc.unfreeze()
    yield
    gc.unfreeze()


def test_the_heap_is_frozen_during_the_run_and_given_back_after() -> None:
    from agentreplay.sim.run import YOUNG_THRESHOLD

    before = gc.get_threshold()
    during: list[tuple[int, int]] = []
    simulate(
        TRACE, SimConfig(), progress=lambda done, total: during.append((gc.get_freeze_count(), gc.get_threshold()[0]))
    )
    assert during and min(f for f, _ in during) > 0
    assert {t for _, t in during} == {max(before[0], YOUNG_THRESHOLD)}
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_the_heap_is_given_back_when_the_run_fails() -> None:
    def boom(done: int, total: int) -> None:
        raise KeyboardInterrupt

    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt):
        simulate(TRACE, SimConfig(), progress=boom)
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_a_callers_own_freeze_is_kept() -> None:
    gc.freeze()
    frozen = gc.get_freeze_count()
    assert frozen > 0
    simulate(TRACE, SimConfig())
    assert gc.get_freeze_count() >= frozen
