"""``agentreplay fleet footprint`` on a few programs of the bundled trace: tables, files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.experiment.helpers import BUNDLED, fleet_json

STATES = ("running", "waiting", "idle", "cached_free", "free")


def test_footprint_writes_tables_and_figure(tmp_path: Path) -> None:
    out = tmp_path / "fp"
    args = ["--trace", str(BUNDLED), "--out", str(out), "--max-programs", "4", "--concurrency", "4", "--interval", "5"]
    doc = fleet_json("footprint", *args)
    got = json.loads((out / "summary.json").read_text())
    assert [r["instances"] for r in got] == [1, 4, 4]
    assert [r["preset"] for r in got] == ["vllm", "vllm", "agent-affinity"]
    for r in got:
        # the states are a partition of the HBM KV at every time, so their means sum to the pool
        assert abs(sum(r["mean_gib"][s] for s in STATES) - r["hbm_kv_gib"]) < 1e-6 * r["hbm_kv_gib"]
        assert 0 < r["gpu_hours_per_1000_tasks_attributed"] <= r["gpu_hours_per_1000_tasks_fleet"]
        assert r["jct_p50_s"] <= r["jct_p90_s"]
    assert got[0]["mean_gib"]["idle"] == 0.0  # LRU keeps no pins
    rows = doc["tables"]["footprint"]
    assert len(rows) == 3 * 6 and rows[0]["cluster"] == got[0]["cluster"] and rows[0]["state"] == "running"
    assert (out / "footprint.png").stat().st_size > 0
    md = (out / "footprint.md").read_text()
    assert "idle in a tool call" in md and "GPU-h / 1,000 tasks attributed" in md and "JCT p90 (s)" in md
