"""``agentreplay validate``: simulate every measured cell, compare, write errors.parquet and the report.

``errors.parquet`` has one row per cell, metric and operating point: ``source, cell_id, gpu, model, dtype, tp,
metric, measured, simulated, rel_error, role`` (+ ``num_tokens, batch_size, context_tokens, bytes`` locating a
component point, and ``note``). ``rel_error = simulated / measured - 1`` (signed). ``role`` is ``calibration``
for component points that fitted the efficiencies (:data:`validation.calibrate.SPLIT`), else ``validation``.

Component metrics: ``layer_time_s`` (one decoder layer = the sum of the measured per-layer operators at
``num_tokens``, see :func:`validation.components_predict.layer_sums`), ``attention_prefill_s`` / ``attention_decode_s``,
``lm_head_s``, ``prefill_iteration_s`` / ``decode_iteration_s`` (Splitwise whole-model iterations) and
``all_reduce_s``. Operator-level rows (the fit diagnostics) go to ``component_ops.parquet``.

Pricer comparison (:data:`validation.protocol.PRICERS`): the same component points priced by the default roofline,
the refined roofline and the measured-table pricer (and its GEMM-tile ablation), each judged under its own declared
split, go to ``pricers.parquet`` (metric rows, plus the RTX 4090 vLLM run and the LLMPerf RTX 3090 BF16 cells
replayed with each pricer) and ``pricer_ops.parquet`` (operator rows). What limits the table pricer (all-reduce
across GPU counts, the decode form) is summarised by :func:`table_limits`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import list_gpus, load_gpu
from agentreplay.perf.table import (
    REFINEMENT_FIELDS,
    TablePerfModel,
    dram_key_s,
    load_refinement,
    refinement_path,
)
from validation import (
    bands,
    crossval_outputs,
    diagnostics,
    e2e,
    e2e_llmperf,
    e2e_outofcell,
    headline,
    report,
    report_data,
)
from validation import calibrate as K
from validation import components as C
from validation import components_predict as CP
from validation.measured import Measured, default_root, load
from validation.validate_pricers import pricer_rows

COLUMNS: Final = [
    "source",
    "cell_id",
    "gpu",
    "model",
    "dtype",
    "tp",
    "metric",
    "measured",
    "simulated",
    "rel_error",
    "role",
    "num_tokens",
    "batch_size",
    "context_tokens",
    "bytes",
    "note",
    "judged",
]


def _cell_cols(df: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    info = cells.set_index("cell_id")
    for col in ("source", "model", "dtype"):
        df[col] = df["cell_id"].map(info[col])
    df["tp"] = df["cell_id"].map(info["tp"]).astype("Int64")
    return df


def component_rows(
    measured: Measured, catalog: str | Path | None = None, data: K.ComponentData | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, list[tuple[str, str]]]:
    """(errors rows, operator-level rows, skipped cells) for every component cell on a catalog GPU."""
    data = data if data is not None else K.component_data(measured)
    known = set(list_gpus(catalog))
    effs = {g: load_gpu(g, catalog).efficiency for g in known}
    ops = K.op_errors(data, effs)
    src = {c: C.source_of(c) for c in ops["cell_id"].unique()}
    layer = CP.layer_sums(ops, ops["predicted_s"].to_numpy(), src)
    roles = ops.drop_duplicates(["cell_id", "num_tokens"]).set_index(["cell_id", "num_tokens"])["role"]
    layer["role"] = [
        roles.get((c, n), "validation") for c, n in zip(layer["cell_id"], layer["num_tokens"], strict=True)
    ]
    layer = layer.assign(metric="layer_time_s", note="ops: " + layer["ops"]).drop(columns="ops")
    att = ops[ops["group"].isin(["attention_prefill", "attention_decode", "lm_head"]) & (ops["probe"] != "tokens")]
    att = att.assign(metric=att["group"] + "_s", note="")
    parts = [layer, att.drop(columns=["group", "probe", "mult", "launches", "per_layer", "rel_error", "gpu", "tp"])]
    for g in sorted(known):
        gpu = dataclasses.replace(load_gpu(g, catalog), efficiency=effs[g])
        it = data.iterations[data.iterations["gpu"] == g].reset_index(drop=True)
        if len(it):
            pred = CP.predict_iterations(it, gpu, data.specs, data.tps, effs[g])  # type: ignore[arg-type]
            parts.append(
                it.assign(predicted_s=pred, metric=it["group"] + "_s", note="whole model, Splitwise")[
                    [
                        "cell_id",
                        "num_tokens",
                        "batch_size",
                        "context_tokens",
                        "measured_s",
                        "predicted_s",
                        "role",
                        "metric",
                        "note",
                    ]
                ]
            )
        ar = data.allreduce[data.allreduce["gpu"] == g].reset_index(drop=True)
        if len(ar):
            parts.append(
                ar.assign(predicted_s=CP.predict_allreduce(ar, gpu, effs[g]), metric="all_reduce_s", note="")[
                    ["cell_id", "bytes", "measured_s", "predicted_s", "role", "metric", "note"]
                ]
            )
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
    # judged = False: a metric the replay fixes by construction (e.g. throughput under arrivals fitted to the
    # measured span); reported beside the others, never given a verdict
    df["judged"] = df["judged"].fillna(True).astype(bool) if "judged" in df else True
    df["tp"] = pd.array(df["tp"], dtype="Int64")
    return (
        df[COLUMNS]
        .sort_values(
            ["role", "source", "cell_id", "metric", "num_tokens", "context_tokens", "batch_size", "bytes"],
            kind="stable",
        )
        .reset_index(drop=True)
    )


def aggregates(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """MAPE (%) and signed mean error (%) per source, per metric and per GPU, split by role."""

    def agg(keys: list[str]) -> pd.DataFrame:
        g = df.groupby([*keys, "role"])["rel_error"]
        out = pd.DataFrame(
            {"n": g.size(), "mape_pct": g.apply(lambda e: np.mean(np.abs(e)) * 100), "mean_signed_pct": g.mean() * 100}
        )
        return out.reset_index()

    return {"source": agg(["source"]), "metric": agg(["source", "metric"]), "gpu": agg(["gpu", "source"])}


#: The steps of :func:`run`, with their wall time in seconds on the bundled data (2 loaded cores, 2026-12-01), so
#: a progress display can give an ETA from the shares.
STEPS: Final = (
    ("read the measured sources", 22),
    ("component cells", 1),
    ("pricer comparison", 24),
    ("end-to-end replays with every pricer", 2),
    ("end-to-end cells", 7),
    ("profiled and unprofiled regimes", 3),
    ("inference-perf runs out of configuration", 20),
    ("live-engine cells", 0.5),
    ("LLMPerf sensitivity to unrecorded settings", 24),
    ("protocol: CV, leave-one-GPU/model-out", 186),
    ("end to end out of cell", 4),
    ("report and figures", 9),
)


def run(
    out: str | Path = "reports/latest",
    measured_paths: list[str] | None = None,
    *,
    defaults: bool = True,
    quick: bool = False,
    catalog: str | Path | None = None,
    live_paths: list[str | Path] | None = None,
    progress: Callable[[str, float], None] | None = None,
    bundled_only: bool = False,
) -> dict[str, Any]:
    """Validate and write ``errors.parquet``, ``component_ops.parquet``, ``report.md``, ``report.html``,
    ``error_bands.json`` and the figures into ``out``. Returns the headline summary (also written as
    ``summary.json``). ``progress(step, weight)`` is called as each step of :data:`STEPS` begins."""
    out = Path(out)
    if bundled_only:  # only what ships with the project: the committed live-engine comparisons
        from validation import live as _live

        defaults, measured_paths = False, []
        live_paths = list(_live.default_paths()) if live_paths is None else live_paths
    elif defaults and not default_root().is_dir():
        raise ValueError(
            f"measured data not found: {default_root()} does not exist. validate reads the development set from "
            "../shared/measurements beside the project (a clone of the project with its shared/ folder beside it; "
            "AGENTREPLAY_MEASUREMENTS names another folder). Pass --bundled-only to validate only the bundled "
            "live-engine comparisons, or --no-default-sources --measured DIR for your own runs."
        )
    out.mkdir(parents=True, exist_ok=True)
    weights = dict(STEPS)

    def step(name: str) -> None:
        if progress is not None:
            progress(name, weights[name])

    step("read the measured sources")
    measured = load(measured_paths, defaults=defaults)
    tables = {name: measured.table(name) for name in ("cells", "component", "requests", "programs", "metrics", "peers")}
    parts, skipped = [], []
    ops = pd.DataFrame()
    pricer_parts, pricer_ops = [], pd.DataFrame()
    has_components = False
    if (tables["cells"]["kind"] == "component").any():
        data = K.component_data(measured)
        has_components = bool(len(data.ops) or len(data.iterations) or len(data.allreduce))
        if has_components:
            step("component cells")
            comp, ops, skipped = component_rows(measured, catalog, data)
            parts.append(comp)
            if len(data.ops):  # the pricer comparison is per operator (whole-model iterations alone have none)
                step("pricer comparison")
                met, pricer_ops = pricer_rows(data, catalog)
                pricer_parts.append(met)
        else:  # every component cell was skipped (e.g. a model the catalog cannot price)
            skipped = list(data.skipped)
    step("end-to-end replays with every pricer")
    alt = e2e.alternatives(tables, catalog)
    if len(alt) and "metric" in alt:
        alt = alt[alt["metric"].notna()]
        pricer_parts.append(
            alt[["pricer", "source", "cell_id", "gpu", "metric", "measured", "simulated", "rel_error", "role"]]
        )
    step("end-to-end cells")
    e2e_rows, dists, e2e_skipped = e2e.run_all(tables, catalog, agent=not quick)
    skipped += e2e_skipped
    if len(e2e_rows):
        e2e_rows["num_tokens"] = e2e_rows["batch_size"] = e2e_rows["context_tokens"] = e2e_rows["bytes"] = None
        parts.append(e2e_rows)
    extra = _regimes_and_inference_perf(tables, out, quick, catalog, data if has_components else None, step)
    parts += extra["rows"]
    skipped += extra["apart"]
    from validation import live

    step("live-engine cells")
    if live_paths is None:  # the committed live runs count as default sources
        live_paths = list(live.default_paths()) if defaults else []
    live_rows = live.rows([Path(p) for p in live_paths])
    if len(live_rows):
        parts.append(live_rows)
    if not parts:
        why = "; ".join(f"{c}: {r}" for c, r in skipped) or "no cell of a kind the validation simulates"
        raise ValueError(f"no measured cell could be simulated ({why})")
    errors = finish(pd.concat(parts, ignore_index=True))
    errors.to_parquet(out / "errors.parquet", index=False)
    if len(ops):
        ops.to_parquet(out / "component_ops.parquet", index=False)
    pricers = pd.concat(pricer_parts, ignore_index=True) if pricer_parts else pd.DataFrame()
    if len(pricers):
        pricers.to_parquet(out / "pricers.parquet", index=False)
    if len(pricer_ops):
        pricer_ops.to_parquet(out / "pricer_ops.parquet", index=False)
    step("LLMPerf sensitivity to unrecorded settings")
    sensitivity = pd.DataFrame() if quick else e2e_llmperf.llmperf_sensitivity(tables, catalog)
    if len(sensitivity):
        sensitivity.to_parquet(out / "llmperf_sensitivity.parquet", index=False)
    burst = (
        sensitivity[
            (sensitivity["setting"] == "arrivals")
            & (sensitivity["value"] == "burst")
            & (sensitivity["dtype"] == "bf16")
        ]
        if len(sensitivity)
        else sensitivity
    )
    summary = report_data.headline(errors, burst)
    summary.update(report_data.pricer_headline(pricers))
    if has_components and len(pricer_ops):
        summary["table_limits"] = table_limits(data, pricers, pricer_ops, catalog)
        summary["prefill_forms"] = _records(prefill_forms(data, catalog))
    floors = [d for cid, d in dists.items() if "ttft_floor_s" in d]
    if floors:
        summary["llmperf_ttft_below_compute_floor"] = {
            "cells": len(floors),
            "below": sum(d["measured_ttft_mean_s"] < d["ttft_floor_s"] for d in floors),
        }
        shares: dict[str, list[float]] = {}
        for d in floors:
            shares.setdefault(d["gpu_dtype"], []).append(100.0 * d["run_floor_s"] / d["measured_span_s"])
        summary["llmperf_run_floor_share_pct"] = {
            k: {"cells": len(v), "min": min(v), "max": max(v)} for k, v in sorted(shares.items())
        }
    summary.update(extra["summary"])
    summary["skipped"] = [{"cell_id": c, "reason": r} for c, r in skipped]
    summary["end_to_end"] = headline.summarise(errors, summary["skipped"])
    summary["sources"] = measured.origins
    # ---- validation protocol outputs (validation/protocol.py, validation/crossval.py): constants with their
    # provenance, CV scores, leave-one-GPU-out / leave-one-model-out, table fidelity; rendered by
    # protocol_render.render_protocol_markdown(summary)
    if has_components and len(data.ops):
        step("protocol: CV, leave-one-GPU/model-out")
        frames, summary["protocol"] = crossval_outputs.outputs(data, pricers, catalog, lomo=not quick)
        if not quick:
            step("end to end out of cell")
            ooc = e2e_outofcell.out_of_cell_rows(tables, data, catalog, shipped=e2e_rows)
            frames["e2e_out_of_cell"] = ooc
            summary["protocol"]["e2e_out_of_cell"] = e2e_outofcell.as_summary(ooc)
        for name, frame in frames.items():
            if len(frame):
                frame.to_parquet(out / f"protocol_{name}.parquet", index=False)
    # ---- end of the validation protocol outputs
    step("report and figures")
    bands.write(errors, out / "error_bands.json")
    report.write(
        out,
        errors,
        ops,
        dists,
        aggregates(errors),
        summary,
        quick=quick,
        pricers=pricers,
        pricer_ops=pricer_ops,
        catalog=catalog,
        sensitivity=sensitivity,
    )
    (out / "summary.json").write_text(json.dumps(summary, indent=1, sort_keys=True, default=str) + "\n")
    return summary


def _regimes_and_inference_perf(
    tables: dict[str, pd.DataFrame],
    out: Path,
    quick: bool,
    catalog: str | Path | None,
    data: Any,
    step: Callable[[str], None],
) -> dict[str, Any]:
    """The profiled / unprofiled replays of the vLLM runs and the inference-perf runs out of configuration: their
    parquet files written, and ``rows`` (error rows), ``apart`` (cells not replayable) and ``summary`` keys."""
    step("profiled and unprofiled regimes")
    regimes = _profiled_regimes(tables, catalog, data)
    res: dict[str, Any] = {"rows": [], "apart": [], "summary": {}}
    if len(regimes):
        regimes.to_parquet(out / "profiled_regimes.parquet", index=False)
        res["summary"]["profiled_regimes"] = _records(regimes.drop(columns=["note"], errors="ignore"))
    step("inference-perf runs out of configuration")
    ip_out = _inference_perf(tables, out, quick)
    if ip_out is not None:
        res["rows"].append(ip_out["rows"])
        res["apart"] += ip_out["apart"]
        res["summary"]["inference_perf"] = ip_out["summary"]
    return res


def _profiled_regimes(tables: dict[str, pd.DataFrame], catalog: str | Path | None, data: Any) -> pd.DataFrame:
    """Every ``vllm-run`` cell priced from its deployment profile and as an unprofiled GPU (DESIGN §5)."""
    from validation.e2e_vllm import vllm_run_regimes

    cells = tables["cells"]
    runs = cells[cells["source"] == "vllm-run"]
    frames = []
    for _, cell in runs.iterrows():
        try:
            frames.append(vllm_run_regimes(cell, tables, catalog, data))
        except ValueError as exc:  # a deployment the simulator does not model: listed by run_all already
            frames.append(pd.DataFrame([{"cell_id": cell["cell_id"], "pricer": "-", "note": str(exc)}]))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _inference_perf(tables: dict[str, pd.DataFrame], out: Path, quick: bool) -> dict[str, Any] | None:
    """The inference-perf cells (:mod:`validation.e2e_peers`): out-of-configuration rows for the headline (stage
    cells), the peer comparison and targets for the summary, the runs apart; None when the sources have none."""
    from validation import e2e_peers

    cells = tables["cells"]
    if not (cells["source"] == "inference-perf").any():
        return None
    ooc, ins, apart = e2e_peers.replay(tables, in_sample=not quick)
    keep = ["source", "cell_id", "gpu", "model", "dtype", "tp", "metric", "measured", "simulated", "role", "note"]
    rows = ooc[ooc["stage_cell"]][keep].copy() if len(ooc) else pd.DataFrame(columns=keep)
    for col in ("num_tokens", "batch_size", "context_tokens", "bytes"):
        rows[col] = None
    peers = e2e_peers.peer_table(ooc, ins, tables.get("peers", pd.DataFrame()))
    for name, df in (
        ("inference_perf_out_of_config", ooc),
        ("inference_perf_in_sample", ins),
        ("inference_perf_peers", peers),
    ):
        if len(df):
            df.to_parquet(out / f"{name}.parquet", index=False)
    summary = {
        "targets": _records(e2e_peers.targets(ooc, ins, peers)),
        "per_configuration": _records(e2e_peers.per_configuration(ooc, ins, peers)),
        "peers_summary": _records(e2e_peers.summary_rows(peers)),
        "apart": [{"cell_id": c, "reason": r} for c, r in apart],
        "runs": int(ooc["cell_id"].str.rsplit("/", n=1).str[0].nunique()) if len(ooc) else 0,
        "in_sample": not quick,
    }
    return {"rows": rows, "apart": apart, "summary": summary}


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: floats rounded, NaN as None."""
    return [
        {
            k: (None if isinstance(v, float) and not np.isfinite(v) else round(v, 3) if isinstance(v, float) else v)
            for k, v in r.items()
        }
        for r in df.to_dict("records")
    ]


