"""A run's outputs (agentreplay.sim.collect): the Python API writes the files the command line writes, findings and
error bands included (the command line adds only which pricer ran), and the notes follow the run's options."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import load_workload
from agentreplay.trace.io import write_trace
from tests.factories import make_trace

runner = CliRunner()
#: three programs with long decodes: on a one-sequence instance the later ones queue for seconds (queue-bound)
PROGRAMS = [[(900, 2000, 1.0), (1000, 10, None)], [(400, 2000, None)], [(1200, 2000, 0.5), (1300, 20, None)]]


def test_the_api_and_the_command_line_write_the_same_files(tmp_path: Path) -> None:
    write_trace(tmp_path / "tr", make_trace(PROGRAMS))
    args = ["--num-gpu-blocks", "400", "--max-num-seqs", "1", "--concurrency", "3", "--perf", "roofline"]
    res = runner.invoke(
        app, ["simulate", "--trace", str(tmp_path / "tr"), "--out", str(tmp_path / "cli"), "--quiet", *args]
    )
    assert res.exit_code == 0, res.output
    cfg = SimConfig().replace(
        cache={"num_gpu_blocks": 400},
        scheduler={"max_num_seqs": 1},
        workload={"concurrency": 3},
        hardware={"perf": "roofline"},
    )
    result = simulate(load_workload(tmp_path / "tr"), cfg)
    result.write(tmp_path / "api")
    cli, api = (json.loads((tmp_path / d / "summary.json").read_text()) for d in ("cli", "api"))
    assert cli.pop("pricer")
    assert cli == api
    assert api["findings"] and api["findings"][0]["kind"] == "queue-bound"
    assert api["error_bands"]  # (the packaged validation report's bands for this GPU and model)
    assert (tmp_path / "cli" / "config.toml").read_bytes() == (tmp_path / "api" / "config.toml").read_bytes()
    assert list(result.summary)[-2:] == ["findings", "error_bands"]


def test_error_bands_none_leaves_them_empty_and_a_streamed_run_has_no_findings(tmp_path: Path) -> None:
    cfg = SimConfig().replace(cache={"num_gpu_blocks": 400})
    res = simulate(make_trace(PROGRAMS), cfg, error_bands="none", stream_to=tmp_path)
    assert res.summary["error_bands"] == {} and "findings" not in res.summary
