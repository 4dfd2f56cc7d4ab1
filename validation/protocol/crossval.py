"""Cross-validation inside the calibration cells, and out-of-profile errors (:mod:`validation.protocol.rules`).

- :func:`table_cv`: the table pricer's two interpolation tunables, ``GEMM_TILE_TOKENS`` (:data:`TILE_CANDIDATES`)
  and the prefill-attention row rule (:data:`ROW_RULES`), each scored on the calibration cells only: per
  calibration cell, a table built from every other point and scored on the points in between (the operators
  the tunable touches: GEMMs for the tile, prefill-attention grid points for the row rule); the score of a
  candidate is the mean over cells of the cell's MAPE (each cell one fold, weighing equally). The lowest score
  wins (:func:`choose`); no validation cell is read.
- :func:`leave_one_gpu_out`: each profiled GPU priced with the kernel-level parameters of the GPU
  :func:`validation.protocol.rules.nearest_gpu` picks among the *other* profiled GPUs (the rule the catalogue uses for
  GPUs without a profile), on its own datasheet peaks; the parameters it had fitted and cannot borrow at the
  ``[defaults.efficiency]`` values; judged on every cell of the GPU.
- :func:`leave_one_model_out`: each GPU refitted (plain and refined roofline) on its calibration cells of the other
  models only, judged on every cell of the held-out model (operator cells of all TP degrees and Splitwise).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import Efficiency, GpuSpec
from agentreplay.perf.table import (
    ATTENTION_ROWS_IN_REFERENCE,
    GEMM_TILE_TOKENS,
    REFINEMENT_FIELDS,
    Refinement,
    TablePerfModel,
)
from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.components import predict as CP
from validation.components import profiles as C
from validation.protocol import rules as P

TILE_CANDIDATES: Final = (1, 16, 32, 64, 128)
#: Prefill-attention rows of the table's grid: interpolated linearly in log tokens (False) or in the log of the
#: fallback's time (True): ``TablePerfModel(attention_rows_in_reference=...)``.
ROW_RULES: Final = {"log tokens": False, "log reference": True}
COMPONENT_METRICS: Final = ("layer_time_s", "attention_prefill_s", "attention_decode_s", "lm_head_s")


def _dense_attention(points: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    att = points["group"].str.startswith("attention") & (points["probe"] != "tokens")
    return points[~att], points[att]


def in_cell_tables(
    data: K.ComponentData,
    g: str,
    fallback: dict[str, Any],
    cells: list[str] | None = None,
    tile: int = GEMM_TILE_TOKENS,
    rows_in_reference: bool = ATTENTION_ROWS_IN_REFERENCE,
) -> tuple[dict[str, Any], pd.Series]:
    """Per cell of ``g`` (or of ``cells``): a table pricer built from every other of its compared token counts
    (attention: every other row and column of the full grid), and for every op row whether it is in that table
    (True) or held out (False). ``tile``: ``TablePerfModel(gemm_tile_tokens=...)``; ``rows_in_reference``:
    ``TablePerfModel(attention_rows_in_reference=...)``."""
    ops = data.ops[data.ops["gpu"] == g]
    if cells is not None:
        ops = ops[ops["cell_id"].isin(cells)]
    full = data.full[data.full["gpu"] == g]
    inside = pd.Series(False, index=ops.index)
    own: dict[str, Any] = {}
    for cid, o in ops.groupby("cell_id", sort=False):
        dense, _ = _dense_attention(o)
        _, att = _dense_attention(full[full["cell_id"] == cid])
        pts = pd.concat([dense[C.in_table(dense)], att[C.in_table(att)]], ignore_index=True)
        keys = set(C.point_keys(C.table_points(pts)))
        inside.loc[o.index] = C.point_keys(o).isin(keys).to_numpy()
        spec = data.specs[cid]
        own[cid] = TablePerfModel(
            C.table_from_points(pts, cid, g, spec.name, data.tps[cid]),  # type: ignore
            fallback[cid],
            gemm_tile_tokens=tile,
            attention_rows_in_reference=rows_in_reference,
        )
    return own, inside


def _refined_fallbacks(data: K.ComponentData, g: str, cells: list[str], catalog: Catalog) -> dict[str, Any]:
    gpu = catalog.gpu(g)
    eff, ref = catalog.refinement(gpu)
    return {c: CP.roofline(gpu, data.specs[c], data.tps[c], eff, ref) for c in cells}  # type: ignore[arg-type]


def table_cv(data: K.ComponentData, catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """Per tunable, candidate and calibration cell: the held-out points it scores and their MAPE (%). Only
    calibration cells are read (their role is asserted)."""
    rows = []
    known = set(catalog.gpus())
    cal = data.ops[data.ops["role"] == P.CALIBRATION]
    for g in sorted(set(cal["gpu"]) & known):
        cells = sorted(cal.loc[cal["gpu"] == g, "cell_id"].unique())
        assert all(K.role(c, data.tps[c]) == P.CALIBRATION for c in cells)
        fb = _refined_fallbacks(data, g, cells, catalog)
        for tunable, cands in (
            ("GEMM_TILE_TOKENS", {str(t): (t, False) for t in TILE_CANDIDATES}),
            ("prefill-attention row rule", {k: (GEMM_TILE_TOKENS, v) for k, v in ROW_RULES.items()}),
        ):
            for cand, (tile, rule) in cands.items():
                own, inside = in_cell_tables(data, g, fb, cells, tile=tile, rows_in_reference=rule)
                held = data.ops.loc[inside.index[~inside.to_numpy()]]
                if tunable == "GEMM_TILE_TOKENS":
                    held = held[held["group"].isin(K.GEMM_GROUPS)]
                else:
                    held = held[(held["group"] == "attention_prefill") & (held["probe"] == "attn_prefill")]
                held = held[K.fittable(held)] if len(held) else held
                if not len(held):
                    continue
                held = held.reset_index(drop=True)
                err = CP.predict_with(held, own) / held["measured_s"].to_numpy() - 1
                for cid, idx in held.groupby("cell_id", sort=False).indices.items():
                    rows.append(
                        {
                            "tunable": tunable,
                            "candidate": cand,
                            "gpu": g,
                            "cell_id": cid,
                            "points": len(idx),
                            "mape_pct": K.mape(err[idx]),
                        }
                    )
    return pd.DataFrame(rows, columns=["tunable", "candidate", "gpu", "cell_id", "points", "mape_pct"])


def cv_scores(cv: pd.DataFrame) -> pd.DataFrame:
    """Per tunable and candidate: folds (calibration cells), points, the CV score (mean over cells of the cell's
    MAPE, %) and the pooled MAPE over all held-out points (%), and which candidate :func:`choose` picks."""
    if not len(cv):
        return pd.DataFrame(columns=["tunable", "candidate", "folds", "points", "cv_score_pct", "chosen"])
    g = cv.groupby(["tunable", "candidate"], sort=False)
    out = pd.DataFrame(
        {"folds": g.size(), "points": g["points"].sum(), "cv_score_pct": g["mape_pct"].mean()}
    ).reset_index()
    out["chosen"] = False
    for _, d in out.groupby("tunable"):
        out.loc[d["cv_score_pct"].idxmin(), "chosen"] = True
    return out


def choose(cv: pd.DataFrame, tunable: str) -> str | None:
    """The candidate of ``tunable`` with the lowest CV score (None without folds)."""
    s = cv_scores(cv)
    s = s[(s["tunable"] == tunable) & s["chosen"]]
    return str(s["candidate"].iloc[0]) if len(s) else None


# ---------------------------------------------------------------------------------------------- judged rows
def judged_rows(
    data: K.ComponentData,
    gpu: GpuSpec,
    cells: set[str],
    eff: Efficiency,
    ref: Refinement | None = None,
    allreduce: bool = True,
    pricers: dict[str, Any] | None = None,
) -> pd.DataFrame:
    """``cell_id, metric, measured, simulated`` of every component metric (layer time, attention, LM head,
    Splitwise iterations, all-reduce) of ``cells`` on ``gpu`` priced by the (refined when ``ref``) roofline;
    ``pricers`` (cell -> pricer): the operator cells priced by those instead (and only those cells)."""
    o = data.ops[(data.ops["gpu"] == gpu.name) & data.ops["cell_id"].isin(cells)].reset_index(drop=True)
    if pricers is not None:
        o = o[o["cell_id"].isin(list(pricers))].reset_index(drop=True)
    parts = []
    if len(o):
        pred = (
            CP.predict_with(o, pricers)
            if pricers is not None
            else CP.predict_ops(o, gpu, data.specs, data.tps, eff, ref)  # type: ignore[arg-type]
        )
        layer = CP.layer_sums(o, pred, {c: C.source_of(c) for c in o["cell_id"].unique()})
        parts.append(layer.assign(metric="layer_time_s")[["cell_id", "metric", "measured_s", "predicted_s"]])
        att = o["group"].isin(["attention_prefill", "attention_decode", "lm_head"]) & (o["probe"] != "tokens")
        parts.append(
            o[att].assign(metric=o.loc[att, "group"] + "_s", predicted_s=pred[att.to_numpy()])[
                ["cell_id", "metric", "measured_s", "predicted_s"]
            ]
        )
    it = data.iterations[(data.iterations["gpu"] == gpu.name) & data.iterations["cell_id"].isin(cells)]
    if len(it) and pricers is None:
        it = it.reset_index(drop=True)
        pred = CP.predict_iterations(it, gpu, data.specs, data.tps, eff, ref)  # type: ignore[arg-type]
        parts.append(
            it.assign(metric=it["group"] + "_s", predicted_s=pred)[["cell_id", "metric", "measured_s", "predicted_s"]]
        )
    ar = data.allreduce[data.allreduce["gpu"] == gpu.name] if allreduce and pricers is None else data.allreduce.iloc[:0]
    if len(ar):
        ar = ar.reset_index(drop=True)
        parts.append(
            ar.assign(metric="all_reduce_s", predicted_s=CP.predict_allreduce(ar, gpu, eff, ref))[
                ["cell_id", "metric", "measured_s", "predicted_s"]
            ]
        )
    df = (
        pd.concat([p for p in parts if len(p)], ignore_index=True)
        if parts
        else pd.DataFrame(columns=["cell_id", "metric", "measured_s", "predicted_s"])
    )
    return df.rename(columns={"measured_s": "measured", "predicted_s": "simulated"})


def _families(df: pd.DataFrame) -> dict[str, float | int]:
    """MAPE (%) of the component metrics, the Splitwise iterations and the all-reduce, and the points of each."""
    err = df["simulated"] / df["measured"] - 1
    fam = np.where(
        df["metric"].isin(COMPONENT_METRICS),
        "components",
        np.where(df["metric"] == "all_reduce_s", "all_reduce", "splitwise"),
    )
    out: dict[str, float | int] = {}
    for f in ("components", "splitwise", "all_reduce"):
        sel = fam == f
        out[f"{f}_n"], out[f"{f}_mape_pct"] = int(sel.sum()), K.mape(err[sel])
    return out


# ---------------------------------------------------------------------------------------------- LOGO
def _profiled(
    data: K.ComponentData, catalog: Catalog = PACKAGED
) -> tuple[dict[str, tuple[str, ...]], dict[str, tuple[str, ...]], list[str], dict[str, GpuSpec]]:
    """(plain fitted parameters per GPU, refined fitted parameters per GPU, the profiled catalog GPUs with a fit
    of their own, their specs)."""
    shipped = catalog.calibration()
    fitted = {g: tuple(v.get("fitted", ())) for g, v in shipped.get("gpus", {}).items() if not v.get("calibrated_from")}
    rfitted = {
        g: tuple(v.get("fitted", {}))
        for g, v in shipped.get("refined", {}).get("gpus", {}).items()
        if not v.get("calibrated_from")
    }
    known = set(catalog.gpus())
    profiled = sorted(set(data.ops.loc[data.ops["role"] == P.CALIBRATION, "gpu"]) & known & set(fitted))
    return fitted, rfitted, profiled, {g: catalog.gpu(g) for g in profiled}


def logo_efficiency(
    g: str,
    profiled: list[str],
    specs: dict[str, GpuSpec],
    fitted: dict[str, tuple[str, ...]],
    catalog: Catalog = PACKAGED,
) -> tuple[str, Efficiency, list[str]] | None:
    """What the catalogue would hold for ``g`` without its profile (the plain roofline): (donor, efficiency,
    the parameters borrowed from the donor); the parameters ``g`` had fitted and cannot borrow at the
    ``[defaults.efficiency]`` values. None when no other profiled GPU can be a donor."""
    donor = P.nearest_gpu(specs[g], [specs[x] for x in profiled])
    if donor is None:
        return None
    target, dspec = specs[g], specs[donor]
    defaults = catalog.default_efficiency()
    take = K.borrowable(K.KERNEL_PARAMS, fitted[donor], target)
    eff = dataclasses.replace(target.efficiency, **{p: defaults[p] for p in fitted[g] if p in defaults})
    eff = dataclasses.replace(eff, **{p: getattr(dspec.efficiency, p) for p in take})
    return donor, eff, list(take)


def logo_efficiencies(data: K.ComponentData, catalog: Catalog = PACKAGED) -> dict[str, tuple[str, Efficiency]]:
    """:func:`logo_efficiency` of every profiled GPU that has a donor: {gpu: (donor, efficiency)}."""
    fitted, _, profiled, specs = _profiled(data, catalog)
    out = {}
    for g in profiled:
        got = logo_efficiency(g, profiled, specs, fitted, catalog)
        if got is not None:
            out[g] = got[:2]
    return out


def leave_one_gpu_out(data: K.ComponentData, catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """Per profiled GPU and pricer (roofline, refined): the donor, and the MAPE on every cell of the GPU with the
    donor's parameters (``logo_*``) beside the GPU's own fit on the same rows (``own_*``)."""
    fitted, rfitted, profiled, specs = _profiled(data, catalog)
    rows = []
    for g in profiled:
        plain = logo_efficiency(g, profiled, specs, fitted, catalog)
        if plain is None:
            continue
        donor, eff, take = plain  # plain: what the catalogue would hold for g without its profile
        target, dspec = specs[g], specs[donor]
        cells = set(data.ops.loc[data.ops["gpu"] == g, "cell_id"]) | set(
            data.iterations.loc[data.iterations["gpu"] == g, "cell_id"]
        )
        d_eff, d_ref = catalog.refinement(dspec)
        rtake = K.borrowable(K.REFINED_KERNEL_PARAMS, rfitted.get(donor, ()), target)
        reff = dataclasses.replace(eff, **{p: getattr(d_eff, p) for p in rtake if p not in REFINEMENT_FIELDS})
        rref = dataclasses.replace(Refinement(), **{p: getattr(d_ref, p) for p in rtake if p in REFINEMENT_FIELDS})
        o_eff, o_ref = catalog.refinement(target)
        for pricer, (le, lr), (oe, orf), took in (
            ("roofline", (eff, None), (target.efficiency, None), take),
            ("refined", (reff, rref), (o_eff, o_ref), rtake),
        ):
            gpu_l = dataclasses.replace(target, efficiency=le)
            logo = judged_rows(data, gpu_l, cells, le, lr)
            own = judged_rows(data, target, cells, oe, orf)
            row: dict[str, Any] = {"gpu": g, "pricer": pricer, "donor": donor, "borrowed": ", ".join(took)}
            row.update({f"logo_{k}": v for k, v in _families(logo).items()})
            row.update({f"own_{k}": v for k, v in _families(own).items() if k.endswith("pct")})
            rows.append(row)
        gpu_l = dataclasses.replace(target, efficiency=reff)
        tables = donor_tables(data, gpu_l, rref, donor, dspec, d_eff, d_ref, cells)
        if tables:
            logo = judged_rows(data, gpu_l, set(tables), reff, rref, pricers=tables)
            row = {
                "gpu": g,
                "pricer": "table",
                "donor": donor,
                "borrowed": "the donor's TP=1 tables of the same "
                f"model, scaled by the refined roofline ({len(tables)} of {len(cells)} cells)",
            }
            row.update({f"logo_{k}": v for k, v in _families(logo).items()})
            rows.append(row)
    return pd.DataFrame(rows)


def donor_tables(
    data: K.ComponentData,
    gpu: GpuSpec,
    ref: Refinement,
    donor: str,
    dspec: GpuSpec,
    d_eff: Efficiency,
    d_ref: Refinement,
    cells: set[str],
) -> dict[str, Any]:
    """Leave-one-GPU-out table pricers: each operator cell of ``gpu`` (its leave-one-GPU-out refined roofline as
    the fallback) priced from the ``donor``'s calibration (TP=1) cell of the same model, the source preference
    of the shipped tables (:data:`validation.calibration.tables.TABLE_SOURCES`) first, scaled by the target's /
    donor's refined roofline; cells whose model the donor did not profile are left out."""
    rank = {s: i for i, s in enumerate(K.TABLE_SOURCES)}
    dcal = data.full[(data.full["gpu"] == donor) & (data.full["tp"] == 1)]
    by_model: dict[str, str] = {}
    for cid in sorted(dcal["cell_id"].unique(), key=lambda c: (rank.get(C.source_of(c), 99), c)):
        if cid in data.specs and K.role(cid, 1) == P.CALIBRATION:
            by_model.setdefault(_model_of(data, cid), cid)
    out: dict[str, Any] = {}
    for cid in sorted(c for c in cells if c in data.tps and C.source_of(c) != "splitwise"):
        src = by_model.get(_model_of(data, cid))
        if src is None:
            continue
        f = dcal[dcal["cell_id"] == src]
        f = f[[(C.source_of(src), grp) not in K.FIT_EXCLUDE for grp in f["group"]]]
        spec = data.specs[src]
        table = C.table_from_points(f, src, donor, spec.name, 1)  # type: ignore[attr-defined]
        out[cid] = TablePerfModel(
            table,
            CP.roofline(gpu, data.specs[cid], data.tps[cid], gpu.efficiency, ref),
            CP.roofline(dspec, spec, 1, d_eff, d_ref),
        )  # type: ignore[arg-type]
    return out


