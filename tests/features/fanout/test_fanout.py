"""Fan-out joins and sibling prefix sharing, hand-computed (constant pricer: every iteration 0.01 s)."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

CONST = LinearPerf(a=0.01, b=0.0)


def link(trace, parent: str, turn: int, delay_s: float | None = None):  # type: ignore[no-untyped-def]
    """Make every program but the first a child of ``parent``'s turn ``turn``."""
    progs = trace.programs
    n = len(progs)
    progs["parent_program_id"] = [None] + [parent] * (n - 1)
    progs["parent_turn_idx"] = [None] + [turn] * (n - 1)
    progs["spawn_delay_s"] = [None] + [delay_s] * (n - 1)
    return trace


def family(gap_s: float, *, delay_s: float | None = None):  # type: ignore[no-untyped-def]
    """p0: turn 0 (100 prompt, 1 output, tool ``gap_s``) spawns p1 and p2 (one turn each: 120 prompt, 2 output),
    then turn 1 (200 prompt, 1 output). The children share min(100, 120) = 100 tokens = 6 full blocks."""
    trace = make_trace([[(100, 1, gap_s), (200, 1, None)], [(120, 2, None)], [(120, 2, None)]])
    return link(trace, "p0", 0, delay_s)


def cfg(instances: int = 1, router: str = "least-loaded") -> SimConfig:
    return SimConfig().replace(
        cache={"num_gpu_blocks": 1000},
        workload={"concurrency": 4},
        hardware={"instances": instances},
        router={"policy": router},
    )


def test_parent_waits_for_its_children_when_they_outlast_the_tool_gap() -> None:
    """p0 turn 0: one 0.01 s prefill iteration emits its only token: finishes at 0.01 s. p1 and p2 arrive then
    and run together: prefill iteration 0.01 -> 0.02 (first token), one decode iteration -> 0.03 (finish). The
    parent's 5 ms gap ended at 0.015, so the join releases turn 1 at 0.03; it finishes one iteration later."""
    res = simulate(family(0.005), cfg(), perf=CONST)
    t = res.turns
    assert t["finish_s"].tolist() == pytest.approx([0.01, 0.04, 0.03, 0.03])
    assert t["release_s"][1] == pytest.approx(0.03)
    p = res.programs
    assert p["arrival_s"].tolist() == pytest.approx([0.0, 0.01, 0.01])
    assert p["jct_s"].tolist() == pytest.approx([0.04, 0.02, 0.02])


def test_parent_waits_for_its_tool_gap_when_children_finish_first() -> None:
    """Same family with a 1 s gap: the children finish at 0.03, the gap ends at 1.01: release at 1.01."""
    res = simulate(family(1.0), cfg(), perf=CONST)
    assert res.turns["release_s"][1] == pytest.approx(1.01)
    assert res.programs["jct_s"][0] == pytest.approx(1.02)


def test_spawn_delay_shifts_the_children_and_the_join() -> None:
    """Children arrive 0.5 s after the spawning call (0.51), finish two iterations later (0.53): the 5 ms gap
    is long over, so turn 1 is released at 0.53."""
    res = simulate(family(0.005, delay_s=0.5), cfg(), perf=CONST)
    assert res.programs["arrival_s"].tolist() == pytest.approx([0.0, 0.51, 0.51])
    assert res.turns["release_s"][1] == pytest.approx(0.53)


def test_children_hit_the_parents_prefix_on_its_instance() -> None:
    """p0's turn 0 leaves 100 computed tokens = 6 full blocks of its history cached; each child's chain is that
    history up to its 100 shared tokens: 6 blocks = 96 tokens hit. Parent turn 1 (reuse 101 -> 6 blocks) hits
    96 too."""
    res = simulate(family(0.005), cfg(), perf=CONST)
    assert res.turns["cached_tokens"].tolist() == [0, 96, 96, 96]


def test_a_child_on_another_instance_misses() -> None:
    """Round-robin over 2 instances, in routing order: p0 turn 0 -> 0, p1 -> 1 (no copy of the parent's context
    there: 0 hit), p2 -> 0 (hits 96), p0 turn 1 -> 1: its history is on instance 0 only, but p1 registered the
    first 6 blocks of it on instance 1 (a copy of the shared prefix): 96 hit. Rows: p0 t0, p0 t1, p1, p2."""
    res = simulate(family(0.005), cfg(instances=2, router="round-robin"), perf=CONST)
    t = res.turns
    assert t["instance"].tolist() == [0, 1, 1, 0]
    assert t["cached_tokens"].tolist() == [0, 96, 0, 96]


