"""Replica failures and drains (agentreplay.features.failover): hand-computed timelines on a linear pricer.

Pricer (tests.sim.fakes.LinearPerf): an iteration costs 0.01 + 0.001 x tokens (prefill chunk tokens + one per
decode). Program ``THREE``: turns (1000 in, 10 out, 1 s tool), (1100, 10, 1 s), (1200, 100); append-only, so turn 1
reuses 1010 tokens and turn 2 1110. Blocks of 16 tokens.

No failure, one instance: turn 0 prefills 1000 (1.01 s, first token at 1.01), 9 decodes of 0.011 s: done 1.109;
released 2.109; turn 0 left 1009 computed = 63 full blocks (1008 tokens) cached, turn 1 prefills 92: first token
2.211, done 2.310; released 3.310, 69 blocks (1104) cached, turn 2 prefills 96: first token 3.416, 99 decodes:
done 4.505.
"""

from __future__ import annotations

from typing import Any

import pytest

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.segment_pool import Segment, SegmentPool
from agentreplay.request import ProgramInfo, Request
from agentreplay.router.policies import ROUTERS
from agentreplay.scheduler.queue import Fcfs
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError, RouterConfig
from agentreplay.sim.instance import Instance
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

THREE = [(1000, 10, 1.0), (1100, 10, 1.0), (1200, 100, None)]


def _cfg(instances: int = 2, router: str = "session-affinity", **failures: Any) -> SimConfig:
    return SimConfig().replace(
        hardware={"instances": instances},
        cache={"num_gpu_blocks": 400},
        router={"policy": router},
        failures=failures,
    )


def _run(programs: list[list[tuple[int, int, float | None]]], cfg: SimConfig) -> Any:
    return simulate(make_trace(programs), cfg, perf=LinearPerf())


def test_off_by_default_and_no_failure_timeline() -> None:
    res = _run([THREE], _cfg())
    assert "failover" not in res.summary and "failover" not in res.tables()
    t = res.turns
    assert t["finish_s"].tolist() == pytest.approx([1.109, 2.310, 4.505])
    assert t["instance"].tolist() == [0, 0, 0]


def test_fail_mid_decode_aborts_the_call_and_the_retry_reprefills_on_a_survivor() -> None:
    """Instance 0 fails at 4.0, in turn 2's decode: 53 decode steps done (3.416 + 53 x 0.011 = 3.999), so the
    call had 1200 + 53 = 1253 tokens of KV and 54 output tokens. The retry goes to instance 1 (session affinity:
    home down, least-loaded survivor) with nothing cached: prefill 1200 (1.21 s, first token 5.21), 99 decodes
    (1.089 s): done 6.299. Re-prefilled because of the failure: min(1253 lost, 1200 computed) = 1200."""
    res = _run([THREE], _cfg(events=[{"instance": 0, "at_s": 4.0}]))
    t = res.turns
    assert t["finish_s"].tolist() == pytest.approx([1.109, 2.310, 6.299])
    assert t["instance"].tolist() == [0, 0, 1]
    assert t["cached_tokens"].tolist() == [0, 1008, 0]
    assert float(t["release_s"].iloc[2]) == pytest.approx(3.310)  # the retry keeps the call's release time
    ledger = res.tables()["failover"].to_pylist()
    assert len(ledger) == 1
    row = ledger[0]
    assert (row["turn"], row["state"], row["instance"], row["turns_done"]) == (2, "running", 0, 2)
    assert (row["lost_kv_tokens"], row["lost_output_tokens"], row["reprefill_tokens"]) == (1253, 54, 1200)
    assert row["retry_instance"] == 1 and row["age_s"] == pytest.approx(4.0)
    assert row["jct_s"] == pytest.approx(6.299)
    s = res.summary["failover"]
    assert (s["programs_affected"], s["reprefill_tokens"], s["aborted_calls"]) == (1, 1200, 1)


def test_fail_during_a_tool_gap_costs_the_idle_program_its_cache() -> None:
    """Instance 0 fails at 1.5 s, while program 0 is in its first tool call (turn 0 done at 1.109, 63 blocks =
    1008 tokens cached there). Turn 1 (released 2.109) goes to instance 1 with nothing cached: prefill 1100
    (1.11 s, first token 3.219), 9 decodes: done 3.318; re-prefilled because of the failure: min(1008, 1100)."""
    res = _run([THREE], _cfg(events=[{"instance": 0, "at_s": 1.5}]))
    t = res.turns
    assert t["instance"].tolist() == [0, 1, 1]
    assert t["finish_s"].tolist()[:2] == pytest.approx([1.109, 3.318])
    row = res.tables()["failover"].to_pylist()[0]
    assert (row["state"], row["turn"], row["turns_done"], row["lost_kv_tokens"], row["reprefill_tokens"]) == (
        "idle",
        1,
        1,
        1008,
        1008,
    )
    assert res.summary["failover"]["aborted_calls"] == 0


