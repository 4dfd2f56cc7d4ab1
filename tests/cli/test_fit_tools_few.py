"""``fit-tools`` does not fit a class from one sample: it pools it and says so, figure included."""

from __future__ import annotations

import json

import numpy as np
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.sim.tools_generative import load_tool_model
from agentreplay.trace.io import write_trace
from tests.factories import make_trace
from validation.tools.fit import MIN_CLASS_N

runner = CliRunner()


def test_one_sample_class_is_pooled_and_reported(tmp_path) -> None:
    rng = np.random.default_rng(3)
    progs = [[(100 + 10 * t, 5, float(rng.lognormal(0, 1))) for t in range(30)] for _ in range(4)]
    tr = make_trace(progs)
    first = tr.turns.index[0]
    tr.turns.loc[first, "tool_class"] = "submit"  # one submit duration among 116 test durations
    tr.turns.loc[first, "tool_duration_s"] = 24.66
    write_trace(tmp_path / "tr", tr)
    res = runner.invoke(
        app,
        [
            "fit-tools",
            str(tmp_path / "tr"),
            "--out",
            str(tmp_path / "m.json"),
            "--report",
            str(tmp_path / "rep"),
            "--json",
        ],
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["too_few_samples"] == {"submit": 1} and out["min_class_n"] == MIN_CLASS_N
    assert "submit" not in {r["class"] for r in out["fits"]}
    spec = load_tool_model(tmp_path / "m.json")
    assert "submit" not in spec.classes and spec.provenance["pooled_classes"] == {"submit": 1}
    md = (tmp_path / "rep" / "tool_fit.md").read_text()
    assert "too few samples" in md.lower() and "submit (n = 1)" in md
    assert (tmp_path / "rep" / "cdf_submit.png").stat().st_size > 1000
    table = runner.invoke(app, ["fit-tools", str(tmp_path / "tr"), "--out", str(tmp_path / "m2.json")])
    assert table.exit_code == 0 and "too few samples" in table.output and "submit (n = 1)" in table.output
