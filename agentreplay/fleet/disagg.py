"""Colocated vs disaggregated prefill / decode at equal GPU count (``agentreplay fleet-disagg``).

For ``gpus`` instances (TP 1 each, or ``tp`` GPUs each) the comparison runs the colocated cluster (every instance
prefills and decodes, vLLM's default) and every split ``kP + (n - k)D`` (:mod:`agentreplay.sim.disagg`) on the same
trace at each load (closed loop, programs in flight), and reports per cell: JCT p50 / p90, TTFT p50 / p99 (the
client's first token; for disaggregated cells the decode instance's, as vLLM's proxies stream it), the prefill
instance's token p50 apart, TPOT p50, throughput, GPU-hours per 1,000 tasks (GPUs x makespan / programs), KV bytes
moved between the pools and each pool's utilisation (busy time / (instances x makespan)).

Compute here (:func:`compare`), draw in :func:`plot`, print and write in :mod:`agentreplay.cli.fleet_disagg`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentreplay.fleet.figures import subplots
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from agentreplay.sim.workload import Workload

COLUMNS = [
    "load",
    "cluster",
    "jct_p50_s",
    "jct_p90_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "prefill_token_p50_s",
    "tpot_p50_ms",
    "programs_per_h",
    "gpu_h_per_1k",
    "kv_moved_tb",
    "util_prefill",
    "util_decode",
]


@dataclass(frozen=True, slots=True)
class Cell:
    """One run: ``prefill`` = 0 for the colocated cluster of ``gpus / tp`` instances."""

    load: int
    prefill: int
    decode: int

    @property
    def name(self) -> str:
        return f"{self.prefill}P+{self.decode}D" if self.prefill else f"colocated x{self.decode}"


def cells(instances: int, loads: list[int]) -> list[Cell]:
    """Colocated, then every split with at least one instance per pool, per load."""
    if instances < 2:
        raise ValueError(f"--gpus: a split needs at least 2 instances, got {instances}")
    return [Cell(load, k, instances - k) for load in loads for k in range(instances)]


def cell_config(base: SimConfig, cell: Cell) -> SimConfig:
    wl = {"arrival": "closed", "concurrency": cell.load}
    if cell.prefill == 0:
        return base.replace(hardware={"instances": cell.decode}, workload=wl)
    dis = {"enabled": True, "prefill_instances": cell.prefill, "decode_instances": cell.decode}
    return base.replace(hardware={"instances": 1}, workload=wl, disagg=dis)


def row(cell: Cell, summary: dict[str, Any], gpus: int) -> dict[str, Any]:
    """The table row of one finished run."""
    s = summary
    span = float(s["makespan_s"])
    d = s.get("disagg")
    busy = s["engine"]["busy_s_per_instance"]
    colo_util = sum(busy) / (len(busy) * span) if span > 0 else float("nan")
    return {
        "load": cell.load,
        "cluster": cell.name,
        "jct_p50_s": s["jct_s"]["p50"],
        "jct_p90_s": s["jct_s"]["p90"],
        "ttft_p50_s": s["ttft_s"]["p50"],
        "ttft_p99_s": s["ttft_s"]["p99"],
        "prefill_token_p50_s": d["prefill_ttft_s"]["p50"] if d else s["ttft_s"]["p50"],
        "tpot_p50_ms": 1e3 * s["tpot_s"]["p50"],
        "programs_per_h": 3600.0 * s["throughput_programs_per_s"],
        "gpu_h_per_1k": gpus * span / 3600.0 / s["programs"] * 1000.0,
        "kv_moved_tb": (d["kv_bytes_transferred"] + d["kv_bytes_pulled"]) / 1e12 if d else 0.0,
        "util_prefill": d["utilisation"]["prefill"] if d else colo_util,
        "util_decode": d["utilisation"]["decode"] if d else colo_util,
    }


def compare(
    workload: Workload,
    base: SimConfig,
    gpus: int,
    loads: list[int],
    progress: Any = None,
) -> list[dict[str, Any]]:
    """Rows of :data:`COLUMNS`, one per cell (colocated first, then 1P+(n-1)D, ... per load)."""
    tp = base.hardware.tp
    if gpus % tp:
        raise ValueError(f"--gpus {gpus} is not a multiple of the TP {tp}")
    rows = []
    for cell in cells(gpus // tp, loads):
        res = simulate(workload, cell_config(base, cell))
        rows.append(row(cell, res.summary, gpus))
        if progress is not None:
            progress(cell)
    return rows


def to_markdown(rows: list[dict[str, Any]], title: str) -> str:
    """The table as Markdown (the committed example output)."""
    fmt = {
        "load": "{:d}",
        "cluster": "{}",
        "kv_moved_tb": "{:.2f}",
        "util_prefill": "{:.0%}",
        "util_decode": "{:.0%}",
        "programs_per_h": "{:.0f}",
    }
    lines = [f"# {title}", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in rows:
        lines.append("| " + " | ".join(fmt.get(c, "{:.3g}").format(r[c]) for c in COLUMNS) + " |")
    return "\n".join(lines) + "\n"


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> Path:
    """JCT p50 / p90 and TTFT p50 / p99 per cluster, one group of bars per load."""
    import numpy as np

    loads = sorted({r["load"] for r in rows})
    names = list(dict.fromkeys(r["cluster"] for r in rows))
    fig, axes = subplots(len(loads), 2, figsize=(11, 3.6 * len(loads)), squeeze=False)
    x = np.arange(len(names))
    for i, load in enumerate(loads):
        by = {r["cluster"]: r for r in rows if r["load"] == load}
        for ax, (lo, hi, label) in zip(
            axes[i], (("jct_p50_s", "jct_p90_s", "JCT (s)"), ("ttft_p50_s", "ttft_p99_s", "TTFT (s)")), strict=True
        ):
            ax.bar(x - 0.2, [by[n][lo] for n in names], 0.4, label="p50")
            ax.bar(x + 0.2, [by[n][hi] for n in names], 0.4, label="p90" if lo.startswith("jct") else "p99")
            ax.set_xticks(x, names)
            ax.set_ylabel(label)
            if lo.startswith("ttft"):
                ax.set_yscale("log")  # the p99 spans orders of magnitude across the splits
            ax.set_title(f"{label.split()[0]}, {load} programs in flight")
            ax.grid(axis="y", alpha=0.3)
            ax.legend()
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path
