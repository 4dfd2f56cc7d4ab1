"""Everything the validation protocol reports, assembled from :mod:`validation.protocol.crossval`: the constants with
their provenance and CV scores, the table CV, the leave-one-GPU-out and leave-one-model-out rows and the table
fidelity, as parquet frames and the ``protocol`` summary entry."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.protocol import rules as P
from validation.protocol.constants import CONSTANT_COLUMNS, catalog_rows, global_rows
from validation.protocol.crossval import (
    COMPONENT_METRICS,
    cv_scores,
    leave_one_gpu_out,
    leave_one_model_out,
    per_gpu,
    table_cv,
)


def _json(df: pd.DataFrame) -> list[dict[str, Any]]:
    """JSON-ready rows: floats rounded to 3 decimals, NaN as None."""
    return [
        {
            k: (
                None
                if isinstance(v, float) and not np.isfinite(v)
                else round(v, 3)
                if isinstance(v, float)
                else v.item()
                if isinstance(v, np.generic)
                else v
            )
            for k, v in r.items()
        }
        for r in df.to_dict("records")
    ]


def fidelity(pricers: pd.DataFrame) -> pd.DataFrame:
    """Table fidelity per GPU: the in-cell rows (role ``fidelity``) of the table pricer, MAPE % and points."""
    f = pricers[(pricers.get("pricer") == "table") & (pricers.get("role") == P.FIDELITY)] if len(pricers) else pricers
    if not len(f):
        return pd.DataFrame(columns=["gpu", "points", "mape_pct"])
    comp = f[f["metric"].isin(COMPONENT_METRICS)]
    ar = f[f["metric"] == "all_reduce_s"]
    out = comp.groupby("gpu")["rel_error"].agg(points="size", mape_pct=K.mape).reset_index()
    if len(ar):
        a = ar.groupby("gpu")["rel_error"].agg(all_reduce_points="size", all_reduce_mape_pct=K.mape).reset_index()
        out = out.merge(a, on="gpu", how="outer")
    return out


def outputs(
    data: K.ComponentData, pricers: pd.DataFrame, catalog: Catalog = PACKAGED, lomo: bool = True
) -> tuple[dict[str, pd.DataFrame], dict[str, Any]]:
    """Everything the protocol reports: frames (``constants``, ``cv``, ``logo``, ``lomo``, ``fidelity``) to be
    written as parquet, and the ``protocol`` summary entry :func:`validation.protocol.render.render_protocol_markdown`
    renders. ``lomo=False`` skips the leave-one-model-out refits (minutes)."""
    cv = table_cv(data, catalog)
    scores = cv_scores(cv)
    shipped = catalog.calibration()
    cal = data.ops[data.ops["role"] == P.CALIBRATION]
    cells = {str(g): sorted(d["cell_id"].unique()) for g, d in cal.groupby("gpu")}
    ar = data.allreduce[data.allreduce["role"] == P.CALIBRATION]
    for g, d in ar.groupby("gpu"):
        cells.setdefault(str(g), []).extend(sorted(d["cell_id"].unique()))
    rows = catalog_rows(
        catalog,
        shipped.get("gpus", {}),
        shipped.get("refined", {}).get("gpus", {}),
        cells,
        K.NEAREST,
    )
    constants = pd.DataFrame(global_rows(_json(scores)) + rows, columns=list(CONSTANT_COLUMNS))
    constants["value"] = constants["value"].astype(str)
    logo = leave_one_gpu_out(data, catalog)
    lo = leave_one_model_out(data, catalog) if lomo else pd.DataFrame()
    fid = fidelity(pricers)
    frames = {"constants": constants, "cv": cv, "logo": logo, "lomo": lo, "fidelity": fid}
    summary = {
        "split": P.SPLIT,
        "nearest_rule": P.NEAREST_RULE,
        "cv_scores": _json(scores),
        "constants": _json(constants),
        "logo": _json(logo),
        "lomo": _json(lo),
        "lomo_per_gpu": _json(per_gpu(lo)),
        "table_fidelity": _json(fid),
        "cells": {
            r: sorted(
                set(data.ops.loc[data.ops["role"] == r, "cell_id"])
                | set(data.iterations.loc[data.iterations["role"] == r, "cell_id"])
                | set(data.allreduce.loc[data.allreduce["role"] == r, "cell_id"])
            )
            for r in (P.CALIBRATION, P.VALIDATION)
        },
    }
    return frames, summary
