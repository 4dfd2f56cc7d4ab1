"""Priority classes (agentreplay.features.classes, the ``priority`` queue order, the ``lowest-priority`` victim) and
deadline admission (agentreplay.router.deadline), with hand-computed expectations."""

from __future__ import annotations

import numpy as np
import pytest

from agentreplay.features.classes.classes import assign_classes
from agentreplay.kv.segment_pool import Segment
from agentreplay.request import ProgramInfo, Request
from agentreplay.router.deadline import DeadlineAdmission, DeadlineContext, DeadlineParams
from agentreplay.scheduler.queue import PriorityOrder, PriorityParams
from agentreplay.scheduler.victim import LowestPriority
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError
from agentreplay.sim.workload import compile_trace
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def _req(turn: int, priority: int, release_s: float, program: int = 0) -> Request:
    info = ProgramInfo(0.0, priority=priority)
    seg = Segment(("t",), 0, 0)
    return Request(
        turn=turn, program=program, turn_idx=0, prompt=10, target_out=1, reuse=0, pfx=None, prog=seg, base=0,
        release_s=release_s, info=info,
    )  # fmt: skip


def test_priority_order_is_class_then_arrival_and_the_victim_is_the_worst_key() -> None:
    """vLLM PriorityRequestQueue: (priority, arrival) ascending; preemption takes max(running, key=(priority,
    arrival)). Calls (turn, class, release): (0, batch, 0.0), (1, interactive, 1.0), (2, background, 0.5),
    (3, interactive, 0.2), (4, batch, 1.5): queue order 3, 1, 2, 0, 4; victim among all: 4 (batch, latest);
    among 0-3: 0."""
    order = PriorityOrder()
    calls = [_req(0, 2, 0.0), _req(1, 0, 1.0), _req(2, 1, 0.5), _req(3, 0, 0.2), _req(4, 2, 1.5)]
    assert [r.turn for r in sorted(calls, key=lambda r: order.key(r, 0.0))] == [3, 1, 2, 0, 4]
    victim = LowestPriority()
    assert victim.pick(calls, order, 0.0).turn == 4
    assert victim.pick(calls[:4], order, 0.0).turn == 0


def test_a_class_may_order_its_calls_by_program_arrival() -> None:
    """Batch ordered by program arrival: program 1 (arrived at 0) before program 0 (arrived at 5) whatever the
    calls' releases (10 and 3); interactive keeps call order; interactive still precedes batch."""
    order = PriorityOrder(PriorityParams(("fcfs", "fcfs", "program-fcfs")))
    a, b, c = _req(0, 2, 3.0, program=0), _req(1, 2, 10.0, program=1), _req(2, 0, 20.0, program=2)
    a.info.arrival_s, b.info.arrival_s = 5.0, 0.0
    assert [r.turn for r in sorted([a, b, c], key=lambda r: order.key(r, 0.0))] == [2, 1, 0]
    assert [r.turn for r in sorted([a, b, c], key=lambda r: PriorityOrder().key(r, 0.0))] == [2, 0, 1]
    with pytest.raises(ConfigError, match=r"\[policy\] priority_order = .* is invalid"):
        SimConfig().replace(policy={"priority_order": ["fcfs", "lifo"]})


def _classed_trace(classes: list[str], programs: list[list[tuple[int, int, float | None]]]) -> object:
    tr = make_trace(programs)
    tr.programs["priority_class"] = classes
    return tr


def test_the_interactive_program_runs_first_under_priority_scheduling() -> None:
    """Two one-call programs (1000 prompt, 10 out) released together on one instance with max_num_seqs 1: p0
    batch, p1 interactive (trace column). Each alone takes 1.01 + 9 x 0.011 = 1.109 s. FCFS runs p0 first (p1
    starts at 1.109); priority runs p1 first (p0 starts at 1.109)."""
    tr = _classed_trace(["batch", "interactive"], [[(1000, 10, None)], [(1000, 10, None)]])
    base = SimConfig().replace(
        cache={"num_gpu_blocks": 400}, workload={"concurrency": 2}, scheduler={"max_num_seqs": 1}
    )
    on = {"enabled": True, "deadline_s": {"interactive": 1.2}}
    fcfs = simulate(tr, base.replace(classes=on), perf=LinearPerf()).turns.set_index("program_id")
    prio_res = simulate(tr, base.replace(classes=on, policy={"queue": "priority"}), perf=LinearPerf())
    prio = prio_res.turns.set_index("program_id")
    assert fcfs.loc["p1", "first_scheduled_s"] == pytest.approx(1.109)
    assert prio.loc["p1", "first_scheduled_s"] == 0.0
    assert prio.loc["p0", "first_scheduled_s"] == pytest.approx(1.109)
    # goodput per class: interactive deadline 1.2 s: met under priority (JCT 1.109), missed under FCFS (2.218)
    cls = prio_res.summary["classes"]
    assert cls["source"] == "trace column priority_class"
    assert cls["interactive"]["met"] == 1 and cls["interactive"]["jct_p50_s"] == pytest.approx(1.109)
    assert cls["batch"]["attempted"] == 1 and cls["batch"]["met"] == 1  # 10 x its uncontended 1.109 s


