"""Several presets on one trace and configuration, ranked (``agentreplay compare``, ``agentreplay fleet compare``).

Each preset runs once per seed (the seeds draw the arrivals and tool times; three by default, from the
configuration's); the table holds, per preset, the mean of each figure over the seeds, and for the ranking metric
its value per seed and spread (max - min). The presets are ranked on that metric as the plan ranks configurations
(:func:`agentreplay.plan.rank.choose`): cheaper first (a preset that adds a host-memory tier costs more), then a
preset is *better* only by more than the noise (the larger seed spread of the two, at least
:data:`agentreplay.plan.rank.TIE_FLOOR` of the value); presets that none is better than are a tie, broken by the
simplest deployment. Every preset name is checked before anything runs (the CompareParams' own check).

Output: ``compare.parquet`` (the table), ``jct_cdf.png`` (the JCT distribution per preset under the first seed)
and one ``simulate`` output folder per preset (its first seed's run; hard links to the cell kept in ``sim-runs``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, get_args, get_type_hints

from agentreplay.experiment.base import Experiment, param
from agentreplay.experiment.params import ParamError
from agentreplay.experiment.tables import View, about, about_of
from agentreplay.policy.presets import PRESETS
from agentreplay.policy.registry import did_you_mean

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

    from agentreplay.experiment.results import Results
    from agentreplay.sim.config import SimConfig
    from agentreplay.sim.result import SimResult
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
    "ttft_p90_s",
    "recomputed_tokens",
)


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
        "ttft_p90_s": s["ttft_s"]["p90"],
        "recomputed_tokens": s["recomputed_tokens"],
    }


def check_presets(names: Sequence[str]) -> list[str]:
    """The preset names, checked: ValueError naming the unknown ones and the known ones (before anything runs)."""
    names = list(dict.fromkeys(n.strip() for n in names if n.strip()))
    if not names:
        raise ParamError(f"--presets: give at least one preset name; known: {', '.join(PRESETS)}")
    unknown = [n for n in names if n not in PRESETS]
    if unknown:
        hints = "".join(did_you_mean(n, PRESETS) for n in unknown)
        raise ParamError(
            f"--presets: unknown preset(s) {', '.join(map(repr, unknown))}{hints}; known: {', '.join(PRESETS)}"
        )
    return names


@dataclass(frozen=True, slots=True)
class CompareParams:
    presets: tuple[str, ...] = param(tuple(PRESETS), "Preset names, comma-separated (agentreplay simulate --preset).")
    rank_by: Literal["jct_mean", "jct_p50", "jct_p90", "jct_p99", "ttft_mean", "makespan"] = param(
        "jct_p90", "Metric the presets are ranked on (lower is better)."
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "presets", tuple(check_presets(self.presets)))
        if self.rank_by not in RANK_METRICS:
            raise ParamError(f"--rank-by {self.rank_by!r}: one of {', '.join(RANK_METRICS)}")


#: metrics ``--rank-by`` accepts (a column of :data:`COLUMNS` without ``_s``; lower is better)
RANK_METRICS: tuple[str, ...] = get_args(get_type_hints(CompareParams)["rank_by"])


def preset_row(name: str, summaries: Sequence[dict[str, Any]], seeds: Sequence[int]) -> dict[str, Any]:
    """One preset's row: each figure the mean over its seeds' summaries, the seeds, each seed's figures."""
    import numpy as np

    per_seed = [row(name, s) for s in summaries]
    mean = {c: float(np.mean([r[c] for r in per_seed])) for c in COLUMNS[1:]}
    return {"preset": name, **mean, "seeds": ",".join(map(str, seeds)), "per_seed": per_seed}


def table_of(results: Results, presets: Sequence[str]) -> pd.DataFrame:
    """One row per preset, in the order given (:func:`preset_row`)."""
    import pandas as pd

    rows = [preset_row(n, [run.summary() for run in results[n]], results.seeds) for n in presets]
    return pd.DataFrame(rows, columns=[*COLUMNS, "seeds", "per_seed"])


def compare(
    workload: Workload, base: SimConfig, presets: Sequence[str], seeds: Sequence[int] | None = None
) -> tuple[pd.DataFrame, dict[str, SimResult]]:
    """The comparison of an in-memory workload, in this process: one simulation per preset and seed (``seeds``
    default: the configuration's). Returns the table (:func:`table_of`'s) and each preset's run under its first
    seed. ``agentreplay compare`` runs the same cells on the experiment runner, from a trace on disk."""
    import pandas as pd

    from agentreplay.policy.presets import apply_preset
    from agentreplay.sim.run import simulate

    names, seeds = check_presets(presets), list(seeds) if seeds else [base.seed]
    results, rows = {}, []
    for name in names:
        cfg = apply_preset(base, name)
        runs = [simulate(workload, cfg.replace(seed=seed)) for seed in seeds]  # type: ignore[arg-type]
        results[name] = runs[0]
        rows.append(preset_row(name, [r.summary for r in runs], seeds))
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
    from agentreplay.policy.presets import apply_preset

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


def stored(table: pd.DataFrame, ranking: Ranking) -> pd.DataFrame:
    """compare.parquet: the table without the per-seed records, with the ranking metric per seed, its spread
    and the ranking (best, tie)."""
    out = table.drop(columns=["per_seed"])
    m = ranking.metric
    out[f"{m}_per_seed_s"] = [ranking.values[p] for p in out["preset"]]
    out[f"{m}_spread_s"] = [ranking.spread[p] for p in out["preset"]]
    out["rank_metric"] = m
    out["best"] = out["preset"] == ranking.best
    out["tie"] = out["preset"].isin(ranking.tied)
    out["deploys"] = [ranking.deployment[p] for p in out["preset"]]
    return out


