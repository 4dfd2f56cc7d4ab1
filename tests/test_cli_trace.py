"""CLI shells for the trace commands: collect, describe, query (run in-process with typer's runner)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from agentreplay.cli import app
from tests.conftest import ROOT, shared_path

runner = CliRunner()
BUNDLED = str(ROOT / "datasets" / "swebench-verified")


def test_describe_json_card() -> None:
    res = runner.invoke(app, ["describe", BUNDLED, "--json"])
    assert res.exit_code == 0, res.output
    card = json.loads(res.output)
    assert card["programs"] == 500 and card["turns"] == 20_163
    assert card["input_tokens_total"] == 333_047_929
    assert 50 < card["input_output_ratio"] < 70
    assert 0.9 < card["reuse_ratio"] < 1.0
    assert sum(card["tool_class_mix"].values()) == 20_163
    assert card["tool_duration_s"]["test"]["n"] > 1000


def test_describe_table_renders() -> None:
    res = runner.invoke(app, ["describe", BUNDLED])
    assert res.exit_code == 0, res.output
    assert "trace card" in res.output and "tool classes" in res.output


def test_query_duckdb_over_parquet() -> None:
    res = runner.invoke(
        app, ["query", "select count(*) as n, sum(input_tokens) as s from turns", "--data", BUNDLED, "--json"]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == [{"n": 20163, "s": 333047929}]


def test_query_bad_sql_is_a_clear_error() -> None:
    res = runner.invoke(app, ["query", "select nope from turns", "--data", BUNDLED])
    assert res.exit_code == 1
    assert "nope" in res.output


def test_collect_auto_and_unknown_format(tmp_path) -> None:
    src = shared_path("datasets", "lmcache-agent-trace-miniswe")
    res = runner.invoke(app, ["collect", "auto", str(src), "--out", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    assert "402" in res.output
    res = runner.invoke(app, ["collect", "nonsense", str(src), "--out", str(tmp_path / "p")])
    assert res.exit_code == 1 and "unknown format" in res.output
    assert not (tmp_path / "p").exists()


def test_collect_unrecognised_folder(tmp_path) -> None:
    (tmp_path / "x.txt").write_text("hello")
    res = runner.invoke(app, ["collect", "auto", str(tmp_path), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "not recognised" in res.output


def test_describe_missing_trace_is_clear(tmp_path) -> None:
    res = runner.invoke(app, ["describe", str(tmp_path)])
    assert res.exit_code == 1 and "programs.parquet missing" in res.output
