"""Run several presets on one trace and configuration and tabulate what differs (``agentreplay compare``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.policy.presets import apply_preset
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import SimResult, simulate
from agentreplay.sim.workload import Workload

COLUMNS = (
    "preset",
    "jct_mean_s",
    "jct_p50_s",
    "jct_p99_s",
    "makespan_s",
    "throughput_programs_per_s",
    "throughput_output_tokens_per_s",
    "prefix_hit_rate",
    "preemptions",
    "affinity_breaks",
    "bytes_moved_total",
    "ttft_mean_s",
    "recomputed_tokens",
)


def row(preset: str, s: dict[str, Any]) -> dict[str, Any]:
    return {
        "preset": preset,
        "jct_mean_s": s["jct_s"]["mean"],
        "jct_p50_s": s["jct_s"]["p50"],
        "jct_p99_s": s["jct_s"]["p99"],
        "makespan_s": s["makespan_s"],
        "throughput_programs_per_s": s["throughput_programs_per_s"],
        "throughput_output_tokens_per_s": s["throughput_output_tokens_per_s"],
        "prefix_hit_rate": s["prefix_hit_rate"],
        "preemptions": s["preemptions"],
        "affinity_breaks": s["affinity_breaks"],
        "bytes_moved_total": s["bytes_moved_total"],
        "ttft_mean_s": s["ttft_s"]["mean"],
        "recomputed_tokens": s["recomputed_tokens"],
    }


def compare(
    workload: Workload, base: SimConfig, presets: Sequence[str], on_done: Callable[[str, SimResult], None] | None = None
) -> tuple[pd.DataFrame, dict[str, SimResult]]:
    """One simulation per preset (same trace, hardware, workload, tools and seed). Returns the table (one row
    per preset, in the order given) and each preset's full results."""
    results: dict[str, SimResult] = {}
    for name in presets:
        res = simulate(workload, apply_preset(base, name))
        results[name] = res
        if on_done is not None:
            on_done(name, res)
    table = pd.DataFrame([row(n, r.summary) for n, r in results.items()], columns=list(COLUMNS))
    return table, results


def plot_jct_cdf(ax: Any, results: dict[str, SimResult]) -> list[Any]:
    """Empirical CDF of program JCT per preset on ``ax``; returns the line artists."""
    lines = []
    for name, res in results.items():
        x = np.sort(res.programs["jct_s"].to_numpy(dtype=float))
        y = np.arange(1, len(x) + 1) / len(x)
        (line,) = ax.step(x, y, where="post", label=name)
        lines.append(line)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of programs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return lines
