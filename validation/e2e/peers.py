"""inference-perf cells replayed out of configuration and in sample, scored beside the peers' errors on the same runs.

- :func:`replay` simulates every replayable run twice: with the engine cost fitted *without* the run's (GPU, model,
  TP) configuration (``leave_one_configuration_out`` in ``catalog/engine_cost.json``; a configuration the shipped
  fit never saw, e.g. a held-out run's, uses the shipped fit, which is out of configuration for it by construction),
  and with the shipped in-sample fit (a run the first pass already replayed with the shipped fit is reused). The
  out-of-configuration rows are the headline (role ``validation``); the in-sample ones sit beside them, labelled.
  Runs that cannot be replayed (overloaded) are returned apart with the reason, never averaged in.
- :func:`peer_table` puts, for every cell and metric the source measured, our error next to each peer simulator's
  error on the very same measurement (``peers`` table: only predictions scored against the cell's own ``actual``).
- :func:`targets` judges the issue's targets (MAPE over the stage cells of the replayable runs): E2E mean and
  per-token time <= 5%, TTFT mean <= 15%, E2E p90 <= 10%, and below BLIS trained-physics' MAPE on the same rows.
"""

from __future__ import annotations

import json
from typing import Final

import numpy as np
import pandas as pd

from validation.catalog import PACKAGED, Catalog
from validation.e2e import inference_perf as ip
from validation.e2e import inference_perf_fit as F

#: metric -> MAPE target %, over the stage cells (out of configuration)
TARGETS: Final = {"e2e_mean_s": 5.0, "itl_mean_s": 5.0, "ttft_mean_s": 15.0, "e2e_p90_s": 10.0}
REFERENCE_PEER: Final = "blis-trained-physics"
PEER_METRICS: Final = ("ttft_mean_s", "ttft_p90_s", "e2e_mean_s", "e2e_p90_s", "itl_mean_s")