def table_limits(
    data: K.ComponentData, pricers: pd.DataFrame, pricer_ops: pd.DataFrame, catalog: str | Path | None = None
) -> dict[str, Any]:
    """What limits the table pricer on held-out points (:mod:`validation.diagnostics`): the 4-GPU all-reduce
    against ring-structure predictions from the 2- and 8-GPU curves and floors fitted to the 4-GPU points
    themselves; the decode attention's linear-in-context form fitted to every point of each batch size; decode
    profile rows faster than the DRAM stream."""
    priced = pricers[(pricers["pricer"] == "refined") & (pricers["metric"] == "all_reduce_s")]
    ar, shape = diagnostics.allreduce_limits(data.allreduce, priced)
    dec = diagnostics.decode_linear_floor(data.full, pricer_ops[pricer_ops["pricer"] == "table"])
    att = data.full[data.full["group"].str.startswith("attention")]
    fallback, peak = {}, {}  # the refined roofline of each attention cell: the tables' fallback
    for g, cells in att.groupby("gpu")["cell_id"].unique().items():
        gpu = load_gpu(str(g), catalog)
        eff, ref = load_refinement(gpu, refinement_path(catalog))
        peak[str(g)] = gpu.mem_bandwidth_gbps * 1e9
        fallback.update({c: CP.roofline(gpu, data.specs[c], data.tps[c], eff, ref) for c in cells})  # type: ignore
    beyond = diagnostics.decode_beyond_dram(data.full, {c: dram_key_s(fb) for c, fb in fallback.items()}, peak)
    rules = diagnostics.grid_rule_cv(data.full, {c: partial(TablePerfModel._pf_ref, fb) for c, fb in fallback.items()})
    return {
        "allreduce": _records(ar),
        "allreduce_shape": _records(shape),
        "decode_linear": _records(dec),
        "decode_beyond_dram": _records(beyond),
        "grid_rules": _records(rules),
    }