# ---------------------------------------------------------------------------------------------- LOMO
def _model_of(data: K.ComponentData, cid: str) -> str:
    return str(data.specs[cid].name)  # type: ignore[attr-defined]


def _without(data: K.ComponentData, held: set[str]) -> K.ComponentData:
    """``data`` with the ``held`` cells out of the fit (role validation)."""
    ops = data.ops.copy()
    ops.loc[ops["cell_id"].isin(held), "role"] = P.VALIDATION
    return dataclasses.replace(data, ops=ops)


def lomo_models(data: K.ComponentData, g: str) -> list[str]:
    """The models of ``g``'s calibration cells: a LOMO refit needs two or more."""
    cal = data.ops[(data.ops["role"] == P.CALIBRATION) & (data.ops["gpu"] == g)]
    return sorted({_model_of(data, c) for c in cal["cell_id"].unique()})


def lomo_efficiency(data: K.ComponentData, g: str, model: str, catalog: Catalog = PACKAGED) -> Efficiency | None:
    """``g``'s plain-roofline efficiency refitted on its calibration cells of the models other than ``model``;
    None when ``g`` has no calibration cell of ``model`` or of another model."""
    models = lomo_models(data, g)
    if model not in models or len(models) < 2:
        return None
    held = {c for c in set(data.ops.loc[data.ops["gpu"] == g, "cell_id"]) if _model_of(data, c) == model}
    return K.fit_gpu(_without(data, held), catalog.gpu(g)).efficiency


