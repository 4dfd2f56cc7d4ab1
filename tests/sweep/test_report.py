"""The sweep report: axis detection, figure data computed exactly, skipped figures, rendered files."""

from __future__ import annotations

import base64
import itertools
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import agentreplay.cli.sweep  # noqa: F401  (registers `report sweep` on the app)
from agentreplay.cli.app import app
from agentreplay.sweep.plots import BarData, LineData
from agentreplay.sweep.report import detect_axes, gain_vs_factor, jct_vs_load, tail_vs_tier, write_report
from agentreplay.sweep.spec import Param

LOAD = Param("workload.concurrency", "workload_concurrency", "concurrency", (8, 32), "int")
QUEUE = Param("policy.queue", "policy_queue", "queue", ("fcfs", "plas"), "str")
TIER = Param("tiers.dram_gib", "tiers_dram_gib", "dram_gib", (0.0, 64.0), "float")
ROUTER = Param("router.policy", "router_policy", "policy", ("round-robin", "least-loaded"), "str")
SCALE = Param("tools.scale", "tools_scale", "scale", (0.5, 1.0), "float")
FIXED = Param("hardware.instances", "hardware_instances", "instances", (2,), "int")


def synthetic(params: list[Param]) -> pd.DataFrame:
    """One ok row per combination; JCT = concurrency x (0.8 for plas) x (0.5 with a DRAM tier) x scale."""
    rows = []
    for combo in itertools.product(*(p.values for p in params)):
        v = dict(zip((p.column for p in params), combo, strict=True))
        jct = (
            v.get("workload_concurrency", 1)
            * (0.8 if v.get("policy_queue") == "plas" else 1.0)
            * (0.5 if v.get("tiers_dram_gib") else 1.0)
            * v.get("tools_scale", 1.0)
        )
        rows.append(
            {
                **v,
                "seed": 0,
                "status": "ok",
                "jct_mean_s": jct,
                "jct_p99_s": 2 * jct,
                "prefix_hit_rate_shared_prefix": 0.1,
                "prefix_hit_rate_own_history": 0.8,
            }
        )
    return pd.DataFrame(rows)


def test_axes_are_detected_from_the_paths() -> None:
    ax = detect_axes([FIXED, SCALE, ROUTER, TIER, QUEUE, LOAD])
    assert (ax.load, ax.group, ax.factor, ax.router, ax.tier) == (LOAD, QUEUE, SCALE, ROUTER, TIER)
    assert FIXED not in ax.varying  # one value: not an axis
    assert detect_axes([Param("preset", "preset", "preset", ("a", "b"), "str"), QUEUE]).group.path == "preset"
    only_router = detect_axes([ROUTER, LOAD])
    assert only_router.group == ROUTER and only_router.factor == LOAD and only_router.tier is None


def test_gain_is_matched_pairs_relative_to_the_first_group_value() -> None:
    params = [LOAD, QUEUE, SCALE]
    fig = gain_vs_factor(synthetic(params), detect_axes(params))
    assert fig.skipped is None
    (panel,) = fig.panels
    assert isinstance(panel, LineData) and panel.xlabel == "tools.scale"
    mean, p99 = panel.series
    assert (mean.name, mean.x, p99.dashed) == ("plas mean", [0.5, 1.0], True)
    assert mean.y == pytest.approx([20.0, 20.0]) and p99.y == pytest.approx([20.0, 20.0])


def test_jct_vs_load_has_one_line_per_other_combination() -> None:
    params = [LOAD, QUEUE, TIER]
    fig = jct_vs_load(synthetic(params), detect_axes(params))
    mean_panel, p99_panel = fig.panels
    assert [s.name for s in mean_panel.series] == [
        "queue=fcfs dram_gib=0",
        "queue=fcfs dram_gib=64",
        "queue=plas dram_gib=0",
        "queue=plas dram_gib=64",
    ]
    assert mean_panel.series[0].x == [8, 32] and mean_panel.series[0].y == [8.0, 32.0]
    assert p99_panel.series[3].y == [2 * 8 * 0.8 * 0.5, 2 * 32 * 0.8 * 0.5]


def test_tier_figure_plots_p99_with_and_without_the_tier() -> None:
    params = [LOAD, TIER]
    fig = tail_vs_tier(synthetic(params), detect_axes(params))
    (panel,) = fig.panels
    assert [s.name for s in panel.series] == ["dram_gib=0 (off)", "dram_gib=64"]
    assert panel.series[1].y == [8.0, 32.0]
    bars = tail_vs_tier(synthetic([TIER]), detect_axes([TIER])).panels[0]
    assert isinstance(bars, BarData) and bars.stacks == [("p99 JCT", [2.0, 1.0])]


def test_figures_the_grid_cannot_support_say_why() -> None:
    ax = detect_axes([SCALE])
    assert "no load axis" in jct_vs_load(synthetic([SCALE]), ax).skipped
    assert "no grouping axis" in gain_vs_factor(synthetic([SCALE]), ax).skipped
    assert "no tier parameter" in tail_vs_tier(synthetic([SCALE]), ax).skipped


def test_report_renders_markdown_and_self_contained_html(local_sweep: tuple[Path, Path], tmp_path: Path) -> None:
    _, out = local_sweep
    result = CliRunner().invoke(app, ["report", "sweep", str(out), "--out", str(tmp_path / "r")])
    assert result.exit_code == 0, result.output
    assert "figure skipped" in result.output and "tier" in result.output
    md = (tmp_path / "r" / "report.md").read_text()
    page = (tmp_path / "r" / "report.html").read_text()
    for name in ("jct-vs-load", "gain", "hit-rate-router"):
        assert (tmp_path / "r" / f"fig-{name}.png").read_bytes()[:4] == b"\x89PNG"
        assert f"(fig-{name}.png)" in md
    assert "Skipped: no tier parameter" in md and "8 (8 ok, 0 failed, 0 not run)" in md
    assert md.count("| ok |") == 8
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 3 and all(base64.b64decode(i)[:4] == b"\x89PNG" for i in images)
    assert "src='fig-" not in page and "http" not in page  # nothing outside the page


def test_report_of_a_folder_without_a_sweep_fails(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "sweep", str(tmp_path)])
    assert result.exit_code == 1 and "sweep.json" in result.output


def test_default_report_folder_is_inside_the_sweep(local_sweep: tuple[Path, Path], tmp_path: Path) -> None:
    import shutil

    copy = tmp_path / "out"
    shutil.copytree(local_sweep[1], copy)
    _, paths = write_report(copy)
    assert paths["html"] == copy / "report" / "report.html"
