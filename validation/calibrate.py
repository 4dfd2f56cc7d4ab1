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
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from agentreplay.perf import Efficiency, GpuSpec, list_gpus, list_models, load_gpu
from agentreplay.perf.table import (
    REFINEMENT_FIELDS,
    AllReduceTable,
    MeasuredTable,
    Refinement,
    allreduce_key,
    table_key,
)
from validation import components as C
from validation import protocol as P
from validation.measured import Measured

SPLIT: Final = P.SPLIT  #: the whole-cell split, declared in validation/protocol.py
FIT_PARAMS: Final = ("compute_efficiency", "bandwidth_efficiency", "kernel_overhead_us", "attn_prefill_efficiency",
                     "attn_prefill_tile_efficiency", "attn_decode_efficiency", "allreduce_efficiency",
                     "allreduce_latency_us")
BOUNDS: Final = {"compute_efficiency": (0.2, 1.0), "bandwidth_efficiency": (0.3, 1.0),
                 "kernel_overhead_us": (0.0, 50.0), "attn_prefill_efficiency": (0.05, 1.0),
                 "attn_decode_efficiency": (0.05, 1.0), "allreduce_efficiency": (0.05, 1.0),
                 "attn_prefill_tile_efficiency": (0.05, 1.0),
                 "allreduce_latency_us": (0.0, 200.0)}
KERNEL_PARAMS: Final = FIT_PARAMS[:6]  #: what a GPU without profiles borrows from its nearest profiled GPU
NEAREST: Final = {"h200": "h100-sxm", "b200": "h100-sxm", "a100-40gb": "a100-80gb", "l40s": "rtx4090"}
#: Compared but not fitted: HF-eager elementwise modules run as several unfused kernels each (RMSNorm: casts,
#: pow, mean, rsqrt, two muls; rotary: slices, neg, cat, muls, adds), unlike the fused kernels of the serving
#: engines the model prices; fitting them would inflate kernel_overhead_us for every GEMM.
#: The same holds for HF's module attention (not the paged FlashAttention kernels of serving engines: its fit gave
#: H100 13% of the bf16 peak where vLLM's kernels reach 30-50%).
FIT_EXCLUDE: Final = frozenset(("llmservingsim-v0", g) for g in ("layernorm", "rotary_emb", "act_fn", "embedding",
                                                                   "final_layernorm", "attention_prefill"))
#: Architectures whose vLLM prefill attention is FlashAttention-2, the kernel agentreplay.perf.tiles describes:
#: vLLM's FlashAttention backend runs FA3 only on compute capability 9.0 (Hopper), whose tiles and persistent
#: scheduler differ (vllm/attention/utils/fa_utils.py get_flash_attn_version).
TILE_ARCHITECTURES: Final = frozenset(("ampere", "ada", "blackwell"))


def tile_form(gpu: GpuSpec) -> bool:
    """True when ``gpu``'s prefill attention is fitted in the FlashAttention-2 tile form (needs its SM count)."""
    return gpu.architecture in TILE_ARCHITECTURES and gpu.sm_count > 0 and gpu.smem_per_sm_kib > 0


SHARE_FLOOR: Final = 0.01  #: smallest weight share of an operator in the fit
ROBUST_SCALE: Final = 0.1  #: soft-L1 loss scale on log-time residuals (10%): HF eager elementwise outliers
#: Fixed starting point (typical published values; the fit also starts from the middle of the box), so a re-run
#: does not depend on what a previous calibration wrote.
START: Final = {"compute_efficiency": 0.7, "bandwidth_efficiency": 0.85, "kernel_overhead_us": 2.0,
                "attn_prefill_efficiency": 0.45, "attn_decode_efficiency": 0.7, "allreduce_efficiency": 0.75,
                "allreduce_latency_us": 10.0, "attn_prefill_tile_efficiency": 0.6}


def role(cell_id: str, tp: int) -> str:
    """``calibration`` or ``validation`` of a whole component cell (:func:`validation.protocol.cell_role`)."""
    return P.cell_role(cell_id, tp)


@dataclass(slots=True)
class ComponentData:
    """Every component point with its role and model context, for one set of measured cells."""

    ops: pd.DataFrame  #: op_points rows + gpu, tp, role
    iterations: pd.DataFrame  #: Splitwise rows + gpu, tp, role
    allreduce: pd.DataFrame  #: all-reduce rows + gpu, role
    specs: dict[str, object]  #: cell_id -> ModelSpec (one-layer for ops, full for iterations)
    tps: dict[str, int]
    cells: pd.DataFrame
    skipped: list[tuple[str, str]] = field(default_factory=list)
    full: pd.DataFrame = field(default_factory=pd.DataFrame)  #: op rows without subsampling (+ gpu, tp)
    allreduce_full: pd.DataFrame = field(default_factory=pd.DataFrame)  #: all-reduce rows at TABLE_POINTS sizes


