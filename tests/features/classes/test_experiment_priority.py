"""``agentreplay fleet priority`` on a tiny trace: one row per variant and class, and a bad class named."""

from __future__ import annotations

from pathlib import Path

from tests.experiment.helpers import fleet, fleet_json, tiny_trace

AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6


def test_priority_rows_and_a_bad_class_option(tmp_path: Path) -> None:
    tr, out = str(tiny_trace(tmp_path / "tr", AGENTS)), tmp_path / "pri"
    args = ["--trace", tr, "--concurrency", "6", "--num-gpu-blocks", "400", "--deadline-s", "interactive=900"]
    rows = fleet_json("priority", *args, "-o", str(out))["tables"]["priority"]
    assert list(rows[0])[:3] == ["variant", "class", "attempted"]
    assert {r["variant"] for r in rows} == {"fcfs", "priority", "priority + defer", "priority + reject"}
    assert sum(r["attempted"] for r in rows if r["variant"] == "fcfs") == 6
    assert "deadlines interactive 900 s, background 3x, batch 10x" in (out / "table.md").read_text()
    bad = fleet("priority", "--trace", tr, "--deadline-s", "urgent=5", "-o", str(tmp_path / "bad"))
    assert bad.exit_code == 1 and "deadline_s.urgent" in bad.output
    bad = fleet("priority", "--trace", tr, "--mix", "interactive", "-o", str(tmp_path / "bad"))
    assert bad.exit_code == 1 and "--mix 'interactive': expected NAME=NUMBER pairs" in bad.output
