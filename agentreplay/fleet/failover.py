"""The failover study behind ``agentreplay fleet-failover``: the same trace and cluster run three times (no
failure; the failures; the failures with the age-aware remedy), the failover ledgers joined with the no-failure
run's JCT, and the JCT impact by program age. Compute first (:func:`run_study`, :func:`by_age`), draw second
(:func:`plot_impact`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.fleet.figures import subplots
from agentreplay.sim import SimConfig, simulate
from agentreplay.sim.workload import Workload

#: program age at the event, in turns done: bucket edges (left-closed) and labels
AGE_EDGES = (0, 10, 20, 40)
AGE_LABELS = ("0-9", "10-19", "20-39", "40+")
RUNS = ("baseline", "failure", "remedy")


@dataclass
class FailoverStudy:
    """The three runs' program JCTs, the two ledgers (with ``jct_base_s`` and ``jct_delta_s``) and summaries."""

    jct: pd.DataFrame  #: program_id -> jct_s of each run (columns RUNS)
    ledgers: dict[str, pd.DataFrame]  #: "failure" / "remedy" -> ledger rows
    summaries: dict[str, dict[str, Any]]  #: run -> its simulation summary


def study_configs(base: SimConfig, events: list[dict[str, Any]]) -> dict[str, SimConfig]:
    """Baseline (failures off), failure (``events``, router placement, the base victim) and remedy (``events``,
    age-aware placement, the ``youngest-first`` victim)."""
    return {
        "baseline": base.replace(failures={"events": [], "mtbf_s": 0.0}),
        "failure": base.replace(failures={"events": events, "placement": "router"}),
        "remedy": base.replace(
            failures={"events": events, "placement": "age-aware"}, policy={"victim": "youngest-first"}
        ),
    }


def run_study(workload: Workload, configs: dict[str, SimConfig], progress: Any = None) -> FailoverStudy:
    jct: dict[str, pd.Series] = {}
    ledgers: dict[str, pd.DataFrame] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for name in RUNS:
        res = simulate(workload, configs[name])
        jct[name] = res.programs.set_index("program_id")["jct_s"]
        summaries[name] = res.summary
        if name != "baseline":
            ledgers[name] = res.tables()["failover"].to_pandas()
        if progress is not None:
            progress(name)
    frame = pd.DataFrame(jct)
    for led in ledgers.values():
        led["jct_base_s"] = frame["baseline"].loc[led["program_id"]].to_numpy()
        led["jct_delta_s"] = led["jct_s"] - led["jct_base_s"]
        led["age_bucket"] = age_bucket(led["turns_done"].to_numpy())
    return FailoverStudy(frame, ledgers, summaries)


def age_bucket(turns_done: np.ndarray) -> np.ndarray:
    idx = np.searchsorted(np.asarray(AGE_EDGES), turns_done, side="right") - 1
    return np.asarray(AGE_LABELS, dtype=object)[np.clip(idx, 0, len(AGE_LABELS) - 1)]


def by_age(study: FailoverStudy) -> pd.DataFrame:
    """One row per age bucket (of the programs the failure run affected, by their age at the first event that
    hit them): programs, re-prefilled tokens, and mean JCT of those programs in the three runs."""
    rows = []
    led = study.ledgers["failure"]
    first = led.drop_duplicates("program_id")
    rem = study.ledgers["remedy"]
    for label in (*AGE_LABELS, "all"):
        sel = first if label == "all" else first[first["age_bucket"] == label]
        ids = sel["program_id"].tolist()
        j = study.jct.loc[ids] if ids else study.jct.iloc[:0]
        rows.append(
            {
                "age_turns": label,
                "programs": len(ids),
                "reprefill_failure": int(led.loc[led["program_id"].isin(ids), "reprefill_tokens"].clip(lower=0).sum()),
                "reprefill_remedy": int(rem.loc[rem["program_id"].isin(ids), "reprefill_tokens"].clip(lower=0).sum()),
                "jct_baseline_s": float(j["baseline"].mean()) if ids else float("nan"),
                "jct_failure_s": float(j["failure"].mean()) if ids else float("nan"),
                "jct_remedy_s": float(j["remedy"].mean()) if ids else float("nan"),
            }
        )
    out = pd.DataFrame(rows)
    out["delta_failure_s"] = out["jct_failure_s"] - out["jct_baseline_s"]
    out["delta_remedy_s"] = out["jct_remedy_s"] - out["jct_baseline_s"]
    return out