def component_data(measured: Measured) -> ComponentData:
    cells = measured.table("cells")
    cells = cells[cells["kind"] == "component"].reset_index(drop=True)
    comp = measured.table("component")
    ops, skipped = C.op_points(cells, comp)
    info = cells.set_index("cell_id")
    ops["gpu"] = ops["cell_id"].map(info["gpu"])
    ops["tp"] = ops["cell_id"].map(info["tp"]).astype(int)
    ops["role"] = [role(c, t) for c, t in zip(ops["cell_id"], ops["tp"], strict=True)]
    specs: dict[str, object] = {}
    for cid in ops["cell_id"].unique():
        specs[cid] = C.one_layer(C.model_spec(info.loc[cid])[0])
    sw = [cid for cid in cells["cell_id"] if C.source_of(cid) == "splitwise"]
    usable = []
    for cid in sw:
        spec, why = C.model_spec(info.loc[cid])
        gpu = info.loc[cid, "gpu"]
        if gpu is None or (isinstance(gpu, float) and np.isnan(gpu)):
            skipped.append((cid, f"GPU {info.loc[cid, 'gpu_raw']!r} is not a catalog operating point"))
        elif spec is None:
            skipped.append((cid, why))
        else:
            specs[cid] = spec
            usable.append(cid)
    it = C.iteration_points(comp, usable)
    it["gpu"] = it["cell_id"].map(info["gpu"])
    it["tp"] = it["cell_id"].map(info["tp"]).astype(int)
    bad, why = C.below_floor(it, specs, {g: load_gpu(g) for g in it["gpu"].unique()})  # type: ignore[arg-type]
    it = it[~bad].reset_index(drop=True)
    skipped += why
    it["role"] = [role(c, t) for c, t in zip(it["cell_id"], it["tp"], strict=True)]
    ar = C.allreduce_points(cells, comp)
    ar["gpu"] = ar["cell_id"].map(info["gpu"])
    ar["role"] = [role(c, t) for c, t in zip(ar["cell_id"], ar["tp"], strict=True)]
    tps = {cid: int(info.loc[cid, "tp"]) for cid in specs}
    full, _ = C.op_points(cells, comp, max_points=C.TABLE_POINTS, max_attention=1 << 30)
    full["gpu"] = full["cell_id"].map(info["gpu"])
    full["tp"] = full["cell_id"].map(info["tp"]).astype(int)
    ar_full = C.allreduce_points(cells, comp, max_points=C.TABLE_POINTS)
    ar_full["gpu"] = ar_full["cell_id"].map(info["gpu"])
    return ComponentData(ops, it, ar, specs, tps, cells, skipped, full, ar_full)


def predict(data: ComponentData, gpu: GpuSpec, eff: Efficiency) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Model seconds for the op, iteration and all-reduce rows of ``gpu``."""
    o = data.ops[data.ops["gpu"] == gpu.name].reset_index(drop=True)
    i = data.iterations[data.iterations["gpu"] == gpu.name].reset_index(drop=True)
    a = data.allreduce[data.allreduce["gpu"] == gpu.name].reset_index(drop=True)
    return (C.predict_ops(o, gpu, data.specs, data.tps, eff),  # type: ignore[arg-type]
            C.predict_iterations(i, gpu, data.specs, data.tps, eff),  # type: ignore[arg-type]
            C.predict_allreduce(a, gpu, eff))


@dataclass(slots=True)
class GpuFit:
    gpu: str
    efficiency: Efficiency
    fitted: tuple[str, ...]  #: parameters fitted (the rest kept their catalog value)
    prior: Efficiency
    n_points: int
    cost: float
    calibrated_from: str | None = None
    fit_ids: tuple[str, ...] = ()  #: point_id of every row that entered the fit


def layer_share(o: pd.DataFrame) -> np.ndarray:
    """Each op row's share of the measured decoder-layer time at its (cell, num_tokens), in [SHARE_FLOOR, 1];
    1 for attention rows and where no whole layer was measured. Weights the fit towards what dominates a layer
    (GEMMs) rather than towards microsecond elementwise kernels."""
    layer = (o[o["per_layer"] & (o["probe"] == "tokens")].assign(t=lambda d: d["measured_s"] * d["mult"])
             .groupby(["cell_id", "num_tokens"])["t"].sum())
    key = pd.MultiIndex.from_arrays([o["cell_id"], o["num_tokens"]])
    tot = layer.reindex(key).to_numpy()
    share = np.where(np.isnan(tot) | o["group"].str.startswith("attention").to_numpy(), 1.0,
                     o["measured_s"].to_numpy() / np.where(np.isnan(tot), 1.0, tot))
    return np.clip(share, SHARE_FLOOR, 1.0)


#: Fit stages: each family of operators fits its own parameters, earlier stages' values held fixed, so that e.g.
#: the fixed cost of attention kernels does not leak into the per-kernel overhead of every GEMM.
STAGES: Final = (
    ("dense", ("compute_efficiency", "bandwidth_efficiency", "kernel_overhead_us")),
    ("attention", ("attn_prefill_efficiency", "attn_prefill_tile_efficiency", "attn_decode_efficiency")),
    ("allreduce", ("allreduce_efficiency", "allreduce_latency_us")),
)


def fittable(ops: pd.DataFrame) -> np.ndarray:
    """True for the op rows of a kind the fit uses (not :data:`FIT_EXCLUDE`), whatever their role."""
    return np.array([(C.source_of(c), g) not in FIT_EXCLUDE for c, g in zip(ops["cell_id"], ops["group"],
                                                                           strict=True)], dtype=bool)


def borrowable(params: tuple[str, ...], fitted: tuple[str, ...], target: GpuSpec) -> tuple[str, ...]:
    """The ``params`` fitted on a :data:`NEAREST` source that ``target`` takes: all of them, except the tile
    efficiency of prefill attention where ``target`` does not run FlashAttention-2 (:func:`tile_form`)."""
    return tuple(p for p in params if p in fitted and (p != "attn_prefill_tile_efficiency" or tile_form(target)))


def fit_rows(data: ComponentData, gpu: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The calibration rows of ``gpu`` that enter the fit (op rows without :data:`FIT_EXCLUDE`, all-reduce)."""
    o = data.ops[(data.ops["gpu"] == gpu) & (data.ops["role"] == "calibration")]
    o = o[fittable(o)]
    a = data.allreduce[(data.allreduce["gpu"] == gpu) & (data.allreduce["role"] == "calibration")]
    return o.reset_index(drop=True), a.reset_index(drop=True)


