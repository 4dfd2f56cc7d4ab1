"""``agentreplay fleet fanout`` end to end on a few bundled programs: table rows, JSON, files."""

from __future__ import annotations

import json
from pathlib import Path

from tests.experiment.helpers import BUNDLED, fleet


def test_fanout_writes_table_figure_and_json(tmp_path: Path) -> None:
    out = tmp_path / "ff"
    args = ["--trace", str(BUNDLED), "--programs", "4", "--fanout", "2", "--fanout-prob", "0.2"]
    args += ["--max-child-turns", "2", "--routers", "round-robin,cache-aware", "--instances", "2"]
    res = fleet("fanout", *args, "--concurrency", "4", "--out", str(out))
    assert res.exit_code == 0, res.output
    summary = json.loads((out / "summary.json").read_text())
    assert [r["router"] for r in summary["rows"]] == ["round-robin", "cache-aware"]
    assert summary["rows"][0]["saved_tokens"] == 0  # the reference router
    assert all(r["root_jct_p50_s_no_fanout"] <= r["root_jct_p90_s_no_fanout"] for r in summary["rows"])
    gen = summary["generated"]
    assert gen["children"] == 2 * gen["spawning_turns"] > 0 and summary["seed"] == 0
    assert {"fanout.md", "fanout.png", "summary.json", "fanout.parquet"} <= {p.name for p in out.iterdir()}
    assert "| round-robin |" in (out / "fanout.md").read_text()


def test_fanout_bad_reference_and_nothing_spawned_are_named(tmp_path: Path) -> None:
    args = ["--trace", str(BUNDLED), "--programs", "3", "--routers", "round-robin", "--out", str(tmp_path / "x")]
    res = fleet("fanout", *args, "--reference", "cache-aware")
    assert res.exit_code != 0
    assert "reference router 'cache-aware' is not among the routers ['round-robin']" in res.output
    res = fleet("fanout", *args, "--reference", "round-robin", "--fanout-prob", "0")
    assert res.exit_code == 1 and "no turn spawned: raise --fanout-prob or --programs" in res.output