def test_deadline_admission_rejects_exactly_the_infeasible_program() -> None:
    """Three one-call programs: p0 interactive (2000 prompt, 10 out: uncontended 0.01 + 2.0 + 9 x 0.011 =
    2.109 s) with deadline 2.0 s: infeasible, rejected; p1 interactive (1000 prompt: 1.109 s <= 2.0) and p2 batch
    (deadline 10 x its uncontended JCT) run. Goodput per class counts p0 as attempted and missed. p1 and p2 share
    the instance: one 2000-token prefill step (2.01 s), 9 decode steps of two (0.012 s): JCT 2.118 > 2.0, so p1
    misses too (interactive goodput 0 of 2) and p2 meets its 11.09 s."""
    tr = _classed_trace(
        ["interactive", "interactive", "batch"], [[(2000, 10, None)], [(1000, 10, None)], [(1000, 10, None)]]
    )
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": 400},
        workload={"concurrency": 3},
        classes={"enabled": True, "deadline_s": {"interactive": 2.0}},
        admission={"policy": "deadline", "deadline_action": "reject"},
    )
    res = simulate(tr, cfg, perf=LinearPerf())
    assert sorted(res.programs["program_id"]) == ["p1", "p2"]
    assert res.summary["admission"]["rejected_programs"] == 1
    inter = res.summary["classes"]["interactive"]
    assert (inter["attempted"], inter["rejected"]) == (2, 1)
    assert (inter["met"], inter["goodput"], inter["jct_p50_s"]) == (0, 0.0, pytest.approx(2.118))
    assert res.summary["classes"]["batch"]["met"] == 1


def test_deferral_holds_infeasible_calls_only_while_calls_wait() -> None:
    """Program 0's deadline is 1 s after arrival (0); its turn-1 call needs 0.5 s more. Released at 0.4 it is
    feasible (0.9 <= 1); at 0.6 it is not (1.1 > 1): held while an instance has a waiting call, admitted when no
    instance has one, the held time counted."""

    class Inst:  # the InstanceView method deadline admission reads (compiled: not subclassable here)
        waiting = 1

        def queue_lengths(self) -> tuple[int, int]:
            return self.waiting, 1

    ctx = DeadlineContext(np.array([1.0]), np.array([2.0, 0.5]))
    pol = DeadlineAdmission(DeadlineParams("defer"), ctx)
    inst = Inst()
    r = _req(1, 0, 0.4)
    assert pol.admit(r, [inst], 0.4)
    assert not pol.admit(r, [inst], 0.6)
    assert not pol.admit(r, [inst], 0.7)
    inst.waiting = 0
    assert pol.admit(r, [inst], 0.9)
    s = pol.summary()
    assert (s["infeasible_calls"], s["deferred_calls"], s["late_programs"]) == (1, 1, 1)
    assert s["held_s_total"] == pytest.approx(0.3)


def test_classes_drawn_from_the_mix_are_seeded_and_a_bad_mix_is_refused() -> None:
    w = compile_trace(make_trace([[(100, 5, None)]] * 400))
    cfg = SimConfig().classes
    a, b = assign_classes(w, cfg, 0), assign_classes(w, cfg, 0)
    assert (a == b).all() and set(a.tolist()) == {0, 1, 2}
    shares = np.bincount(a, minlength=3) / len(a)
    assert np.allclose(shares, [0.2, 0.3, 0.5], atol=0.07)
    with pytest.raises(ConfigError, match=r"\[classes\] mix = .* is invalid: shares summing to 1"):
        SimConfig().replace(classes={"mix": {"interactive": 0.5, "batch": 0.2}})
    with pytest.raises(ConfigError, match=r"\[classes\] deadline_x.batch = 0.5 is invalid: >= 1"):
        SimConfig().replace(classes={"deadline_x": {"interactive": 2.0, "background": 2.0, "batch": 0.5}})
    tr = make_trace([[(100, 5, None)]])
    tr.programs["priority_class"] = ["urgent"]
    with pytest.raises(ValueError, match="program 'p0' has class 'urgent'"):
        assign_classes(compile_trace(tr), cfg, 0, tr)


def test_the_in_run_service_estimate_is_the_uncontended_definition() -> None:
    """Deadline estimates inside a run and the uncontended JCT of ``agentreplay tasks`` price a turn alone with the
    same function (agentreplay.perf.alone), by hand on a constant pricer: 2 chunks of 4 + 2 prefill tokens, then
    3 decode steps at contexts 8, 9, 10 (the prompt plus the tokens decoded before each step)."""
    from agentreplay.features.classes import classes
    from agentreplay.fleet import uncontended
    from agentreplay.perf.alone import turn_service_s

    assert classes.turn_service_s is turn_service_s is uncontended.turn_service_s

    class Const:
        def iteration_time_s(self, prefill: list, decode: list) -> float:
            return 1.0 + 0.1 * sum(n for n, _, _ in prefill)

        def decode_coeffs(self, n: int) -> tuple[float, float]:
            return 0.5, 0.01

    pre, dec = turn_service_s(Const(), 4, 8, 2, 4)
    assert pre == pytest.approx((1.0 + 0.4) + (1.0 + 0.2))
    assert dec == pytest.approx(3 * 0.5 + 0.01 * (8 + 9 + 10))


def test_admission_and_classes_sections_round_trip_through_toml() -> None:
    import tomllib

    from agentreplay.sim.config import from_dict, to_toml

    cfg = SimConfig().replace(
        classes={"enabled": True, "deadline_s": {"interactive": 600.0}},
        admission={"policy": "deadline", "deadline_action": "reject"},
        policy={"queue": "priority", "priority_order": ["fcfs", "fcfs", "program-fcfs"]},
    )
    assert from_dict(tomllib.loads(to_toml(cfg))) == cfg