def run_summary(study: FailoverStudy) -> pd.DataFrame:
    """One row per run: JCT mean / p90 over every program, preemptions, and the ledger totals."""
    rows = []
    for name in RUNS:
        s = study.summaries[name]
        fo = s.get("failover", {})
        j = study.jct[name]
        rows.append(
            {
                "run": name,
                "jct_mean_s": float(j.mean()),
                "jct_p90_s": float(j.quantile(0.9)),
                "preemptions": int(s.get("preemptions", 0)),
                "programs_affected": int(fo.get("programs_affected", 0)),
                "aborted_calls": int(fo.get("aborted_calls", 0)),
                "reprefill_tokens": int(fo.get("reprefill_tokens", 0)),
                "lost_output_tokens": int(fo.get("lost_output_tokens", 0)),
            }
        )
    return pd.DataFrame(rows)


def plot_impact(ax_bars: Any, ax_scatter: Any, study: FailoverStudy, table: pd.DataFrame) -> tuple[Any, Any]:
    """Left: mean JCT of the affected programs by age bucket, three runs. Right: each affected program's JCT
    change vs the no-failure run against its age (turns done) at the event, failure and remedy."""
    t = table[table["age_turns"] != "all"]
    x = np.arange(len(t))
    for k, (name, col) in enumerate(
        (("no failure", "jct_baseline_s"), ("failure", "jct_failure_s"), ("failure + remedy", "jct_remedy_s"))
    ):
        ax_bars.bar(x + (k - 1) * 0.27, t[col], width=0.27, label=name)
    ax_bars.set_xticks(x, [f"{a}\n(n={n})" for a, n in zip(t["age_turns"], t["programs"], strict=True)])
    ax_bars.set_xlabel("program age at the failure (turns done)")
    ax_bars.set_ylabel("mean JCT of the affected programs (s)")
    ax_bars.set_title("JCT of the programs a failure hit")
    ax_bars.grid(alpha=0.3, axis="y")
    ax_bars.legend()
    for name, marker in (("failure", "o"), ("remedy", "s")):
        led = study.ledgers[name].drop_duplicates("program_id")
        label = "failure" if name == "failure" else "failure + remedy"
        ax_scatter.scatter(led["turns_done"], led["jct_delta_s"], marker=marker, alpha=0.6, label=label)
    ax_scatter.axhline(0, color="grey", lw=0.8)
    ax_scatter.set_xlabel("program age at the failure (turns done)")
    ax_scatter.set_ylabel("JCT - JCT without failure (s)")
    ax_scatter.set_title("JCT impact per affected program")
    ax_scatter.grid(alpha=0.3)
    ax_scatter.legend()
    return ax_bars, ax_scatter


def write_figure(path: Any, study: FailoverStudy, table: pd.DataFrame) -> None:

    fig, (a, b) = subplots(1, 2, figsize=(12, 4.5))
    plot_impact(a, b, study, table)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def markdown(table: pd.DataFrame, runs: pd.DataFrame, setting: str) -> str:
    """The two tables as Markdown, with the setting they came from."""

    def md(df: pd.DataFrame) -> str:
        head = "| " + " | ".join(df.columns) + " |\n|" + "---|" * len(df.columns) + "\n"
        body = "".join(
            "| " + " | ".join(_fmt(v) for v in row) + " |\n" for row in df.itertuples(index=False, name=None)
        )
        return head + body

    return (
        f"# Failover: JCT impact by program age\n\n{setting}\n\n{_READING}\n\n## Runs\n\n{md(runs)}\n"
        f"## Programs the failures hit, by age at the first hit\n\n{md(table)}"
    )


_READING = (
    "Runs: `baseline` without failures; `failure` with them (aborted calls retried through the router, the "
    "failed instance's KV lost); `remedy` with them plus age-aware placement (re-routed programs oldest first, "
    "each to the least-loaded survivor with room for its prompt) and the `youngest-first` preemption victim. The "
    "age table groups the programs the `failure` run's events hit (age = turns done at the first hit) and shows "
    "their mean JCT in all three runs; `reprefill_*` = context tokens computed again because of a failure "
    "(`min(KV lost, prompt - cached)` of the re-routed call), for those programs in each run. The remedy run's "
    "events hit a partly different set of programs (its timeline differs once preemptions differ)."
)


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return "" if v != v else f"{v:,.1f}"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return str(v)
