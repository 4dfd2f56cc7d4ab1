"""``fleet-admission`` and ``fleet-priority`` on a tiny trace: the table, the files, JSON, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

AGENTS = [[(2000, 20, 0.5), (2100, 20, 0.3), (2200, 20, None)]] * 6


def _trace(tmp_path: Path) -> Path:
    d = tmp_path / "trace"
    write_trace(d, make_trace(AGENTS))
    return d


def test_fleet_admission_writes_table_summary_and_figure(tmp_path: Path) -> None:
    out = tmp_path / "adm"
    res = CliRunner().invoke(
        app,
        [
            "fleet-admission",
            "-t",
            str(_trace(tmp_path)),
            "--concurrency",
            "6",
            "--num-gpu-blocks",
            "400",
            "-o",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert "thunderagent (no decay)" in res.output
    assert {p.name for p in out.iterdir()} >= {"table.md", "summary.json", "admission.png"}
    s = json.loads((out / "summary.json").read_text())
    assert s["thunderagent (no decay)"]["admission"]["pauses"] > 0  # 400 blocks hold 3 of the 6 programs
    assert "admission" not in s["admit-all"]


def test_fleet_priority_json_and_a_bad_class_option(tmp_path: Path) -> None:
    tr = _trace(tmp_path)
    out = tmp_path / "pri"
    res = CliRunner().invoke(
        app,
        ["fleet-priority", "-t", str(tr), "--concurrency", "6", "--num-gpu-blocks", "400", "-o", str(out), "--json"],
    )
    assert res.exit_code == 0, res.output
    got = json.loads(res.output)
    assert got["head"][:3] == ["variant", "class", "attempted"]
    assert {r[0] for r in got["rows"]} == {"fcfs", "priority", "priority + defer", "priority + reject"}
    assert sum(r[2] for r in got["rows"] if r[0] == "fcfs") == 6
    bad = CliRunner().invoke(app, ["fleet-priority", "-t", str(tr), "--deadline-s", "urgent=5", "-o", str(out)])
    assert bad.exit_code != 0 and "deadline_s.urgent" in bad.output