def _stage(o: pd.DataFrame, a: pd.DataFrame, gpu: GpuSpec, data: ComponentData, base: Efficiency,
           params: list[str], time_weighted: bool = False) -> tuple[Efficiency, float]:
    """Bounded soft-L1 least squares of log(model) - log(measured) over ``params``. Weights: each curve (cell x
    operator group) counts about equally; within it, points by sqrt(share of the layer time / points in the
    curve), or with ``time_weighted`` by sqrt(time / the curve's total time), i.e. squared relative error
    weighted by time (attention: a 10 us point weighs what it costs in an iteration, not what a 10 ms one does)."""
    curve = pd.concat([o["cell_id"] + "|" + o["group"], a["cell_id"] + "|ar"], ignore_index=True)
    if time_weighted:
        t = pd.Series(np.concatenate([o["measured_s"].to_numpy(dtype=float),
                                      a["measured_s"].to_numpy(dtype=float)]))
        w = np.sqrt((t / t.groupby(curve).transform("sum")).to_numpy())
    else:
        share = np.concatenate([layer_share(o), np.ones(len(a))])
        w = np.sqrt(share / curve.map(curve.value_counts()).to_numpy(dtype=float))
    meas = np.log(np.concatenate([o["measured_s"].to_numpy(dtype=float),
                                  a["measured_s"].to_numpy(dtype=float)]))

    def eff_of(x: np.ndarray) -> Efficiency:
        return dataclasses.replace(base, **{p: float(v) for p, v in zip(params, x, strict=True)})

    def resid(x: np.ndarray) -> np.ndarray:
        e = eff_of(x)
        pred = np.concatenate([C.predict_ops(o, gpu, data.specs, data.tps, e),  # type: ignore[arg-type]
                               C.predict_allreduce(a, gpu, e)])
        return w * (np.log(np.maximum(pred, 1e-12)) - meas)

    x, cost = _fit(resid, params, BOUNDS, START)
    return eff_of(x), cost


def _fit(resid: Callable[[np.ndarray], np.ndarray], params: list[str], bounds: dict[str, tuple[float, float]],
         start: dict[str, float]) -> tuple[np.ndarray, float]:
    """Bounded soft-L1 least squares of ``resid`` over ``params``, from the catalog start and from the middle of
    the bounds; the better of the two ``(x, cost)``."""
    lo = np.array([bounds[p][0] for p in params])
    hi = np.array([bounds[p][1] for p in params])
    best = None
    for x0 in (np.clip([start[p] for p in params], lo + 1e-6, hi - 1e-6), (lo + hi) / 2):
        r = least_squares(resid, x0, bounds=(lo, hi), loss="soft_l1", f_scale=ROBUST_SCALE, x_scale="jac",
                          diff_step=1e-4, max_nfev=400)
        if best is None or r.cost < best.cost:
            best = r
    assert best is not None
    return best.x, float(best.cost)


