"""``agentreplay fleet thinking`` on a tiny trace: the budget cuts reasoning tokens and shortens the tail."""

from __future__ import annotations

from pathlib import Path

from tests.experiment.helpers import fleet, fleet_json
from tests.factories import make_trace


def reasoning_trace(folder: Path) -> Path:
    """Three programs of three turns; every first turn reasons 150 of its 200 output tokens."""
    from agentreplay.trace.io import write_trace

    trace = make_trace([[(2000 + 1500 * t, 200 if t == 0 else 60, 1.0) for t in range(3)] for _ in range(3)])
    trace.turns["reasoning_tokens"] = [150 if t == 0 else 0 for t in trace.turns["turn_idx"]]
    write_trace(folder, trace)
    return folder


def test_a_budget_cuts_tokens_and_the_tail(tmp_path: Path) -> None:
    """Budget 50: each first turn keeps 50 of its 150 reasoning tokens, 3 turns x 100 tokens cut."""
    trace, out = str(reasoning_trace(tmp_path / "tr")), tmp_path / "o"
    args = ["--trace", trace, "--loads", "1", "--budgets", "none,50", "--model", "llama-3.1-8b", "--tp", "1"]
    tables = fleet_json("thinking", *args, "--out", str(out))["tables"]
    none, cap = tables["thinking"]
    (stats,) = tables["thinking_trace"]
    assert stats["turns_with_reasoning"] == 3 and stats["reasoning_tokens"] == 450
    assert (none["budget"], cap["budget"]) == ("none", "50")
    assert (none["cut_tokens"], cap["cut_tokens"], cap["turns_capped"]) == (0, 300, 3)
    assert none["output_tokens"] - cap["output_tokens"] == 300
    assert cap["jct_p90_s"] < none["jct_p90_s"] and cap["p90_change"] < 0 == none["p90_change"]
    md = (out / "thinking.md").read_text()
    assert "| 1 | 50 | 3 | 300 |" in md and "3 with reasoning tokens (450 tokens)" in md
    assert "Command: agentreplay fleet thinking --loads 1 --budgets none,50" in md
    assert (out / "thinking.png").stat().st_size > 0 and (out / "thinking.parquet").is_file()
    res = fleet("thinking", *args, "--out", str(out))  # resumed: prints the table again, runs nothing
    assert res.exit_code == 0 and "2 cells (2 already done" in res.stderr and "done load" not in res.stderr
    assert "thinking budget: llama-3.1-8b TP1 on h100-sxm" in res.stdout


def test_a_negative_budget_is_refused(tmp_path: Path) -> None:
    res = fleet("thinking", "--budgets", "none,-3", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "--budgets item -3: an integer >= 0 or 'none'" in res.output