def test_siblings_share_a_copy_on_a_third_instance() -> None:
    """Children alone on an instance: the first computes the shared 6 blocks, a sibling admitted later hits them.
    p0 (1 s gap) spawns p1, p2, p3; round-robin over 2 instances in routing order: p0 t0 -> 0, p1 -> 1 (miss),
    p2 -> 0 (hits the parent), p3 -> 1 (hits p1's copy, registered at p1's admission), p0 t1 -> 0 (its own
    history). Rows: p0 t0, p0 t1, p1, p2, p3."""
    trace = link(make_trace([[(100, 1, 1.0), (200, 1, None)], *[[(120, 2, None)]] * 3]), "p0", 0)
    res = simulate(trace, cfg(instances=2, router="round-robin"), perf=CONST)
    t = res.turns
    assert t["instance"].tolist() == [0, 0, 1, 0, 1]
    assert t["cached_tokens"].tolist() == [0, 96, 0, 96, 96]


def test_workflow_without_links_is_unchanged() -> None:
    """The same three programs without links: all arrive at 0 (closed loop of 4), none shares a prefix."""
    trace = make_trace([[(100, 1, 0.005), (200, 1, None)], [(120, 2, None)], [(120, 2, None)]])
    res = simulate(trace, cfg(), perf=CONST)
    assert res.programs["arrival_s"].tolist() == [0.0, 0.0, 0.0]
    assert res.turns["cached_tokens"].tolist() == [0, 96, 0, 0]  # (rows: p0 t0, p0 t1, p1, p2)


def test_fleet_measures_on_the_family() -> None:
    """The family plus p3 (one 50-token turn, no children), one instance. Prefill computed = prompts 100 + 200 +
    120 + 120 + 50 = 590 minus the 3 x 96 hits = 302; sibling hit rate = (96 + 96) / (100 + 100) = 0.96;
    p3 hits nothing with or without the fan-out (0.0); workflow JCT of p0 = 0.04 s (its turn 1 ends last) and
    of p3 0.01 s (both arrive at 0 in the closed loop of 4, p3 prefills with p0's first call)."""
    from agentreplay.features.fanout.experiment_measure import compare_routers
    from agentreplay.sim.workload import compile_trace

    trace = make_trace([[(100, 1, 0.005), (200, 1, None)], [(120, 2, None)], [(120, 2, None)], [(50, 1, None)]])
    trace = link(trace, "p0", 0)
    trace.programs.loc[3, ["parent_program_id", "parent_turn_idx", "spawn_delay_s"]] = None
    w = compile_trace(trace)
    (row,) = compare_routers(w, cfg(), ["least-loaded"], "least-loaded", perf=CONST)
    assert row.prefill_tokens == 302 and row.saved_tokens == 0
    assert row.sibling_hit_rate == pytest.approx(0.96)
    assert row.others_hit_rate == 0.0 and row.others_hit_rate_no_fanout == 0.0
    assert row.others_hit_rate_in_bursts != row.others_hit_rate_in_bursts  # p3 released at 0, before any child
    assert row.workflow_jct_s.tolist() == pytest.approx([0.04, 0.01])


def test_summary_reports_workflow_jct() -> None:
    """One workflow (p0 + 2 sub-agents): workflow JCT = 0.04 s (root arrival 0 to p0's last finish)."""
    res = simulate(family(0.005), cfg(), perf=CONST)
    f = res.summary["fanout"]
    assert f["workflows"] == 1 and f["sub_agents"] == 2
    assert f["workflow_jct_s"]["p50"] == pytest.approx(0.04)
    assert "fanout" not in simulate(make_trace([[(100, 1, None)]]), cfg(), perf=CONST).summary


def test_closed_loop_counts_workflows() -> None:
    """Concurrency 1 with the family and p3 (one 50-token turn): p3 arrives when the whole workflow ends (0.04 s),
    not when p0's first call or a child finishes."""
    trace = make_trace([[(100, 1, 0.005), (200, 1, None)], [(120, 2, None)], [(120, 2, None)], [(50, 1, None)]])
    trace = link(trace, "p0", 0)
    trace.programs.loc[3, ["parent_program_id", "parent_turn_idx", "spawn_delay_s"]] = None
    res = simulate(trace, cfg().replace(workload={"concurrency": 1}), perf=CONST)
    assert res.programs["arrival_s"].tolist() == pytest.approx([0.0, 0.01, 0.01, 0.04])


def test_head_keeps_links_among_the_kept_programs() -> None:
    """``max_programs`` (Workload.head): the first program alone has no links; the first two keep p1's."""
    from agentreplay.sim.workload import compile_trace

    w = compile_trace(family(0.005))
    assert w.head(1).dag is None
    d = w.head(2).dag
    assert d is not None and d.parent.tolist() == [-1, 0] and d.spawn_turn.tolist() == [-1, 0]


def test_burst_windows() -> None:
    from agentreplay.features.fanout.experiment_measure import _in_intervals

    got = _in_intervals(np.array([0.0, 1.0, 2.5, 3.0, 5.0, 7.0]), np.array([1.0, 2.0, 6.0]), np.array([3.0, 2.2, 6.5]))
    assert got.tolist() == [False, True, True, True, False, False]
