"""``agentreplay fleet day`` on a tiny day: the streamed tables shown, the table, the figure, and the streamed
summary equal to the in-memory one."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from tests.experiment.helpers import BUNDLED, fleet, fleet_json


def test_day_streams_and_compares(tmp_path: Path) -> None:
    out = tmp_path / "day"
    args = ["--trace", str(BUNDLED), "--out", str(out), "--programs", "12", "--instances", "2", "--concurrency", "4"]
    doc = fleet_json("day", *args)
    assert doc["tables"]["day_check"] == [{"same_summary": True}]
    rows = doc["tables"]["day"]
    assert [row["mode"] for row in rows] == ["streamed", "in memory"] and {row["programs"] for row in rows} == {12}
    assert pq.read_table(out / "turns.parquet").num_rows == rows[0]["turns"]
    assert len(set(pq.read_table(out / "programs.parquet").column("program_id").to_pylist())) == 12
    for name in ("summary.json", "config.toml", "day.md", "day_memory.png", "instances.parquet"):
        assert (out / name).stat().st_size > 0, name
    assert "streamed summary equal to the in-memory one: yes" in (out / "day.md").read_text()


def test_day_names_a_bad_trace(tmp_path: Path) -> None:
    res = fleet("day", "--trace", str(tmp_path / "nope"), "--out", str(tmp_path / "o"))
    assert res.exit_code != 0 and "nope" in res.output
