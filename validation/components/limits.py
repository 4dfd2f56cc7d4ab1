"""What limits the component pricers on the held-out points, as frames for the summary: the table pricer's
all-reduce, decode form and grid rules (:func:`table_limits`, from :mod:`validation.components.diagnostics`), and
prefill attention of the refined roofline in its FLOP and FlashAttention-2 tile forms (:func:`prefill_forms`)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pandas as pd

from agentreplay.perf.table import REFINEMENT_FIELDS, TablePerfModel, dram_key_s
from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.components import diagnostics
from validation.components import predict as CP


def table_limits(
    data: K.ComponentData, pricers: pd.DataFrame, pricer_ops: pd.DataFrame, catalog: Catalog = PACKAGED
) -> dict[str, pd.DataFrame]:
    """What limits the table pricer on held-out points (:mod:`validation.components.diagnostics`): the 4-GPU
    all-reduce against ring-structure predictions from the 2- and 8-GPU curves and floors fitted to the 4-GPU
    points themselves (``allreduce``, ``allreduce_shape``); the decode attention's linear-in-context form fitted to
    every point of each batch size (``decode_linear``); decode profile rows faster than the DRAM stream
    (``decode_beyond_dram``); the prefill grid's row rules under cross-validation (``grid_rules``)."""
    priced = pricers[(pricers["pricer"] == "refined") & (pricers["metric"] == "all_reduce_s")]
    ar, shape = diagnostics.allreduce_limits(data.allreduce, priced)
    dec = diagnostics.decode_linear_floor(data.full, pricer_ops[pricer_ops["pricer"] == "table"])
    att = data.full[data.full["group"].str.startswith("attention")]
    fallback, peak = {}, {}  # the refined roofline of each attention cell: the tables' fallback
    for g, cells in att.groupby("gpu")["cell_id"].unique().items():
        gpu = catalog.gpu(str(g))
        eff, ref = catalog.refinement(gpu)
        peak[str(g)] = gpu.mem_bandwidth_gbps * 1e9
        fallback.update({c: CP.roofline(gpu, data.specs[c], data.tps[c], eff, ref) for c in cells})  # type: ignore
    beyond = diagnostics.decode_beyond_dram(data.full, {c: dram_key_s(fb) for c, fb in fallback.items()}, peak)
    rules = diagnostics.grid_rule_cv(data.full, {c: partial(TablePerfModel._pf_ref, fb) for c, fb in fallback.items()})
    return {
        "allreduce": ar,
        "allreduce_shape": shape,
        "decode_linear": dec,
        "decode_beyond_dram": beyond,
        "grid_rules": rules,
    }


def prefill_forms(data: K.ComponentData, catalog: Catalog = PACKAGED) -> pd.DataFrame:
    """Prefill attention of the refined roofline in its two forms, each fitted on the calibration split alone
    (:func:`validation.calibration.refined.fit_refined`): the FLOP form and the FlashAttention-2 tile form
    (:mod:`agentreplay.perf.tiles`), judged on the prefill-attention points the fit uses (serving-engine kernels,
    not :data:`validation.calibration.settings.FIT_EXCLUDE`) of every GPU fitted in the tile form. The tile form's
    fit is the shipped one (the catalog's ``roofline.toml``); the FLOP form is refitted here."""
    rows = []
    for g in sorted(set(data.ops["gpu"]) & set(catalog.gpus())):
        gpu = catalog.gpu(g)
        pf = data.ops[
            (data.ops["gpu"] == g) & (data.ops["group"] == "attention_prefill") & (data.ops["probe"] != "tokens")
        ]
        pf = pf[K.fittable(pf)]
        if not K.tile_form(gpu) or not (pf["role"] == "calibration").any():
            continue
        flop = K.fit_refined(data, gpu, tiles=False)
        forms = (("FLOP", flop.efficiency, flop.refinement), ("tile", *catalog.refinement(gpu)))
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
