"""ThunderAgent admission as its released router runs it (agentreplay.router.thunderagent_released): the periodic
scheduler check, the acting-token weight and 2^(-t) decay, the priority-grouped BFD resume, the 1800 s forced
resume, the shared-token discount and the cooldowns, with hand-computed numbers; and end to end."""

from __future__ import annotations

import pytest

from agentreplay.features.classes.config import AdmissionConfig
from agentreplay.request import ProgramInfo, Request
from agentreplay.router.admission import ADMISSIONS
from agentreplay.router.thunderagent import ThunderAgent, ThunderParams
from agentreplay.router.thunderagent_released import ThunderAgentReleased, bfd_resume
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


class _Inst:  # the InstanceView methods ThunderAgent reads (a compiled class cannot be subclassed here)
    def __init__(self, tokens: int, usage: float = 0.0) -> None:
        self.tokens = tokens
        self.usage = usage

    def kv_capacity_tokens(self) -> int:
        return self.tokens

    def kv_usage(self) -> float:
        return self.usage


def _call(program: int, prompt: int, out: int = 0, last: bool = False, turn: int = 0) -> Request:
    from agentreplay.kv.segment_pool import Segment

    seg = Segment(("t",), 0, 0)
    return Request(
        turn=turn, program=program, turn_idx=turn, prompt=prompt, target_out=out, reuse=0, pfx=None, prog=seg,
        base=0, release_s=0.0, info=ProgramInfo(0.0), last=last,
    )  # fmt: skip


def _ta(**kw: object) -> ThunderAgentReleased:
    return ThunderAgentReleased(ThunderParams(**kw))  # type: ignore[arg-type]


def test_the_defaults_are_the_released_constants_and_the_variant_picks_the_class() -> None:
    p = ThunderParams()
    assert p.thunder_variant == "released"
    assert (p.thunder_scheduler_interval_s, p.thunder_acting_token_weight, p.thunder_acting_token_decay) == (
        5.0,
        1.0,
        False,
    )
    assert (p.thunder_resume_timeout_s, p.thunder_buffer_tokens, p.thunder_half_life_s) == (1800.0, 100, 1.0)
    assert (p.thunder_shared_tokens, p.thunder_pause_cooldown_s, p.thunder_resume_cooldown_s) == ("off", 0.0, 0.0)
    assert isinstance(ADMISSIONS.build("thunderagent", AdmissionConfig()), ThunderAgentReleased)
    original = ADMISSIONS.build("thunderagent", AdmissionConfig(thunder_variant="original"))
    assert isinstance(original, ThunderAgent) and original.name == "thunderagent"


def test_a_held_program_is_resumed_at_the_next_scheduler_check_not_when_a_call_ends() -> None:
    """Capacity 1000, buffer 100. t = 0: A (800) enters (1000 >= 900); B (200) needs 300 > 100 left: queued. t = 1:
    A's last call ends (1000 free) but nothing resumes B until the check at t = 5 (interval 5 s, first one after
    one interval); C (10) arriving at t = 2 would fit but queues behind B. With a 2 s interval, B enters at 2."""
    inst = [_Inst(1000)]
    ta = _ta()
    a, b, c = _call(0, 800, last=True), _call(1, 200), _call(2, 10)
    assert ta.admit(a, inst, 0.0)
    assert not ta.admit(b, inst, 0.0)
    assert ta.next_wake(0.0) == 5.0
    ta.finished(a, 1.0)
    assert not ta.admit(b, inst, 1.0) and not ta.admit(c, inst, 2.0) and not ta.admit(b, inst, 4.999)
    assert ta.next_wake(4.999) == 5.0 and ta.checks == 0
    assert ta.admit(b, inst, 5.0) and ta.admit(c, inst, 5.0)
    assert ta.held_s == {1: 5.0, 2: 3.0} and ta.paused_s == {1: 5.0, 2: 3.0} and ta.checks == 1
    fast = _ta(thunder_scheduler_interval_s=2.0)
    assert fast.admit(a, inst, 0.0) and not fast.admit(b, inst, 0.0)
    fast.finished(a, 1.0)
    assert fast.next_wake(1.0) == 2.0
    assert not fast.admit(b, inst, 1.999) and fast.admit(b, inst, 2.0)