def prefill_forms(data: K.ComponentData, catalog: str | Path | None = None) -> pd.DataFrame:
    """Prefill attention of the refined roofline in its two forms, each fitted on the calibration split alone
    (:func:`validation.calibrate.fit_refined`): the FLOP form and the FlashAttention-2 tile form
    (:mod:`agentreplay.perf.tiles`), judged on the prefill-attention points the fit uses (serving-engine kernels,
    not :data:`validation.calibrate.FIT_EXCLUDE`) of every GPU fitted in the tile form.
    The tile form's fit is the shipped one (catalog/roofline.toml); the FLOP form is refitted here."""
    rows = []
    for g in sorted(set(data.ops["gpu"]) & set(list_gpus(catalog))):
        gpu = load_gpu(g, catalog)
        pf = data.ops[
            (data.ops["gpu"] == g) & (data.ops["group"] == "attention_prefill") & (data.ops["probe"] != "tokens")
        ]
        pf = pf[K.fittable(pf)]
        if not K.tile_form(gpu) or not (pf["role"] == "calibration").any():
            continue
        flop = K.fit_refined(data, gpu, tiles=False)
        forms = (("FLOP", flop.efficiency, flop.refinement), ("tile", *load_refinement(gpu, refinement_path(catalog))))
        for form, eff, ref in forms:
            err = CP.predict_ops(pf, gpu, data.specs, data.tps, eff, ref) / pf["measured_s"].to_numpy() - 1  # type: ignore
            row: dict[str, Any] = {"gpu": g, "form": form}
            for r in ("calibration", "validation"):
                sel = (pf["role"] == r).to_numpy()
                row[f"{r[:3]}. n"], row[f"{r[:3]}. MAPE %"] = int(sel.sum()), K.mape(err[sel])
            params = ("attn_prefill_tile_efficiency",) if form == "tile" else K.FLOP_PREFILL_PARAMS
            values = {p: getattr(ref if p in REFINEMENT_FIELDS else eff, p) for p in (*params, "attn_kernel_us")}
            row["parameters"] = ", ".join(f"{p} {round(v, 4):.3g}" for p, v in values.items() if v is not None)
            rows.append(row)
    return pd.DataFrame(rows)