def fit_gpu(data: ComponentData, gpu: GpuSpec, prior: Efficiency | None = None) -> GpuFit:
    """Fit ``gpu``'s efficiencies on its calibration rows, stage by stage (:data:`STAGES`); a parameter without
    data in its stage keeps the catalog value. Prefill attention: the tile form where :func:`tile_form` says so
    (``attn_prefill_tile_efficiency``), else the FLOP form (``attn_prefill_efficiency``)."""
    tiles = tile_form(gpu)
    prior = prior or gpu.efficiency
    if not tiles:
        prior = dataclasses.replace(prior, attn_prefill_tile_efficiency=0.0)
    o, a = fit_rows(data, gpu.name)
    is_att = o["group"].str.startswith("attention")
    rows = {"dense": (o[~is_att].reset_index(drop=True), a.iloc[:0]),
            "attention": (o[is_att].reset_index(drop=True), a.iloc[:0]), "allreduce": (o.iloc[:0], a)}
    eff, fitted, cost = prior, [], 0.0
    for stage, params in STAGES:
        so, sa = rows[stage]
        groups = set(so["group"])
        active = [p for p in params if (stage != "attention" and len(so) + len(sa))
                  or (f"attention_{p.split('_')[1]}" in groups
                      and p != ("attn_prefill_efficiency" if tiles else "attn_prefill_tile_efficiency"))]
        if not active:
            continue
        eff, c = _stage(so, sa, gpu, data, eff, active, time_weighted=stage == "attention")
        fitted += active
        cost += c
    if not fitted:
        raise ValueError(f"{gpu.name}: no calibration points")
    ids = tuple(o["point_id"]) + tuple(a["point_id"])
    return GpuFit(gpu.name, eff, tuple(fitted), prior, len(ids), cost, fit_ids=ids)


# ---------------------------------------------------------------------------------------------- refined roofline
GEMM_GROUPS: Final = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
ELEMENTWISE_GROUPS: Final = ("embedding", "layernorm", "rotary_emb", "act_fn", "final_layernorm", "sampler")
ATTENTION_GROUPS: Final = ("attention_prefill", "attention_decode")
#: The refined roofline (agentreplay.perf.table.RefinedPerfModel) is fitted stage by stage, each operator family
#: on its own rows and parameters, earlier stages held fixed; every point weighs its relative error (log
#: residual), each curve (cell x operator group) counting equally.
REFINED_STAGES: Final = (
    ("gemm", GEMM_GROUPS, ("compute_efficiency", "bandwidth_efficiency", "kernel_overhead_us",
                           "gemm_m_half_tokens")),
    ("elementwise", ELEMENTWISE_GROUPS, ("elementwise_kernel_us", "elementwise_bandwidth_efficiency")),
    ("attention", ATTENTION_GROUPS, ("attn_prefill_efficiency", "attn_prefill_m_half_tokens",
                                     "attn_prefill_kv_efficiency", "attn_prefill_tile_efficiency",
                                     "attn_decode_efficiency", "attn_kernel_us", "attn_decode_seq_us",
                                     "attn_decode_fixed_us")),
    ("allreduce", (), ("allreduce_efficiency", "allreduce_latency_us")),
)
REFINED_BOUNDS: Final = {**BOUNDS, "gemm_m_half_tokens": (0.0, 4096.0), "elementwise_kernel_us": (0.0, 50.0),
                         "elementwise_bandwidth_efficiency": (0.1, 4.0), "attn_kernel_us": (0.0, 100.0),
                         "attn_prefill_kv_efficiency": (0.02, 1.0), "attn_decode_seq_us": (0.0, 10.0),
                         "attn_prefill_m_half_tokens": (0.0, 4096.0), "attn_prefill_tile_efficiency": (0.05, 1.0),
                         "attn_decode_fixed_us": (0.0, 50.0)}
REFINED_START: Final = {**START, "gemm_m_half_tokens": 64.0, "elementwise_kernel_us": 2.0,
                        "elementwise_bandwidth_efficiency": 1.0, "attn_kernel_us": 5.0,
                        "attn_prefill_kv_efficiency": 0.3, "attn_decode_seq_us": 0.1,
                        "attn_prefill_m_half_tokens": 0.0, "attn_prefill_tile_efficiency": 0.6,
                        "attn_decode_fixed_us": 0.0}
REFINED_KERNEL_PARAMS: Final = tuple(p for _, _, ps in REFINED_STAGES[:3] for p in ps)  #: what NEAREST borrows
#: Prefill attention in the tile form (agentreplay.perf.tiles) replaces these FLOP-form parameters.
FLOP_PREFILL_PARAMS: Final = ("attn_prefill_efficiency", "attn_prefill_m_half_tokens", "attn_prefill_kv_efficiency")


@dataclass(slots=True)
class RefinedFit:
    gpu: str
    efficiency: Efficiency
    refinement: Refinement
    fitted: tuple[str, ...]
    n_points: int
    cost: float
    calibrated_from: str | None = None

    def value(self, p: str) -> float:
        return float(getattr(self.refinement if p in REFINEMENT_FIELDS else self.efficiency, p))


