"""``agentreplay tasks`` on a small real simulate output, and its bad-input errors."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.fleet.outputs import OutputError, read_output
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()
#: 12 programs of 5 turns growing by 3,000 tokens, on a cache too small to keep them all through their tool gaps.
TRACE = make_trace([[(2000 + 3000 * t, 40, 0.5 + 0.25 * (p % 3)) for t in range(5)] for p in range(12)])


@pytest.fixture(scope="module")
def sim_out(tmp_path_factory):
    d = tmp_path_factory.mktemp("tasks")
    write_trace(d / "tr", TRACE)
    res = runner.invoke(
        app,
        [
            "simulate",
            "--trace",
            str(d / "tr"),
            "--out",
            str(d / "sim"),
            "--quiet",
            "--concurrency",
            "12",
            "--num-gpu-blocks",
            "4000",
            "--decision-log",
        ],
    )
    assert res.exit_code == 0, res.output
    return d


def test_tasks_writes_its_report_and_prints_json(sim_out) -> None:
    res = runner.invoke(
        app, ["tasks", str(sim_out / "sim"), "--deadline-x", "2", "--trace", str(sim_out / "tr"), "--json"]
    )
    assert res.exit_code == 0, res.output
    s = json.loads(res.output)
    folder = sim_out / "sim" / "tasks"
    assert json.loads((folder / "summary.json").read_text()) == s
    for name in (
        "programs.parquet",
        "turns.parquet",
        "ttft_by_step.parquet",
        "cache_by_step.parquet",
        "collapses.parquet",
        "tasks.md",
        "goodput.png",
        "ttft_by_step.png",
        "cost_ttl.png",
        "cache_health.png",
    ):
        assert (folder / name).is_file(), name
    assert s["programs"] == 12 and s["turns"] == 60 and s["decision_log"] and s["trace"]
    progs = pd.read_parquet(folder / "programs.parquet")
    assert (progs["jct_s"] >= progs["uncontended_jct_s"] * (1 - 1e-9)).all()
    assert s["goodput"]["met"] == int((progs["jct_s"] <= 2 * progs["uncontended_jct_s"]).sum())
    assert s["goodput"]["attempted"] == 12
    usd = s["cost"]["usd_per_1000_tasks"]
    assert usd["5m"] == pytest.approx(progs["cost_5m_usd"].sum() * 1000 / 12)
    assert usd["5m"] < usd["nocache"]  # every gap is seconds: the cache pays
    assert s["cost"]["break_even"]["gaps_over_5m"] == 0
    assert s["cache_health"]["collapses"] > 0  # the small cache evicts sessions during their tool gaps
    assert "unknown: run with --decision-log" not in s["cache_health"]["by_cause"]
    events = pd.read_parquet(folder / "collapses.parquet")
    assert len(events) == s["cache_health"]["collapses"]


def test_tasks_tables_and_absolute_deadline(sim_out) -> None:
    res = runner.invoke(app, ["tasks", str(sim_out / "sim"), "--deadline", "1e6", "--out", str(sim_out / "t2")])
    assert res.exit_code == 0, res.output
    assert "goodput" in res.output and "TTFT by step" in res.output and "break-even" in res.output
    s = json.loads((sim_out / "t2" / "summary.json").read_text())
    assert s["goodput"]["goodput"] == 1.0  # every program finishes within 10^6 s


def test_without_decision_log_causes_are_unknown(sim_out, tmp_path) -> None:
    shutil.copytree(sim_out / "sim", tmp_path / "sim", ignore=shutil.ignore_patterns("tasks", "decisions.jsonl"))
    res = runner.invoke(app, ["tasks", str(tmp_path / "sim"), "--json"])
    assert res.exit_code == 0, res.output
    by = json.loads(res.output)["cache_health"]["by_cause"]
    assert set(by) <= {"unknown: run with --decision-log", "preemption", "routing miss"}


def test_a_folder_that_is_not_a_simulate_output_names_the_missing_file(sim_out, tmp_path) -> None:
    res = runner.invoke(app, ["tasks", str(sim_out / "tr")])
    assert res.exit_code == 1
    assert "missing summary.json" in " ".join(res.output.split())
    shutil.copytree(sim_out / "sim", tmp_path / "sim", ignore=shutil.ignore_patterns("tasks"))
    (tmp_path / "sim" / "config.toml").unlink()
    with pytest.raises(OutputError, match=r"missing config\.toml"):
        read_output(tmp_path / "sim")
    res = runner.invoke(app, ["tasks", str(tmp_path / "nothing")])
    assert res.exit_code == 1 and "not a folder" in res.output


def test_a_turns_table_without_a_needed_column_is_named(sim_out, tmp_path) -> None:
    shutil.copytree(sim_out / "sim", tmp_path / "sim", ignore=shutil.ignore_patterns("tasks"))
    t = pd.read_parquet(tmp_path / "sim" / "turns.parquet").drop(columns=["cached_tokens"])
    t.to_parquet(tmp_path / "sim" / "turns.parquet")
    with pytest.raises(OutputError, match=r"turns.parquet: missing column\(s\) \['cached_tokens'\]"):
        read_output(tmp_path / "sim")


def test_both_deadlines_and_bad_prices_fail(sim_out, tmp_path) -> None:
    res = runner.invoke(app, ["tasks", str(sim_out / "sim"), "--deadline", "10", "--deadline-x", "2"])
    assert res.exit_code == 1 and "not both" in res.output
    bad = tmp_path / "p.toml"
    bad.write_text("[prices]\ninput_per_mtok = 'x'\n")
    res = runner.invoke(app, ["tasks", str(sim_out / "sim"), "--prices", str(bad), "--out", str(tmp_path / "o")])
    assert res.exit_code == 1 and "input_per_mtok" in res.output


def test_decision_log_programs_map_to_program_ids(sim_out) -> None:
    out = read_output(sim_out / "sim")
    assert out.decisions is not None
    route = out.decisions[out.decisions["event"] == "route"]
    assert set(route["program_id"]) == set(out.programs["program_id"])
    # the route of each turn names the instance turns.parquet records for it
    merged = route.merge(out.turns, left_on=["program_id", "turn"], right_on=["program_id", "turn_idx"])
    assert len(merged) == len(out.turns) and (merged["instance_x"] == merged["instance_y"]).all()
