"""``agentreplay fleet-spec`` and ``fleet-thinking`` on a tiny trace, and the study helpers they call."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.fleet.speculation import crossover, default_cases
from agentreplay.fleet.thinking import parse_budgets
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()


def _trace_dir(tmp_path):
    """Three programs of three turns; every first turn reasons 150 of its 200 output tokens."""
    trace = make_trace([[(2000 + 1500 * t, 200 if t == 0 else 60, 1.0) for t in range(3)] for _ in range(3)])
    trace.turns["reasoning_tokens"] = [150 if t == 0 else 0 for t in trace.turns["turn_idx"]]
    write_trace(tmp_path / "tr", trace)
    return tmp_path / "tr"


def test_cases_and_crossover() -> None:
    cases = default_cases(3, [0.5, 0.8], "llama-3.1-8b")
    assert [c.label for c in cases] == [
        "none",
        "ngram a=0.5",
        "ngram a=0.8",
        "draft llama-3.1-8b a=0.5",
        "draft llama-3.1-8b a=0.8",
        "ngram per-class",
    ]
    curve = [
        {"drafter": "ngram", "acceptance": 0.5, "ctx": 1000, "batch": n, "speedup": s}
        for n, s in ((1, 1.6), (64, 1.1), (128, 0.9), (256, 0.7))
    ]
    assert crossover(curve) == {"ngram a=0.5, 1,000-token contexts": 128}
    assert crossover(curve[:2]) == {"ngram a=0.5, 1,000-token contexts": None}


def test_parse_budgets() -> None:
    assert parse_budgets("none, 128,0") == [None, 128, 0]
    with pytest.raises(ValueError, match="'-3'"):
        parse_budgets("none,-3")


def test_fleet_spec_runs_and_speculation_shortens_jct(tmp_path) -> None:
    d = _trace_dir(tmp_path)
    args = ["fleet-spec", "--trace", str(d), "--loads", "1", "--model", "llama-3.1-8b", "--tp", "1"]
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.stdout)["rows"]
    by = {r["case"]: r for r in rows}
    # one program at a time: n-gram speculation has no drafter cost, so it shortens decode and JCT
    assert by["ngram a=0.8"]["jct_p50_s"] < by["ngram a=0.5"]["jct_p50_s"] < by["none"]["jct_p50_s"]
    assert by["ngram a=0.8"]["tokens_per_step"] > by["ngram a=0.5"]["tokens_per_step"] > 1.0
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "spec.png").stat().st_size > 0
    assert "| 1 | ngram a=0.8 |" in (tmp_path / "o" / "spec.md").read_text()


def test_fleet_thinking_runs_and_cuts_tokens(tmp_path) -> None:
    """Budget 50: each first turn keeps 50 of its 150 reasoning tokens, 3 turns x 100 tokens cut."""
    d = _trace_dir(tmp_path)
    args = ["fleet-thinking", "--trace", str(d), "--loads", "1", "--budgets", "none,50", "--model", "llama-3.1-8b"]
    res = runner.invoke(app, [*args, "--tp", "1", "--out", str(tmp_path / "o"), "--json"])
    assert res.exit_code == 0, res.output
    got = json.loads(res.stdout)
    assert got["trace"]["turns_with_reasoning"] == 3 and got["trace"]["reasoning_tokens"] == 450
    none, cap = got["rows"]
    assert (none["cut_tokens"], cap["cut_tokens"], cap["turns_capped"]) == (0, 300, 3)
    assert none["output_tokens"] - cap["output_tokens"] == 300
    assert cap["jct_p90_s"] < none["jct_p90_s"]


def test_bad_options_fail_with_a_message(tmp_path) -> None:
    res = runner.invoke(app, ["fleet-thinking", "--budgets", "none,x", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "--budgets item 'x'" in res.output
    res = runner.invoke(app, ["fleet-spec", "--loads", "0", "--out", str(tmp_path)])
    assert res.exit_code == 1 and "--loads" in res.output
