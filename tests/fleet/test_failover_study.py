"""``agentreplay fleet-failover`` and its study (agentreplay.fleet.failover) on a small synthetic trace."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.fleet import failover as fo
from agentreplay.sim import SimConfig
from agentreplay.sim.workload import compile_trace
from agentreplay.trace.io import write_trace
from tests.factories import make_trace
from tests.sim.fakes import LinearPerf

runner = CliRunner()
#: 12 programs of 3 + p % 5 turns growing by 2,000 tokens
PROGRAMS = [[(2000 + 2000 * t, 30, 0.5) for t in range(3 + p % 5)] for p in range(12)]


def test_age_buckets_are_left_closed() -> None:
    assert fo.age_bucket(np.array([0, 9, 10, 19, 20, 39, 40, 200])).tolist() == [
        "0-9",
        "0-9",
        "10-19",
        "10-19",
        "20-39",
        "20-39",
        "40+",
        "40+",
    ]


def test_study_configs_differ_only_in_failures_and_victim() -> None:
    base = SimConfig().replace(hardware={"instances": 3})
    cfgs = fo.study_configs(base, [{"instance": 1, "at_s": 5.0}])
    assert not cfgs["baseline"].failures.enabled
    assert cfgs["failure"].failures.placement == "router" and cfgs["failure"].policy.victim == "most-recent"
    assert cfgs["remedy"].failures.placement == "age-aware" and cfgs["remedy"].policy.victim == "youngest-first"
    assert cfgs["failure"].failures.events == cfgs["remedy"].failures.events


def test_study_tables_add_up(monkeypatch: pytest.MonkeyPatch) -> None:
    """By-age rows partition the programs the failure hit; the 'all' row's re-prefill equals the run's total;
    the ledger's JCT delta is the JCT minus the baseline JCT of the same program."""
    real = fo.simulate
    monkeypatch.setattr(fo, "simulate", lambda w, c: real(w, c, perf=LinearPerf()))
    base = SimConfig().replace(
        hardware={"instances": 3}, cache={"num_gpu_blocks": 2000}, router={"policy": "session-affinity"}
    )
    cfgs = fo.study_configs(base, [{"instance": 1, "at_s": 20.0, "recover_after_s": 5.0}])
    study = fo.run_study(compile_trace(make_trace(PROGRAMS)), cfgs)
    table = fo.by_age(study)
    led = study.ledgers["failure"]
    assert table.loc[table["age_turns"] == "all", "programs"].item() == led["program_id"].nunique() > 0
    assert table.loc[table["age_turns"] != "all", "programs"].sum() == led["program_id"].nunique()
    total = study.summaries["failure"]["failover"]["reprefill_tokens"]
    assert table.loc[table["age_turns"] == "all", "reprefill_failure"].item() == total > 0
    row = led.iloc[0]
    assert row["jct_delta_s"] == pytest.approx(row["jct_s"] - study.jct.loc[row["program_id"], "baseline"])
    runs = fo.run_summary(study)
    assert runs["run"].tolist() == ["baseline", "failure", "remedy"]
    assert runs.loc[0, "programs_affected"] == 0 and runs.loc[1, "reprefill_tokens"] == total


def test_cli_prints_the_tables_and_writes_the_figure(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace(PROGRAMS))
    args = ["fleet-failover", "--trace", str(tmp_path / "tr"), "--instances", "3", "--concurrency", "12"]
    args += ["--num-gpu-blocks", "4000", "--fail-at", "20", "--fail-instance", "1", "--recover-after", "5"]
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [r["run"] for r in data["runs"]] == ["baseline", "failure", "remedy"]
    assert data["by_age"][-1]["age_turns"] == "all"
    res = runner.invoke(app, [*args, "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    assert "programs the failures hit" in res.output
    for name in ("failover.md", "jct_by_age.png", "ledger_failure.parquet", "ledger_remedy.parquet", "summary.json"):
        assert (tmp_path / "out" / name).is_file(), name
    led = pd.read_parquet(tmp_path / "out" / "ledger_failure.parquet")
    assert {"jct_base_s", "jct_delta_s", "age_bucket", "reprefill_tokens"} <= set(led.columns)


def test_cli_bad_kind_and_bad_instance_fail_clearly(tmp_path) -> None:
    write_trace(tmp_path / "tr", make_trace(PROGRAMS))
    res = runner.invoke(app, ["fleet-failover", "--trace", str(tmp_path / "tr"), "--kind", "explode"])
    assert res.exit_code == 1 and "--kind 'explode'" in res.output
    res = runner.invoke(
        app, ["fleet-failover", "--trace", str(tmp_path / "tr"), "--instances", "2", "--fail-instance", "7"]
    )
    assert res.exit_code == 1 and "events.instance = 7 is invalid" in res.output
