"""The plain roofline's fit (:func:`fit_gpu`, :func:`calibrate`): per GPU, bounded soft-L1 least squares on log
time over the calibration rows, stage by stage (:data:`validation.calibration.settings.STAGES`); GPUs without
profiles borrow the kernel-level efficiencies of :data:`validation.calibration.settings.NEAREST`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from agentreplay.perf import Efficiency, GpuSpec
from validation.calibration.data import ComponentData, component_data, fit_rows
from validation.calibration.settings import (
    BOUNDS,
    KERNEL_PARAMS,
    NEAREST,
    ROBUST_SCALE,
    SHARE_FLOOR,
    STAGES,
    START,
    tile_form,
)
from validation.catalog import PACKAGED, Catalog
from validation.components import predict as CP
from validation.measured import Measured


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
    layer = (
        o[o["per_layer"] & (o["probe"] == "tokens")]
        .assign(t=lambda d: d["measured_s"] * d["mult"])
        .groupby(["cell_id", "num_tokens"])["t"]
        .sum()
    )
    key = pd.MultiIndex.from_arrays([o["cell_id"], o["num_tokens"]])
    tot = layer.reindex(key).to_numpy()
    share = np.where(
        np.isnan(tot) | o["group"].str.startswith("attention").to_numpy(),
        1.0,
        o["measured_s"].to_numpy() / np.where(np.isnan(tot), 1.0, tot),
    )
    return np.clip(share, SHARE_FLOOR, 1.0)


def borrowable(params: tuple[str, ...], fitted: tuple[str, ...], target: GpuSpec) -> tuple[str, ...]:
    """The ``params`` fitted on a :data:`NEAREST` source that ``target`` takes: all of them, except the tile
    efficiency of prefill attention where ``target`` does not run FlashAttention-2 (:func:`tile_form`)."""
    return tuple(p for p in params if p in fitted and (p != "attn_prefill_tile_efficiency" or tile_form(target)))


def _stage(
    o: pd.DataFrame,
    a: pd.DataFrame,
    gpu: GpuSpec,
    data: ComponentData,
    base: Efficiency,
    params: list[str],
    time_weighted: bool = False,
) -> tuple[Efficiency, float]:
    """Bounded soft-L1 least squares of log(model) - log(measured) over ``params``. Weights: each curve (cell x
    operator group) counts about equally; within it, points by sqrt(share of the layer time / points in the
    curve), or with ``time_weighted`` by sqrt(time / the curve's total time), i.e. squared relative error
    weighted by time (attention: a 10 us point weighs what it costs in an iteration, not what a 10 ms one does)."""
    curve = pd.concat([o["cell_id"] + "|" + o["group"], a["cell_id"] + "|ar"], ignore_index=True)
    if time_weighted:
        t = pd.Series(np.concatenate([o["measured_s"].to_numpy(dtype=float), a["measured_s"].to_numpy(dtype=float)]))
        w = np.sqrt((t / t.groupby(curve).transform("sum")).to_numpy())
    else:
        share = np.concatenate([layer_share(o), np.ones(len(a))])
        w = np.sqrt(share / curve.map(curve.value_counts()).to_numpy(dtype=float))
    meas = np.log(np.concatenate([o["measured_s"].to_numpy(dtype=float), a["measured_s"].to_numpy(dtype=float)]))

    def eff_of(x: np.ndarray) -> Efficiency:
        return dataclasses.replace(base, **{p: float(v) for p, v in zip(params, x, strict=True)})

    def resid(x: np.ndarray) -> np.ndarray:
        e = eff_of(x)
        pred = np.concatenate(
            [
                CP.predict_ops(o, gpu, data.specs, data.tps, e),  # type: ignore[arg-type]
                CP.predict_allreduce(a, gpu, e),
            ]
        )
        return w * (np.log(np.maximum(pred, 1e-12)) - meas)

    x, cost = fit_least_squares(resid, params, BOUNDS, START)
    return eff_of(x), cost


def fit_least_squares(
    resid: Callable[[np.ndarray], np.ndarray],
    params: list[str],
    bounds: dict[str, tuple[float, float]],
    start: dict[str, float],
) -> tuple[np.ndarray, float]:
    """Bounded soft-L1 least squares of ``resid`` over ``params``, from the catalog start and from the middle of
    the bounds; the better of the two ``(x, cost)``."""
    lo = np.array([bounds[p][0] for p in params])
    hi = np.array([bounds[p][1] for p in params])
    best = None
    for x0 in (np.clip([start[p] for p in params], lo + 1e-6, hi - 1e-6), (lo + hi) / 2):
        r = least_squares(
            resid,
            x0,
            bounds=(lo, hi),
            loss="soft_l1",
            f_scale=ROBUST_SCALE,
            x_scale="jac",
            diff_step=1e-4,
            max_nfev=400,
        )
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
    rows = {
        "dense": (o[~is_att].reset_index(drop=True), a.iloc[:0]),
        "attention": (o[is_att].reset_index(drop=True), a.iloc[:0]),
        "allreduce": (o.iloc[:0], a),
    }
    eff, fitted, cost = prior, [], 0.0
    for stage, params in STAGES:
        so, sa = rows[stage]
        groups = set(so["group"])
        active = [
            p
            for p in params
            if (stage != "attention" and len(so) + len(sa))
            or (
                f"attention_{p.split('_')[1]}" in groups
                and p != ("attn_prefill_efficiency" if tiles else "attn_prefill_tile_efficiency")
            )
        ]
        if not active:
            continue
        eff, c = _stage(so, sa, gpu, data, eff, active, time_weighted=stage == "attention")
        fitted += active
        cost += c
    if not fitted:
        raise ValueError(f"{gpu.name}: no calibration points")
    ids = tuple(o["point_id"]) + tuple(a["point_id"])
    return GpuFit(gpu.name, eff, tuple(fitted), prior, len(ids), cost, fit_ids=ids)


def calibrate(measured: Measured, catalog: Catalog = PACKAGED) -> tuple[dict[str, GpuFit], ComponentData]:
    """Fit every catalog GPU that has calibration points; borrow for the others (:data:`NEAREST`)."""
    data = component_data(measured)
    known = set(catalog.gpus())
    have = sorted(set(data.ops.loc[data.ops["role"] == "calibration", "gpu"]) & known)
    fits = {g: fit_gpu(data, catalog.gpu(g)) for g in have}
    for g, src in NEAREST.items():
        if g in known and g not in fits and src in fits:
            target = catalog.gpu(g)
            prior = target.efficiency
            borrowed = borrowable(KERNEL_PARAMS, fits[src].fitted, target)
            eff = dataclasses.replace(prior, **{p: getattr(fits[src].efficiency, p) for p in borrowed})
            fits[g] = GpuFit(g, eff, borrowed, prior, 0, 0.0, calibrated_from=src)
    return fits, data
