"""``compare`` runs every preset under several seeds and ranks them as ``plan`` does (issue 31, items 1 and 5):
presets closer than the seed spread are a tie, broken by the simplest deployment; preset names are checked before
anything is simulated; Ctrl-C leaves the previous output as it was."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()


@pytest.fixture()
def trace(tmp_path):
    write_trace(tmp_path / "tr", make_trace([[(300 + 40 * t, 12, 0.3) for t in range(3)] for _ in range(4)]))
    return str(tmp_path / "tr")


def test_unknown_preset_is_refused_before_anything_is_simulated(tmp_path, trace, monkeypatch) -> None:
    import agentreplay.compare as cmp

    def never(*a, **k):  # pragma: no cover - the test fails if reached
        raise AssertionError("simulated before the preset names were checked")

    monkeypatch.setattr(cmp, "simulate", never)
    monkeypatch.setattr("agentreplay.sim.workload.compile_trace", never)
    out = tmp_path / "cmp"
    res = runner.invoke(app, ["compare", "--trace", trace, "--out", str(out), "--presets", "vllm,vlm,fastest"])
    assert res.exit_code == 1
    assert "unknown preset(s) 'vlm', 'fastest'" in res.output and "did you mean 'vllm'" in res.output
    assert not out.exists()
    res = runner.invoke(app, ["compare", "--trace", trace, "--out", str(out), "--rank-by", "speed"])
    assert res.exit_code == 1 and "--rank-by 'speed'" in res.output and not out.exists()


def test_equal_presets_tie_and_the_simplest_wins_whatever_the_order(tmp_path, trace) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app,
        ["compare", "--trace", trace, "--out", str(out), "--presets", "agent-affinity,lmcache-offload,sglang,vllm"],
        terminal_width=250,
    )
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
    assert (out / "vllm" / "summary.json").exists()


def test_one_seed_is_said(tmp_path, trace) -> None:
    out = tmp_path / "cmp"
    res = runner.invoke(
        app, ["compare", "--trace", trace, "--out", str(out), "--presets", "vllm", "--seeds", "5", "--json"]
    )
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.stdout)
    assert row["seeds"] == "5" and row["best"] is True and row["jct_p90_spread_s"] == 0.0


def test_ctrl_c_leaves_the_previous_output(tmp_path, trace, monkeypatch) -> None:
    out = tmp_path / "cmp"
    assert (
        runner.invoke(
            app, ["compare", "--trace", trace, "--out", str(out), "--presets", "vllm", "--seeds", "0"]
        ).exit_code
        == 0
    )
    before = sorted(p.name for p in out.iterdir())
    import agentreplay.compare as cmp

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(cmp, "simulate", interrupted)
    res = runner.invoke(app, ["compare", "--trace", trace, "--out", str(out), "--presets", "sglang"])
    assert res.exit_code == 130
    assert [x for x in res.output.splitlines() if "interrupted" in x] == [
        f"interrupted: {out} left as it was (compare is not resumable: rerun it)"
    ]
    assert sorted(p.name for p in out.iterdir()) == before and [p.name for p in tmp_path.iterdir()] == ["cmp", "tr"]


def test_rank_metrics_of_the_help_are_the_libraries() -> None:
    from agentreplay.cli.compare import RANK_METRICS as shown
    from agentreplay.compare import RANK_METRICS

    assert shown == RANK_METRICS
