"""Properties of whole replays: fast decode equals step by step, determinism, conservation, ordering."""

from __future__ import annotations

import filecmp

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentreplay.policy.presets import PRESETS, apply_preset
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import read_trace
from tests.conftest import ROOT
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

BUNDLED = ROOT / "datasets" / "swebench-verified"
INT_COLS = [
    "instance",
    "cached_tokens",
    "cached_prefix_tokens",
    "recomputed_tokens",
    "preemptions",
    "input_tokens",
    "output_tokens",
]
TIME_COLS = ["release_s", "first_scheduled_s", "first_token_s", "finish_s"]


def assert_same_replay(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Bit-identical: decode steps are summed one by one in both modes (see agentreplay.sim.instance._Run)."""
    pd.testing.assert_frame_equal(a[INT_COLS + TIME_COLS], b[INT_COLS + TIME_COLS], check_exact=True)


def three_paths(trace, cfg: SimConfig, **kw):
    """The same replay with fast decode, step by step (``fast_decode=False``) and eager (``lazy_decode=False``)."""
    return (
        simulate(trace, cfg, **kw),
        simulate(trace, cfg.replace(scheduler={"fast_decode": False}), **kw),
        simulate(trace, cfg.replace(scheduler={"lazy_decode": False}), **kw),
    )


def assert_paths_agree(runs, extra: tuple[str, ...] = ()) -> None:
    """Every path's per-turn frame equals the fast path's, bit for bit, on the replay columns and ``extra``."""
    cols = INT_COLS + TIME_COLS + list(extra)
    for other in runs[1:]:
        pd.testing.assert_frame_equal(runs[0].turns[cols], other.turns[cols], check_exact=True)
        # GPU-seconds: the cohort counter and a run's closed form (agentreplay.sim.gpu_time) equal per-step,
        # per-request charging up to rounding
        pd.testing.assert_series_equal(runs[0].turns["gpu_s"], other.turns["gpu_s"], rtol=1e-9, atol=0)


@pytest.fixture(scope="module")
def bundled_head():
    return compile_trace(read_trace(BUNDLED)).head(40)


@pytest.mark.parametrize("blocks", [None, 6000])  # roomy, and tight enough to preempt
def test_fast_decode_equals_step_by_step_on_real_programs(bundled_head, blocks) -> None:
    cfg = SimConfig().replace(workload={"concurrency": 12}, cache={"num_gpu_blocks": blocks})
    fast, slow, eager = three_paths(bundled_head, cfg)
    assert_paths_agree((fast, slow, eager))
    assert fast.summary["engine"]["iterations"] == slow.summary["engine"]["iterations"]
    assert fast.summary["engine"]["iterations"] == eager.summary["engine"]["iterations"]
    assert fast.summary["engine"]["events"] < slow.summary["engine"]["events"]
    if blocks:
        assert fast.summary["preemptions"] > 0


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_fast_lazy_and_eager_paths_agree_under_every_preset(bundled_head, preset) -> None:
    """Pins, TTL expiries, host-tier writes and KV loads end or forbid decode runs exactly where a step-by-step
    engine would schedule differently (found: a load completing mid-run, and a step that starts loads)."""
    cfg = apply_preset(
        SimConfig().replace(workload={"concurrency": 16}, hardware={"instances": 2}, cache={"num_gpu_blocks": 6000}),
        preset,
    )
    assert_paths_agree(three_paths(bundled_head, cfg), ("first_scheduled_s", "reloaded_dram_tokens"))


def test_fast_lazy_and_eager_paths_agree_when_programs_migrate_with_their_kv(bundled_head) -> None:
    """Another instance reads the old instance's pool mid-run (cached KV moved over the cluster link): the run's
    evictions so far must be applied first (found: the fast path loaded blocks a step-by-step engine had
    evicted)."""
    cfg = apply_preset(
        SimConfig().replace(workload={"concurrency": 24}, hardware={"instances": 3}, cache={"num_gpu_blocks": 6000}),
        "continuum",
    )
    cfg = cfg.replace(router={"inter_instance_gbps": 50.0, "affinity_max_outstanding": 6})
    runs = three_paths(bundled_head, cfg)
    assert runs[0].turns["reloaded_remote_tokens"].sum() > 0
    assert_paths_agree(runs, ("reloaded_remote_tokens",))


programs_st = st.lists(
    st.lists(
        st.tuples(st.integers(1, 300), st.integers(1, 40), st.sampled_from([0.0, 0.05, 0.3, 1.0])),
        min_size=1,
        max_size=4,
    ),
    min_size=1,
    max_size=6,
)


def grow(programs):
    """Make contexts append-only: each turn's prompt extends the previous prompt + output."""
    out = []
    for turns in programs:
        ctx, rows = 0, []
        for new, o, tool in turns:
            rows.append((ctx + new, o, tool))
            ctx += new + o
        out.append(rows)
    return out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    programs=programs_st,
    blocks=st.integers(60, 200),
    seqs=st.integers(1, 4),
    budget=st.integers(16, 256),
    conc=st.integers(1, 4),
    prefix=st.sampled_from([0, 20, 40]),
)
def test_random_traces_finish_in_order_and_fast_equals_slow(programs, blocks, seqs, budget, conc, prefix) -> None:
    trace = make_trace(grow(programs), shared_prefix_tokens=prefix)
    longest = max(i + o for turns in grow(programs) for i, o, _ in turns)
    blocks = max(blocks, -(-longest // 16))
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": blocks},
        workload={"concurrency": conc},
        scheduler={"max_num_seqs": seqs, "max_num_batched_tokens": budget},
    )
    runs = three_paths(trace, cfg, perf=LinearPerf())
    assert_paths_agree(runs)
    t = runs[0].turns
    assert t["finish_s"].notna().all()  # every released turn finished
    assert (t["first_token_s"] >= t["release_s"]).all() and (t["finish_s"] >= t["first_token_s"]).all()
    for _, g in t.groupby("program_id"):  # turn t+1 released only after turn t and its tool gap
        prev_end = g["finish_s"].to_numpy()[:-1] + g["tool_s"].to_numpy()[:-1]
        assert np.allclose(g["release_s"].to_numpy()[1:], prev_end)
    assert int(t["output_tokens"].sum()) == int(trace.turns["output_tokens"].sum())
    assert int(t["input_tokens"].sum()) == int(trace.turns["input_tokens"].sum())
    assert (t["cached_tokens"] < t["input_tokens"]).all()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    programs=programs_st,
    blocks=st.integers(60, 200),
    seqs=st.integers(1, 4),
    budget=st.integers(16, 256),
    conc=st.integers(1, 6),
    prefix=st.sampled_from([0, 20, 40]),
    preset=st.sampled_from(sorted(PRESETS)),
    instances=st.integers(1, 3),
    gbps=st.sampled_from([0.0, 1.0, 50.0]),
    dram_gib=st.sampled_from([0.0, 0.05, 1.0]),
    ttl=st.sampled_from([0.01, 0.3, 5.0]),
    unpin=st.booleans(),
)
def test_random_traces_fast_equals_slow_under_presets_tiers_and_migration(
    programs, blocks, seqs, budget, conc, prefix, preset, instances, gbps, dram_gib, ttl, unpin
) -> None:
    """Every source of wakes and cross-instance reads (pins and their expiry, tier writes and loads, migrations)
    on random traces: the three engine paths agree exactly."""
    trace = make_trace(grow(programs), shared_prefix_tokens=prefix)
    longest = max(i + o for turns in grow(programs) for i, o, _ in turns)
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": max(blocks, -(-longest // 16))},
        workload={"concurrency": conc},
        hardware={"instances": instances},
        scheduler={"max_num_seqs": seqs, "max_num_batched_tokens": budget},
    )
    cfg = apply_preset(cfg, preset).replace(
        router={"inter_instance_gbps": gbps}, policy={"ttl_s": ttl, "unpin_on_pressure": unpin}
    )
    if dram_gib:
        cfg = cfg.replace(tiers={"dram_gib": dram_gib})
    assert_paths_agree(three_paths(trace, cfg, perf=LinearPerf()), ("reloaded_dram_tokens", "reloaded_remote_tokens"))


