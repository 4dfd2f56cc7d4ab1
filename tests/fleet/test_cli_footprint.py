"""``agentreplay fleet-footprint`` on a few programs of the bundled trace: tables, files, bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentreplay.cli import app

runner = CliRunner()
TRACE = Path(__file__).resolve().parents[2] / "datasets" / "swebench-verified"


def test_fleet_footprint_writes_table_and_figure(tmp_path) -> None:
    out = tmp_path / "fp"
    args = ["fleet-footprint", "--trace", str(TRACE), "--out", str(out), "--max-programs", "6"]
    res = runner.invoke(app, [*args, "--concurrency", "4", "--interval", "5", "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert [r["instances"] for r in got] == [1, 4, 4]
    assert [r["preset"] for r in got] == ["vllm", "vllm", "agent-affinity"]
    for r in got:
        # the states are a partition of the HBM KV at every time, so their means sum to the pool
        assert (
            abs(sum(r["mean_gib"][s] for s in ("running", "waiting", "idle", "cached_free", "free")) - r["hbm_kv_gib"])
            < 1e-6 * r["hbm_kv_gib"]
        )
        assert 0 < r["gpu_hours_per_1000_tasks_attributed"] <= r["gpu_hours_per_1000_tasks_fleet"]
    assert got[0]["mean_gib"]["idle"] == 0.0  # LRU keeps no pins
    assert (out / "footprint.png").stat().st_size > 0
    md = (out / "footprint.md").read_text()
    assert "idle in a tool call" in md and "GPU-h / 1,000 tasks attributed" in md


def test_fleet_footprint_bad_trace_fails_clearly(tmp_path) -> None:
    res = runner.invoke(app, ["fleet-footprint", "--trace", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1
    assert "nope" in res.output
