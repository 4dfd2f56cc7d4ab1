"""KV footprint of live sessions on a cluster over time, compared across clusters (``agentreplay fleet-footprint``).

Runs the simulator with the footprint series on (:mod:`agentreplay.sim.footprint`: each instance's HBM KV blocks
held by running calls, waiting calls, programs idle in a tool call, the prefix cache, and free), sums the
instances at each sample time, and reports per state the peak and the time-weighted mean in GiB, beside each run's
GPU-hours per 1,000 tasks (attributed to programs and fleet-level, :mod:`agentreplay.sim.gpu_time`).

Summing instances: each instance is sampled at its own step starts, at most once per interval; the cluster
series holds each instance's last sample carried forward onto a common grid of ``interval_s`` (an instance idle
for a while keeps its last state, which is what it holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.fleet.figures import subplots
from agentreplay.policy.presets import apply_preset
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.footprint import STATES
from agentreplay.trace.io import Trace

GIB = 2**30
LABELS = {
    "running": "running calls",
    "waiting": "waiting calls",
    "idle": "idle in a tool call (pinned / written)",
    "cached_free": "prefix cache (free, reusable)",
    "free": "free",
}


@dataclass(frozen=True, slots=True)
class Cluster:
    """One cluster to compare: ``instances`` x ``gpu``, the router / retention of ``preset``."""

    name: str
    instances: int
    preset: str


DEFAULT_CLUSTERS = (
    Cluster("1 instance, least-loaded (vllm)", 1, "vllm"),
    Cluster("4 instances, least-loaded (vllm)", 4, "vllm"),
    Cluster("4 instances, agent-affinity", 4, "agent-affinity"),
)


@dataclass(frozen=True, slots=True)
class FootprintRun:
    cluster: Cluster
    series: pd.DataFrame  #: time_s and GiB per state (cluster sum), plus offloaded_gib
    summary: dict[str, Any]


def cluster_series(fp: pd.DataFrame, block_bytes: int, interval_s: float) -> pd.DataFrame:
    """Instances' samples summed on a grid of ``interval_s`` (last sample carried forward), in GiB."""
    end = float(fp["time_s"].max())
    grid = np.arange(0.0, end + interval_s, interval_s)
    out = pd.DataFrame({"time_s": grid})
    cols = [f"{s}_blocks" for s in STATES] + ["offloaded_blocks"]
    total = np.zeros((len(grid), len(cols)))
    for _, g in fp.groupby("instance", sort=True):
        g = g.sort_values("time_s", kind="stable")
        idx = np.searchsorted(g["time_s"].to_numpy(), grid, side="right") - 1
        vals = g[cols].to_numpy(dtype=float)
        total += np.where((idx >= 0)[:, None], vals[np.maximum(idx, 0)], _empty(g, cols)[None, :])
    for j, c in enumerate(cols):
        out[c.replace("_blocks", "_gib")] = total[:, j] * block_bytes / GIB
    return out


