"""The end-to-end headline of the validation report: every end-to-end cell, every metric its source measured.

What users judge is end to end (TTFT, TPOT / ITL, E2E, throughput, JCT, hit rate, preemptions), so the report
opens with one line, "N of M end-to-end cells within target", and one table holding every end-to-end cell and
every metric its source measured, each with its target and verdict, misses first (DESIGN §5). Nothing is picked
per source. Computed from the error rows (``errors.parquet``) and the skipped-cell list; no figure is typed in.

Rules (each one place, here):

- **End-to-end cells** are the measured serving and agent runs (:data:`E2E_SOURCES`: real vLLM runs, LLMPerf
  runs, the live engine cell, the agent JCT run) and the Splitwise whole-model iterations (a whole forward pass of
  a real engine, judged per cell by its MAPE over the measured operating points, :data:`ITERATION_METRICS`).
- **Target**: ``|error| <= 10 %`` for every metric (:data:`TARGET_PCT`; the fidelity issue's per-group target),
  MAPE over the points for a Splitwise cell. One target for every metric, so no metric is favoured.
- **Verdict of a cell**: within target when every judged metric is; a metric the replay fixes by construction
  (row ``judged = False``, e.g. throughput under arrivals fitted to the measured span) is shown with its error
  and "not judged: ..." and counts for nothing.
- **Workload**: a cell replayed on stand-in trajectories (:data:`STAND_IN_SOURCES`: the agent JCT run, whose own
  trajectories are not public) is counted and tabled apart, never averaged with the rest.
- **Not simulated**: an end-to-end cell the validation could not replay (a GPU outside the catalogue, a
  deployment field the simulator does not model, a source without a replay) is listed with its reason and counted
  in neither N nor M.
"""

from __future__ import annotations

from typing import Any, Final

import numpy as np
import pandas as pd

#: Sources whose cells are whole measured runs (component sources are judged in the component sections).
E2E_SOURCES: Final = ("vllm-run", "llmperf", "agent-jct", "mlperf", "live-vllm-cpu", "inference-perf")
#: Splitwise: whole-model iterations of a real engine, one cell per GPU, model and TP.
ITERATION_METRICS: Final = ("prefill_iteration_s", "decode_iteration_s")
#: Cells replayed on trajectories that are not the measured run's own (reported apart).
STAND_IN_SOURCES: Final = ("agent-jct",)
#: |signed error| (or a Splitwise cell's MAPE) within this many percent is "met", for every metric.
TARGET_PCT: Final = 10.0

COLUMNS: Final = [
    "workload",
    "source",
    "cell_id",
    "gpu",
    "model",
    "dtype",
    "tp",
    "metric",
    "statistic",
    "n",
    "measured",
    "simulated",
    "error_pct",
    "target_pct",
    "verdict",
    "judged",
    "note",
]


def is_e2e(source: pd.Series, metric: pd.Series) -> pd.Series:
    """Rows of end-to-end cells: measured runs, and Splitwise whole-model iterations."""
    return source.isin(E2E_SOURCES) | (source.eq("splitwise") & metric.isin(ITERATION_METRICS))


def verdict(error_pct: float, target_pct: float = TARGET_PCT) -> str:
    """``met`` or ``missed by X pp`` (``n/a`` without a finite error)."""
    if not np.isfinite(error_pct):
        return "n/a"
    return "met" if abs(error_pct) <= target_pct else f"missed by {abs(error_pct) - target_pct:.1f} pp"


def e2e_table(errors: pd.DataFrame) -> pd.DataFrame:
    """One row per end-to-end cell and metric (:data:`COLUMNS`), misses first (largest miss first), then met,
    then the metrics not judged. A Splitwise cell's metric row is its MAPE over the measured points
    (``statistic`` says which)."""
    e = errors[is_e2e(errors["source"], errors["metric"])]
    if not len(e):
        return pd.DataFrame(columns=COLUMNS)
    judged = e["judged"] if "judged" in e else pd.Series(True, index=e.index)
    point = e[~e["metric"].isin(ITERATION_METRICS)].assign(judged=judged)
    rows = [
        {
            "source": r.source,
            "cell_id": r.cell_id,
            "gpu": r.gpu,
            "model": r.model,
            "dtype": r.dtype,
            "tp": r.tp,
            "metric": r.metric,
            "statistic": "signed error",
            "n": 1,
            "measured": r.measured,
            "simulated": r.simulated,
            "error_pct": 100.0 * r.rel_error,
            "judged": bool(r.judged),
            "note": r.note,
        }
        for r in point.itertuples(index=False)
    ]
    it = e[e["metric"].isin(ITERATION_METRICS)]
    for (cid, metric), d in it.groupby(["cell_id", "metric"], sort=True):
        first = d.iloc[0]
        rows.append(
            {
                "source": first["source"],
                "cell_id": cid,
                "gpu": first["gpu"],
                "model": first["model"],
                "dtype": first["dtype"],
                "tp": first["tp"],
                "metric": metric,
                "statistic": f"MAPE over {len(d)} points",
                "n": len(d),
                "measured": float(d["measured"].median()),
                "simulated": float(d["simulated"].median()),
                "error_pct": float(np.mean(np.abs(d["rel_error"])) * 100),
                "judged": True,
                "note": "measured / simulated: medians over the points; signed mean error "
                f"{float(d['rel_error'].mean() * 100):+.1f}%",
            }
        )
    t = pd.DataFrame(rows)
    t["workload"] = np.where(t["source"].isin(STAND_IN_SOURCES), "stand-in", "measured")
    t["target_pct"] = TARGET_PCT
    t["verdict"] = [
        verdict(v) if j else "not judged: fixed by construction"
        for v, j in zip(t["error_pct"], t["judged"], strict=True)
    ]
    miss = t["verdict"].str.startswith("missed")
    rank = np.select([miss, t["verdict"].eq("met")], [0, 1], 2)
    t = (
        t.assign(_rank=rank, _abs=-t["error_pct"].abs())
        .sort_values(["_rank", "_abs", "cell_id", "metric"], kind="stable")
        .drop(columns=["_rank", "_abs"])
    )
    return t[COLUMNS].reset_index(drop=True)