def test_token_conservation_on_the_bundled_trace(bundled_head) -> None:
    res = simulate(bundled_head, SimConfig().replace(workload={"concurrency": 16}))
    assert res.summary["input_tokens"] == int(bundled_head.input_tokens.sum())
    assert res.summary["output_tokens"] == int(bundled_head.output_tokens.sum())
    assert res.summary["turns"] == bundled_head.n_turns


def test_same_seed_gives_byte_identical_files(bundled_head, tmp_path) -> None:
    cfg = SimConfig().replace(workload={"arrival": "poisson", "rate_per_s": 0.5}, seed=3)
    simulate(bundled_head, cfg).write(tmp_path / "a")
    simulate(bundled_head, cfg).write(tmp_path / "b")
    for name in ("turns.parquet", "programs.parquet", "instances.parquet", "summary.json", "config.toml"):
        assert filecmp.cmp(tmp_path / "a" / name, tmp_path / "b" / name, shallow=False), name


def test_multi_instance_round_robin_spreads_turns() -> None:
    trace = make_trace([[(100, 5, 0.1), (150, 5, None)]] * 4)
    cfg = SimConfig().replace(
        hardware={"instances": 2},
        router={"policy": "round-robin"},
        workload={"concurrency": 4},
        cache={"num_gpu_blocks": 1000},
    )
    res = simulate(trace, cfg, perf=LinearPerf())
    assert sorted(res.turns["instance"].unique().tolist()) == [0, 1]