def _apply(eff: Efficiency, ref: Refinement, params: list[str], x: np.ndarray) -> tuple[Efficiency, Refinement]:
    e = {p: float(v) for p, v in zip(params, x, strict=True) if p not in REFINEMENT_FIELDS}
    r = {p: float(v) for p, v in zip(params, x, strict=True) if p in REFINEMENT_FIELDS}
    return dataclasses.replace(eff, **e), dataclasses.replace(ref, **r)


def _refined_stage(o: pd.DataFrame, a: pd.DataFrame, gpu: GpuSpec, data: ComponentData, eff: Efficiency,
                   ref: Refinement, params: list[str]) -> tuple[Efficiency, Refinement, float]:
    curve = pd.concat([o["cell_id"] + "|" + o["group"], a["cell_id"] + "|ar"], ignore_index=True)
    w = 1.0 / np.sqrt(curve.map(curve.value_counts()).to_numpy(dtype=float))
    meas = np.log(np.concatenate([o["measured_s"].to_numpy(dtype=float), a["measured_s"].to_numpy(dtype=float)]))

    def resid(x: np.ndarray) -> np.ndarray:
        e, r = _apply(eff, ref, params, x)
        pred = np.concatenate([C.predict_ops(o, gpu, data.specs, data.tps, e, r),  # type: ignore[arg-type]
                               C.predict_allreduce(a, gpu, e, r)])
        return w * (np.log(np.maximum(pred, 1e-12)) - meas)

    x, cost = _fit(resid, params, REFINED_BOUNDS, REFINED_START)
    e, r = _apply(eff, ref, params, x)
    return e, r, cost


def fit_refined(data: ComponentData, gpu: GpuSpec, tiles: bool | None = None) -> RefinedFit:
    """Fit the refined roofline of ``gpu`` on its calibration rows (:data:`REFINED_STAGES`); parameters without
    rows in their stage keep the catalog value (Efficiency) or the plain-roofline default (Refinement). Prefill
    attention takes the tile form where :func:`tile_form` (or ``tiles``) says so, else the FLOP form."""
    tiles = tile_form(gpu) if tiles is None else tiles
    o, a = fit_rows(data, gpu.name)
    eff, ref = gpu.efficiency, Refinement()
    if not tiles:
        eff = dataclasses.replace(eff, attn_prefill_tile_efficiency=0.0)
    fitted: list[str] = []
    cost = 0.0
    for stage, groups, params in REFINED_STAGES:
        so = o[o["group"].isin(groups)].reset_index(drop=True)
        sa = a if stage == "allreduce" else a.iloc[:0]
        active = list(params) if len(so) + len(sa) else []
        if stage == "attention":
            pf, dec = so[so["group"] == "attention_prefill"], so[so["group"] == "attention_decode"]
            active = [p for p in params if (p == "attn_kernel_us" and len(so))
                      or (p in ("attn_prefill_efficiency", "attn_prefill_m_half_tokens") and len(pf) and not tiles)
                      or (p == "attn_prefill_kv_efficiency" and (pf["context_tokens"] > 0).any() and not tiles)
                      or (p == "attn_prefill_tile_efficiency" and len(pf) and tiles)
                      or (p in ("attn_decode_efficiency", "attn_decode_seq_us") and len(dec))
                      or (p == "attn_decode_fixed_us" and len(dec) and len(pf))]
        if not active:
            continue
        eff, ref, c = _refined_stage(so, sa, gpu, data, eff, ref, active)
        fitted += active
        cost += c
    if not fitted:
        raise ValueError(f"{gpu.name}: no calibration points")
    return RefinedFit(gpu.name, eff, ref, tuple(fitted), len(o) + len(a), cost)


def calibrate_refined(data: ComponentData, catalog: str | Path | None = None) -> dict[str, RefinedFit]:
    """:func:`fit_refined` for every catalog GPU with calibration points; :data:`NEAREST` borrowing for others."""
    known = set(list_gpus(catalog))
    have = sorted(set(data.ops.loc[data.ops["role"] == "calibration", "gpu"]) & known)
    fits = {g: fit_refined(data, load_gpu(g, catalog)) for g in have}
    for g, src in NEAREST.items():
        if g in known and g not in fits and src in fits:
            f, target = fits[src], load_gpu(g, catalog)
            borrowed = borrowable(REFINED_KERNEL_PARAMS, f.fitted, target)
            e = {p: f.value(p) for p in borrowed if p not in REFINEMENT_FIELDS}
            r = {p: f.value(p) for p in borrowed if p in REFINEMENT_FIELDS}
            fits[g] = RefinedFit(g, dataclasses.replace(target.efficiency, **e),
                                 dataclasses.replace(Refinement(), **r), borrowed, 0, 0.0, calibrated_from=src)
    return fits


