"""``agentreplay validate``: simulate every measured cell, compare, write errors.parquet and the report.

``errors.parquet`` has one row per cell, metric and operating point: ``source, cell_id, gpu, model, dtype, tp,
metric, measured, simulated, rel_error, role`` (+ ``num_tokens, batch_size, context_tokens, bytes`` locating a
component point, and ``note``). ``rel_error = simulated / measured - 1`` (signed). ``role`` is ``calibration``
for component points that fitted the efficiencies (:data:`validation.calibrate.SPLIT`), else ``validation``.

Component metrics: ``layer_time_s`` (one decoder layer = the sum of the measured per-layer operators at
``num_tokens``, see :func:`validation.components.layer_sums`), ``attention_prefill_s`` / ``attention_decode_s``,
``lm_head_s``, ``prefill_iteration_s`` / ``decode_iteration_s`` (Splitwise whole-model iterations) and
``all_reduce_s``. Operator-level rows (the fit diagnostics) go to ``component_ops.parquet``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import list_gpus, load_gpu
from validation import calibrate as K
from validation import components as C
from validation import e2e, report
from validation.measured import Measured, load

COLUMNS: Final = ["source", "cell_id", "gpu", "model", "dtype", "tp", "metric", "measured", "simulated",
                  "rel_error", "role", "num_tokens", "batch_size", "context_tokens", "bytes", "note"]


def _cell_cols(df: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    info = cells.set_index("cell_id")
    for col in ("source", "model", "dtype"):
        df[col] = df["cell_id"].map(info[col])
    df["tp"] = df["cell_id"].map(info["tp"]).astype("Int64")
    return df


def component_rows(measured: Measured, catalog: str | Path | None = None
                   ) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(errors rows, operator-level rows, skipped cells) for every component cell on a catalog GPU."""
    data = K.component_data(measured)
    known = set(list_gpus(catalog))
    effs = {g: load_gpu(g, catalog).efficiency for g in known}
    ops = K.op_errors(data, effs)
    src = {c: C.source_of(c) for c in ops["cell_id"].unique()}
    layer = C.layer_sums(ops, ops["predicted_s"].to_numpy(), src)
    roles = ops.drop_duplicates(["cell_id", "num_tokens"]).set_index(["cell_id", "num_tokens"])["role"]
    layer["role"] = [roles.get((c, n), "validation") for c, n in zip(layer["cell_id"], layer["num_tokens"],
                                                                     strict=True)]
    layer = layer.assign(metric="layer_time_s", note="ops: " + layer["ops"]).drop(columns="ops")
    att = ops[ops["group"].isin(["attention_prefill", "attention_decode", "lm_head"]) & (ops["probe"] != "tokens")]
    att = att.assign(metric=att["group"] + "_s", note="")
    parts = [layer, att.drop(columns=["group", "probe", "mult", "launches", "per_layer", "rel_error", "gpu", "tp"])]
    for g in sorted(known):
        gpu = dataclasses.replace(load_gpu(g, catalog), efficiency=effs[g])
        it = data.iterations[data.iterations["gpu"] == g].reset_index(drop=True)
        if len(it):
            pred = C.predict_iterations(it, gpu, data.specs, data.tps, effs[g])  # type: ignore[arg-type]
            parts.append(it.assign(predicted_s=pred, metric=it["group"] + "_s", note="whole model, Splitwise")[
                ["cell_id", "num_tokens", "batch_size", "context_tokens", "measured_s", "predicted_s", "role",
                 "metric", "note"]])
        ar = data.allreduce[data.allreduce["gpu"] == g].reset_index(drop=True)
        if len(ar):
            parts.append(ar.assign(predicted_s=C.predict_allreduce(ar, gpu, effs[g]), metric="all_reduce_s",
                                   note="")[["cell_id", "bytes", "measured_s", "predicted_s", "role", "metric",
                                             "note"]])
    df = pd.concat([p for p in parts if len(p)], ignore_index=True)
    df = df.rename(columns={"measured_s": "measured", "predicted_s": "simulated"})
    df["gpu"] = df["cell_id"].map(data.cells.set_index("cell_id")["gpu"])
    df = _cell_cols(df, data.cells)
    return df, ops, data.skipped


