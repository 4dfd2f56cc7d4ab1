"""The plan's outputs: JSON / CSV / Markdown / figure from a small plan, error bands, and the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

import agentreplay.cli.plan  # noqa: F401  (registers `plan` on the app)
from agentreplay.cli.app import app
from agentreplay.plan import PlanRequest, parse_slo, plan
from agentreplay.plan.evidence import margin, term_evidence
from agentreplay.plan.figure import draw
from agentreplay.plan.report import to_dict, write
from agentreplay.plan.search import Family, Trial
from tests.plan.conftest import InlineExecutor

runner = CliRunner()
RESIDUALS = [  # two workstation / dense-small cells, one datacenter / moe cell
    {"cell_id": "a", "gpu_class": "workstation", "model_class": "dense-small", "family": "jct", "error_pct": 10.0},
    {"cell_id": "b", "gpu_class": "workstation", "model_class": "dense-small", "family": "e2e", "error_pct": -30.0},
    {"cell_id": "c", "gpu_class": "datacenter", "model_class": "moe", "family": "jct", "error_pct": 50.0},
]


def _trial(gpu: str, model: str = "llama-3.1-8b") -> Trial:
    return Trial(Family(gpu, model, 1, "vllm"), 1, 1, "c", "ok", None, 0.1, False, {"jct_p90_s": 100.0}, 1.0)


def test_band_only_for_the_same_gpu_and_model_class() -> None:
    lat, good = parse_slo("jct_p90<=120,goodput@600>=0.9")
    ev = term_evidence(lat, _trial("rtx4090"), RESIDUALS, "unprofiled")
    assert ev["comparable"] and ev["band_pct"] == pytest.approx(20.0) and ev["n_cells"] == 2
    assert ev["short"] == "+-20% (2 cells)"
    ev = term_evidence(lat, _trial("h100-sxm"), RESIDUALS, "unprofiled")  # datacenter dense-small: none
    assert not ev["comparable"] and ev["short"].startswith("none (nearest:") and ev["level"] == "model class"
    assert term_evidence(lat, _trial("h100-sxm"), [], "unprofiled")["short"] == "no residuals"
    assert term_evidence(good, _trial("rtx4090"), RESIDUALS, "unprofiled")["band_pct"] is None
    edge = {"band_pct": 20.0, "comparable": True}
    assert margin(lat, _trial("rtx4090"), edge)["marginal"] is False  # 100 x 1.2 = 120: still meets
    t = _trial("rtx4090")
    t.figures["jct_p90_s"] = 101.0
    assert margin(lat, t, edge)["marginal"] is True
    assert margin(lat, t, {"band_pct": None})["marginal"] is None


def test_outputs_of_a_small_plan(bundled: Path, tmp_path: Path) -> None:
    req = PlanRequest(
        bundled,
        0.5,
        parse_slo("jct_p90<=100000,goodput@100000>=0.5"),
        gpus=("h100-sxm", "rtx4090"),
        max_programs=8,
        max_instances=2,
    )
    res = plan(req, InlineExecutor(), tmp_path / "sweepdir")
    data = to_dict(res, RESIDUALS)
    assert data["chosen"]["gpus"] == 1 and data["configurations_tried"] == len(res.trials) >= 2
    assert data["programs"] == 8 and data["max_programs"] == 8
    rtx = next(r for r in data["configurations"] if r["gpu"] == "rtx4090")
    assert rtx["jct_p90 band"].startswith("+-20%") and rtx["goodput@100000 meets at band edge"] is None
    paths = write(res, tmp_path / "out", data)
    assert json.loads(paths[0].read_text())["slo"] == ["jct_p90<=100000s", "goodput@100000>=0.5"]
    with paths[1].open() as f:
        assert len(list(csv.DictReader(f))) == len(res.trials)
    md = paths[2].read_text()
    assert "cheapest configuration meeting" in md and "the first 8 programs of the trace (--max-programs 8)" in md
    assert "total wall time" in md and "GPU-hours per 1,000 tasks = GPUs x 1000 / (load x 3600)" in md
    png = draw(data, tmp_path / "out" / "cost_vs_slo.png")
    assert png.stat().st_size > 10_000


def test_cli_bad_objective_is_a_clear_error(bundled: Path, tmp_path: Path) -> None:
    r = runner.invoke(
        app, ["plan", "--trace", str(bundled), "--load", "0.1", "--slo", "jct_p90>600", "--out", str(tmp_path / "o")]
    )
    assert r.exit_code == 1 and "--slo" in r.output and "operator '>' is not supported" in r.output
    assert not (tmp_path / "o").exists()


def test_cli_bad_values_fail_before_running(bundled: Path, tmp_path: Path) -> None:
    r = runner.invoke(app, ["plan", "--trace", str(tmp_path / "nope"), "--load", "0.1", "--slo", "jct_p90<=600"])
    assert r.exit_code == 1 and "no such folder" in r.output
    r = runner.invoke(
        app,
        [
            "plan",
            "--trace",
            str(bundled),
            "--load",
            "0.1",
            "--slo",
            "jct_p90<=600",
            "--tp",
            "x",
            "--out",
            str(tmp_path / "o"),
        ],
    )
    assert r.exit_code == 1 and "--tp 'x'" in r.output


def test_cli_end_to_end_json(bundled: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    r = runner.invoke(
        app,
        [
            "plan",
            "--trace",
            str(bundled),
            "--load",
            "0.5",
            "--slo",
            "jct_p90<=100000",
            "--max-programs",
            "6",
            "--max-instances",
            "2",
            "--workers",
            "1",
            "--out",
            str(out),
            "--json",
        ],
    )
    assert r.exit_code == 0, r.output
    assert {p.name for p in out.iterdir()} >= {"plan.json", "plan.md", "configurations.csv", "cost_vs_slo.png", "sweep"}
    data = json.loads((out / "plan.json").read_text())
    assert data["chosen"]["label"] == "1x h100-sxm tp1 vllm (llama-3.1-8b)"
    assert data["chosen"]["gpu_hours_per_1000_tasks"] == pytest.approx(1000 / (0.5 * 3600))


def test_cli_executor_choice_is_checked(bundled: Path, tmp_path: Path) -> None:
    base = ["plan", "--trace", str(bundled), "--load", "0.1", "--slo", "jct_p90<=600", "--out", str(tmp_path / "o")]
    r = runner.invoke(app, [*base, "--executor", "dask"])
    assert r.exit_code == 1 and "--executor dask needs --scheduler-address" in r.output
    r = runner.invoke(app, [*base, "--executor", "ray"])
    assert r.exit_code == 1 and "--executor 'ray'" in r.output


def test_cli_rerun_with_another_load_replaces_the_folder(bundled: Path, tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = [
        "plan",
        "--trace",
        str(bundled),
        "--slo",
        "jct_p90<=100000",
        "--max-programs",
        "4",
        "--max-instances",
        "1",
        "--seeds",
        "0",
        "--workers",
        "1",
        "--out",
        str(out),
        "--json",
    ]
    assert runner.invoke(app, [*args, "--load", "0.5"]).exit_code == 0
    again = runner.invoke(app, [*args, "--load", "0.5"])
    assert again.exit_code == 0 and '"configurations_simulated_now": 0' in again.output.replace("\n", "")
    other = runner.invoke(app, [*args, "--load", "0.25"])
    assert other.exit_code == 0, other.output
    data = json.loads((out / "plan.json").read_text())
    assert data["load_programs_per_s"] == 0.25 and data["configurations_simulated_now"] == 1
    assert len(list(out.glob("sweep/results/*/*.parquet"))) == 1  # the 0.5 / s cells went with the old plan
    assert [p.name for p in tmp_path.iterdir()] == ["o"]  # no staging folder left beside it


def test_chosen_label_stays_inside_its_panel() -> None:
    """The chosen configuration's label reads away from the nearer edge: at the right end of the cost axis it ends
    left of the point (it used to run off the panel, cut at the figure's edge)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from agentreplay.plan.figure import plot_term

    def row(cost: float, p90: float, label: str) -> dict:
        return {
            "gpu": "h100-sxm",
            "preset": "vllm",
            "tp": 1,
            "feasible": True,
            "gpu_hours_per_1000_tasks": cost,
            "jct_p90": p90,
            "label": label,
        }

    long = "3x b200 tp1 agent-affinity (llama-3.1-8b) with a long label"
    for chosen in (row(2.0, 100.0, long), row(0.5, 100.0, long)):
        data = {"configurations": [row(0.5, 900.0, "a"), row(2.0, 100.0, "b")], "chosen": chosen}
        fig = Figure(figsize=(6, 4))
        ax = fig.add_subplot()
        plot_term(ax, data, "jct_p90<=600")
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        renderer = canvas.get_renderer()
        text = next(t for t in ax.texts if t.get_text() == long)
        box, panel = text.get_window_extent(renderer), ax.get_window_extent(renderer)
        assert panel.x0 <= box.x0 and box.x1 <= panel.x1, (chosen["gpu_hours_per_1000_tasks"], box, panel)
