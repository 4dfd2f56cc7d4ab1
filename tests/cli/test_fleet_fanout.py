"""``agentreplay fleet-fanout`` end to end on a few bundled programs: table rows, JSON, files."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentreplay.cli.app import app

BUNDLED = Path(__file__).resolve().parents[2] / "datasets" / "swebench-verified"


def test_fleet_fanout_writes_table_figure_and_json(tmp_path) -> None:  # type: ignore[no-untyped-def]
    out = tmp_path / "ff"
    args = ["fleet-fanout", "--trace", str(BUNDLED), "--programs", "4", "--fanout", "2", "--fanout-prob", "0.2"]
    args += ["--max-child-turns", "2", "--routers", "round-robin,cache-aware", "--instances", "2"]
    args += ["--concurrency", "4", "--out", str(out), "--json"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    summary = json.loads(res.output)
    assert [r["router"] for r in summary["rows"]] == ["round-robin", "cache-aware"]
    assert summary["rows"][0]["saved_tokens"] == 0  # the reference router
    gen = summary["generated"]
    assert gen["children"] == 2 * gen["spawning_turns"] > 0
    assert {p.name for p in out.iterdir()} == {"fanout.md", "fanout.png", "summary.json"}
    assert "| round-robin |" in (out / "fanout.md").read_text()


def test_fleet_fanout_bad_router_is_named(tmp_path) -> None:  # type: ignore[no-untyped-def]
    args = ["fleet-fanout", "--trace", str(BUNDLED), "--programs", "3", "--fanout-prob", "0.3"]
    args += ["--routers", "round-robin", "--reference", "cache-aware", "--out", str(tmp_path / "x")]
    res = CliRunner().invoke(app, args)
    assert res.exit_code != 0
    assert "reference router 'cache-aware' is not among the routers ['round-robin']" in res.output
