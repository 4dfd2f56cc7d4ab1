"""The study end to end at a tiny size: sweeps in process, the joined table, the report and its figures."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from agentreplay.sim.workload import Workload
from agentreplay.study.probes import PROBE_RATES, probe_study, probe_tool_scale, retention_breakdown
from agentreplay.study.report import write_report
from agentreplay.study.runner import run_study
from agentreplay.study.spec import StudyOptions
from tests.study.conftest import SerialExecutor


def test_study_runs_and_the_report_renders(tiny: StudyOptions, workload: Workload, tmp_path: Path) -> None:
    only = ["routing", "routing-ceiling", "tool-scale", "bimodal-tools", "tiers", "queue"]
    run = run_study(tiny, tmp_path / "work", SerialExecutor(), only=only)
    assert not run.failed
    assert set(run.results["experiment"]) == set(only)
    assert run.results["group_name"].notna().all() and (run.results["group_name"] != "?").all()
    assert set(run.results.loc[run.results["experiment"] == "routing", "group_name"]) >= {
        "round-robin",
        "session-affinity",
    }
    probes = probe_tool_scale(workload, tiny, scales=[1.0, 8.0])
    out = write_report(run, tmp_path / "report", probes)
    text = out.read_text()
    for heading in (
        "## Finding 1: routing",
        "## Finding 3: tool latency",
        "### Mechanism (decision log)",
        "## Finding 4: memory tiering",
        "## Finding 5",
        "**Verdict: ",
    ):
        assert heading in text
    for png in ("routing.png", "tool-scale.png", "tiers.png", "probe-tool-scale.png", "bimodal-tools.png"):
        assert (out.parent / png).stat().st_size > 10_000
    back = pd.read_parquet(out.parent / "results.parquet")
    assert len(back) == len(run.results)
    # rerunning resumes: nothing runs again, the same table comes back
    again = run_study(tiny, tmp_path / "work", SerialExecutor(), only=only)
    assert len(again.results) == len(run.results)


def test_retention_breakdown_counts_pins_and_expired_pins() -> None:
    decisions = [
        {"event": "retention", "program": 0, "turn": 0, "action": "pin", "ttl_s": 1.0, "reason": "x"},
        {"event": "retention", "program": 0, "turn": 1, "action": "pin", "ttl_s": 5.0, "reason": "x"},
        {
            "event": "retention",
            "program": 1,
            "turn": 0,
            "action": "release",
            "ttl_s": float("inf"),
            "reason": "test ttl 40 s above cap",
        },
        {"event": "route", "program": 1, "turn": 0},
    ]
    turns = pd.DataFrame({"program_id": ["a", "a", "b"], "turn_idx": [0, 1, 0], "tool_s": [2.0, 3.0, 40.0]})
    b = retention_breakdown(decisions, turns, ["a", "b"])
    assert b["decisions"] == 3
    assert b["pin_share"] == 2 / 3 and b["release_above_cap_share"] == 1 / 3
    assert b["pins_expired_share"] == 0.5  # the 1 s pin met a 2 s tool; the 5 s pin held through 3 s


def test_probe_study_runs_every_rate_on_the_study_trace(tiny: StudyOptions, workload: Workload) -> None:
    """What ``agentreplay study`` probes: each rate's cells on the study's trace, one frame in rate order."""
    assert PROBE_RATES == (0.05, 0.1)
    got = probe_study(tiny, scales=[8.0])
    assert list(got.index) == list(range(len(got))) and list(dict.fromkeys(got["rate_per_s"])) == list(PROBE_RATES)
    want = pd.concat([probe_tool_scale(workload, tiny, [8.0], rate_per_s=r) for r in PROBE_RATES], ignore_index=True)
    pd.testing.assert_frame_equal(got, want)
