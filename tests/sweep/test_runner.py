"""The runner on the local process pool: end to end, resume, failures and retries, the CLI's exit code."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentreplay.cli.sweep  # noqa: F401  (registers `sweep` and `report` on the app)
from agentreplay.cli.app import app
from agentreplay.query import query
from agentreplay.sweep import LocalExecutor, load_spec, run_sweep
from agentreplay.sweep.spec import SpecError
from agentreplay.sweep.store import CORE_FIGURES
from tests.sweep.conftest import BASE, write_spec

runner = CliRunner()


def test_every_cell_is_ok_and_queryable(local_sweep: tuple[Path, Path]) -> None:
    spec_file, out = local_sweep
    assert query("select count(*) as n from results", out)["n"].item() == 8
    df = query("select * from results order by cell_id", out)
    spec = load_spec(spec_file)
    assert sorted(df["cell_id"]) == sorted(c.cell_id for c in spec.cells)
    assert set(df["status"]) == {"ok"} and set(df["attempts"]) == {1} and df["error"].isna().all()
    assert {"workload_concurrency", "router_policy", "tools_scale", "cell_group", "seed", "wall_s", "label"} <= set(
        df.columns
    )
    assert {name for name, _ in CORE_FIGURES} <= set(df.columns)
    assert [c for c in df.columns if c.startswith(("error_bands", "findings"))] == []  # (worker.NOT_FIGURES)
    assert (df["jct_mean_s"] > 0).all() and (df["jct_p99_s"] >= df["jct_p50_s"]).all()
    assert (df["programs"] == 6).all()
    assert set(df["cell_group"]) == {"concurrency_2", "concurrency_4"}
    files = sorted(p.relative_to(out / "results").as_posix() for p in (out / "results").rglob("*"))
    assert all(not f.split("/")[-1].startswith(".") for f in files)  # no temporaries left behind
    assert (out / "sweep.json").exists() and (out / "base-config.toml").exists()


def test_rerun_skips_finished_cells(local_sweep: tuple[Path, Path], tmp_path: Path, pool: LocalExecutor) -> None:
    spec_file, out = local_sweep
    copy = tmp_path / "out"
    shutil.copytree(out, copy)
    spec = load_spec(spec_file)
    again = run_sweep(spec, copy, pool)
    assert (again.skipped, again.submitted, again.ok) == (8, 0, 0)
    victim = next((copy / "results").rglob("*.parquet"))
    victim.unlink()
    resumed = run_sweep(spec, copy, pool)
    assert (resumed.skipped, resumed.submitted, resumed.ok, resumed.failed) == (7, 1, 1, 0)
    assert victim.exists()
    assert query("select count(*) as n from results", copy)["n"].item() == 8


def test_a_folder_of_another_sweep_is_refused(
    local_sweep: tuple[Path, Path], tiny_trace: Path, tmp_path: Path, pool: LocalExecutor
) -> None:
    _, out = local_sweep
    other = load_spec(write_spec(tmp_path / "o.toml", tiny_trace, BASE + '[grid]\n"tools.scale" = [3]\n'))
    with pytest.raises(SpecError, match="different sweep"):
        run_sweep(other, out, pool)


def test_a_failing_cell_is_retried_once_recorded_and_exits_1(
    tiny_trace: Path, tmp_path: Path, pool: LocalExecutor
) -> None:
    # 2 KV blocks cannot hold the trace's longest request: simulate() raises CapacityError at run time
    body = BASE + '[grid]\n"cache.num_gpu_blocks" = [2, 4096]\n"router.policy" = ["round-robin", "least-loaded"]\n'
    spec = write_spec(tmp_path / "fail.toml", tiny_trace, body)
    out = tmp_path / "out"
    result = runner.invoke(app, ["sweep", str(spec), "--out", str(out), "--workers", "2", "--quiet"])
    assert result.exit_code == 1
    assert "retrying" in result.output and "2 cell(s) failed" in result.output
    df = query("select * from results order by label", out)
    assert len(df) == 4
    failed = df[df["status"] == "failed"]
    assert list(failed["cache_num_gpu_blocks"]) == [2, 2] and set(failed["attempts"]) == {2}
    assert failed["error"].str.contains("CapacityError: .*2 KV blocks", regex=True).all()
    assert failed["jct_mean_s"].isna().all()
    ok = df[df["status"] == "ok"]
    assert list(ok["cache_num_gpu_blocks"]) == [4096, 4096] and set(ok["attempts"]) == {1}
    # a rerun retries only the failed cells (and fails again, still exit 1)
    again = run_sweep(load_spec(spec), out, pool)
    assert (again.skipped, again.submitted, again.failed) == (2, 4, 2)


def test_dry_run_lists_cells_and_runs_nothing(local_sweep: tuple[Path, Path], tmp_path: Path) -> None:
    spec_file, out = local_sweep
    result = runner.invoke(app, ["sweep", str(spec_file), "--dry-run", "--out", str(out)])
    assert result.exit_code == 0, result.output
    spec = load_spec(spec_file)
    assert all(c.cell_id in result.output for c in spec.cells)
    assert "8 cells" in result.output and " ok " in result.output
    fresh = runner.invoke(app, ["sweep", str(spec_file), "--dry-run", "--out", str(tmp_path / "none")])
    assert fresh.exit_code == 0 and not (tmp_path / "none").exists()


def test_cli_errors_are_one_line(tiny_trace: Path, tmp_path: Path) -> None:
    bad = write_spec(tmp_path / "bad.toml", tiny_trace, BASE + '[grid]\n"hardware.tp" = [1, 3]\n')
    result = runner.invoke(app, ["sweep", str(bad), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "(tp=3)" in result.output and "[hardware] tp = 3" in result.output
    assert not (tmp_path / "o").exists()
    missing_out = runner.invoke(app, ["sweep", str(bad).replace("bad", "nope")])
    assert missing_out.exit_code == 1
