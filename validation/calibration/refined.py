"""The refined roofline's fit (:func:`fit_refined`, :func:`calibrate_refined`): the plain fit's parameters plus
:class:`~agentreplay.perf.refinement.Refinement`'s, stage by stage over operator families
(:data:`validation.calibration.settings.REFINED_STAGES`), on the calibration rows only."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd

from agentreplay.perf import Efficiency, GpuSpec
from agentreplay.perf.table import REFINEMENT_FIELDS, Refinement
from validation.calibration.data import ComponentData, fit_rows
from validation.calibration.fit import borrowable, fit_least_squares
from validation.calibration.settings import (
    NEAREST,
    REFINED_BOUNDS,
    REFINED_KERNEL_PARAMS,
    REFINED_STAGES,
    REFINED_START,
    tile_form,
)
from validation.catalog import PACKAGED, Catalog
from validation.components import predict as CP


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


def _refined_stage(
    o: pd.DataFrame,
    a: pd.DataFrame,
    gpu: GpuSpec,
    data: ComponentData,
    eff: Efficiency,
    ref: Refinement,
    params: list[str],
) -> tuple[Efficiency, Refinement, float]:
    curve = pd.concat([o["cell_id"] + "|" + o["group"], a["cell_id"] + "|ar"], ignore_index=True)
    w = 1.0 / np.sqrt(curve.map(curve.value_counts()).to_numpy(dtype=float))
    meas = np.log(np.concatenate([o["measured_s"].to_numpy(dtype=float), a["measured_s"].to_numpy(dtype=float)]))

    def resid(x: np.ndarray) -> np.ndarray:
        e, r = _apply(eff, ref, params, x)
        pred = np.concatenate(
            [
                CP.predict_ops(o, gpu, data.specs, data.tps, e, r),  # type: ignore[arg-type]
                CP.predict_allreduce(a, gpu, e, r),
            ]
        )
        return w * (np.log(np.maximum(pred, 1e-12)) - meas)

    x, cost = fit_least_squares(resid, params, REFINED_BOUNDS, REFINED_START)
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
            active = [
                p
                for p in params
                if (p == "attn_kernel_us" and len(so))
                or (p in ("attn_prefill_efficiency", "attn_prefill_m_half_tokens") and len(pf) and not tiles)
                or (p == "attn_prefill_kv_efficiency" and (pf["context_tokens"] > 0).any() and not tiles)
                or (p == "attn_prefill_tile_efficiency" and len(pf) and tiles)
                or (p in ("attn_decode_efficiency", "attn_decode_seq_us") and len(dec))
                or (p == "attn_decode_fixed_us" and len(dec) and len(pf))
            ]
        if not active:
            continue
        eff, ref, c = _refined_stage(so, sa, gpu, data, eff, ref, active)
        fitted += active
        cost += c
    if not fitted:
        raise ValueError(f"{gpu.name}: no calibration points")
    return RefinedFit(gpu.name, eff, ref, tuple(fitted), len(o) + len(a), cost)


def calibrate_refined(data: ComponentData, catalog: Catalog = PACKAGED) -> dict[str, RefinedFit]:
    """:func:`fit_refined` for every catalog GPU with calibration points; :data:`NEAREST` borrowing for others."""
    known = set(catalog.gpus())
    have = sorted(set(data.ops.loc[data.ops["role"] == "calibration", "gpu"]) & known)
    fits = {g: fit_refined(data, catalog.gpu(g)) for g in have}
    for g, src in NEAREST.items():
        if g in known and g not in fits and src in fits:
            f, target = fits[src], catalog.gpu(g)
            borrowed = borrowable(REFINED_KERNEL_PARAMS, f.fitted, target)
            e = {p: f.value(p) for p in borrowed if p not in REFINEMENT_FIELDS}
            r = {p: f.value(p) for p in borrowed if p in REFINEMENT_FIELDS}
            fits[g] = RefinedFit(
                g,
                dataclasses.replace(target.efficiency, **e),
                dataclasses.replace(Refinement(), **r),
                borrowed,
                0,
                0.0,
                calibrated_from=src,
            )
    return fits