def write_refinements(fits: dict[str, RefinedFit], dst: Path) -> None:
    """``roofline.toml``: the fitted parameters of each GPU (the rest: gpus.toml / plain-roofline defaults)."""
    lines = ["# Refined roofline (agentreplay.perf.table.RefinedPerfModel): written by `agentreplay calibrate`",
             "# (validation/calibrate.py REFINED_STAGES), fitted on the calibration split only (calibration.json).",
             "# Efficiency keys here override gpus.toml for the refined roofline only; the plain PerfModel keeps",
             "# gpus.toml. Units in the key names; see the agentreplay.perf.table docstring for each parameter.", ""]
    for g, f in sorted(fits.items()):
        lines.append(f'[gpu."{g}"]')
        lines.append(f'# calibrated_from = "{f.calibrated_from}"' if f.calibrated_from
                     else f"# fitted on {f.n_points} component points")
        lines += [f"{p} = {round(f.value(p), _FMT.get(p, 4))!r}" for p in f.fitted]
        lines.append("")
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(dst)


def calibrate(measured: Measured, catalog: str | Path | None = None) -> tuple[dict[str, GpuFit], ComponentData]:
    """Fit every catalog GPU that has calibration points; borrow for the others (:data:`NEAREST`)."""
    data = component_data(measured)
    known = set(list_gpus(catalog))
    have = sorted(set(data.ops.loc[data.ops["role"] == "calibration", "gpu"]) & known)
    fits = {g: fit_gpu(data, load_gpu(g, catalog)) for g in have}
    for g, src in NEAREST.items():
        if g in known and g not in fits and src in fits:
            target = load_gpu(g, catalog)
            prior = target.efficiency
            borrowed = borrowable(KERNEL_PARAMS, fits[src].fitted, target)
            eff = dataclasses.replace(prior, **{p: getattr(fits[src].efficiency, p) for p in borrowed})
            fits[g] = GpuFit(g, eff, borrowed, prior, 0, 0.0, calibrated_from=src)
    return fits, data


# ---------------------------------------------------------------------------------------------- error tables
def mape(err: pd.Series | np.ndarray) -> float:
    """Mean absolute relative error in % (NaN without points; NaN errors propagate)."""
    return float(np.mean(np.abs(err)) * 100) if len(err) else float("nan")


def op_errors(data: ComponentData, effs: dict[str, Efficiency]) -> pd.DataFrame:
    """Per-operator-group rows with the model's prediction under ``effs`` and the signed relative error."""
    parts = []
    for g in sorted(set(data.ops["gpu"]) & set(effs)):
        gpu = dataclasses.replace(load_gpu(g), efficiency=effs[g])
        o = data.ops[data.ops["gpu"] == g].reset_index(drop=True)
        parts.append(o.assign(predicted_s=C.predict_ops(o, gpu, data.specs, data.tps, effs[g])))  # type: ignore
    out = pd.concat(parts, ignore_index=True) if parts else data.ops.assign(predicted_s=np.nan)
    out["rel_error"] = out["predicted_s"] / out["measured_s"] - 1
    return out


