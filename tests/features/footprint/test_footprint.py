"""KV footprint time series (agentreplay.features.footprint): hand-computed block states, the partition, the table."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from agentreplay.features.footprint.config import FootprintConfig
from agentreplay.features.footprint.footprint import COLUMNS
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.config import ConfigError
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf


def _run(retention: str, **policy: float):  # type: ignore[no-untyped-def]
    """A: 40-token prompt, 2 output tokens, a 10 s tool call, then a 60-token prompt (1 output); B: 32 tokens,
    3 output, arriving at t = 3. Every step lasts 1 s; 100 blocks of 16 tokens; a sample at every step start."""
    trace = make_trace([[(40, 2, 10.0), (60, 1, None)], [(32, 3, None)]])
    trace.programs["arrival_s"] = [0.0, 3.0]
    config = SimConfig().replace(
        cache={"num_gpu_blocks": 100},
        workload={"arrival": "trace"},
        policy={"retention": retention, **policy},
        footprint={"interval_s": 0.5},
    )
    return simulate(trace, config, perf=LinearPerf(a=1.0, b=0.0))


def _rows(res) -> list[list[float]]:  # type: ignore[no-untyped-def]
    c = res.columns("footprint")
    return [[c[k][i].item() for k in COLUMNS] for i in range(len(c["time_s"]))]


def test_pinned_session_is_idle_in_its_tool_call() -> None:
    """(time, instance, running, waiting, idle, cached_free, free, total, offloaded); steps start at t = 0, 1
    (A's prefill, A's decode run), 3, 4 (B's prefill, B's 2-step decode run) and 12 (A's second call).

    t=0: A's 40-token chunk has slots: ceil(40/16) = 3 blocks running. t=1: its decode slot (token 41) fits in
    block 3. A finishes at 2; the TTL pin (60 s) keeps its 41 // 16 = 2 full blocks, the partial one is freed.
    t=3: B's 32 tokens = 2 blocks running, A's 2 idle. t=4: B's decode slot 33 opens a third block.
    t=12: A's second call hits its 2 pinned blocks (the pin is consumed) and computes to 60 tokens: 4 blocks
    running; B's finished history (2 full blocks of 34 tokens) stays in the prefix cache: 2 cached-free."""
    assert _rows(_run("ttl", ttl_s=60.0)) == [
        [0.0, 0, 3, 0, 0, 0, 97, 100, 0],
        [1.0, 0, 3, 0, 0, 0, 97, 100, 0],
        [3.0, 0, 2, 0, 2, 0, 96, 100, 0],
        [4.0, 0, 3, 0, 2, 0, 95, 100, 0],
        [12.0, 0, 4, 0, 0, 2, 94, 100, 0],
    ]


def test_without_a_pin_the_session_is_cached_free() -> None:
    """vLLM's LRU (no retention policy): A's 2 full blocks go back to the free queue with their content
    (cached-free) instead of idle; at t=12 they are hit again (running)."""
    rows = _rows(_run("lru"))
    assert rows[2] == [3.0, 0, 2, 0, 0, 2, 96, 100, 0]
    assert rows[3] == [4.0, 0, 3, 0, 0, 2, 95, 100, 0]
    assert rows[4] == [12.0, 0, 4, 0, 0, 2, 94, 100, 0]


def test_footprint_is_off_by_default_and_written_when_on(tmp_path) -> None:
    trace = make_trace([[(40, 2, None)]])
    off = simulate(trace, SimConfig().replace(cache={"num_gpu_blocks": 100}), perf=LinearPerf())
    assert "footprint" not in off.tables() and "footprint" not in off.summary
    on = _run("ttl", ttl_s=60.0)
    on.write(tmp_path)
    got = pq.read_table(tmp_path / "footprint.parquet")
    assert got.column_names == list(COLUMNS)
    assert got.equals(on.tables()["footprint"])
    cols = on.columns("footprint")
    assert cols is not None
    for name in COLUMNS:
        assert got.column(name).to_pylist() == cols[name].tolist()
    assert on.summary["footprint"]["samples"] == 5
    assert on.summary["footprint"]["block_bytes"] > 0


@pytest.mark.parametrize("section", [{"retention": "continuum"}, {"retention": "offload"}])
def test_states_partition_the_pool_under_pressure(section: dict[str, str]) -> None:
    """Random-ish multi-turn programs on 2 instances with few blocks (preemption), pins or host-tier writes:
    every sample's states sum to the pool and none is negative."""
    progs = [[(30 + 37 * p % 200, 5 + 11 * p % 60, 0.05 * (p % 3)) for _ in range(3)] for p in range(10)]
    config = SimConfig().replace(
        cache={"num_gpu_blocks": 60},
        hardware={"instances": 2},
        policy=section,
        tiers={"dram_gib": 1.0},
        workload={"concurrency": 6},
        footprint={"interval_s": 0.001},
    )
    res = simulate(make_trace(progs), config, perf=LinearPerf())
    c = res.columns("footprint")
    assert c is not None and len(c["time_s"]) > 20
    parts = sum(c[f"{s}_blocks"] for s in ("running", "waiting", "idle", "cached_free", "free"))
    assert (parts == c["total_blocks"]).all()
    assert min(c[f"{s}_blocks"].min() for s in ("running", "waiting", "idle", "cached_free", "free")) >= 0
    assert c["running_blocks"].max() > 0


def test_bad_interval_names_section_field_and_value() -> None:
    with pytest.raises(ConfigError, match=r"\[footprint\] interval_s = -1.0"):
        FootprintConfig(interval_s=-1.0)
    with pytest.raises(ConfigError, match=r"\[footprint\] interval_s"):
        SimConfig().replace(footprint={"interval_s": float("inf")})


def test_cluster_series_carries_each_instance_forward_and_sums() -> None:
    """Instance 0 sampled at t = 0 and 2, instance 1 at t = 1 (before: all free); grid of 1 s, 1 GiB blocks.
    t=0: inst 0 (running 2, free 8) + inst 1 not sampled yet (free 10) -> running 2, free 18.
    t=1: inst 0 still (2, 8) + inst 1 (running 5, free 5) -> running 7, free 13.
    t=2: inst 0 (running 1, free 9) + inst 1 (5, 5) -> running 6, free 14."""
    import pandas as pd

    from agentreplay.features.footprint.experiment import GIB, cluster_series

    def row(t: float, i: int, run: int) -> dict[str, float]:
        return {
            "time_s": t,
            "instance": i,
            "running_blocks": run,
            "waiting_blocks": 0,
            "idle_blocks": 0,
            "cached_free_blocks": 0,
            "free_blocks": 10 - run,
            "total_blocks": 10,
            "offloaded_blocks": 0,
        }

    fp = pd.DataFrame([row(0.0, 0, 2), row(2.0, 0, 1), row(1.0, 1, 5)])
    s = cluster_series(fp, GIB, 1.0)
    assert s["time_s"].tolist() == [0.0, 1.0, 2.0]
    assert s["running_gib"].tolist() == [2.0, 7.0, 6.0]
    assert s["free_gib"].tolist() == [18.0, 13.0, 14.0]
