"""``analyse`` end to end on tiny real runs: programs cut by max_model_len, and the decision-log filter."""

from __future__ import annotations

import pytest

from agentreplay.fleet import Prices, analyse, read_output
from agentreplay.sim import SimConfig, simulate
from tests.factories import make_trace

#: p0's third call (9,000 tokens) is over max_model_len 4,096: vLLM rejects it and the agent stops there.
TRACE = make_trace([[(1000, 20, 1.0), (1500, 20, 1.0), (9000, 20, None)], [(1000, 20, 1.0), (1200, 20, None)]])


@pytest.fixture(scope="module")
def cut_run(tmp_path_factory):
    d = tmp_path_factory.mktemp("cut")
    cfg = SimConfig().replace(scheduler={"max_model_len": 4096}, policy={"decision_log": True})
    res = simulate(TRACE, cfg)
    assert res.summary["rejected"]["programs_cut"] == 1
    res.write(d)
    return d


def test_a_cut_program_misses_its_deadline_when_the_trace_tells(cut_run) -> None:
    rep = analyse(read_output(cut_run), Prices(), deadline_s=1e9, trace_turns=TRACE.turns)
    g = rep.summary["goodput"]
    assert (g["attempted"], g["met"], g["programs_cut"]) == (2, 1, 1)
    assert rep.programs.set_index("program_id")["cut"].to_dict() == {"p0": True, "p1": False}
    assert not rep.notes


def test_without_the_trace_a_cut_program_counts_and_the_report_says_so(cut_run) -> None:
    rep = analyse(read_output(cut_run), Prices(), deadline_s=1e9)
    assert rep.summary["goodput"]["met"] == 2
    assert rep.notes == [
        "1 programs were cut at a call over max_model_len; without --trace they count as "
        "finished when their JCT meets the deadline"
    ]


def test_a_trace_without_a_turn_of_the_run_is_refused(cut_run) -> None:
    other = make_trace([[(1000, 20, None)]])
    with pytest.raises(ValueError, match="the trace has no turn 1 of program 'p0'"):
        analyse(read_output(cut_run), Prices(), deadline_x=2, trace_turns=other.turns)


def test_decision_events_filter(cut_run) -> None:
    everything = read_output(cut_run).decisions
    kept = read_output(cut_run, decision_events=("retention",)).decisions
    assert everything is not None and kept is not None
    assert set(everything["event"]) >= {"route", "admit", "retention"}
    assert set(kept["event"]) == {"retention"}
    assert len(kept) == (everything["event"] == "retention").sum() == 2  # p0, p1 turn 0 (a last call: no gap)


def test_gpu_time_per_1000_tasks(cut_run) -> None:
    out = read_output(cut_run)
    g = analyse(out, Prices(), deadline_x=2).summary["gpu_time"]
    makespan, busy = out.summary["makespan_s"], out.summary["engine"]["busy_s_per_instance"][0]
    assert g["gpus"] == 1 and g["makespan_s"] == makespan
    assert g["fleet_gpu_hours_per_1000_tasks"] == pytest.approx(makespan / 3600 / 2 * 1000)
    assert g["busy_gpu_hours_per_1000_tasks"] == pytest.approx(busy / 3600 / 2 * 1000)
    assert 0 < g["busy_share"] <= 1
    # programs' GPU-seconds (token shares of the iterations) add up to the busy time on one GPU; the rest of
    # GPUs x makespan is idle
    assert g["attributed_gpu_hours_per_1000_tasks"] == pytest.approx(busy / 3600 / 2 * 1000, rel=1e-9)
    assert g["idle_gpu_hours_per_1000_tasks"] == pytest.approx((makespan - busy) / 3600 / 2 * 1000, rel=1e-9)


def test_gpu_seconds_per_program(cut_run) -> None:
    out = read_output(cut_run)
    rep = analyse(out, Prices(), deadline_x=2)
    g = rep.summary["gpu_s_per_program"]
    per = out.programs.set_index("program_id")["gpu_s"]
    assert g["p50"] == pytest.approx(float(per.median()))
    assert g["p99"] == pytest.approx(float(per.quantile(0.99)))
    assert [t["program_id"] for t in g["top"]] == list(per.sort_values(ascending=False).index)
    assert rep.programs.set_index("program_id")["gpu_s"].to_dict() == per.to_dict()


def test_an_output_without_gpu_seconds_still_reports(cut_run, tmp_path) -> None:
    """Outputs written before ``gpu_s`` existed: no per-program figures, attributed GPU time NaN."""
    import shutil

    import pandas as pd

    d = tmp_path / "old"
    shutil.copytree(cut_run, d)
    for name in ("turns", "programs"):
        pd.read_parquet(d / f"{name}.parquet").drop(columns="gpu_s").to_parquet(d / f"{name}.parquet")
    rep = analyse(read_output(d), Prices(), deadline_x=2)
    assert rep.summary["gpu_s_per_program"] == {}
    assert (
        rep.summary["gpu_time"]["attributed_gpu_hours_per_1000_tasks"]
        != rep.summary["gpu_time"]["attributed_gpu_hours_per_1000_tasks"]
    )
