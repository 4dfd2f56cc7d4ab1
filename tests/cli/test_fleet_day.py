"""``agentreplay fleet-day`` on a tiny day: writes the streamed tables, the table, the figure, and finds the
streamed summary equal to the in-memory one."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from agentreplay.cli import app

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def test_fleet_day_streams_and_compares(tmp_path) -> None:
    out = tmp_path / "day"
    args = ["fleet-day", "--trace", str(ROOT / "datasets" / "swebench-verified"), "--out", str(out)]
    r = runner.invoke(app, [*args, "--programs", "12", "--instances", "2", "--concurrency", "4", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["same_summary"] is True
    assert [row["mode"] for row in doc["rows"]] == ["streamed", "in memory"]
    assert {row["programs"] for row in doc["rows"]} == {12}
    turns = pq.read_table(out / "turns.parquet")
    assert turns.num_rows == doc["rows"][0]["turns"]
    assert len(set(pq.read_table(out / "programs.parquet").column("program_id").to_pylist())) == 12
    for name in ("summary.json", "config.toml", "day.md", "day_memory.png", "instances.parquet"):
        assert (out / name).stat().st_size > 0, name


def test_fleet_day_names_a_bad_trace(tmp_path) -> None:
    r = runner.invoke(app, ["fleet-day", "--trace", str(tmp_path / "nope"), "--out", str(tmp_path / "o")])
    assert r.exit_code != 0
    assert "nope" in r.output


def test_simulate_stream_writes_the_same_tables(tmp_path) -> None:
    """``simulate --stream`` writes the tables of ``simulate`` (rows in the order programs finished) and the same
    summary, less the findings."""
    base = ["simulate", "--trace", str(ROOT / "datasets" / "swebench-verified"), "--max-programs", "15"]
    base += ["--instances", "2", "--concurrency", "6", "--json"]
    a = runner.invoke(app, [*base, "--out", str(tmp_path / "a")])
    b = runner.invoke(app, [*base, "--out", str(tmp_path / "b"), "--stream"])
    assert a.exit_code == 0 and b.exit_code == 0, a.output + b.output
    keys = {"turns": ["program_id", "turn_idx"], "programs": ["program_id"], "instances": ["time_s", "instance"]}
    for name, k in keys.items():
        ta, tb = (pq.read_table(tmp_path / d / f"{name}.parquet") for d in "ab")
        order = [(c, "ascending") for c in k]
        assert tb.sort_by(order).equals(ta.sort_by(order)), name
    sa, sb = (json.loads((tmp_path / d / "summary.json").read_text()) for d in "ab")
    assert "findings" not in sb
    sa.pop("findings")
    assert sa == sb