def test_acting_tokens_count_weighted_and_resume_capacity_decays_as_two_to_the_minus_t() -> None:
    """Weight 0.5: A's call (400 + 50) ends at t = 1: used = int(0.5 x 450) + 100 = 325; the decayed figure at
    t = 3 ignores the weight: int(450 x 2^-2) + 100 = 212."""
    inst = [_Inst(1000)]
    ta = _ta(thunder_acting_token_weight=0.5)
    a = _call(0, 400, out=50)
    assert ta.admit(a, inst, 0.0)
    assert ta.used() == 500
    ta.finished(a, 1.0)
    assert ta.used() == 325 and ta.used(3.0) == 212
    assert _ta(thunder_half_life_s=2.0).decay(ta.active[0], 3.0) == 0.5


def _decay_scenario(decay: bool) -> ThunderAgentReleased:
    """Capacity 1000, buffer 100: A (700) enters, B (150) needs 250 > 200 left: queued. A's call ends at t = 1 with
    100 out: acting 800, 100 left."""
    ta = _ta(thunder_acting_token_decay=decay)
    inst = [_Inst(1000)]
    a = _call(0, 700, out=100)
    assert ta.admit(a, inst, 0.0) and not ta.admit(_call(1, 150), inst, 0.0)
    ta.finished(a, 1.0)
    return ta


def test_with_decay_the_check_resumes_on_the_decayed_capacity_and_then_pauses_on_the_full_one() -> None:
    """At the t = 5 check A has acted 4 s: resume capacity 1000 - (int(800 x 2^-4) + 100) = 850 >= 250: B resumed.
    The pause step then counts A in full: 1000 - (800 + 150 + 200) < 0: A (the only acting program) is paused.
    Without decay, 100 left <= the buffer: B stays queued."""
    inst = [_Inst(1000)]
    ta = _decay_scenario(decay=True)
    assert ta.used(5.0) == 150
    assert ta.admit(_call(1, 150), inst, 5.0)
    assert list(ta.paused) == [0] and ta.pauses == 2 and ta.paused_at[0] == 5.0
    flat = _decay_scenario(decay=False)
    assert not flat.admit(_call(1, 150), inst, 5.0) and list(flat.paused) == [1]


def test_the_resume_order_is_reasoning_then_new_then_acting_each_by_tokens_at_pause() -> None:
    """Capacity 1200, no buffer. t = 0: Y (800), X, R, P (100 each) enter (1100). R and P make a second call (150)
    and act with 200 from t = 3; X's second call (400) at t = 4: 800 + 400 + 400 = 1600. The t = 5 check pauses
    the smallest acting programs, R then P (equal: creation order), down to 1200. t = 6: R's next call (250) waits;
    N (150) arrives and queues behind the paused ones. t = 7: X's last call ends: 400 left. The t = 10 check takes
    R (reasoning, 250), then N (new, 150: 400), and P (acting, 200) no longer fits. (Smallest first would have
    taken N and P.)"""
    inst = [_Inst(1200)]
    ta = _ta(thunder_buffer_tokens=0)
    y, x, r, p = 0, 1, 2, 3
    assert all(ta.admit(_call(q, tok), inst, 0.0) for q, tok in ((y, 800), (x, 100), (r, 100), (p, 100)))
    ta.finished(_call(x, 100), 1.0)
    for q in (r, p):
        ta.finished(_call(q, 100, out=50), 1.0)
        assert ta.admit(_call(q, 150, turn=1), inst, 2.0)
        ta.finished(_call(q, 150, out=50, turn=1), 3.0)
    x2 = _call(x, 400, last=True, turn=1)
    assert ta.admit(x2, inst, 4.0) and ta.used() == 1600
    assert not ta.admit(_call(r, 250, turn=2), inst, 6.0)
    assert list(ta.paused) == [r, p] and ta.paused_at == {r: 5.0, p: 5.0}
    n = _call(4, 150)
    assert not ta.admit(n, inst, 6.0)
    assert ta._candidates() == [(r, 250), (4, 150), (p, 200)]
    ta.finished(x2, 7.0)
    assert ta.admit(_call(r, 250, turn=2), inst, 10.0) and ta.admit(n, inst, 10.0)
    assert list(ta.paused) == [p]
    assert ta.paused_s == {r: 5.0, 4: 4.0} and ta.held_s == {r: 4.0, 4: 4.0}