def test_drain_finishes_the_running_call_then_the_next_goes_elsewhere() -> None:
    """Drain instance 0 at 1.05, during turn 0's decode: turn 0 finishes there at 1.109 as without a drain; the
    instance then goes down (its cache with it). Turn 1 (released 2.109) goes to instance 1, nothing cached:
    prefill 1100 (1.11 s, first token 3.219), 9 decodes: done 3.318. Turn 2 (released 4.318) hits 1104 on
    instance 1: prefill 96 (0.106, 4.424), 99 decodes: done 5.513. Ledger: program 0 idle, 1008 tokens lost
    (63 blocks), all re-prefilled by turn 1."""
    res = _run([THREE], _cfg(events=[{"instance": 0, "at_s": 1.05, "kind": "drain"}]))
    t = res.turns
    assert t["instance"].tolist() == [0, 1, 1]
    assert t["finish_s"].tolist() == pytest.approx([1.109, 3.318, 5.513])
    row = res.tables()["failover"].to_pylist()[0]
    assert (row["event"], row["state"], row["turn"], row["lost_kv_tokens"], row["reprefill_tokens"]) == (
        "drain",
        "idle",
        1,
        1008,
        1008,
    )
    events = [(e["event"], e["t_s"]) for e in res.summary["failover"]["events"]]
    assert events == [("drain", 1.05), ("drained", pytest.approx(1.109))]


def test_all_instances_down_holds_the_call_until_one_recovers() -> None:
    """One instance fails at 1.05 (turn 0: 3 decode steps done, 1003 tokens of KV, 4 output tokens) and is back,
    empty, at 3.05. The retry is held until then: prefill 1000 (first token 4.06), 9 decodes: done 4.159."""
    res = _run([THREE], _cfg(instances=1, events=[{"instance": 0, "at_s": 1.05, "recover_after_s": 2.0}]))
    t = res.turns
    assert t["finish_s"].iloc[0] == pytest.approx(4.159)
    assert len(t) == 3 and t["finish_s"].notna().all()
    s = res.summary["failover"]
    assert s["held_calls"] == 1
    row = res.tables()["failover"].to_pylist()[0]
    assert (row["lost_kv_tokens"], row["lost_output_tokens"], row["reprefill_tokens"]) == (1003, 4, 1000)


def test_all_down_without_recovery_fails_clearly() -> None:
    with pytest.raises(RuntimeError, match=r"every instance is down at t = 1.050 s and none recovers"):
        _run([THREE], _cfg(instances=1, events=[{"instance": 0, "at_s": 1.05}]))


AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6


@pytest.mark.parametrize("router", ROUTERS.names())
def test_no_router_sends_a_call_to_a_dead_instance(router: str) -> None:
    """Instance 1 of 3 fails at 0.5 s for good: every call that runs after that runs elsewhere, and all finish."""
    res = _run(AGENTS, _cfg(instances=3, router=router, events=[{"instance": 1, "at_s": 0.5}]))
    t = res.turns
    assert len(t) == 18 and t["finish_s"].notna().all()
    assert (t.loc[t["first_scheduled_s"] >= 0.5, "instance"] != 1).all()
    assert (t["instance"] == 1).sum() < 6  # it did take calls before it failed (only the aborted ones moved)


def _instance(waiting: int, up: bool) -> Instance:
    """A real instance (the routers read compiled InstanceViews) with ``waiting`` queued calls."""
    inst = Instance(0, Engine(), LinearPerf(), Scheduler(KVManager(SegmentPool(100, 16)), 8, 64), lambda r: None)
    inst.sched.waiting.extend(_request(100 + k) for k in range(waiting))
    inst.up = up
    return inst


@pytest.mark.parametrize("router", ROUTERS.names())
def test_routers_skip_instances_that_are_not_up(router: str) -> None:
    """The least-loaded instance (0) and the program's home (0) are down: every router picks among 1 and 2."""
    policy = ROUTERS.build(router, RouterConfig(policy=router))
    views = [_instance(0, False), _instance(5, True), _instance(3, True)]
    for k in range(6):
        r = _request(program=k % 2, prompt=4000)
        r.info.home = 0
        assert policy.pick(r, views, float(k)) in (1, 2)


def _request(program: int, prompt: int = 100, turn_idx: int = 0, service: int = 0) -> Request:
    info = ProgramInfo(0.0, service_tokens=service)
    return Request(0, program, turn_idx, prompt, 10, prompt, None, Segment(("p", program), 0, 0), 0, 0.0, info)