def cell_verdicts(table: pd.DataFrame) -> pd.DataFrame:
    """Per end-to-end cell: judged metrics, metrics met, worst judged |error|, within target (every judged
    metric met); misses first."""
    if not len(table):
        return pd.DataFrame(
            columns=[
                "workload",
                "source",
                "cell_id",
                "gpu",
                "dtype",
                "metrics",
                "met",
                "worst_metric",
                "worst_error_pct",
                "within_target",
            ]
        )
    rows = []
    for (wl, src, cid), d in table.groupby(["workload", "source", "cell_id"], sort=True):
        j = d[d["judged"]]
        worst = j.loc[j["error_pct"].abs().idxmax()] if len(j) else None
        rows.append(
            {
                "workload": wl,
                "source": src,
                "cell_id": cid,
                "gpu": d["gpu"].iloc[0],
                "dtype": d["dtype"].iloc[0],
                "metrics": len(j),
                "met": int(j["verdict"].eq("met").sum()),
                "worst_metric": None if worst is None else worst["metric"],
                "worst_error_pct": np.nan if worst is None else float(worst["error_pct"]),
                "within_target": bool(len(j)) and bool(j["verdict"].eq("met").all()),
            }
        )
    c = pd.DataFrame(rows)
    return (
        c.assign(_a=-c["worst_error_pct"].abs())
        .sort_values(["within_target", "_a", "cell_id"])
        .drop(columns="_a")
        .reset_index(drop=True)
    )


def not_simulated(skipped: list[dict[str, str]] | list[tuple[str, str]]) -> pd.DataFrame:
    """End-to-end cells the validation could not replay, with the reason (component skips are elsewhere)."""
    recs = [s if isinstance(s, dict) else {"cell_id": s[0], "reason": s[1]} for s in skipped]
    df = pd.DataFrame(recs, columns=["cell_id", "reason"])
    src = df["cell_id"].str.split("/").str[0]
    return df[src.isin(E2E_SOURCES)].reset_index(drop=True)


def family(metric: pd.Series) -> pd.Series:
    """A metric's family: its name without the statistic (``ttft_p90_s`` -> ``ttft``; throughputs unchanged)."""
    return metric.str.replace(r"_(mean|p\d+)_s$", "", regex=True)


def group_mape(table: pd.DataFrame) -> pd.DataFrame:
    """MAPE and signed mean error (%) of the judged rows per workload, source and metric family (mean, quantiles
    and throughput kept apart)."""
    j = table[table["judged"]]
    if not len(j):
        return pd.DataFrame(columns=["workload", "source", "family", "n", "mape_pct", "mean_signed_pct"])
    fam = family(j["metric"])
    g = j.assign(family=fam).groupby(["workload", "source", "family"])["error_pct"]
    return pd.DataFrame(
        {"n": g.size(), "mape_pct": g.apply(lambda v: float(np.mean(np.abs(v)))), "mean_signed_pct": g.mean()}
    ).reset_index()


def summarise(errors: pd.DataFrame, skipped: list[Any]) -> dict[str, Any]:
    """The headline as data (``summary.json`` key ``end_to_end``) and its one line."""
    table = e2e_table(errors)
    cells = cell_verdicts(table)
    meas = cells[cells["workload"] == "measured"]
    stand = cells[cells["workload"] == "stand-in"]
    ns = not_simulated(skipped)
    apart = ns["reason"].str.startswith("not replayable")
    line = (
        f"{int(meas['within_target'].sum())} of {len(meas)} replayable end-to-end cells within target "
        f"(every judged metric within +-{TARGET_PCT:.0f}%)"
    )
    if len(stand):
        line += f"; stand-in workload, reported apart: {int(stand['within_target'].sum())} of {len(stand)}"
    if apart.any():
        line += f"; {int(apart.sum())} not replayable, listed apart with the reason"
    if (~apart).any():
        line += f"; {int((~apart).sum())} not simulated"
    rows = table[table["judged"] & table["workload"].eq("measured")] if len(table) else table
    return {
        "line": line,
        "target_pct": TARGET_PCT,
        "cells_within_target": int(meas["within_target"].sum()),
        "cells": len(meas),
        "stand_in_cells_within_target": int(stand["within_target"].sum()),
        "stand_in_cells": len(stand),
        "not_simulated": int((~apart).sum()),
        "not_replayable": int(apart.sum()),
        "metrics_met": int(rows["verdict"].eq("met").sum()),
        "metrics_judged": len(rows),
        "metrics_not_judged": int((~table["judged"]).sum()) if len(table) else 0,
        "cells_table": cells.to_dict("records"),
        "groups": group_mape(table).to_dict("records"),
    }
