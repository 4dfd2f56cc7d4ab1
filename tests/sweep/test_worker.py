"""A sweep cell (agentreplay.sweep.worker.run_cell): its figures are the run's own, without the error bands and
findings that ``simulate`` adds to every summary."""

from __future__ import annotations

from pathlib import Path

from agentreplay.sim import SimConfig, simulate
from agentreplay.sweep.worker import flatten_summary, load_workload, run_cell

CFG = SimConfig().replace(hardware={"gpu": "h100-sxm", "model": "llama-3.1-8b"}, workload={"concurrency": 4})


def test_a_sweep_cell_has_no_error_band_or_findings_column(tiny_trace: Path) -> None:
    summary = simulate(load_workload(tiny_trace), CFG).summary
    assert summary["error_bands"] and "findings" in summary  # what a plain run's summary holds
    res = run_cell(str(tiny_trace), CFG.to_dict())
    assert res["status"] == "ok", res["error"]
    assert [k for k in res["figures"] if "error_bands" in k or "findings" in k] == []
    assert res["figures"]["jct_p90_s"] == flatten_summary(summary)["jct_p90_s"]  # the same run otherwise


def test_flatten_leaves_out_the_error_bands_and_findings_sections() -> None:
    summary = {
        "jct_s": {"p90": 2.0},
        "error_bands": {"jct_s.p90": {"mape_pct": 4.2, "n_cells": 3, "comparable": True}},
        "findings": [{"kind": "queue-bound", "share": 0.5}],
        "tiers": {"findings": 1},  # only the top-level sections are left out
    }
    assert flatten_summary(summary) == {"jct_p90_s": 2.0, "tiers_findings": 1}
