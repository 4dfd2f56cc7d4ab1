"""ThunderAgent admission, ``thunder_variant = "original"`` (agentreplay.router.thunderagent): pause at admission,
pause between turns, greedy resume, acting decay and weight, forced resume, with hand-computed numbers; and end to
end through the orchestrator. The released variant: tests/sim/test_thunderagent_released.py."""

from __future__ import annotations

import pytest

from agentreplay.request import ProgramInfo, Request
from agentreplay.router.admission import ADMISSIONS
from agentreplay.router.thunderagent import ThunderAgent, ThunderParams
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


class _Inst:  # the InstanceView methods ThunderAgent reads (a compiled class cannot be subclassed here)
    def __init__(self, tokens: int) -> None:
        self.tokens = tokens

    def kv_capacity_tokens(self) -> int:
        return self.tokens

    def queue_lengths(self) -> tuple[int, int]:
        return 0, 0


INST = [_Inst(1000)]  # capacity 1000 tokens


def _call(program: int, prompt: int, out: int = 50, last: bool = False, turn: int = 0) -> Request:
    from agentreplay.kv.segment_pool import Segment

    seg = Segment(("t",), 0, 0)
    return Request(
        turn=turn, program=program, turn_idx=0, prompt=prompt, target_out=out, reuse=0, pfx=None, prog=seg,
        base=0, release_s=0.0, info=ProgramInfo(0.0), last=last,
    )  # fmt: skip


def _policy(**kw: float) -> ThunderAgent:
    p = {"thunder_half_life_s": 0.0, "thunder_buffer_tokens": 100, "thunder_resume_timeout_s": 50.0, **kw}
    return ThunderAgent(ThunderParams(**p))  # type: ignore[arg-type]


def test_a_new_program_that_does_not_fit_is_paused_and_resumed_greedily() -> None:
    """Capacity 1000, buffer 100, no decay. t=0: A (400) -> 500 fits; B (300) -> 500 + 400 = 900 fits; C (200)
    -> 900 + 300 = 1200 > 1000: paused, its call held. t=1: A's call ends (400 + 50 out): A acts with 450 tokens,
    footprint 550 + 400 = 950, C needs 300 > 50 left: still paused. t=2: B's last call ends: footprint 550,
    450 left >= 300: C resumed, its call admitted after 2 s held."""
    ta = _policy()
    a, b, c = _call(0, 400), _call(1, 300, last=True), _call(2, 200)
    assert ta.admit(a, INST, 0.0) and ta.admit(b, INST, 0.0)
    assert ta.footprint(0.0) == 900
    assert not ta.admit(c, INST, 0.0)
    assert ta.pauses == 1 and list(ta.paused) == [2]
    ta.finished(a, 1.0)
    assert not ta.admit(c, INST, 1.0)
    assert ta.footprint(1.0) == 950
    ta.finished(b, 2.0)
    assert ta.admit(c, INST, 2.0)
    assert ta.held_s == {2: 2.0} and ta.paused_s == {2: 2.0}
    assert ta.footprint(2.0) == 450 + 100 + 200 + 100
    # a new program waits while any program is paused, even if it would fit (source: queue-not-empty rule)
    ta2 = _policy()
    assert ta2.admit(_call(0, 850), INST, 0.0)
    assert not ta2.admit(_call(1, 400), INST, 0.0)  # 950 + 500 > 1000
    assert not ta2.admit(_call(2, 10), INST, 0.0)  # 950 + 110 > 1000 anyway; and C waits behind B
    assert list(ta2.paused) == [1, 2]


def test_acting_footprint_decays_with_the_half_life() -> None:
    """Half-life 1 s: A's call (400 + 50) ends at t = 1; at t = 3 it counts 450 x 0.5^2 = 112.5 tokens, plus the
    100-token buffer; at t = 1.5, 450 x 0.5^0.5."""
    ta = _policy(thunder_half_life_s=1.0)
    a = _call(0, 400)
    assert ta.admit(a, INST, 0.0)
    ta.finished(a, 1.0)
    assert ta.footprint(3.0) == pytest.approx(212.5)
    assert ta.footprint(1.5) == pytest.approx(450 * 0.5**0.5 + 100)
    assert ta.footprint(1.0) == pytest.approx(550)


def test_the_acting_token_weight_scales_the_decayed_acting_footprint() -> None:
    """Weight 0.5, half-life 1 s: A's call (400 + 50) ends at t = 1; at t = 2 it counts 450 x 0.5 x 0.5 = 112.5
    tokens, plus the 100-token buffer; with no decay, 450 x 0.5 = 225 at any time."""
    ta = _policy(thunder_half_life_s=1.0, thunder_acting_token_weight=0.5)
    a = _call(0, 400)
    assert ta.admit(a, INST, 0.0)
    ta.finished(a, 1.0)
    assert ta.footprint(2.0) == pytest.approx(212.5)
    flat = _policy(thunder_acting_token_weight=0.5)
    assert flat.admit(a, INST, 0.0)
    flat.finished(a, 1.0)
    assert flat.footprint(9.0) == 325.0


