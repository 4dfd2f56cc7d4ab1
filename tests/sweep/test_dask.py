"""The same sweep through a real Dask cluster (LocalCluster, 2 worker processes) gives the local pool's figures."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentreplay.cli.sweep  # noqa: F401  (registers `sweep` on the app)
from agentreplay.cli.app import app
from agentreplay.query import query
from agentreplay.sweep import DaskExecutor

distributed = pytest.importorskip("distributed")

#: columns that describe the run, not the simulation
RUN_COLUMNS = {"wall_s", "attempts"}


def test_dask_cluster_matches_the_local_pool(local_sweep: tuple[Path, Path], tmp_path: Path) -> None:
    spec, local_out = local_sweep
    runner = CliRunner()
    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None) as cluster:
        remote = runner.invoke(
            app,
            [
                "sweep",
                str(spec),
                "--out",
                str(tmp_path / "dask"),
                "--quiet",
                "--scheduler-address",
                cluster.scheduler_address,
            ],
        )
    assert remote.exit_code == 0, remote.output
    assert "dask scheduler" in remote.output and "2 workers" in remote.output
    a = query("select * from results order by cell_id", local_out)
    b = query("select * from results order by cell_id", tmp_path / "dask")
    assert len(a) == 8 and list(a.columns) == list(b.columns)
    keep = [c for c in a.columns if c not in RUN_COLUMNS]
    assert a[keep].equals(b[keep])


def test_an_unreachable_scheduler_fails_at_connect() -> None:
    with pytest.raises(OSError):  # TimeoutError included
        DaskExecutor("tcp://127.0.0.1:1", timeout_s=0.5)
