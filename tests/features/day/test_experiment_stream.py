"""``simulate --stream`` writes the tables of ``simulate`` (rows in the order programs finished) and the same
summary, less the findings: what ``agentreplay fleet day`` streams."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from agentreplay.cli import app
from tests.experiment.helpers import BUNDLED


def test_simulate_stream_writes_the_same_tables(tmp_path: Path) -> None:
    base = ["simulate", "--trace", str(BUNDLED), "--max-programs", "15", "--instances", "2", "--concurrency", "6"]
    a = CliRunner().invoke(app, [*base, "--json", "--out", str(tmp_path / "a")])
    b = CliRunner().invoke(app, [*base, "--json", "--out", str(tmp_path / "b"), "--stream"])
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
