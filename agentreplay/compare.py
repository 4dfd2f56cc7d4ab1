"""Run several presets on one trace and configuration and tabulate what differs (``agentreplay compare``).

Each preset runs once per seed (the seeds draw the arrivals and tool times); the table holds, per preset, the
mean of each figure over the seeds, and for the ranking metric its value per seed and spread (max - min). The
presets are ranked on that metric as the plan ranks configurations (:func:`agentreplay.plan.rank.choose`):
cheaper first (a preset that adds a host-memory tier costs more), then a preset is *better* only by more than
the noise (the larger seed spread of the two, at least :data:`agentreplay.plan.rank.TIE_FLOOR` of the value);
presets that none is better than are a tie, broken by the simplest deployment. Every preset name is checked
before anything runs.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.policy.presets import PRESETS, apply_preset
from agentreplay.policy.registry import did_you_mean
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import SimResult, simulate
from agentreplay.sim.workload import Workload

COLUMNS = (
    "preset",
    "jct_mean_s",
    "jct_p50_s",
    "jct_p90_s",
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
#: metrics ``--rank-by`` accepts (a column of :data:`COLUMNS` without ``_s``; lower is better)
RANK_METRICS = ("jct_mean", "jct_p50", "jct_p90", "jct_p99", "ttft_mean", "makespan")


def row(preset: str, s: dict[str, Any]) -> dict[str, Any]:
    return {
        "preset": preset,
        "jct_mean_s": s["jct_s"]["mean"],
        "jct_p50_s": s["jct_s"]["p50"],
        "jct_p90_s": s["jct_s"]["p90"],
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


def check_presets(names: Sequence[str]) -> list[str]:
    """The preset names, checked: ValueError naming the unknown ones and the known ones (before anything runs)."""
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise ValueError(f"--presets: give at least one preset name; known: {', '.join(PRESETS)}")
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        hints = "".join(did_you_mean(n, PRESETS) for n in unknown)
        raise ValueError(
            f"--presets: unknown preset(s) {', '.join(map(repr, unknown))}{hints}; known: {', '.join(PRESETS)}"
        )
    return names


def compare(
    workload: Workload,
    base: SimConfig,
    presets: Sequence[str],
    on_done: Callable[[str, SimResult], None] | None = None,
    seeds: Sequence[int] | None = None,
) -> tuple[pd.DataFrame, dict[str, SimResult]]:
    """One simulation per preset and seed (same trace, hardware, workload and tools; ``seeds`` default: the
    config's seed). Returns the table (one row per preset, in the order given: each figure the mean over the
    seeds, with ``seeds`` and each seed's figures in ``per_seed``) and each preset's results under its first
    seed."""
    check_presets(presets)
    seeds = list(seeds) if seeds else [base.seed]
    results: dict[str, SimResult] = {}
    rows = []
    for name in presets:
        cfg = apply_preset(base, name)
        per_seed = []
        for i, seed in enumerate(seeds):
            res = simulate(workload, cfg.replace(seed=seed))  # type: ignore[arg-type]
            if i == 0:
                results[name] = res
            per_seed.append(row(name, res.summary))
            if on_done is not None:
                on_done(f"{name} (seed {seed})" if len(seeds) > 1 else name, res)
        mean = {c: float(np.mean([r[c] for r in per_seed])) for c in COLUMNS[1:]}
        rows.append({"preset": name, **mean, "seeds": ",".join(map(str, seeds)), "per_seed": per_seed})
    return pd.DataFrame(rows, columns=[*COLUMNS, "seeds", "per_seed"]), results


@dataclass(slots=True)
class Ranking:
    """The presets ranked on one metric: the best, the tie, and the rule (one sentence)."""

    metric: str
    best: str
    tied: list[str]
    rule: str
    spread: dict[str, float]  #: preset -> max - min of the metric over the seeds
    values: dict[str, list[float]]  #: preset -> the metric per seed
    deployment: dict[str, str]  #: preset -> what it deploys beyond plain vLLM (extra tiers, mechanisms)


def rank(table: pd.DataFrame, base: SimConfig, metric: str = "jct_p90") -> Ranking:
    """Rank the presets of a :func:`compare` table on ``metric`` (:data:`RANK_METRICS`; the worst value over
    the seeds counts, as in the plan) by :func:`agentreplay.plan.rank.choose`."""
    from agentreplay.plan.rank import Cost, Footprint, choose, deployment_values, spread
    from agentreplay.plan.slo import Term
    from agentreplay.plan.trial import Family, Trial

    if metric not in RANK_METRICS:
        raise ValueError(f"--rank-by {metric!r}: one of {', '.join(RANK_METRICS)}")
    col, term = f"{metric}_s", Term(metric, "<=", float("inf"))
    hw = base.hardware
    trials = []
    for r in table.itertuples(index=False):
        cfg = apply_preset(base, r.preset)
        fp = Footprint.of(deployment_values(cfg))
        vals = [float(s[col]) for s in r.per_seed]
        t = Trial(
            Family(hw.gpu, hw.model, hw.tp, r.preset),
            hw.instances,
            1,
            r.preset,
            "ok",
            None,
            0.0,
            False,
            {term.column: max(vals)},
            0.0,
            feasible=True,
            footprint=fp,
        )
        gpus = hw.tp * hw.instances
        t.priced = Cost(gpus, hw.instances * fp.dram_gib, hw.instances * fp.cxl_gib, None, gpus, 0.0, 0.0)
        t.per_seed = {metric: [*vals]}
        trials.append(t)
    choice = choose(trials, [term])
    assert choice is not None
    return Ranking(
        metric,
        choice.chosen.family.preset,
        [t.family.preset for t in choice.tied],
        choice.rule,
        {t.family.preset: spread(t, term) for t in trials},
        {t.family.preset: [float(v) for v in t.per_seed[metric] if v is not None] for t in trials},
        {t.family.preset: t.footprint.text() for t in trials},
    )


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
