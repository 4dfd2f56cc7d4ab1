"""``agentreplay fleet disagg``: colocated vs disaggregated splits at equal GPU count, table + Markdown + figure."""

from __future__ import annotations

import json
from pathlib import Path

from agentreplay.features.disagg.experiment import Cell, cells
from tests.experiment.helpers import fleet, tiny_trace


def test_cells_are_colocated_then_every_split() -> None:
    assert [c.name for c in cells(4, [8])] == ["colocated x4", "1P+3D", "2P+2D", "3P+1D"]
    assert cells(2, [1, 2])[2] == Cell(2, 0, 2)


def test_command_writes_table_markdown_and_figure(tmp_path: Path) -> None:
    trace = tiny_trace(tmp_path / "tr", [[(500, 20, 0.1), (700, 20, None)]] * 3)
    out = tmp_path / "o"
    res = fleet("disagg", "--trace", str(trace), "--gpus", "2", "--loads", "2", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "1P+1D" in res.output and "colocated x2" in res.output
    rows = json.loads((out / "rows.json").read_text())
    assert [r["cluster"] for r in rows] == ["colocated x2", "1P+1D"]
    colo, split = rows
    assert colo["kv_moved_tb"] == 0.0 and split["kv_moved_tb"] > 0
    assert split["gpu_h_per_1k"] > 0 and split["ttft_p50_s"] <= split["ttft_p90_s"] <= split["ttft_p99_s"]
    assert 0 < split["prefill_token_p50_s"] <= split["prefill_token_p90_s"]  # the prefill instance's token
    assert colo["prefill_token_p90_s"] == colo["ttft_p90_s"]  # colocated: the client's first token
    assert "prefill_token_p90_s" in (out / "disagg.md").read_text()
    assert (out / "disagg.png").stat().st_size > 0
    assert "| 2 | 1P+1D |" in (out / "disagg.md").read_text()


def test_bad_loads_fail_with_the_value(tmp_path: Path) -> None:
    res = fleet("disagg", "--loads", "x", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "--loads item 'x': an integer" in res.output