def replay(
    tables: dict[str, pd.DataFrame],
    catalog: Catalog = PACKAGED,
    *,
    processes: int | None = None,
    in_sample: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(out-of-configuration rows, in-sample rows, (cell, reason) apart) for every inference-perf cell."""
    runs, apart = F.runs_from(tables)
    if not runs:
        return pd.DataFrame(), pd.DataFrame(), apart
    shipped = F.load(catalog)
    if shipped is None:
        raise ValueError(
            f"no fitted engine cost in {catalog.folder} (engine_cost.json): run `agentreplay calibrate "
            "--engine-cost --measured <inference-perf folder>` first"
        )
    loo = F.load_out_of_configuration(catalog)
    ooc_rows, in_rows = [], []
    by_cost: dict[F.EngineCost, list[F.Run]] = {}
    for r in runs:
        by_cost.setdefault(loo.get(r.configuration, shipped), []).append(r)
    shipped_reps: dict[str, ip.RunReplay] = {}  # runs already replayed with the shipped fit (configuration unseen)
    for cost, group in by_cost.items():
        reps = F.replay_runs(group, cost, processes=processes)
        if cost == shipped:
            shipped_reps = reps
        for r in group:
            how = "fit without this configuration" if r.configuration in loo else "shipped fit (configuration unseen)"
            for row in F.rows([r], reps, tables, cost):
                ooc_rows.append({**row, "fit": how})
    if in_sample:
        todo = [r for r in runs if r.name not in shipped_reps]
        reps = {**shipped_reps, **(F.replay_runs(todo, shipped, processes=processes) if todo else {})}
        in_rows = [{**row, "fit": "in sample"} for row in F.rows(runs, reps, tables, shipped, role="in-sample")]
    ooc, ins = pd.DataFrame(ooc_rows), pd.DataFrame(in_rows)
    stage_flags = _stage_flags(tables)
    for df in (ooc, ins):
        if len(df):
            df["rel_error"] = df["simulated"] / df["measured"] - 1
            df["configuration"] = df["gpu"] + "/" + df["model"] + "/tp" + df["tp"].astype(str)
            df["stage_cell"] = df["cell_id"].map(stage_flags)
    return ooc, ins, apart


def _stage_flags(tables: dict[str, pd.DataFrame]) -> dict[str, bool]:
    cells = tables["cells"]
    cells = cells[cells["source"] == ip.SOURCE]
    return {c["cell_id"]: ip.is_stage_cell(json.loads(c["config_json"])) for _, c in cells.iterrows()}


def peer_table(ooc: pd.DataFrame, ins: pd.DataFrame, peers: pd.DataFrame) -> pd.DataFrame:
    """One row per (cell, metric): measured, our error out of configuration and in sample, each peer's error (%)."""
    if not len(ooc):
        return pd.DataFrame()
    base = ooc[["cell_id", "configuration", "metric", "measured", "rel_error", "stage_cell"]].rename(
        columns={"rel_error": "agentreplay (out of config.)"}
    )
    if len(ins):
        base = base.merge(
            ins[["cell_id", "metric", "rel_error"]].rename(columns={"rel_error": "agentreplay (in sample)"}),
            on=["cell_id", "metric"],
            how="left",
        )
    if len(peers):
        p = peers.assign(err=peers["predicted"] / peers["actual"] - 1)
        p = p.drop_duplicates(["cell_id", "metric", "simulator"]).pivot_table(
            index=["cell_id", "metric"], columns="simulator", values="err"
        )
        base = base.merge(p.reset_index(), on=["cell_id", "metric"], how="left")
    base = base[base["metric"].isin(PEER_METRICS)]
    sims = [c for c in base.columns if c not in ("cell_id", "configuration", "metric", "measured", "stage_cell")]
    base[sims] = base[sims] * 100.0
    return base


def summary_rows(table: pd.DataFrame) -> pd.DataFrame:
    """Per simulator and metric: MAPE % over the cells where both it and agentreplay have a value, and n."""
    if not len(table):
        return pd.DataFrame()
    ours = "agentreplay (out of config.)"
    sims = [c for c in table.columns if c not in ("cell_id", "configuration", "metric", "measured", "stage_cell", ours)]
    out = []
    for sim in [ours, *sims]:
        for metric, g in table.groupby("metric"):
            both = g[g[sim].notna() & g[ours].notna()]
            if not len(both):
                continue
            out.append(
                {
                    "simulator": sim,
                    "metric": metric,
                    "cells": len(both),
                    "MAPE %": float(both[sim].abs().mean()),
                    "agentreplay out of config. on the same cells, MAPE %": (
                        float(both[ours].abs().mean()) if sim != ours else np.nan
                    ),
                }
            )
    return pd.DataFrame(out)


def targets(ooc: pd.DataFrame, ins: pd.DataFrame, peers_table: pd.DataFrame) -> pd.DataFrame:
    """The issue's targets over the stage cells, misses first: MAPE out of configuration, in sample, the reference
    peer's on the same rows, target and verdict."""
    if not len(ooc):
        return pd.DataFrame()
    st = ooc[ooc["stage_cell"]]
    rows = []
    for metric, target in TARGETS.items():
        g = st[st["metric"] == metric]
        if not len(g):
            continue
        ours = float(np.mean(np.abs(g["rel_error"]))) * 100
        ins_m = ins[(ins["metric"] == metric) & ins["stage_cell"]] if len(ins) else ins
        ref = np.nan
        if REFERENCE_PEER in peers_table:
            both = peers_table[
                (peers_table["metric"] == metric) & peers_table["stage_cell"] & peers_table[REFERENCE_PEER].notna()
            ]
            ref = float(both[REFERENCE_PEER].abs().mean()) if len(both) else np.nan
            ours_same = float(both["agentreplay (out of config.)"].abs().mean()) if len(both) else np.nan
        else:
            ours_same = np.nan
        met_target = ours <= target
        beats = bool(ours_same < ref) if np.isfinite(ref) else None
        rows.append(
            {
                "metric": metric,
                "cells": len(g),
                "out-of-config. MAPE %": ours,
                "in-sample MAPE %": float(np.mean(np.abs(ins_m["rel_error"]))) * 100 if len(ins_m) else np.nan,
                "target %": target,
                f"{REFERENCE_PEER} MAPE % (same rows)": ref,
                "agentreplay on those rows %": ours_same,
                "verdict": ("met" if met_target else f"missed by {ours - target:.1f} pp")
                + (
                    ""
                    if beats is None
                    else (
                        f"; on the reference peer's {len(both)} rows {ours_same:.1f}% vs its {ref:.1f}%: "
                        + ("below it" if beats else "NOT below it")
                    )
                ),
            }
        )
    df = pd.DataFrame(rows)
    return (
        df.assign(_miss=~df["verdict"].str.startswith("met"))
        .sort_values("_miss", ascending=False)
        .drop(columns="_miss")
    )


def per_configuration(ooc: pd.DataFrame, ins: pd.DataFrame, peers_table: pd.DataFrame) -> pd.DataFrame:
    """Per configuration and metric: in-sample MAPE, out-of-configuration MAPE, best peer's MAPE on the same rows."""
    if not len(ooc):
        return pd.DataFrame()
    sims = [
        c
        for c in peers_table.columns
        if c not in ("cell_id", "configuration", "metric", "measured", "stage_cell") and not c.startswith("agentreplay")
    ]
    rows = []
    st = ooc[ooc["stage_cell"]]
    for (conf, metric), g in st.groupby(["configuration", "metric"]):
        if metric not in TARGETS:
            continue
        ig = ins[(ins["configuration"] == conf) & (ins["metric"] == metric) & ins["stage_cell"]] if len(ins) else ins
        pt = peers_table[
            (peers_table["configuration"] == conf) & (peers_table["metric"] == metric) & peers_table["stage_cell"]
        ]
        best, best_sim = np.nan, ""
        for sim in sims:
            v = pt[sim].dropna()
            if len(v) and (not np.isfinite(best) or v.abs().mean() < best):
                best, best_sim = float(v.abs().mean()), f"{sim} ({len(v)} cells)"
        rows.append(
            {
                "configuration": conf,
                "metric": metric,
                "cells": len(g),
                "in-sample MAPE %": float(np.mean(np.abs(ig["rel_error"]))) * 100 if len(ig) else np.nan,
                "out-of-config. MAPE %": float(np.mean(np.abs(g["rel_error"]))) * 100,
                "best peer MAPE %": best,
                "best peer": best_sim,
            }
        )
    return pd.DataFrame(rows)