def test_bfd_resume_selects_in_priority_order_then_places_largest_first() -> None:
    assert bfd_resume([(1, 10), (2, 30), (3, 20)], 1000, 0) == [2, 3, 1]
    assert bfd_resume([(1, 300), (2, 200), (3, 50)], 400, 0) == [1, 3]  # 2 does not fit after 1: skipped
    assert bfd_resume([(1, 10)], 100, 100) == []  # a backend with no more than the buffer left takes nothing
    # 1 and 2 fit together (200 + 100 <= 300), but placing 1 leaves 100 <= the buffer: the backend leaves the
    # candidates and 2 is not placed (released _greedy_resume)
    assert bfd_resume([(1, 100), (2, 0)], 300, 100) == [1]


def test_with_no_acting_program_every_reasoning_program_is_marked() -> None:
    """Capacity 1000, no buffer: A, B, C (300 each) reasoning; A acts from t = 1 (300) and its next call (500) at
    t = 2 brings 500 + 600 = 1100. The t = 5 check has no acting program to pause; marks leave the remaining
    capacity the loop reads unchanged, so all three are marked (not just one). B's call ends at t = 6: paused."""
    inst = [_Inst(1000)]
    ta = _ta(thunder_buffer_tokens=0)
    assert all(ta.admit(_call(q, 300), inst, 0.0) for q in range(3))
    ta.finished(_call(0, 300), 1.0)
    assert ta.admit(_call(0, 500, turn=1), inst, 2.0)
    ta.finished(_call(1, 300), 6.0)
    assert ta.marks == 3 and ta.pauses == 1 and list(ta.paused) == [1]
    assert ta.active[0].marked and ta.active[2].marked


def _three_acting(**kw: object) -> ThunderAgentReleased:
    """Capacity 1000, no buffer: A, B, C (200 each) act with 300 from t = 1; A's next call (900) at t = 2:
    900 + 600 = 1500, 500 over."""
    inst = [_Inst(1000)]
    ta = _ta(thunder_buffer_tokens=0, **kw)
    assert all(ta.admit(_call(q, 200), inst, 0.0) for q in range(3))
    for q in range(3):
        ta.finished(_call(q, 200, out=100), 1.0)
    assert ta.admit(_call(0, 900, turn=1), inst, 2.0)
    ta._catch_up(5.0)
    return ta


def test_the_pause_cooldown_allows_one_acting_pause_per_check_then_marks() -> None:
    """Without cooldown the t = 5 check pauses B then C (1500 -> 1200 -> 900). With a 5 s pause cooldown it pauses
    B only; still over, it marks the reasoning program A."""
    free = _three_acting()
    assert list(free.paused) == [1, 2] and free.marks == 0
    cool = _three_acting(thunder_pause_cooldown_s=5.0)
    assert list(cool.paused) == [1] and cool.marks == 1 and cool.active[0].marked