def finish(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["rel_error"] = df["simulated"] / df["measured"] - 1.0
    for col in ("num_tokens", "batch_size", "context_tokens", "bytes"):
        df[col] = pd.array(df[col] if col in df else [None] * len(df), dtype="Int64")
    df["note"] = df["note"].fillna("") if "note" in df else ""
    df["tp"] = pd.array(df["tp"], dtype="Int64")
    return df[COLUMNS].sort_values(["role", "source", "cell_id", "metric", "num_tokens", "context_tokens",
                                    "batch_size", "bytes"], kind="stable").reset_index(drop=True)


def aggregates(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE (%) and signed mean error (%) per source, per metric and per GPU, split by role."""
    def agg(keys: list[str]) -> pd.DataFrame:
        g = df.groupby([*keys, "role"])["rel_error"]
        out = pd.DataFrame({"n": g.size(), "mape_pct": g.apply(lambda e: np.mean(np.abs(e)) * 100),
                            "mean_signed_pct": g.mean() * 100})
        return out.reset_index()
    return {"source": agg(["source"]), "metric": agg(["source", "metric"]), "gpu": agg(["gpu", "source"])}


def run(out: str | Path = "reports/latest", measured_paths: list[str] | None = None, *, defaults: bool = True,
        quick: bool = False, catalog: str | Path | None = None) -> dict[str, Any]:
    """Validate and write ``errors.parquet``, ``component_ops.parquet``, ``report.md``, ``report.html`` and the
    figures into ``out``. Returns the headline summary (also written as ``summary.json``)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    measured = load(measured_paths, defaults=defaults)
    tables = {name: measured.table(name) for name in ("cells", "component", "requests", "programs", "metrics")}
    parts, skipped = [], []
    ops = pd.DataFrame()
    if (tables["cells"]["kind"] == "component").any():
        comp, ops, skipped = component_rows(measured, catalog)
        parts.append(comp)
    e2e_rows, dists, e2e_skipped = e2e.run_all(tables, catalog, agent=not quick)
    skipped += e2e_skipped
    if len(e2e_rows):
        e2e_rows["num_tokens"] = e2e_rows["batch_size"] = e2e_rows["context_tokens"] = e2e_rows["bytes"] = None
        parts.append(e2e_rows)
    if not parts:
        raise ValueError("no measured cell could be simulated")
    errors = finish(pd.concat(parts, ignore_index=True))
    errors.to_parquet(out / "errors.parquet", index=False)
    if len(ops):
        ops.to_parquet(out / "component_ops.parquet", index=False)
    sensitivity = llmperf_burst(tables, catalog)
    summary = report.headline(errors, sensitivity)
    floors = [d for cid, d in dists.items() if "ttft_floor_s" in d]
    if floors:
        summary["llmperf_ttft_below_compute_floor"] = {
            "cells": len(floors), "below": sum(d["measured_ttft_mean_s"] < d["ttft_floor_s"] for d in floors)}
    summary["skipped"] = [{"cell_id": c, "reason": r} for c, r in skipped]
    summary["sources"] = measured.origins
    report.write(out, errors, ops, dists, aggregates(errors), summary, quick=quick)
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return summary


def llmperf_burst(tables: dict[str, pd.DataFrame], catalog: str | Path | None) -> pd.DataFrame:
    """Arrival sensitivity of the LLMPerf RTX 3090 BF16 cells: all 64 requests at t = 0 instead of staggered."""
    cells = tables["cells"]
    sel = cells[(cells["source"] == "llmperf") & (cells["gpu"] == "rtx3090") & (cells["dtype"] == "bf16")]
    rows = []
    for _, cell in sel.iterrows():
        r, _ = e2e.llmperf(cell, tables, catalog, burst=True)
        rows.extend(x for x in r if x["metric"] in ("throughput_output_tok_s", "ttft_mean_s", "e2e_mean_s"))
    df = pd.DataFrame(rows)
    if len(df):
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df