def mape_table(ops: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) per GPU, operator group and role."""
    t = ops.groupby(["gpu", "group", "role"])["rel_error"].apply(mape).unstack("role")
    return t.reindex(columns=["calibration", "validation"])


# ---------------------------------------------------------------------------------------------- writing
_FMT = {"kernel_overhead_us": 3, "allreduce_latency_us": 3, "gemm_m_half_tokens": 1, "elementwise_kernel_us": 3,
        "attn_kernel_us": 3, "attn_decode_seq_us": 4, "attn_decode_fixed_us": 3, "attn_prefill_m_half_tokens": 1}


def _block(fit: GpuFit, old_lines: list[str]) -> list[str]:
    """The new ``[gpu."x".efficiency]`` table: fitted keys first, then the old lines for keys not fitted."""
    head = f'[gpu."{fit.gpu}".efficiency]'
    if fit.calibrated_from:
        note = (f'# calibrated_from = "{fit.calibrated_from}": no profile of this GPU; kernel-level efficiencies '
                f"of {fit.calibrated_from} (agentreplay calibrate)")
    else:
        note = (f"# calibrated by `agentreplay calibrate` on {fit.n_points} component points "
                "(split and fit errors: calibration.json)")
    lines = [head, note]
    # a GPU fitted in the tile form drops its FLOP-form prefill efficiency (the [defaults] value prices the
    # decode FLOP bound, which the KV bytes dominate)
    replaced = set(fit.fitted) | ({"attn_prefill_efficiency"} if "attn_prefill_tile_efficiency" in fit.fitted
                                  else set())
    for p in fit.fitted:
        v = getattr(fit.efficiency, p)
        lines.append(f"{p} = {round(v, _FMT.get(p, 4))!r}")
    dropping = False
    for ln in old_lines:
        if dropping and ln[:1].isspace() and ln.strip().startswith("#"):
            continue  # continuation comment of a dropped key
        key = ln.split("=", 1)[0].strip()
        dropping = ln.startswith("# calibrat") or key in replaced
        if not dropping:
            lines.append(ln)
    return lines


def write_catalog(fits: dict[str, GpuFit], src: Path, dst: Path) -> None:
    """Rewrite the efficiency tables of ``src`` (a gpus.toml) for the fitted GPUs into ``dst``; everything
    else (specs, comments, other GPUs) is kept byte for byte."""
    lines = src.read_text().splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        m = re.fullmatch(r'\[gpu\."([^"]+)"\.efficiency\]\s*', lines[i])
        if m and m.group(1) in fits:
            j = i + 1
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("["):
                j += 1
            out.extend(_block(fits[m.group(1)], lines[i + 1:j]))
            i = j
            continue
        m = re.fullmatch(r'\[gpu\."([^"]+)"\]\s*', lines[i])
        if m and m.group(1) in fits and f'[gpu."{m.group(1)}".efficiency]' not in lines:
            j = i + 1  # no efficiency table yet: add one after the GPU's table
            while j < len(lines) and lines[j].strip() and not lines[j].startswith("["):
                j += 1
            out.extend(lines[i:j])
            out.extend(_block(fits[m.group(1)], []))
            i = j
            continue
        out.append(lines[i])
        i += 1
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text("\n".join(out) + "\n")
    tmp.replace(dst)


def summary_json(fits: dict[str, GpuFit], ops: pd.DataFrame, data: ComponentData, measured: Measured) -> dict:
    table = mape_table(ops)
    gpus = {}
    for g, f in sorted(fits.items()):
        d = ops[ops["gpu"] == g]
        gpus[g] = {
            "efficiency": {k: round(v, 6) for k, v in dataclasses.asdict(f.efficiency).items()},
            "fitted": list(f.fitted), "calibrated_from": f.calibrated_from,
            "points": {r: int((d["role"] == r).sum()) for r in ("calibration", "validation")},
            "mape_pct": {r: _num(mape(d.loc[d["role"] == r, "rel_error"])) for r in ("calibration", "validation")},
            "mape_pct_by_group": {grp: {r: _num(v) for r, v in row.items()}
                                  for grp, row in table.loc[g].iterrows()} if g in table.index.levels[0] else {},
        }
    return {"schema_version": 1, "split": SPLIT, "fit_params": list(FIT_PARAMS),
            "bounds": {k: list(v) for k, v in BOUNDS.items()}, "start": START, "robust_scale": ROBUST_SCALE,
            "stages": {name: list(params) for name, params in STAGES},
            "fit_excluded": sorted(f"{s}:{g}" for s, g in FIT_EXCLUDE),
            "max_points_per_curve": C.MAX_POINTS, "gpus": gpus,
            "skipped_cells": [{"cell_id": c, "reason": r} for c, r in data.skipped],
            "sources": [{k: o[k] for k in ("path", "collector", "cells")} for o in measured.origins]}


def _num(v: float) -> float | None:
    """Rounded for the JSON file; None for NaN (strict JSON has no NaN)."""
    return None if not np.isfinite(v) else round(float(v), 3)


def packaged_catalog() -> Path:
    return Path(__file__).resolve().parents[1] / "agentreplay" / "perf" / "catalog" / "gpus.toml"


# ---------------------------------------------------------------------------------------------- shipped tables
#: Source preference when several profiles cover one (GPU, model, TP): serving-engine kernels first.
TABLE_SOURCES: Final = ("llmservingsim-perf", "vidur", "llmservingsim-v0")


def shipped_tables(data: ComponentData) -> dict[str, MeasuredTable]:
    """The measured tables ``TablePerfModel.from_names`` reads: every calibration profile cell (TP=1,
    :mod:`validation.protocol`) of a catalog GPU and model, all its points (dense curves at
    :data:`validation.components.TABLE_POINTS` log-spaced token counts, attention grids whole), one source per
    (GPU, model, TP) by :data:`TABLE_SOURCES`; HF-eager modules of LLMServingSim v0 (:data:`FIT_EXCLUDE`) are
    left to the roofline, as in the fit. Validation cells ship no table: ``from_names`` scales the TP=1 table."""
    models = set(list_models())
    out: dict[str, MeasuredTable] = {}
    rank = {s: i for i, s in enumerate(TABLE_SOURCES)}
    cids = sorted((c for c in data.full["cell_id"].unique() if role(c, data.tps[c]) == P.CALIBRATION),
                  key=lambda c: (rank.get(C.source_of(c), 99), c))
    for cid in cids:
        spec, src = data.specs[cid], C.source_of(cid)
        name = spec.name  # type: ignore[attr-defined]
        if name not in models:
            continue
        f = data.full[data.full["cell_id"] == cid]
        f = f[[(src, grp) not in FIT_EXCLUDE for grp in f["group"]]]
        key = table_key(str(f["gpu"].iloc[0]), name, data.tps[cid]) if len(f) else ""
        if not len(f) or key in out:
            continue
        out[key] = C.table_from_points(f, cid, str(f["gpu"].iloc[0]), name, data.tps[cid])
    return out


def shipped_allreduce(data: ComponentData) -> dict[str, AllReduceTable]:
    """The all-reduce tables ``TablePerfModel.from_names`` reads: every calibration single-node all-reduce curve
    of a catalog GPU (:func:`validation.components.allreduce_points`, :data:`validation.components.TABLE_POINTS`
    log-spaced sizes; the 2- and 8-GPU curves, :mod:`validation.protocol`), keyed ``gpu/tpN``; one curve per key
    (the first cell in name order)."""
    known = set(list_gpus())
    out: dict[str, AllReduceTable] = {}
    a = data.allreduce_full
    if not len(a):
        return out
    for _, d in sorted(a.groupby("cell_id"), key=lambda kv: str(kv[0])):
        g = d["gpu"].iloc[0]
        if not isinstance(g, str) or g not in known or role(str(d["cell_id"].iloc[0]), int(d["tp"].iloc[0])) \
                != P.CALIBRATION:
            continue
        key = allreduce_key(g, int(d["tp"].iloc[0]))
        if key not in out:
            out[key] = C.allreduce_table(d)
    return out


def _arr(values: object, fmt: str) -> str:
    return "[" + ", ".join(format(v, fmt) for v in values) + "]"  # type: ignore[attr-defined]


def write_tables(tables: dict[str, MeasuredTable], dst: Path,
                 allreduce: dict[str, AllReduceTable] | None = None) -> None:
    """``tables.toml``: one ``[table."gpu/model/tpN"]`` per table, seconds per layer (module docstring of
    agentreplay.perf.table), and one ``[allreduce."gpu/tpN"]`` per all-reduce table (seconds per all-reduce)."""
    lines = ["# Measured per-layer tables for agentreplay.perf.table.TablePerfModel, written by `agentreplay "
             "calibrate`", "# (validation/calibrate.py shipped_tables) from the component profiles: seconds per "
             "layer of each", "# operator (per forward: embedding, final_layernorm, lm_head, sampler) against "
             "tokens (sequences", "# for lm_head / sampler); attention per layer by (tokens or batch, context);",
             "# all-reduce: seconds of one all-reduce over tp GPUs of one node against the bytes reduced "
             "(shipped_allreduce).", ""]
    for key, a in sorted((allreduce or {}).items()):
        lines += [f'[allreduce."{key}"]', f'source = "{a.name}"', f'gpu = "{a.gpu}"', f"tp = {a.tp}",
                  f"bytes = {_arr(a.nbytes, 'd')}", f"seconds = {_arr(a.seconds, '.5g')}", ""]
    for key, t in sorted(tables.items()):
        lines += [f'[table."{key}"]', f'source = "{t.name}"', f'gpu = "{t.gpu}"', f'model = "{t.model}"',
                  f"tp = {t.tp}", f'dtype = "{t.dtype}"']
        for op, (x, sec) in sorted(t.ops.items()):
            order = np.argsort(np.asarray(x), kind="stable")
            lines += [f'[table."{key}".op.{op}]', f"tokens = {_arr(np.asarray(x)[order], 'd')}",
                      f"seconds = {_arr(np.asarray(sec)[order], '.5g')}"]
        for part, names in (("attention_prefill", ("tokens", "context")), ("attention_decode", ("batch", "context"))):
            v = getattr(t, part)
            if v is not None:
                lines += [f'[table."{key}".{part}]', f"{names[0]} = {_arr(v[0], 'd')}",
                          f"{names[1]} = {_arr(v[1], 'd')}", f"seconds = {_arr(v[2], '.5g')}"]
        lines.append("")
    tmp = dst.with_name(f".{dst.name}.tmp")
    tmp.write_text("\n".join(lines))
    tmp.replace(dst)


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
    write_tables(tables, dst.parent / "tables.toml", allreduce)
    summary = summary_json(fits, ops, data, measured)
    summary["refined"] = {
        "stages": {name: list(params) for name, _, params in REFINED_STAGES}, "bounds": {
            k: list(v) for k, v in REFINED_BOUNDS.items() if k not in BOUNDS}, "start": REFINED_START,
        "gpus": {g: {"fitted": {p: round(f.value(p), 6) for p in f.fitted}, "calibrated_from": f.calibrated_from,
                     "points": f.n_points} for g, f in sorted(refined.items())}}
    summary["tables"] = sorted(tables)
    summary["allreduce_tables"] = sorted(allreduce)
    (dst.parent / "calibration.json").write_text(json.dumps(summary, indent=1, sort_keys=True) + "\n")
    summary["_ops"] = ops
    return summary
