"""The plan on a real Dask cluster (the goodput cell function ships as a partial) finds what it finds inline."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentreplay.plan import PlanRequest, parse_slo, plan
from agentreplay.sweep import DaskExecutor
from tests.plan.conftest import InlineExecutor

distributed = pytest.importorskip("distributed")


def test_dask_plan_matches_inline(bundled: Path, tmp_path: Path) -> None:
    req = PlanRequest(
        bundled,
        0.5,
        parse_slo("jct_p90<=100000,goodput@100000>=0.5"),
        gpus=("h100-sxm", "a100-80gb"),
        max_programs=6,
        max_instances=2,
    )
    inline = plan(req, InlineExecutor(), tmp_path / "inline")
    with (
        distributed.LocalCluster(n_workers=1, processes=True, threads_per_worker=1, dashboard_address=None) as cluster,
        DaskExecutor(cluster.scheduler_address) as ex,
    ):
        remote = plan(req, ex, tmp_path / "dask")
    assert "dask scheduler" in remote.executor
    assert [(t.family, t.instances, t.feasible) for t in remote.trials] == [
        (t.family, t.instances, t.feasible) for t in inline.trials
    ]
    for a, b in zip(inline.trials, remote.trials, strict=True):
        assert a.figures["goodput_100000s"] == b.figures["goodput_100000s"] == 1.0
        assert a.figures["jct_p90_s"] == b.figures["jct_p90_s"]
