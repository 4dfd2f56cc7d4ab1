"""KV footprint of live sessions on a cluster over time, compared across clusters (``agentreplay fleet footprint``).

Runs the simulator with the footprint series on (:mod:`agentreplay.features.footprint.footprint`: each instance's
HBM KV blocks held by running calls, waiting calls, programs idle in a tool call, the prefix cache, and free), sums
the instances at each sample time, and reports per state the peak and the time-weighted mean in GiB, beside each
run's GPU-hours per 1,000 tasks (attributed to programs and fleet-level, :mod:`agentreplay.sim.gpu_time`).

Summing instances: each instance is sampled at its own step starts, at most once per interval; the cluster
series holds each instance's last sample carried forward onto a common grid of ``interval_s`` (an instance idle
for a while keeps its last state, which is what it holds).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from agentreplay.experiment import Experiment, View, about, about_of, over_seeds, param
from agentreplay.experiment.params import check
from agentreplay.experiment.tables import markdown as md_table
from agentreplay.features.footprint.footprint import STATES

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from agentreplay.experiment import Results, Run
    from agentreplay.sim.config import SimConfig

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
class FootprintParams:
    concurrency: int = param(64, "Programs in flight (closed loop).")
    interval: float = param(10.0, "Seconds between footprint samples per instance.")
    max_programs: int | None = param(None, "Replay only the first N programs of the trace.", none="all")

    def __post_init__(self) -> None:
        check(self.concurrency >= 1, "--concurrency", self.concurrency, "an integer >= 1")
        check(self.interval > 0, "--interval", self.interval, "seconds > 0")
        check(self.max_programs is None or self.max_programs >= 1, "--max-programs", self.max_programs, ">= 1")


def cluster_series(fp: pd.DataFrame, block_bytes: int, interval_s: float) -> pd.DataFrame:
    """Instances' samples summed on a grid of ``interval_s`` (last sample carried forward), in GiB."""
    import numpy as np
    import pandas as pd

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
    import numpy as np

    v = np.zeros(len(cols))
    v[cols.index("free_blocks")] = float(g["total_blocks"].iloc[0])
    return v


def measure(cluster: Cluster, run: Run, interval_s: float) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The cluster's series and its summary (peak and mean GiB per state, GPU-hours, JCT) from one run."""
    s = run.summary()
    series = cluster_series(run.table("footprint"), int(s["footprint"]["block_bytes"]), interval_s)
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
        "jct_p90_s": s["jct_s"]["p90"],
        "hbm_kv_gib": float(series[[f"{st}_gib" for st in STATES]].sum(axis=1).iloc[0]),
        "peak_gib": {st: float(series[f"{st}_gib"].max()) for st in (*STATES, "offloaded")},
        "mean_gib": {st: float(series[f"{st}_gib"].mean()) for st in (*STATES, "offloaded")},
        "gpu_hours_per_1000_tasks_attributed": s["gpu_hours_per_1000_tasks_attributed"],
        "gpu_hours_per_1000_tasks_fleet": gpus * s["makespan_s"] * per_k,
        "samples": s["footprint"]["samples"],
    }
    return series, summary


def tables_of(runs: dict[str, Run], interval_s: float) -> dict[str, pd.DataFrame]:
    """One seed's tables: per cluster and state the peak and mean GiB, per cluster GPU time and JCT, the series."""
    import pandas as pd

    states, gpu, series, summaries = [], [], [], []
    for c in DEFAULT_CLUSTERS:
        ser, s = measure(c, runs[c.name], interval_s)
        series.append(ser.assign(cluster=c.name)[["cluster", *ser.columns]])
        summaries.append(s)
        for st in (*STATES, "offloaded"):
            share = s["mean_gib"][st] / s["hbm_kv_gib"] if st != "offloaded" else float("nan")
            states.append(
                {
                    "cluster": c.name,
                    "state": st,
                    "peak_gib": s["peak_gib"][st],
                    "mean_gib": s["mean_gib"][st],
                    "mean_share": share,
                }
            )
        a, f = s["gpu_hours_per_1000_tasks_attributed"], s["gpu_hours_per_1000_tasks_fleet"]
        gpu.append(
            {
                "cluster": c.name,
                "gpu_h_per_1k_attributed": a,
                "gpu_h_per_1k_fleet": f,
                "idle_share": 1 - a / f,
                "jct_p50_s": s["jct_p50_s"],
                "jct_p90_s": s["jct_p90_s"],
            }
        )
    index = pd.Index([s["cluster"] for s in summaries], name="cluster")
    return {
        "footprint": pd.DataFrame(states).set_index(["cluster", "state"]),
        "footprint_gpu": pd.DataFrame(gpu).set_index("cluster"),
        "footprint_series": pd.concat(series, ignore_index=True),
        "_summaries": pd.DataFrame({"summary": summaries}, index=index),
    }


def table_rows(tables: dict[str, pd.DataFrame]) -> tuple[list[str], list[list[str]]]:
    """One row per cluster and state: peak / mean GiB and the mean share of the HBM KV."""
    head = ["cluster", "state", "peak GiB", "mean GiB", "mean share of HBM KV"]
    rows = [
        [
            cluster,
            LABELS.get(st, "offloaded to host tiers"),
            f"{r['peak_gib']:,.1f}",
            f"{r['mean_gib']:,.1f}",
            "-" if r["mean_share"] != r["mean_share"] else f"{r['mean_share']:.3f}",
        ]
        for (cluster, st), r in zip(tables["footprint"].index, tables["footprint"].to_dict("records"), strict=True)
    ]
    return head, rows