def test_the_resume_cooldown_skips_a_resume_round_within_it() -> None:
    """Capacity 1000, no buffer, resume cooldown 6 s. A (1000) fills it; B and C (100) queue; A ends at t = 1; the
    t = 5 check resumes B and C. D (950) queues at t = 6; B and C end by t = 8. The t = 10 check is 5 s after the
    last resume: skipped; the t = 15 one resumes D. Without the cooldown D enters at t = 10."""
    inst = [_Inst(1000)]

    def run(cooldown: float) -> tuple[ThunderAgentReleased, Request]:
        ta = _ta(thunder_buffer_tokens=0, thunder_resume_cooldown_s=cooldown)
        a, b, c, d = _call(0, 1000, last=True), _call(1, 100, last=True), _call(2, 100, last=True), _call(3, 950)
        assert ta.admit(a, inst, 0.0) and not ta.admit(b, inst, 0.0) and not ta.admit(c, inst, 0.0)
        ta.finished(a, 1.0)
        assert ta.admit(b, inst, 5.0) and ta.admit(c, inst, 5.0)
        assert not ta.admit(d, inst, 6.0)
        ta.finished(b, 7.0)
        ta.finished(c, 8.0)
        return ta, d

    ta, d = run(6.0)
    assert not ta.admit(d, inst, 10.0) and ta.admit(d, inst, 15.0)
    ta, d = run(0.0)
    assert ta.admit(d, inst, 10.0)


def test_a_held_call_is_forced_in_when_it_has_waited_the_timeout() -> None:
    """A (900) never ends; B (200) waits from t = 0. Timeout 7 s: the orchestrator is told t = 5 (a check), then 7;
    B is forced in at 7, not at 6.999. The released constant is 1800 s."""
    inst = [_Inst(1000)]
    ta = _ta(thunder_resume_timeout_s=7.0)
    b = _call(1, 200)
    assert ta.admit(_call(0, 900), inst, 0.0) and not ta.admit(b, inst, 0.0)
    assert ta.next_wake(0.0) == 5.0
    assert not ta.admit(b, inst, 5.0)
    assert ta.next_wake(5.0) == 7.0
    assert not ta.admit(b, inst, 6.999) and ta.admit(b, inst, 7.0)
    assert ta.forced_resumes == 1 and ta.held_s == {1: 7.0}
    slow = _ta()
    assert slow.admit(_call(0, 900), inst, 0.0) and not slow.admit(b, inst, 0.0)
    assert not slow.admit(b, inst, 1799.9) and slow.admit(b, inst, 1800.0)
    assert slow.checks == 1  # checks that could change nothing were skipped


def test_the_shared_token_discount_reads_the_instances_kv_usage() -> None:
    """Capacity 1000 (two instances of 500), buffer 100: A (500) enters; B (450) needs 550 > 400: queued. At the
    t = 5 check the engines hold 0.2 x 500 x 2 = 200 tokens: shared = 500 - 200 = 300, remaining 1000 - (500 -
    300 + 100) = 700 >= 550: B resumed. With "off" (as released) or with 0.6 in use (600 >= 500: shared 0) B
    stays queued."""

    def run(mode: str, usage: float) -> tuple[ThunderAgentReleased, bool]:
        inst = [_Inst(500, usage), _Inst(500, usage)]
        ta = _ta(thunder_shared_tokens=mode)
        b = _call(1, 450)
        assert ta.admit(_call(0, 500), inst, 0.0) and not ta.admit(b, inst, 0.0)
        return ta, ta.admit(b, inst, 5.0)

    ta, admitted = run("kv-usage", 0.2)
    assert admitted and ta.shared_tokens == 300 and ta.used() == 500 + 450 - 300 + 200
    ta, admitted = run("off", 0.2)
    assert not admitted and ta.shared_tokens == 0
    ta, admitted = run("kv-usage", 0.6)
    assert not admitted and ta.shared_tokens == 0