def plot_jct_cdf(ax: Any, jct: dict[str, np.ndarray]) -> list[Any]:
    """Empirical CDF of program JCT per preset on ``ax``; returns the line artists."""
    import numpy as np

    lines = []
    for name, values in jct.items():
        x = np.sort(np.asarray(values, dtype=float))
        y = np.arange(1, len(x) + 1) / len(x)
        (line,) = ax.step(x, y, where="post", label=name)
        lines.append(line)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (s)")
    ax.set_ylabel("fraction of programs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return lines


HEAD = ["preset", "JCT mean (s)", "p50 (s)", "p90 (s)", "p99 (s)", "{m} worst (s)", "{m} spread (s)", "programs/s"]
HEAD += ["hit rate", "preempt", "affinity breaks", "GB moved", "TTFT p90 (s)", "deploys"]


class Compare(Experiment):
    name = "compare"
    summary = "Presets on one trace and configuration, each under several seeds, ranked with ties."
    description = (
        "Each preset runs once per seed (default three); the table shows the mean over the seeds and the ranking "
        "metric's spread, and names the best preset: presets whose metric differs by less than the seed spread (or "
        "1%) are a tie, broken by the simplest deployment (no extra memory tier, fewer mechanisms). Writes "
        "compare.parquet, jct_cdf.png and one simulate folder per preset (its first seed's run); agentreplay compare "
        "takes every simulate option besides."
    )
    example = "agentreplay fleet compare --presets vllm,continuum --out out/cmp"
    Params = CompareParams
    hardware = MappingProxyType({})
    output_kind = "compare"
    outputs = ("compare.parquet", "jct_cdf.png")

    def default_seeds(self, seed: int) -> list[int]:
        """Three seeds from the configuration's."""
        return [seed, seed + 1, seed + 2]

    def configs(self, base: SimConfig, p: CompareParams) -> dict[str, SimConfig]:
        from agentreplay.policy.presets import apply_preset

        return {name: apply_preset(base, name) for name in p.presets}

    def analyse(self, results: Results, p: CompareParams) -> dict[str, pd.DataFrame]:
        import pandas as pd

        table = table_of(results, p.presets)
        ranking = rank(table, results.base, p.rank_by)
        first = {name: results.first(name) for name in p.presets}
        jct = [(name, run.columns("programs", ["jct_s"])["jct_s"]) for name, run in first.items()]
        return {
            "compare": stored(table, ranking),
            "_runs": pd.DataFrame({"preset": list(first), "folder": [str(r.folder) for r in first.values()]}),
            "_jct": pd.DataFrame({"preset": [n for n, v in jct for _ in v], "jct_s": [x for _, v in jct for x in v]}),
            "_about": about(rule=ranking.rule, seeds=list(results.seeds)),
        }

    def render(self, tables: dict[str, pd.DataFrame], out: Path) -> list[Path]:
        from agentreplay.experiment.runner import link_folder
        from agentreplay.fleet.figures import subplots

        jct = tables["_jct"]
        fig, ax = subplots(figsize=(7, 4.5))
        plot_jct_cdf(ax, {n: g["jct_s"].to_numpy() for n, g in jct.groupby("preset", sort=False)})
        fig.tight_layout()
        fig.savefig(out / "jct_cdf.png", dpi=120)
        runs = tables["_runs"]
        folders = [link_folder(Path(f), out / n) for n, f in zip(runs["preset"], runs["folder"], strict=True)]
        return [out / "jct_cdf.png", *folders]

    def views(self, tables: dict[str, pd.DataFrame]) -> list[View]:
        t, a = tables["compare"], about_of(tables)
        m = str(t["rank_metric"].iloc[0])
        best = str(t.loc[t["best"], "preset"].iloc[0])
        tied = list(t.loc[t["tie"], "preset"])
        rows = []
        for r in t.to_dict("records"):
            mark = " <- best" if r["best"] else (" (tie)" if r["tie"] else "")
            rows.append(
                [
                    r["preset"] + mark,
                    f"{r['jct_mean_s']:,.1f}",
                    f"{r['jct_p50_s']:,.1f}",
                    f"{r['jct_p90_s']:,.1f}",
                    f"{r['jct_p99_s']:,.1f}",
                    f"{max(r[f'{m}_per_seed_s']):,.1f}",
                    f"{r[f'{m}_spread_s']:,.1f}",
                    f"{r['throughput_programs_per_s']:.4f}",
                    f"{r['prefix_hit_rate']:.3f}",
                    f"{r['preemptions']:,.0f}",
                    f"{r['affinity_breaks']:,.0f}",
                    f"{r['bytes_moved_total'] / 1e9:,.1f}",
                    f"{r['ttft_p90_s']:,.3f}",
                    r["deploys"],
                ]
            )
        notes = [f"best on {m}: {best}; {a['rule']}"]
        notes += [f"tied: {', '.join(tied)}"] if tied else []
        notes += ["one seed: no spread measured, so only differences under 1% are ties"] if len(a["seeds"]) == 1 else []
        title = f"preset comparison (mean over seeds {','.join(map(str, a['seeds']))}; ranked on {m})"
        head = [h.format(m=m) for h in HEAD]
        return [View(title, head, rows, notes=notes, left=1)]


EXPERIMENT = Compare()
