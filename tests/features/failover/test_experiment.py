"""``agentreplay fleet failover`` and its study on a small synthetic trace."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from agentreplay.experiment import run_experiment
from agentreplay.features.failover.experiment import EXPERIMENT, age_bucket, study_configs
from agentreplay.features.failover.experiment import FailoverParams as Params
from agentreplay.sim import SimConfig
from tests.experiment.helpers import fleet, fleet_json, tiny_trace
from tests.sim.fakes import LinearPerf

#: 12 programs of 3 + p % 5 turns growing by 2,000 tokens
PROGRAMS = [[(2000 + 2000 * t, 30, 0.5) for t in range(3 + p % 5)] for p in range(12)]


def test_age_buckets_are_left_closed() -> None:
    got = age_bucket(np.array([0, 9, 10, 19, 20, 39, 40, 200])).tolist()
    assert got == ["0-9", "0-9", "10-19", "10-19", "20-39", "20-39", "40+", "40+"]


def test_study_configs_differ_only_in_failures_and_victim() -> None:
    cfgs = study_configs(SimConfig().replace(hardware={"instances": 3}), [{"instance": 1, "at_s": 5.0}])
    assert not cfgs["baseline"].failures.enabled
    assert cfgs["failure"].failures.placement == "router" and cfgs["failure"].policy.victim == "most-recent"
    assert cfgs["remedy"].failures.placement == "age-aware" and cfgs["remedy"].policy.victim == "youngest-first"
    assert cfgs["failure"].failures.events == cfgs["remedy"].failures.events


def test_default_events_cycle_over_the_survivors() -> None:
    events = Params(instances=3).events()
    assert [(e["instance"], e["at_s"]) for e in events] == [(1, 600.0), (2, 1500.0), (1, 2400.0)]
    assert all(e["recover_after_s"] == 300.0 for e in events)
    assert "recover_after_s" not in Params(recover_after=-1.0).events()[0]


def test_study_tables_add_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """By-age rows partition the programs the failure hit; the 'all' row's re-prefill equals the run's total;
    the ledger's JCT delta is the JCT minus the baseline JCT of the same program."""
    from agentreplay.sim import run

    real = run.simulate
    monkeypatch.setattr(run, "simulate", lambda w, c: real(w, c, perf=LinearPerf()))
    p = Params(instances=3, concurrency=12, num_gpu_blocks=2000, fail_at=(20.0,), fail_instance=(1,), recover_after=5.0)
    done = run_experiment(EXPERIMENT, p, SimConfig(), tiny_trace(tmp_path / "tr", PROGRAMS), tmp_path / "o", workers=1)
    t = done.tables
    table, led = t["by_age"], t["ledger_failure"]
    assert table.loc["all", "programs"] == led["program_id"].nunique() > 0
    assert table.drop(index="all")["programs"].sum() == led["program_id"].nunique()
    runs = t["runs"]
    assert table.loc["all", "reprefill_failure"] == runs.loc["failure", "reprefill_tokens"] > 0
    assert list(runs.index) == ["baseline", "failure", "remedy"] and runs.loc["baseline", "programs_affected"] == 0
    jct = {
        name: pd.read_parquet(next((tmp_path / "o" / "sim-runs").glob(f"{name}.*")) / "programs.parquet").set_index(
            "program_id"
        )["jct_s"]
        for name in ("baseline", "failure")
    }
    row = led.iloc[0]
    assert row["jct_delta_s"] == pytest.approx(row["jct_s"] - jct["baseline"].loc[row["program_id"]])
    hit = jct["failure"].loc[led["program_id"].unique()]
    assert table.loc["all", "jct_p90_failure_s"] == pytest.approx(hit.quantile(0.9))


def test_cli_prints_the_tables_and_writes_the_files(tmp_path: Path) -> None:
    tr = str(tiny_trace(tmp_path / "tr", PROGRAMS))
    args = ["--trace", tr, "--instances", "3", "--concurrency", "12", "--num-gpu-blocks", "4000"]
    args += ["--fail-at", "20", "--fail-instance", "1", "--recover-after", "5", "--out", str(tmp_path / "out")]
    doc = fleet_json("failover", *args)
    assert [r["run"] for r in doc["tables"]["runs"]] == ["baseline", "failure", "remedy"]
    assert doc["tables"]["by_age"][-1]["age_turns"] == "all"
    res = fleet("failover", *args)
    assert res.exit_code == 0 and "programs the failures hit" in res.output
    for name in ("failover.md", "jct_by_age.png", "ledger_failure.parquet", "ledger_remedy.parquet", "summary.json"):
        assert (tmp_path / "out" / name).is_file(), name
    led = pd.read_parquet(tmp_path / "out" / "ledger_failure.parquet")
    assert {"jct_base_s", "jct_delta_s", "age_bucket", "reprefill_tokens"} <= set(led.columns)


def test_cli_bad_kind_and_bad_instance_fail_clearly(tmp_path: Path) -> None:
    tr = str(tiny_trace(tmp_path / "tr", PROGRAMS))
    res = fleet("failover", "--trace", tr, "--kind", "explode", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "--kind 'explode'" in res.output
    res = fleet("failover", "--trace", tr, "--instances", "2", "--fail-instance", "7", "--out", str(tmp_path / "o"))
    assert res.exit_code == 1 and "events.instance = 7 is invalid" in res.output
