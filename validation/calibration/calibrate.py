"""Fit the performance model's per-GPU efficiencies to measured component profiles (``agentreplay calibrate``).

What is fitted, per GPU with profiles (bounded least squares on log time, ``scipy.optimize.least_squares``):
``compute_efficiency``, ``bandwidth_efficiency``, ``kernel_overhead_us`` (operator profiles),
``attn_prefill_efficiency`` / ``attn_decode_efficiency`` (only where attention was profiled in that phase) and
``allreduce_efficiency`` / ``allreduce_latency_us`` (only where a single-node all-reduce was profiled). Every
other parameter keeps its catalog value (``framework_overhead_ms`` / ``per_seq_overhead_us`` are engine costs
that isolated kernel profiles cannot see). No fp8 profile exists, so there is no per-dtype fit: fp8 runs use the
same efficiencies at the fp8 peak. One parameter set per GPU, no per-cell knobs.

The split (:data:`SPLIT`, :func:`role`: whole cells, declared in :mod:`validation.protocol.rules`) keeps calibration
and validation cells apart; only rows of ``calibration`` cells enter the fit. GPUs without profiles take the
kernel-level efficiencies of :data:`NEAREST` (marked
``calibrated_from`` in the catalog comments and in ``calibration.json``).

The job's parts, one module each: :mod:`validation.calibration.settings` (what is fitted and how),
:mod:`validation.calibration.data` (the points and their roles), :mod:`validation.calibration.fit` (the plain roofline),
:mod:`validation.calibration.refined` (the refined roofline), :mod:`validation.calibration.tables` (the shipped
tables) and :mod:`validation.calibration.write` (the files). This module runs them (:func:`run`) and re-exports their
names, so ``validation.calibration.calibrate.X`` is the one address of each.
"""

from __future__ import annotations

import json

from validation.calibration.data import (
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
from validation.calibration.fit import (
    GpuFit,
    borrowable,
    calibrate,
    fit_gpu,
    layer_share,
)
from validation.calibration.refined import (
    RefinedFit,
    calibrate_refined,
    fit_refined,
)
from validation.calibration.settings import (
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
from validation.calibration.tables import (
    DEPLOYMENT_PROFILE_SOURCES,
    TABLE_SOURCES,
    shipped_allreduce,
    shipped_origins,
    shipped_tables,
)
from validation.calibration.write import (
    gpus_toml,
    summary_json,
    with_efficiency,
    write_gpus,
    write_refinements,
    write_tables,
)
from validation.catalog import PACKAGED, Catalog
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
    "gpus_toml",
    "layer_share",
    "mape",
    "mape_table",
    "op_errors",
    "predict",
    "role",
    "run",
    "shipped_allreduce",
    "shipped_origins",
    "shipped_tables",
    "summary_json",
    "tile_form",
    "with_efficiency",
    "write_gpus",
    "write_refinements",
    "write_tables",
]


def run(measured: Measured, out: Catalog | None = None) -> dict:
    """Calibrate from the packaged catalog and write ``out`` (default: the packaged catalog, rewritten in place):
    ``gpus.toml`` (the fitted efficiencies), ``roofline.toml`` (the refined roofline, fitted from that
    ``gpus.toml``), ``tables.toml`` (measured tables) and ``calibration.json``; return the summary (also what
    ``agentreplay calibrate`` prints)."""
    dst = out if out is not None else PACKAGED
    fits, data = calibrate(measured, PACKAGED)
    ops = op_errors(data, {g: f.efficiency for g, f in fits.items()})
    write_gpus(fits, PACKAGED, dst)
    refined = calibrate_refined(data, dst)
    write_refinements(refined, dst)
    tables = shipped_tables(data)
    allreduce = shipped_allreduce(data)
    write_tables(tables, dst, allreduce, shipped_origins(data, tables))
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
    dst.write("calibration.json", json.dumps(summary, indent=1, sort_keys=True) + "\n")
    summary["_ops"] = ops
    return summary
