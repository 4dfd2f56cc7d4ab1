"""Agent-aware policies: routers, queue orders, victims, retention, tiers, presets (exact cases + properties)."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay.engine import Engine
from agentreplay.kv.retention import GapContext, ToolStats, _min_waste
from agentreplay.kv.tiers import HostTier, Link
from agentreplay.policy.presets import PRESETS, apply_preset
from agentreplay.request import ProgramInfo, Request
from agentreplay.scheduler.queue import ContinuumOrder, Plas, PlasParams
from agentreplay.scheduler.victim import AgeAware, LowestPriority, MostRecent
from agentreplay.sim import SimConfig, simulate
from tests.factories import make_request, make_trace
from tests.sim.fakes import LinearPerf
from tests.sim.test_properties import grow, programs_st


def cfg(**sections) -> SimConfig:
    base = SimConfig().replace(cache={"num_gpu_blocks": 1000}, workload={"concurrency": 4})
    return base.replace(**sections) if sections else base


def req(
    turn: int = 0, program: int = 0, prompt: int = 100, release: float = 0.0, service: int = 0, arrival: float = 0.0
) -> Request:
    return make_request(
        program, prompt, turn=turn, release_s=release, info=ProgramInfo(arrival, service_tokens=service)
    )


# ---- routers -----------------------------------------------------------------------------------------------
AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.5), (2200, 20, 0.5), (2300, 20, None)]] * 8


def test_session_affinity_keeps_programs_home_and_hits_their_history() -> None:
    aff = simulate(
        make_trace(AGENTS), cfg(hardware={"instances": 3}, router={"policy": "session-affinity"}), perf=LinearPerf()
    )
    rr = simulate(
        make_trace(AGENTS), cfg(hardware={"instances": 3}, router={"policy": "round-robin"}), perf=LinearPerf()
    )
    assert aff.summary["affinity_breaks"] == 0
    assert aff.turns.groupby("program_id")["instance"].nunique().max() == 1
    assert rr.summary["affinity_breaks"] > 0
    assert aff.summary["prefix_hit_rate"] > rr.summary["prefix_hit_rate"]


def test_session_affinity_falls_back_when_home_is_full_and_counts_breaks() -> None:
    res = simulate(
        make_trace(AGENTS),
        cfg(
            hardware={"instances": 2},
            workload={"concurrency": 8},
            router={"policy": "session-affinity", "affinity_max_outstanding": 1},
        ),
        perf=LinearPerf(),
    )
    assert res.summary["affinity_breaks"] > 0
    assert res.programs["migrations"].sum() == res.summary["affinity_breaks"]


def test_session_affinity_move_transfers_kv_when_a_link_is_configured() -> None:
    base = cfg(
        hardware={"instances": 2},
        workload={"concurrency": 8},
        router={"policy": "session-affinity", "affinity_max_outstanding": 1, "inter_instance_gbps": 100},
    )
    res = simulate(make_trace(AGENTS), base, perf=LinearPerf())
    assert res.summary["reloaded_tokens"]["remote"] > 0
    assert res.summary["bytes_moved"]["fabric"] > 0


def test_cache_aware_router_follows_the_cache_when_balanced() -> None:
    ca = simulate(
        make_trace(AGENTS), cfg(hardware={"instances": 3}, router={"policy": "cache-aware"}), perf=LinearPerf()
    )
    rr = simulate(
        make_trace(AGENTS), cfg(hardware={"instances": 3}, router={"policy": "round-robin"}), perf=LinearPerf()
    )
    assert ca.summary["affinity_breaks"] == 0  # load stays within the balance thresholds: follow the cache
    assert ca.summary["prefix_hit_rate"] > rr.summary["prefix_hit_rate"]


# ---- queue orders and victims -------------------------------------------------------------------------------
def test_plas_levels_demote_by_service_and_promote_starved_calls() -> None:
    plas = Plas(PlasParams((100, 1000), 10.0))
    assert plas.level(req(service=50), now=0.0) == 0
    assert plas.level(req(service=500), now=0.0) == 1
    assert plas.level(req(service=5000), now=0.0) == 2
    assert plas.level(req(service=5000, release=0.0), now=11.0) == 0
    calls = [req(turn=1, service=5000, release=1.0), req(turn=2, service=10, release=2.0)]
    assert [r.turn for r in sorted(calls, key=lambda r: plas.key(r, 3.0))] == [2, 1]


def test_continuum_order_puts_pinned_programs_first_then_program_arrival() -> None:
    a, b, c = (
        req(turn=1, program=1, arrival=5.0),
        req(turn=2, program=2, arrival=1.0),
        req(turn=3, program=3, arrival=9.0),
    )
    c.pinned = True
    order = ContinuumOrder()
    assert [r.turn for r in sorted([a, b, c], key=lambda r: order.key(r, 0.0))] == [3, 2, 1]


def test_victim_policies() -> None:
    running = [
        req(turn=1, prompt=500, service=10),
        req(turn=2, prompt=100, service=9000),
        req(turn=3, prompt=300, service=50),
    ]
    plas = Plas(PlasParams((100, 1000), 1e9))
    assert MostRecent().pick(running, plas, 0.0).turn == 3
    assert LowestPriority().pick(running, plas, 0.0).turn == 2  # highest attained service = lowest priority
    assert AgeAware().pick(running, plas, 0.0).turn == 2  # the shortest context


# ---- retention and tiers ----------------------------------------------------------------------------------
def test_ttl_pin_survives_pressure_that_lru_does_not() -> None:
    # 120-block pool: while p0 is in its tool gap, p1's 1500-token call evicts p0's cached blocks under LRU; a
    # TTL pin keeps them, and Continuum's order lets p0's next call (its KV pinned) go before the blocked p1.
    trace = make_trace([[(1000, 10, 2.0), (1100, 10, None)], [(1500, 10, None)]])
    base = cfg(cache={"num_gpu_blocks": 120}, workload={"concurrency": 2})
    lru = simulate(trace, base, perf=LinearPerf())
    ttl = simulate(
        trace,
        base.replace(policy={"retention": "ttl", "ttl_s": 10.0, "unpin_on_pressure": False, "queue": "continuum"}),
        perf=LinearPerf(),
    )
    hit = lambda res: int(res.turns.loc[1, "cached_tokens"])  # noqa: E731
    assert hit(ttl) == 1008 and hit(lru) < hit(ttl)


def test_evict_drops_the_history() -> None:
    trace = make_trace([[(1000, 10, 1.0), (1100, 10, None)]])
    res = simulate(trace, cfg(policy={"retention": "evict"}), perf=LinearPerf())
    assert res.turns["cached_tokens"].tolist() == [0, 0]


def test_offload_reloads_from_dram_and_counts_bytes() -> None:
    # the pool is too small to keep turn 0's KV in HBM across the other program's call, DRAM keeps it
    trace = make_trace([[(1000, 10, 2.0), (1100, 10, None)], [(1500, 10, None)]])
    res = simulate(
        trace,
        cfg(
            cache={"num_gpu_blocks": 100},
            workload={"concurrency": 2},
            policy={"retention": "offload"},
            tiers={"dram_gib": 1.0},
        ),
        perf=LinearPerf(),
    )
    t = res.turns
    assert t.loc[1, "reloaded_dram_tokens"] > 0
    assert t.loc[1, "cached_tokens"] + t.loc[1, "reloaded_dram_tokens"] == 1008
    assert res.summary["bytes_moved"]["dram0"] > 0


def test_link_shares_bandwidth_between_concurrent_transfers() -> None:
    eng = Engine()
    link = Link("pcie", eng, gbps=1.0, latency_s=0.0)
    done: list[tuple[str, float]] = []
    link.start(10**9, lambda: done.append(("a", eng.now)))
    link.start(10**9, lambda: done.append(("b", eng.now)))
    eng.run()
    assert [n for n, _ in done] == ["a", "b"]
    assert all(t == pytest.approx(2.0) for _, t in done)  # each alone would take 1 s


def test_host_tier_lru_eviction() -> None:
    tier = HostTier("dram", 10, Link("x", Engine(), 1.0, 0.0))
    assert tier.put("a", 6) == []
    assert tier.put("b", 3) == []
    tier.get("a")
    assert tier.put("c", 4) == [("b", 3)]
    assert tier.used_blocks == 10


def test_infercept_min_waste_choices() -> None:
    ctx = GapContext(now_s=0, context_blocks=100, used_blocks=1000, recompute_s=0.05, swap_s=None, true_gap_s=0)
    assert _min_waste(0.1, ctx).action == "pin"  # short gap: keep
    assert _min_waste(100.0, ctx).action == "drop"  # long gap: recompute is cheaper
    swap = GapContext(0, 100, 1000, recompute_s=0.5, swap_s=0.01, true_gap_s=0)
    assert _min_waste(100.0, swap).action == "offload"


def test_continuum_ttl_uses_the_tool_distribution() -> None:
    from agentreplay.kv.retention import ContinuumParams, ContinuumTtl

    stats = ToolStats()
    for x in (1.0, 2.0, 3.0, 4.0, 5.0):
        stats.observe("test", x)
    r = req()
    r.tool_class = "test"
    ctx = GapContext(0, 10, 10, 0.1, None, 0)
    d = ContinuumTtl(ContinuumParams(continuum_quantile=0.8), stats).decide(r, ctx)
    assert d.action == "pin" and d.ttl_s == 4.0
    code = ContinuumTtl(ContinuumParams(continuum_variant="code"), stats).decide(r, ctx)
    assert code.action == "release"  # running mean 3 s > 2 s
    assert math.isinf(ContinuumTtl(ContinuumParams(), ToolStats()).decide(r, ctx).ttl_s)


# ---- properties across presets ---------------------------------------------------------------------------
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    programs=programs_st,
    blocks=st.integers(40, 120),
    preset=st.sampled_from(sorted(PRESETS)),
    instances=st.integers(1, 3),
    dram=st.sampled_from([0.0, 0.0005]),
    conc=st.integers(1, 5),
)
def test_every_program_finishes_under_every_preset(programs, blocks, preset, instances, dram, conc) -> None:
    trace = make_trace(grow(programs), shared_prefix_tokens=20)
    longest = max(i + o for turns in grow(programs) for i, o, _ in turns)
    base = SimConfig().replace(
        cache={"num_gpu_blocks": max(blocks, -(-longest // 16))},
        workload={"concurrency": conc},
        hardware={"instances": instances},
        scheduler={"max_num_seqs": 3, "max_num_batched_tokens": 128},
        tiers={"dram_gib": dram, "cxl_gib": dram},
    )
    res = simulate(trace, apply_preset(base, preset), perf=LinearPerf())  # also runs each instance's check_idle
    t = res.turns
    assert t["finish_s"].notna().all()
    assert int(t["output_tokens"].sum()) == int(trace.turns["output_tokens"].sum())
    assert (
        t["cached_tokens"] + t["reloaded_dram_tokens"] + t["reloaded_cxl_tokens"] + t["reloaded_remote_tokens"]
        <= t["input_tokens"]
    ).all()
    assert (t.loc[t["preemptions"] > 0, "finish_s"] >= t.loc[t["preemptions"] > 0, "first_token_s"]).all()


def test_heterogeneous_cluster_and_decision_log(tmp_path) -> None:
    base = SimConfig().replace(
        hardware={"model": "llama-3.1-8b", "groups": ("h100-sxm:1:2", "a100-80gb:2:1")},
        workload={"concurrency": 6},
        router={"policy": "session-affinity"},
        policy={"retention": "ttl", "decision_log": True},
    )
    res = simulate(make_trace(AGENTS), base)
    per = res.summary["cluster"]["per_instance"]
    assert [p["gpu"] for p in per] == ["h100-sxm", "h100-sxm", "a100-80gb"]
    assert per[0]["num_gpu_blocks"] != per[2]["num_gpu_blocks"]
    assert set(res.turns["instance"]) <= {0, 1, 2}
    events = {d["event"] for d in res.decisions}
    assert {"route", "admit", "retention"} <= events
    res.write(tmp_path)
    assert (tmp_path / "decisions.jsonl").read_text().count("\n") == len(res.decisions)


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.one_of(st.tuples(st.sampled_from("ab"), st.floats(0, 100)), st.tuples(st.just("q"), st.floats(0, 1))),
        max_size=80,
    )
)
def test_tool_stats_quantiles_equal_a_sorted_list(events) -> None:
    """Observations are batched and sorted lazily; every quantile equals the one of the full sorted history."""
    stats, seen = ToolStats(), {"a": [], "b": []}
    for key, x in events:
        if key == "q":
            for cls, xs in seen.items():
                want = sorted(xs)[min(len(xs) - 1, max(0, math.ceil(x * len(xs)) - 1))] if xs else None
                assert stats.quantile(cls, x) == want
                assert stats.count(cls) == len(xs)
        else:
            stats.observe(key, x)
            seen[key].append(x)


@settings(max_examples=40, deadline=None)
@given(
    loads=st.lists(st.tuples(st.integers(0, 4), st.integers(1, 900), st.booleans()), min_size=1, max_size=6),
    metric=st.sampled_from(["requests", "tokens"]),
)
def test_least_loaded_picks_the_first_least_loaded_up_instance(loads, metric) -> None:
    """The lowest load among instances that are up, ties to the lowest index; with none up, instance 0."""
    from agentreplay.router.policies import least_loaded
    from tests.features.failover.test_failover import _instance, _request

    views = []
    for waiting, prompt, up in loads:
        inst = _instance(0, up)
        inst.sched.waiting.extend(_request(100 + k, prompt=prompt) for k in range(waiting))
        views.append(inst)
    load = [v.outstanding() if metric == "requests" else v.outstanding_tokens() for v in views]
    up = [i for i, v in enumerate(views) if v.up]
    want = min(up, key=lambda i: (load[i], i)) if up else 0
    assert least_loaded(views, metric) == want


def test_tool_stats_keep_durations_only_when_a_policy_asks() -> None:
    """The simulator's ToolStats keeps counts and sums; durations (for quantiles) only after keep_samples(), which
    Continuum calls when built; asking for them after observations were made without them is an error."""
    from agentreplay.kv.retention import ContinuumParams, ContinuumTtl

    lean = ToolStats(samples=False)
    lean.observe("test", 2.0)
    assert lean.mean("test") == 2.0 and lean.count("test") == 1 and not lean._new
    with pytest.raises(RuntimeError, match="not kept"):
        lean.quantile("test", 0.5)
    with pytest.raises(RuntimeError, match="after observations"):
        ContinuumTtl(ContinuumParams(), lean)
    fresh = ToolStats(samples=False)
    ContinuumTtl(ContinuumParams(), fresh)
    for x in (1.0, 2.0, 3.0):
        fresh.observe("test", x)
    assert fresh.quantile("test", 0.5) == 2.0