def gpu_rows(tables: dict[str, pd.DataFrame]) -> tuple[list[str], list[list[str]]]:
    """Per cluster: GPU-hours per 1,000 tasks attributed to programs and GPUs x makespan (the difference is idle
    GPU time), and the JCT."""
    head = ["cluster", "GPU-h / 1,000 tasks attributed", "GPU-h / 1,000 tasks fleet", "idle share", "JCT p50 (s)"]
    head += ["JCT p90 (s)"]
    t = tables["footprint_gpu"]
    rows = [
        [
            cluster,
            f"{r['gpu_h_per_1k_attributed']:.2f}",
            f"{r['gpu_h_per_1k_fleet']:.2f}",
            f"{r['idle_share']:.3f}",
            f"{r['jct_p50_s']:,.0f}",
            f"{r['jct_p90_s']:,.0f}",
        ]
        for cluster, r in zip(t.index, t.to_dict("records"), strict=True)
    ]
    return head, rows


def plot_footprint(axes: Any, series: pd.DataFrame) -> Any:
    """One stacked-area panel per cluster: GiB per state over time (cluster sum; the first seed's run)."""
    colors = {"running": "#1f77b4", "waiting": "#ff7f0e", "idle": "#d62728", "cached_free": "#2ca02c", "free": "#ddd"}
    if "seed" in series.columns:
        series = series[series["seed"] == series["seed"].iloc[0]]
    for ax, (name, ser) in zip(axes, series.groupby("cluster", sort=False), strict=True):
        t = ser["time_s"] / 3600.0
        ys = [ser[f"{st}_gib"] for st in STATES]
        ax.stackplot(t, ys, labels=[LABELS[s] for s in STATES], colors=[colors[s] for s in STATES], linewidth=0)
        ax.set_title(name, fontsize=10)
        ax.set_ylabel("HBM KV (GiB)")
        ax.set_xlim(0, float(t.max()))
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated time (h)")
    axes[0].legend(loc="upper right", fontsize=8, ncol=2)
    return axes


def markdown(tables: dict[str, pd.DataFrame], setting: str) -> str:
    head, rows = table_rows(tables)
    ghead, grows = gpu_rows(tables)
    md = [
        "# KV footprint of live sessions (`agentreplay fleet footprint`)\n",
        "HBM KV blocks per state, summed over the cluster's instances, sampled at step starts "
        f"(`agentreplay/features/footprint/footprint.py`); peak and mean over time in GiB. {setting}\n",
        md_table(head, rows) + "\nGPU time per 1,000 tasks: attributed to programs (their token shares of the "
        "iterations) vs GPUs x makespan; the difference is idle GPU time.\n",
        md_table(ghead, grows) + "\n![footprint](footprint.png)\n",
    ]
    return "\n".join(md)


class Footprint(Experiment):
    name = "footprint"
    summary = "KV footprint of live sessions over time: 1 and 4 GPUs, least-loaded vs agent-affinity."
    description = (
        "Runs the trace on 1 x GPU (least-loaded), 4 x GPU (least-loaded) and 4 x GPU (agent-affinity preset) with "
        "the footprint series on, and reports per cluster the peak and mean GiB of HBM KV held by running calls, "
        "waiting calls, programs idle in a tool call, the prefix cache and free memory, with GPU-hours per 1,000 "
        "tasks (attributed to programs vs GPUs x makespan). Writes footprint.md, summary.json and a stacked-area "
        "figure per cluster, footprint.png."
    )
    example = "agentreplay fleet footprint --out reports/fleet/footprint"
    Params = FootprintParams
    hardware = MappingProxyType({"gpu": "h100-sxm", "model": "llama-3.1-8b"})
    outputs = ("footprint.md", "footprint.png", "summary.json")

    def configs(self, base: SimConfig, p: FootprintParams) -> dict[str, SimConfig]:
        from agentreplay.policy.presets import apply_preset

        start = base.replace(workload={"concurrency": p.concurrency, "max_programs": p.max_programs})
        return {
            c.name: apply_preset(start.replace(hardware={"instances": c.instances}), c.preset).replace(
                footprint={"interval_s": p.interval}
            )
            for c in DEFAULT_CLUSTERS
        }

    def analyse(self, results: Results, p: FootprintParams) -> dict[str, pd.DataFrame]:
        tables = over_seeds(results, lambda runs: tables_of(runs, p.interval))
        hw = results.base.hardware
        setting = (
            f"Run: {hw.model} on {hw.gpu}, {p.concurrency} programs in flight (closed loop), trace `{results.trace}`"
            + (f" (first {p.max_programs} programs)" if p.max_programs else "")
            + f", a sample per instance at most every {p.interval:g} s."
            + (f" Mean over seeds {', '.join(map(str, results.seeds))}." if len(results.seeds) > 1 else "")
        )
        title = f"KV footprint of live sessions ({hw.model} on {hw.gpu}, {p.concurrency} in flight)"
        tables["_about"] = about(title=title, setting=setting)
        return tables

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        import json

        from agentreplay.experiment.results import plain_json
        from agentreplay.fleet.figures import save, subplots

        n = len(DEFAULT_CLUSTERS)
        fig, axes = subplots(n, 1, figsize=(9, 2.6 * n), squeeze=False)
        plot_footprint(axes[:, 0], tables["footprint_series"])
        save(fig, out / "footprint.png")
        (out / "footprint.md").write_text(markdown(tables, about_of(tables)["setting"]))
        (out / "summary.json").write_text(
            json.dumps(plain_json(list(tables["_summaries"]["summary"])), indent=2) + "\n"
        )
        return [out / "footprint.png", out / "footprint.md", out / "summary.json"]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        gpu = "GPU time per 1,000 tasks (attributed vs fleet: the difference is idle GPU time)"
        return [View(about_of(tables)["title"], *table_rows(tables), left=2), View(gpu, *gpu_rows(tables))]


EXPERIMENT = Footprint()