def test_over_capacity_pauses_the_smallest_acting_program_first() -> None:
    """A (300) and B (200) admitted (700); both calls end at t = 1 with 100 out: A acts with 400, B with 300 (900
    with buffers). t = 2: A's next call has 700 prompt tokens (active programs enter unchecked): 800 + 400 = 1200
    > 1000. The pass at the next question (t = 3) pauses the smallest acting program, B (1200 - 400 = 800), and
    B's call released at t = 3 is held. t = 4: A's last call ends: B resumed, held 1 s."""
    ta = _policy()
    a, b = _call(0, 300, out=100), _call(1, 200, out=100)
    assert ta.admit(a, INST, 0.0) and ta.admit(b, INST, 0.0)
    ta.finished(a, 1.0)
    ta.finished(b, 1.0)
    a2 = _call(0, 700, last=True, turn=1)
    assert ta.admit(a2, INST, 2.0)
    assert ta.footprint(2.0) == 1200
    b2 = _call(1, 500, turn=1)
    assert not ta.admit(b2, INST, 3.0)
    assert ta.pauses == 1 and list(ta.paused) == [1] and ta.footprint(3.0) == 800
    ta.finished(a2, 4.0)
    assert ta.admit(b2, INST, 4.0)
    assert ta.held_s == {1: 1.0} and ta.paused_s == {1: 1.0}


def test_with_no_acting_program_the_smallest_reasoning_one_is_marked_and_paused_when_its_call_ends() -> None:
    """A (300) and B (200) reasoning; A's call ends at t = 1 (acting 400), its next call (900 prompt) enters at
    t = 2: 1000 + 300 = 1300 > 1000 and nobody acts, so B (smallest reasoning) is marked (1300 - 300 = 1000 fits).
    B's call ends at t = 3: B is paused instead of acting; its next call is held."""
    ta = _policy()
    a, b = _call(0, 300, out=100), _call(1, 200, out=100)
    assert ta.admit(a, INST, 0.0) and ta.admit(b, INST, 0.0)
    ta.finished(a, 1.0)
    assert ta.admit(_call(0, 900, turn=1), INST, 2.0)
    ta.schedule(INST, 2.0)
    assert ta.active[1].marked and ta.pauses == 0
    ta.finished(b, 3.0)
    assert ta.pauses == 1 and 1 in ta.paused
    assert not ta.admit(_call(1, 400, turn=1), INST, 3.5)


def test_a_held_call_is_resumed_at_the_timeout_whatever_the_capacity() -> None:
    """A (900) fills the capacity; C (200) is held from t = 0. The orchestrator is told to offer again at
    min(0 + recheck 5, 0 + timeout 50) = 5; at t = 49.9 C is still held, at t = 50 it is forced in."""
    ta = _policy()
    assert ta.admit(_call(0, 800), INST, 0.0)
    c = _call(1, 200)
    assert not ta.admit(c, INST, 0.0)
    assert ta.next_wake(0.0) == 5.0
    assert ta.next_wake(47.0) == 50.0
    assert not ta.admit(c, INST, 49.9)
    assert ta.admit(c, INST, 50.0)
    assert ta.forced_resumes == 1 and ta.held_s == {1: 50.0}


def _two_programs(**adm: object) -> tuple[object, dict]:
    """Two one-call programs (1000 prompt, 10 out) arriving together on one instance."""
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": 200},
        workload={"concurrency": 2},
        admission={"policy": "thunderagent", "thunder_variant": "original", "thunder_capacity_fraction": 0.5, **adm},
        policy={"decision_log": True},
    )
    res = simulate(make_trace([[(1000, 10, None)], [(1000, 10, None)]]), cfg, perf=LinearPerf())
    return res, res.summary["admission"]


def test_end_to_end_the_second_program_waits_for_the_first() -> None:
    """200 blocks x 16 = 3200 tokens x 0.5 = 1600. p0: 1000 + 100 fits; p1: 1100 + 1100 > 1600: held. p0 runs
    alone: prefill 0.01 + 0.001 x 1000 = 1.01 s (first token), 9 decode steps of 0.011 s: ends at 1.109; then p1
    is resumed and runs the same 1.109 s: JCT 1.109 and 2.218."""
    res, s = _two_programs()
    t = res.turns.set_index("program_id")  # type: ignore[attr-defined]
    assert t.loc["p0", "finish_s"] == pytest.approx(1.109)
    assert t.loc["p1", "first_scheduled_s"] == pytest.approx(1.109)
    assert t.loc["p1", "finish_s"] == pytest.approx(2.218)
    assert s["pauses"] == 1 and s["programs_held"] == 1 and s["held_s_total"] == pytest.approx(1.109)
    assert s["forced_resumes"] == 0 and s["capacity_tokens"] == 1600
    assert s["held_s_p50"] == s["held_s_p90"] == s["held_s_max"] == pytest.approx(1.109)
    log = [(d["program"], d["decision"], d["t"]) for d in res.decisions if d["event"] == "admission"]  # type: ignore[attr-defined]
    assert log == [(1, "hold", 0.0), (1, "admit", pytest.approx(1.109))]


def test_end_to_end_forced_resume_fires_on_its_timer() -> None:
    """Timeout 0.5 s: the orchestrator's timer offers p1 at 0.5 and it is forced in; the instance is busy with
    p0's prefill until 1.01, when both share the next step."""
    res, s = _two_programs(thunder_resume_timeout_s=0.5)
    t = res.turns.set_index("program_id")  # type: ignore[attr-defined]
    assert s["forced_resumes"] == 1 and s["held_s_total"] == pytest.approx(0.5)
    assert t.loc["p1", "first_scheduled_s"] == pytest.approx(1.01)


def test_bad_parameters_name_section_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"\[admission\] thunder_half_life_s = -1.0 is invalid"):
        SimConfig().replace(admission={"thunder_half_life_s": -1.0})
    with pytest.raises(ConfigError, match=r"\[admission\] policy = 'nope' is invalid: one of"):
        SimConfig().replace(admission={"policy": "nope"})
    assert "thunderagent" in ADMISSIONS
