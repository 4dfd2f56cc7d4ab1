"""End-to-end calibration with a declared split (validation.e2e.fit, ``calibrate --calibration``): synthetic
"measured" runs made by the simulator with known step-cost parameters; the fit must recover them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from agentreplay.cli import app
from agentreplay.perf import PerfModel, load_gpu, load_model
from agentreplay.perf.stepcost import StepCost
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from tests.conftest import SHARED
from validation.e2e.common import single_turn_trace
from validation.e2e.fit import FitError, fit, metrics, runs_from_tables, split, write_vllm_run
from validation.measured import Measured, collect_path

TRUTH = StepCost(fixed_ms=4.0, per_seq_us=80.0)
RATES = (2, 8, 20)  # requests per second; 8 is held out


def _run(tmp: Path, rate: int, n: int = 30) -> Path:
    rng = np.random.default_rng(rate)
    ids = [f"q{i}" for i in range(n)]
    trace = single_turn_trace(
        ids, np.arange(n) / rate, rng.integers(50, 600, n), rng.integers(20, 120, n), "llama-3.1-8b"
    )
    cfg = SimConfig().replace(
        hardware={"gpu": "h100-sxm", "model": "llama-3.1-8b"},
        cache={"num_gpu_blocks": 3000},
        scheduler={"max_num_seqs": 256, "max_num_batched_tokens": 2048},
        workload={"arrival": "trace"},
    )
    gpu = load_gpu("h100-sxm")
    perf = PerfModel(gpu, load_model("llama-3.1-8b"), efficiency=TRUTH.apply(gpu.efficiency))
    res = simulate(trace, cfg, perf=perf)
    return write_vllm_run(
        tmp / f"run{rate}",
        res,
        "NVIDIA H100 80GB HBM3",
        "meta-llama/Llama-3.1-8B-Instruct",
        dataset_path=f"sharegpt-sps{rate}.jsonl",
    )


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    tmp = tmp_path_factory.mktemp("e2e_fit")
    return [_run(tmp, r) for r in RATES]


def _runs(dirs: list[Path]):
    data = Measured()
    for d in dirs:
        collect_path(d, data)
    return runs_from_tables(data.tables)


def test_step_cost_form_is_the_models_framework_term() -> None:
    gpu = load_gpu("h100-sxm")
    m = PerfModel(gpu, load_model("llama-3.1-8b"), efficiency=TRUTH.apply(gpu.efficiency))
    # 3 decodes + 1 prefill chunk = 4 sequences: 4 ms + 4 * 80 us = 4.32 ms
    assert m.breakdown([(100, 0)], [10, 20, 30])["framework_overhead"] == pytest.approx(4.32e-3, rel=1e-12)
    assert TRUTH.time_s(4) == pytest.approx(4.32e-3, rel=1e-12)
    assert StepCost.of(TRUTH.apply(gpu.efficiency)) == TRUTH
    with pytest.raises(ValueError, match="per_seq_us"):
        StepCost(1.0, -1.0)


def test_round_trip_through_the_collector_replays_exactly(run_dirs: list[Path]) -> None:
    runs = _runs(run_dirs)
    assert [r.cell_id for r in runs] == [f"vllm-run/h100-sxm/llama-3.1-8b/tp1/{r}rps" for r in RATES]
    from validation.e2e.fit import replay

    for run in runs:  # the truth reproduces what was "measured" (same engine, same deployment)
        sim = metrics(replay(run, TRUTH))
        for k, v in run.measured.items():
            assert sim[k] == pytest.approx(v, rel=1e-6, abs=1e-6), k


def test_fit_recovers_the_true_parameters_and_reports_held_out_error(run_dirs: list[Path]) -> None:
    cal, held = split(_runs(run_dirs), ["*/2rps", "*/20rps"])
    assert [r.cell_id[-5:] for r in held] == ["/8rps"]
    res = fit(cal, held)
    assert res.start == StepCost(0.5, 0.0)  # the catalogue's h100-sxm values
    assert res.fitted.fixed_ms == pytest.approx(TRUTH.fixed_ms, rel=0.05)
    assert res.fitted.per_seq_us == pytest.approx(TRUTH.per_seq_us, rel=0.1)
    assert res.mape_pct("held-out") < 1.0 < res.mape_pct("held-out", "start")


def test_split_errors_name_the_problem(run_dirs: list[Path]) -> None:
    runs = _runs(run_dirs)
    with pytest.raises(FitError, match="no end-to-end cell matches"):
        split(runs, ["*/3rps"])
    with pytest.raises(FitError, match="declare which cells fit"):
        split(runs, [])


def test_cli_needs_runs_and_protects_project_cells(run_dirs: list[Path]) -> None:
    r = CliRunner().invoke(app, ["calibrate", "--calibration", "*"])
    assert r.exit_code != 0 and "--measured RUN" in r.output
    shared = SHARED / "measurements" / "serving-vllm-llmservingsim"
    if not shared.exists():
        pytest.skip("../shared/measurements not present")
    r = CliRunner().invoke(app, ["calibrate", "--measured", str(shared), "--calibration", "*"])
    assert r.exit_code != 0 and "validation cells" in r.output


def test_fit_measured_declares_the_split_then_fits_the_calibration_cells(run_dirs: list[Path]) -> None:
    """The library side of ``calibrate --calibration`` (validation.e2e.fit_measured): the split is announced
    before the fit, which is :func:`fit` on the declared calibration cells."""
    from validation.e2e.fit import FIT_METRICS
    from validation.e2e.fit_measured import fit_measured

    notes: list[str] = []
    globs = ["*/2rps", "*/20rps"]
    res = fit_measured(run_dirs, globs, notes.append)
    cal, held = split(_runs(run_dirs), globs)
    ids = [r.cell_id for r in cal], [r.cell_id for r in held]
    assert notes == [
        f"declared split: 2 calibration cell(s) {ids[0]}, 1 held out {ids[1]}; fitting framework_overhead_ms and "
        f"per_seq_overhead_us on {', '.join(FIT_METRICS)}"
    ]
    assert res.as_dict() == fit(cal, held).as_dict()
    assert list(res.as_dict()) == ["calibration", "held_out", "start", "fitted", "mape_pct", "rows"]
    with pytest.raises(FitError, match="no end-to-end cell matches"):
        fit_measured(run_dirs, ["*/3rps"])


def test_cli_prints_and_writes_the_fit(run_dirs: list[Path], tmp_path: Path) -> None:
    import json

    args = ["calibrate", *(a for d in run_dirs for a in ("--measured", str(d))), "--calibration", "*/20rps"]
    out = tmp_path / "fit.json"
    r = CliRunner().invoke(app, [*args, "--json", "--out", str(out)])
    assert r.exit_code == 0, r.output
    written = json.loads(out.read_text())
    assert written["calibration"] == ["vllm-run/h100-sxm/llama-3.1-8b/tp1/20rps"] and len(written["held_out"]) == 2
    assert json.loads(r.stdout[r.stdout.index("{") :]) == written
    r = CliRunner().invoke(app, args, terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "declared split: 1 calibration cell(s)" in r.output and "held-out MAPE over 2 cell(s)" in r.output


def _iteration_tables() -> dict:
    """Two Splitwise-style cells (whole-model iterations) made with TRUTH: A100 TP2 and H100 TP4, Llama-2-70B."""
    cells, comp = [], []
    for gpu, tp in (("a100-80gb", 2), ("h100-sxm", 4)):
        cid = f"splitwise/{gpu}/llama-2-70b/tp{tp}"
        cells.append({"cell_id": cid, "source": "splitwise", "gpu": gpu, "model": "llama-2-70b", "tp": tp})
        g = load_gpu(gpu)
        m = PerfModel(g, load_model("llama-2-70b"), tp=tp, efficiency=TRUTH.apply(g.efficiency))
        for b in (1, 4, 16, 64):
            comp.append(
                {
                    "cell_id": cid,
                    "op": "prefill_iteration",
                    "num_tokens": 512 * b,
                    "batch_size": b,
                    "context_tokens": 0,
                    "seconds": m.iteration_time_s([(512, 0)] * b, ()),
                }
            )
            comp.append(
                {
                    "cell_id": cid,
                    "op": "decode_iteration",
                    "num_tokens": b,
                    "batch_size": b,
                    "context_tokens": 640,
                    "seconds": m.iteration_time_s((), [640] * b),
                }
            )
    return {"cells": pd.DataFrame(cells), "component": pd.DataFrame(comp)}


def test_iteration_cells_fit_exactly_and_transfer_to_the_held_out_gpu() -> None:
    from validation.e2e.fit import fit_iterations, iteration_cells_from_tables

    cells, skipped = iteration_cells_from_tables(_iteration_tables())
    assert [c.cell_id for c in cells] == ["splitwise/a100-80gb/llama-2-70b/tp2", "splitwise/h100-sxm/llama-2-70b/tp4"]
    assert not skipped and len(cells[0].points) == 8
    cal, held = split(cells, ["splitwise/a100-80gb/*"])
    res = fit_iterations(cal, held)
    # linear in the two parameters: non-negative least squares recovers them exactly
    assert res.fitted.fixed_ms == pytest.approx(TRUTH.fixed_ms, rel=1e-6)
    assert res.fitted.per_seq_us == pytest.approx(TRUTH.per_seq_us, rel=1e-6)
    assert res.mape_pct("held-out") < 1e-6 < 5.0 < res.mape_pct("held-out", "start")