def leave_one_model_out(data: K.ComponentData, catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """Per GPU with calibration cells of two or more models, per model and pricer (roofline, refined): the GPU
    refitted on its calibration cells of the other models only, judged on every cell of the held-out model
    (``lomo_*``), beside the shipped fit on the same rows (``own_*``). ``leaked``: parameters the shipped fit
    fitted that this refit could not (they keep the catalog value, fitted with the held-out model)."""
    known = set(catalog.gpus())
    cal = data.ops[data.ops["role"] == P.CALIBRATION]
    rows = []
    for g in sorted(set(cal["gpu"]) & known):
        gpu = catalog.gpu(g)
        models = sorted({_model_of(data, c) for c in cal.loc[cal["gpu"] == g, "cell_id"].unique()})
        if len(models) < 2:
            continue
        shipped = catalog.calibration()
        fitted_plain = set(shipped.get("gpus", {}).get(g, {}).get("fitted", ()))
        fitted_ref = set(shipped.get("refined", {}).get("gpus", {}).get(g, {}).get("fitted", {}))
        o_eff, o_ref = catalog.refinement(gpu)
        all_cells = set(data.ops.loc[data.ops["gpu"] == g, "cell_id"]) | set(
            data.iterations.loc[data.iterations["gpu"] == g, "cell_id"]
        )
        for m in models:
            held = {c for c in all_cells if _model_of(data, c) == m}
            sub = _without(data, held)
            pf = K.fit_gpu(sub, gpu)
            rf = K.fit_refined(sub, gpu)
            for pricer, (le, lr), (oe, orf), got, full in (
                ("roofline", (pf.efficiency, None), (gpu.efficiency, None), set(pf.fitted), fitted_plain),
                ("refined", (rf.efficiency, rf.refinement), (o_eff, o_ref), set(rf.fitted), fitted_ref),
            ):
                lomo = judged_rows(data, dataclasses.replace(gpu, efficiency=le), held, le, lr, allreduce=False)
                own = judged_rows(data, gpu, held, oe, orf, allreduce=False)
                row: dict[str, Any] = {
                    "gpu": g,
                    "model": m,
                    "pricer": pricer,
                    "cells": len(held),
                    "leaked": ", ".join(sorted(full - got)),
                }
                row.update({f"lomo_{k}": v for k, v in _families(lomo).items() if not k.startswith("all_reduce")})
                row.update(
                    {
                        f"own_{k}": v
                        for k, v in _families(own).items()
                        if k.endswith("pct") and not k.startswith("all_reduce")
                    }
                )
                rows.append(row)
    return pd.DataFrame(rows)


def per_gpu(lomo: pd.DataFrame) -> pd.DataFrame:
    """LOMO MAPE per GPU and pricer: mean over held-out models of each model's component MAPE."""
    if not len(lomo):
        return lomo
    return lomo.groupby(["gpu", "pricer"])[["lomo_components_mape_pct", "own_components_mape_pct"]].mean().reset_index()