def _empty(g: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """An instance before its first sample: all blocks free."""
    v = np.zeros(len(cols))
    v[cols.index("free_blocks")] = float(g["total_blocks"].iloc[0])
    return v


def run_cluster(trace: Trace, base: SimConfig, cluster: Cluster, interval_s: float) -> FootprintRun:
    cfg = apply_preset(base.replace(hardware={"instances": cluster.instances}), cluster.preset)
    cfg = cfg.replace(footprint={"interval_s": interval_s})
    res = simulate(trace, cfg)
    cols = res.columns("footprint")
    assert cols is not None
    fp = pd.DataFrame(cols)
    s = res.summary
    series = cluster_series(fp, int(s["footprint"]["block_bytes"]), interval_s)
    gpus = sum(p["tp"] for p in s["cluster"]["per_instance"])
    n = s["programs"]
    per_k = 1000.0 / 3600.0 / n
    summary = {
        "cluster": cluster.name,
        "instances": cluster.instances,
        "preset": cluster.preset,
        "programs": n,
        "makespan_s": s["makespan_s"],
        "jct_p50_s": s["jct_s"]["p50"],
        "hbm_kv_gib": float(series[[f"{st}_gib" for st in STATES]].sum(axis=1).iloc[0]),
        "peak_gib": {st: float(series[f"{st}_gib"].max()) for st in (*STATES, "offloaded")},
        "mean_gib": {st: float(series[f"{st}_gib"].mean()) for st in (*STATES, "offloaded")},
        "gpu_hours_per_1000_tasks_attributed": s["gpu_hours_per_1000_tasks_attributed"],
        "gpu_hours_per_1000_tasks_fleet": gpus * s["makespan_s"] * per_k,
        "samples": s["footprint"]["samples"],
    }
    return FootprintRun(cluster, series, summary)


def table_rows(runs: list[FootprintRun]) -> tuple[list[str], list[list[str]]]:
    """One row per cluster and state: peak / mean GiB; then the GPU-hours rows."""
    head = ["cluster", "state", "peak GiB", "mean GiB", "mean share of HBM KV"]
    rows = []
    for r in runs:
        s = r.summary
        for st in (*STATES, "offloaded"):
            share = s["mean_gib"][st] / s["hbm_kv_gib"] if st != "offloaded" else float("nan")
            rows.append(
                [
                    r.cluster.name,
                    LABELS.get(st, "offloaded to host tiers"),
                    f"{s['peak_gib'][st]:,.1f}",
                    f"{s['mean_gib'][st]:,.1f}",
                    "-" if share != share else f"{share:.3f}",
                ]
            )
    return head, rows


def gpu_rows(runs: list[FootprintRun]) -> tuple[list[str], list[list[str]]]:
    """Per cluster: GPU-hours per 1,000 tasks attributed to programs and GPUs x makespan (the difference is idle
    GPU time), and the median JCT."""
    head = ["cluster", "GPU-h / 1,000 tasks attributed", "GPU-h / 1,000 tasks fleet", "idle share", "JCT p50 (s)"]
    rows = []
    for r in runs:
        s = r.summary
        a, f = s["gpu_hours_per_1000_tasks_attributed"], s["gpu_hours_per_1000_tasks_fleet"]
        rows.append([r.cluster.name, f"{a:.2f}", f"{f:.2f}", f"{1 - a / f:.3f}", f"{s['jct_p50_s']:,.0f}"])
    return head, rows


def plot_footprint(axes: Any, runs: list[FootprintRun]) -> Any:
    """One stacked-area panel per cluster: GiB per state over time (cluster sum)."""
    colors = {"running": "#1f77b4", "waiting": "#ff7f0e", "idle": "#d62728", "cached_free": "#2ca02c", "free": "#ddd"}
    for ax, r in zip(axes, runs, strict=True):
        t = r.series["time_s"] / 3600.0
        ys = [r.series[f"{st}_gib"] for st in STATES]
        ax.stackplot(t, ys, labels=[LABELS[s] for s in STATES], colors=[colors[s] for s in STATES], linewidth=0)
        ax.set_title(r.cluster.name, fontsize=10)
        ax.set_ylabel("HBM KV (GiB)")
        ax.set_xlim(0, float(t.max()))
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (h)")
    axes[0].legend(loc="upper right", fontsize=8, ncol=2)
    return axes


def write(runs: list[FootprintRun], folder: Path, setting: str = "") -> list[Path]:
    """``footprint.png``, ``footprint.md`` and ``summary.json`` into ``folder``; ``setting``: a line saying what
    ran (model, GPU, load, trace) for the Markdown page."""
    import json

    folder.mkdir(parents=True, exist_ok=True)
    fig, axes = subplots(len(runs), 1, figsize=(9, 2.6 * len(runs)), squeeze=False)
    plot_footprint(axes[:, 0], runs)
    fig.tight_layout()
    png = folder / "footprint.png"
    fig.savefig(png, dpi=110)
    head, rows = table_rows(runs)
    ghead, grows = gpu_rows(runs)
    md = [
        "# KV footprint of live sessions (`agentreplay fleet-footprint`)\n",
        "HBM KV blocks per state, summed over the cluster's instances, sampled at step starts "
        f"(`agentreplay/sim/footprint.py`); peak and mean over time in GiB. {setting}\n",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *["| " + " | ".join(r) + " |" for r in rows],
        "\nGPU time per 1,000 tasks: attributed to programs (their token shares of the iterations) vs GPUs x "
        "makespan; the difference is idle GPU time.\n",
        "| " + " | ".join(ghead) + " |",
        "|" + "---|" * len(ghead),
        *["| " + " | ".join(r) + " |" for r in grows],
        "\n![footprint](footprint.png)\n",
    ]
    mdp = folder / "footprint.md"
    mdp.write_text("\n".join(md))
    js = folder / "summary.json"
    js.write_text(json.dumps([r.summary for r in runs], indent=2) + "\n")
    return [png, mdp, js]