def _two_programs(**adm: object) -> tuple[object, dict]:
    """Two one-call programs (1000 prompt, 10 out) arriving together on one instance: capacity 200 blocks x 16 x
    0.5 = 1600; p0 (1100) enters, p1 (1100 more) is held."""
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": 200},
        workload={"concurrency": 2},
        admission={"policy": "thunderagent", "thunder_capacity_fraction": 0.5, **adm},
        policy={"decision_log": True},
    )
    res = simulate(make_trace([[(1000, 10, None)], [(1000, 10, None)]]), cfg, perf=LinearPerf())
    return res, res.summary["admission"]


@pytest.mark.parametrize(("interval", "start"), [(5.0, 5.0), (2.0, 2.0), (0.5, 1.5)])
def test_end_to_end_the_held_program_enters_at_the_first_check_after_the_first_ends(
    interval: float, start: float
) -> None:
    """p0 runs alone and ends at 1.109 (prefill 1.01 + 9 decode steps of 0.011 s); p1 enters at the first scheduler
    check after that (5, 2, 1.5 s) and runs the same 1.109 s."""
    res, s = _two_programs(thunder_scheduler_interval_s=interval)
    t = res.turns.set_index("program_id")  # type: ignore[attr-defined]
    assert t.loc["p0", "finish_s"] == pytest.approx(1.109)
    assert t.loc["p1", "first_scheduled_s"] == pytest.approx(start)
    assert t.loc["p1", "finish_s"] == pytest.approx(start + 1.109)
    assert s["variant"] == "released" and s["pauses"] == 1 and s["forced_resumes"] == 0
    assert s["held_s_total"] == pytest.approx(start) and s["capacity_tokens"] == 1600
    log = [(d["program"], d["decision"], d["t"]) for d in res.decisions if d["event"] == "admission"]  # type: ignore[attr-defined]
    assert log == [(1, "hold", 0.0), (1, "admit", pytest.approx(start))]


@pytest.mark.parametrize(
    ("field", "value", "allowed"),
    [
        ("thunder_variant", "newest", r"one of \['released', 'original'\]"),
        ("thunder_scheduler_interval_s", 0.0, "> 0 seconds"),
        ("thunder_acting_token_weight", -0.5, ">= 0"),
        ("thunder_acting_token_decay", "yes", "true or false"),
        ("thunder_shared_tokens", "vllm", r"one of \['off', 'kv-usage'\]"),
        ("thunder_pause_cooldown_s", -1.0, ">= 0 seconds"),
        ("thunder_resume_cooldown_s", float("inf"), ">= 0 seconds"),
    ],
)
def test_bad_released_parameters_name_section_field_value_and_range(field: str, value: object, allowed: str) -> None:
    with pytest.raises(ConfigError, match=rf"\[admission\] {field} = {value!r} is invalid: {allowed}"):
        SimConfig().replace(admission={field: value})


AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6


@pytest.mark.parametrize("decay", [False, True])
def test_skipping_checks_that_cannot_change_anything_changes_no_result(
    monkeypatch: pytest.MonkeyPatch, decay: bool
) -> None:
    """Six three-call programs on 400 blocks (6400 tokens: three fit), 1 s checks: the run is the same when every
    check runs (``_check`` never reports quiet) as when the quiet ones are skipped (but for the series points)."""
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": 400},
        workload={"concurrency": 6},
        admission={"policy": "thunderagent", "thunder_scheduler_interval_s": 1.0, "thunder_acting_token_decay": decay},
    )
    fast = simulate(make_trace(AGENTS), cfg, perf=LinearPerf())
    check = ThunderAgentReleased._check
    monkeypatch.setattr(ThunderAgentReleased, "_check", lambda self, now: check(self, now) and False)
    full = simulate(make_trace(AGENTS), cfg, perf=LinearPerf())
    a, b = fast.summary["admission"], full.summary["admission"]
    assert a["pauses"] > 0 and a["checks"] < b["checks"]
    sampled = ("checks", "footprint_series")  # (each check run adds a point to the series)
    assert {k: v for k, v in a.items() if k not in sampled} == {k: v for k, v in b.items() if k not in sampled}
    assert fast.turns.equals(full.turns)
