"""``agentreplay fleet admission`` on a tiny trace where KV is tight: the table, the files, the footprint series."""

from __future__ import annotations

import json
from pathlib import Path

from tests.experiment.helpers import fleet, tiny_trace

AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6


def test_admission_writes_table_summary_and_figure(tmp_path: Path) -> None:
    out = tmp_path / "adm"
    args = ["--trace", str(tiny_trace(tmp_path / "tr", AGENTS)), "--concurrency", "6", "--num-gpu-blocks", "400"]
    res = fleet("admission", *args, "-o", str(out))
    assert res.exit_code == 0, res.output
    assert "thunderagent (no decay)" in res.output and "KV blocks 400" in res.output
    assert {p.name for p in out.iterdir()} >= {"table.md", "summary.json", "admission.png", "admission.parquet"}
    s = json.loads((out / "summary.json").read_text())
    assert s["thunderagent (no decay)"]["admission"]["pauses"] > 0  # 400 blocks hold 3 of the 6 programs
    assert "admission" not in s["admit-all"] and "engine" not in s["admit-all"]  # the bulky parts left out
    md = (out / "table.md").read_text()
    assert md.startswith("admission on tr: ") and "| admit-all |" in md and "| - |" in md  # no capacity: '-'
    import pandas as pd

    fp = pd.read_parquet(out / "admission_footprint.parquet")
    assert set(fp["variant"]) == {"thunderagent (decay 1 s)", "thunderagent (no decay)"}
    assert (fp["capacity_tokens"] == 400 * 16).all()
