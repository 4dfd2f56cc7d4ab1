"""``compare`` (the preset comparison experiment) runs every preset under several seeds and ranks them as ``plan``
does: presets closer than the seed spread are a tie, broken by the simplest deployment; preset names are checked
before anything is simulated; Ctrl-C keeps the finished runs for a rerun."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from tests.experiment.helpers import tiny_trace

runner = CliRunner()


@pytest.fixture()
def trace(tmp_path: Path) -> str:
    return str(tiny_trace(tmp_path / "tr", [[(300 + 40 * t, 12, 0.3) for t in range(3)] for _ in range(4)]))


def compare(*args: str) -> object:
    return runner.invoke(app, ["compare", *args, "--workers", "1"], env={"COLUMNS": "250"})


def test_unknown_preset_is_refused_before_anything_is_simulated(tmp_path, trace, monkeypatch) -> None:
    def never(*a, **k):  # pragma: no cover - the test fails if reached
        raise AssertionError("simulated before the preset names were checked")

    monkeypatch.setattr("agentreplay.sim.run.simulate", never)
    monkeypatch.setattr("agentreplay.sim.workload.load_workload", never)
    out = tmp_path / "cmp"
    res = compare("--trace", trace, "--out", str(out), "--presets", "vllm,vlm,fastest")
    assert res.exit_code == 1
    assert "unknown preset(s) 'vlm', 'fastest'" in res.output and "did you mean 'vllm'" in res.output
    assert not out.exists()
    res = compare("--trace", trace, "--out", str(out), "--rank-by", "speed")
    assert res.exit_code == 1 and "--rank-by 'speed'" in res.output and not out.exists()


def test_equal_presets_tie_and_the_simplest_wins_whatever_the_order(tmp_path, trace) -> None:
    out = tmp_path / "cmp"
    res = compare("--trace", trace, "--out", str(out), "--presets", "agent-affinity,lmcache-offload,sglang,vllm")
    assert res.exit_code == 0, res.output
    assert "mean over seeds 0,1,2" in res.output and "best on jct_p90: vllm" in res.output
    table = pd.read_parquet(out / "compare.parquet")
    assert list(table["preset"]) == ["agent-affinity", "lmcache-offload", "sglang", "vllm"]
    best = table.set_index("preset")
    assert bool(best.loc["vllm", "best"]) and best["best"].sum() == 1
    assert all(len(v) == 3 for v in table["jct_p90_per_seed_s"])
    assert best.loc["lmcache-offload", "deploys"].startswith("256 GiB DRAM per instance")
    assert not bool(best.loc["lmcache-offload", "tie"])  # the host tier costs more: never tied with the cheaper
    assert set(table.loc[table["tie"], "preset"]) == {"agent-affinity", "sglang"}  # identical figures here
    assert (best["ttft_p90_s"] > 0).all() and "TTFT p90 (s)" in res.output
    assert (out / "vllm" / "summary.json").exists() and (out / "jct_cdf.png").stat().st_size > 0
    assert len(list((out / "sim-runs").iterdir())) == 4 * 3  # every preset and seed kept


def test_one_seed_is_said(tmp_path, trace) -> None:
    out = tmp_path / "cmp"
    res = compare("--trace", trace, "--out", str(out), "--presets", "vllm", "--seeds", "5", "--json")
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert row["seeds"] == "5" and row["best"] is True and row["jct_p90_spread_s"] == 0.0
    res = compare("--trace", trace, "--out", str(out), "--presets", "vllm", "--seeds", "5")
    assert "one seed: no spread measured" in res.output


def test_ctrl_c_keeps_the_finished_runs_and_the_previous_output(tmp_path, trace, monkeypatch) -> None:
    out = tmp_path / "cmp"
    assert compare("--trace", trace, "--out", str(out), "--presets", "vllm", "--seeds", "0").exit_code == 0
    before = sorted(p.name for p in out.iterdir())
    from agentreplay.sim import run

    real, calls = run.simulate, []

    def second_interrupted(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(run, "simulate", second_interrupted)
    res = compare("--trace", trace, "--out", str(out), "--presets", "vllm,sglang", "--seeds", "1")
    assert res.exit_code == 130
    assert [x for x in res.output.splitlines() if "interrupted" in x] == [
        f"interrupted: the finished cells are kept in {out / 'sim-runs'}; rerun the same command to resume"
    ]
    assert sorted(p.name for p in out.iterdir()) == before  # the last complete output is still there
    assert len(list((out / "sim-runs").iterdir())) == 2  # the earlier run's cell and the one that finished now
    monkeypatch.undo()
    res = compare("--trace", trace, "--out", str(out), "--presets", "vllm,sglang", "--seeds", "1")
    assert res.exit_code == 0 and "1 already done" in res.output
    assert {p.name for p in out.iterdir()} >= {"vllm", "sglang"} and len(list((out / "sim-runs").iterdir())) == 2


def test_the_in_process_comparison_is_the_runners(tmp_path, trace) -> None:
    from agentreplay.experiment.compare import compare as in_process
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.workload import load_workload

    res = compare("--trace", trace, "--out", str(tmp_path / "cmp"), "--presets", "vllm,sglang", "--seeds", "0,1")
    table, results = in_process(load_workload(trace), SimConfig(), ["vllm", "sglang"], seeds=[0, 1])
    stored = pd.read_parquet(tmp_path / "cmp" / "compare.parquet")
    assert res.exit_code == 0 and list(results) == ["vllm", "sglang"]
    pd.testing.assert_frame_equal(stored[table.columns[:-1]], table.drop(columns=["per_seed"]))


def test_rank_metrics_of_the_help_are_the_experiments() -> None:
    from agentreplay.cli.compare import RANK_METRICS as shown
    from agentreplay.experiment.compare import RANK_METRICS

    assert shown == RANK_METRICS
