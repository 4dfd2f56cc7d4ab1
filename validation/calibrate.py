"""Fit the performance model's per-GPU efficiencies to measured component profiles (``agentreplay calibrate``).

What is fitted, per GPU with profiles (bounded least squares on log time, ``scipy.optimize.least_squares``):
``compute_efficiency``, ``bandwidth_efficiency``, ``kernel_overhead_us`` (operator profiles),
``attn_prefill_efficiency`` / ``attn_decode_efficiency`` (only where attention was profiled in that phase) and
``allreduce_efficiency`` / ``allreduce_latency_us`` (only where a single-node all-reduce was profiled). Every
other parameter keeps its catalog value (``framework_overhead_ms`` / ``per_seq_overhead_us`` are engine costs
that isolated kernel profiles cannot see). No fp8 profile exists, so there is no per-dtype fit: fp8 runs use the
same efficiencies at the fp8 peak. One parameter set per GPU, no per-cell knobs.

The split (:data:`SPLIT`, :func:`role`: whole cells, declared in :mod:`validation.protocol`) keeps calibration
and validation cells apart; only rows of ``calibration`` cells enter the fit. GPUs without profiles take the
kernel-level efficiencies of :data:`NEAREST` (marked
``calibrated_from`` in the catalog comments and in ``calibration.json``).

The job's parts, one module each: :mod:`validation.calibrate_settings` (what is fitted and how),
:mod:`validation.calibrate_data` (the points and their roles), :mod:`validation.calibrate_fit` (the plain roofline),
:mod:`validation.calibrate_refined` (the refined roofline), :mod:`validation.calibrate_tables` (the shipped
tables) and :mod:`validation.calibrate_write` (the files). This module runs them (:func:`run`) and re-exports their
names, so ``validation.calibrate.X`` is the one address of each.
"""

from __future__ import annotations

import json
from pathlib import Path

from validation.calibrate_data import (
    SPLIT,
    ComponentData,
    component_data,
    fit_rows,
    fittable,
    mape,
    mape_table,
    op_errors,
    predict,
    role,
)
from validation.calibrate_fit import (
    GpuFit,
    borrowable,
    calibrate,
    fit_gpu,
    layer_share,
)
from validation.calibrate_refined import (
    RefinedFit,
    calibrate_refined,
    fit_refined,
)
from validation.calibrate_settings import (
    ATTENTION_GROUPS,
    BOUNDS,
    ELEMENTWISE_GROUPS,
    FIT_EXCLUDE,
    FIT_PARAMS,
    FLOP_PREFILL_PARAMS,
    GEMM_GROUPS,
    KERNEL_PARAMS,
    NEAREST,
    REFINED_BOUNDS,
    REFINED_KERNEL_PARAMS,
    REFINED_STAGES,
    REFINED_START,
    ROBUST_SCALE,
    SHARE_FLOOR,
    STAGES,
    START,
    TILE_ARCHITECTURES,
    tile_form,
)
from validation.calibrate_tables import (
    DEPLOYMENT_PROFILE_SOURCES,
    TABLE_SOURCES,
    shipped_allreduce,
    shipped_origins,
    shipped_tables,
)
from validation.calibrate_write import (
    packaged_catalog,
    summary_json,
    write_catalog,
    write_refinements,
    write_tables,
)
from validation.measured import Measured

__all__ = [
    "ATTENTION_GROUPS",
    "BOUNDS",
    "DEPLOYMENT_PROFILE_SOURCES",
    "ELEMENTWISE_GROUPS",
    "FIT_EXCLUDE",
    "FIT_PARAMS",
    "FLOP_PREFILL_PARAMS",
    "GEMM_GROUPS",
    "KERNEL_PARAMS",
    "NEAREST",
    "REFINED_BOUNDS",
    "REFINED_KERNEL_PARAMS",
    "REFINED_STAGES",
    "REFINED_START",
    "ROBUST_SCALE",
    "SHARE_FLOOR",
    "SPLIT",
    "STAGES",
    "START",
    "TABLE_SOURCES",
    "TILE_ARCHITECTURES",
    "ComponentData",
    "GpuFit",
    "RefinedFit",
    "borrowable",
    "calibrate",
    "calibrate_refined",
    "component_data",
    "fit_gpu",
    "fit_refined",
    "fit_rows",
    "fittable",
    "layer_share",
    "mape",
    "mape_table",
    "op_errors",
    "packaged_catalog",
    "predict",
    "role",
    "run",
    "shipped_allreduce",
    "shipped_origins",
    "shipped_tables",
    "summary_json",
    "tile_form",
    "write_catalog",
    "write_refinements",
    "write_tables",
]


def run(measured: Measured, out: str | Path | None = None) -> dict:
    """Calibrate, write the catalog (``out`` or the packaged gpus.toml) and, beside it, ``roofline.toml`` (the
    refined roofline), ``tables.toml`` (measured tables) and ``calibration.json``; return the summary (also what
    ``agentreplay calibrate`` prints)."""
    src = packaged_catalog()
    dst = Path(out) if out else src
    fits, data = calibrate(measured)
    ops = op_errors(data, {g: f.efficiency for g, f in fits.items()})
    write_catalog(fits, src, dst)
    refined = calibrate_refined(data)
    write_refinements(refined, dst.parent / "roofline.toml")
    tables = shipped_tables(data)
    allreduce = shipped_allreduce(data)
    write_tables(tables, dst.parent / "tables.toml", allreduce, shipped_origins(data, tables))
    summary = summary_json(fits, ops, data, measured)
    summary["refined"] = {
        "stages": {name: list(params) for name, _, params in REFINED_STAGES},
        "bounds": {k: list(v) for k, v in REFINED_BOUNDS.items() if k not in BOUNDS},
        "start": REFINED_START,
        "gpus": {
            g: {
                "fitted": {p: round(f.value(p), 6) for p in f.fitted},
                "calibrated_from": f.calibrated_from,
                "points": f.n_points,
            }
            for g, f in sorted(refined.items())
        },
    }
    summary["tables"] = sorted(tables)
    summary["allreduce_tables"] = sorted(allreduce)
    (dst.parent / "calibration.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    summary["_ops"] = ops
    return summary