def test_youngest_first_victim_preempts_the_program_with_fewest_turns_done() -> None:
    victim = VICTIMS.build("youngest-first", None)
    old, young, young_less = _request(0, turn_idx=9), _request(1, turn_idx=2, service=500), _request(2, turn_idx=2)
    assert victim.pick([old, young, young_less], Fcfs(), 0.0) is young_less  # fewest turns, then least service
    assert victim.pick([young, old], Fcfs(), 0.0) is young
    twin = _request(3, turn_idx=2)
    assert victim.pick([young_less, twin], Fcfs(), 0.0) is twin  # a tie: the most recent admission


@pytest.mark.parametrize(("placement", "expected"), [("router", (1, 1)), ("age-aware", (2, 1))])
def test_age_aware_placement_resubmits_oldest_first_to_the_roomiest_survivor(
    placement: str, expected: tuple[int, int]
) -> None:
    """Cache-aware routing puts both programs on instance 0 (their 800-token shared prefix matches there). At
    4.0 s it fails with p0's turn 1 (1 turn done) and p1's turn 2 (2 turns done) running, p0 admitted first.
    The router re-routes them in that order, both to instance 1 (the smallest tree, then p0's shared prefix
    there). Age-aware placement takes p1 (older) first, to the survivor with the fewest outstanding tokens
    (instances 1 and 2 are empty: the lower index, 1), then p0 to instance 2 (1 now holds p1's call)."""
    progs = [[(1000, 10, 0.1), (1100, 500, None)], [(1000, 10, 1.0), (1050, 10, 0.1), (1100, 500, None)]]
    cfg = SimConfig().replace(
        hardware={"instances": 3},
        cache={"num_gpu_blocks": 400},
        router={"policy": "cache-aware"},
        workload={"concurrency": 2},
        failures={"events": [{"instance": 0, "at_s": 4.0}], "placement": placement},
    )
    res = simulate(make_trace(progs, shared_prefix_tokens=800), cfg, perf=LinearPerf())
    rows = res.tables()["failover"].to_pylist()
    assert [(r["program"], r["turn"], r["state"], r["turns_done"]) for r in rows] == [
        (0, 1, "running", 1),
        (1, 2, "running", 2),
    ]
    assert (rows[0]["retry_instance"], rows[1]["retry_instance"]) == expected
    t = res.turns.set_index(["program_id", "turn_idx"])
    assert (t.loc[("p0", 1), "first_scheduled_s"], t.loc[("p1", 2), "first_scheduled_s"]) == (4.0, 4.0)


def test_random_failures_are_reproducible_and_leave_other_streams_alone() -> None:
    """MTBF failures draw from their own generator: the same seed gives the same ledger; a failure that never
    comes within the run (MTBF 1e9 s) leaves every number as without failures (arrival and tool draws unchanged)."""
    progs = AGENTS
    a = _run(progs, _cfg(instances=3, mtbf_s=2.0, mttr_s=1.0))
    b = _run(progs, _cfg(instances=3, mtbf_s=2.0, mttr_s=1.0))
    assert a.summary["failover"] == b.summary["failover"]
    assert a.tables()["failover"].equals(b.tables()["failover"])
    assert a.turns.equals(b.turns)
    assert a.summary["failover"]["events"]  # failures did happen
    c = _run(progs, _cfg(instances=3, mtbf_s=2.0, mttr_s=1.0).replace(seed=5))
    assert c.summary["failover"]["events"] != a.summary["failover"]["events"]
    off = _run(progs, _cfg(instances=3))
    never = _run(progs, _cfg(instances=3, mtbf_s=1e9))
    assert never.turns.equals(off.turns)
    assert never.summary["failover"]["events"] == []


def test_bad_failure_config_names_section_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"\[failures\] events.kind = 'boom' is invalid: one of \['fail', 'drain'\]"):
        _cfg(events=[{"instance": 0, "at_s": 1.0, "kind": "boom"}])
    with pytest.raises(ConfigError, match=r"\[failures\] mttr_s = 0.0 is invalid: > 0"):
        _cfg(mttr_s=0.0)
    with pytest.raises(ConfigError, match=r"\[failures\] events = .* unknown key\(s\) \['when'\]"):
        _cfg(events=[{"instance": 0, "when": 1.0}])
    with pytest.raises(
        ConfigError, match=r"\[failures\] events.instance = 5 is invalid: an instance index in \[0, 1\]"
    ):
        _run([THREE], _cfg(events=[{"instance": 5, "at_s": 1.0}]))
