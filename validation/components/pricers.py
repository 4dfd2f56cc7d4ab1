"""The pricer comparison of ``agentreplay validate`` (:data:`validation.protocol.rules.PRICERS`): the component points
priced by the default roofline, the refined roofline and the measured-table pricer (and its GEMM-tile ablation),
each judged under its own declared split; the table pricer's out-of-cell validation (TP>1 cells from their TP=1
sibling's table, the all-reduce held out by GPU count, Splitwise iterations from the Vidur TP=1 table).
:func:`pricer_rows` gives the rows ``pricers.parquet`` and ``pricer_ops.parquet`` are written from."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.perf.table import (
    TablePerfModel,
)
from validation.calibration import calibrate as K
from validation.catalog import PACKAGED, Catalog
from validation.components import predict as CP
from validation.components import profiles as C
from validation.protocol import crossval

_SIBLING = re.compile(r"/tp\d+$")


def out_of_cell_tables(data: K.ComponentData, g: str, fallback: dict[str, Any]) -> dict[str, Any]:
    """Validation of the table pricer: each validation (TP>1) operator cell of ``g`` priced from the full table of
    its TP=1 sibling (same source, GPU and model; a calibration cell), scaled by the refined roofline's ratio."""
    ops = data.ops[data.ops["gpu"] == g]
    full = data.full[data.full["gpu"] == g]
    out: dict[str, Any] = {}
    for cid in ops["cell_id"].unique():
        sib = _SIBLING.sub("/tp1", cid)
        if data.tps[cid] == 1 or sib not in fallback or K.role(sib, 1) != "calibration":
            continue
        f = full[full["cell_id"] == sib]
        table = C.table_from_points(f, sib, g, data.specs[sib].name, 1)  # type: ignore[attr-defined]
        out[cid] = TablePerfModel(table, fallback[cid], fallback[sib])
    return out


def pricer_rows(data: K.ComponentData, catalog: Catalog = PACKAGED) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(metric rows, operator rows) of every pricer in :data:`validation.protocol.rules.PRICERS` on the component
    cells of catalog GPUs: ``pricer, cell_id, gpu, metric | group, measured, simulated, rel_error, role`` and the
    operating point; roles per :mod:`validation.protocol.rules` (the table's in-cell rows: ``fidelity``; its in-table
    points, reproduced by construction, are not listed)."""
    known = set(catalog.gpus())
    src = {c: C.source_of(c) for c in data.ops["cell_id"].unique()}
    op_parts, metric_parts = [], []
    for g in sorted(set(data.ops["gpu"]) & known):
        gpu = catalog.gpu(g)
        eff_r, ref_r = catalog.refinement(gpu)
        ops = data.ops[data.ops["gpu"] == g]
        plain = {c: CP.roofline(gpu, data.specs[c], data.tps[c], gpu.efficiency) for c in ops["cell_id"].unique()}
        refined = {c: CP.roofline(gpu, data.specs[c], data.tps[c], eff_r, ref_r) for c in ops["cell_id"].unique()}
        own, inside = crossval.in_cell_tables(data, g, refined)
        other = out_of_cell_tables(data, g, refined)
        ar = data.allreduce[data.allreduce["gpu"] == g].reset_index(drop=True)
        it = data.iterations[data.iterations["gpu"] == g].reset_index(drop=True)
        for name, pricers, sel in (
            ("roofline", plain, ops),
            ("refined", refined, ops),
            ("table", own, ops[~inside]),
            ("table", other, ops[ops["cell_id"].isin(list(other))]),
        ):
            if not len(sel):
                continue
            o = sel.assign(pricer=name, predicted_s=CP.predict_with(sel.reset_index(drop=True), pricers))
            if pricers is own:
                o["role"] = "fidelity"
            o = o.reset_index(drop=True)
            op_parts.append(o)
            layer = CP.layer_sums(o, o["predicted_s"].to_numpy(), src)
            lr = o.drop_duplicates(["cell_id", "num_tokens", "role"]).groupby(["cell_id", "num_tokens"])["role"].max()
            layer["role"] = [
                lr.get((c, n), "validation") for c, n in zip(layer["cell_id"], layer["num_tokens"], strict=True)
            ]
            att = o[o["group"].isin(["attention_prefill", "attention_decode", "lm_head"]) & (o["probe"] != "tokens")]
            metric_parts += [
                layer.assign(metric="layer_time_s").drop(columns="ops"),
                att.assign(metric=att["group"] + "_s")[
                    [
                        "cell_id",
                        "num_tokens",
                        "batch_size",
                        "context_tokens",
                        "measured_s",
                        "predicted_s",
                        "role",
                        "metric",
                    ]
                ],
            ]
            metric_parts[-1]["pricer"] = metric_parts[-2]["pricer"] = name
            if pricers is other:
                continue  # the all-reduce and Splitwise rows of the table come once, with its in-cell pricers
            if len(ar):
                e, r = (gpu.efficiency, None) if name == "roofline" else (eff_r, ref_r)
                parts = [ar.assign(predicted_s=CP.predict_allreduce(ar, gpu, e, r))]
                if name == "table":  # fidelity on every curve; validation: the fallback on validation curves
                    pred, inside_ar = _allreduce_held_out(ar, gpu, e, r)
                    parts = [
                        ar.assign(predicted_s=pred, role="fidelity")[~inside_ar],
                        parts[0][parts[0]["role"] == "validation"],
                    ]
                for p in parts:
                    metric_parts.append(
                        p.assign(pricer=name, metric="all_reduce_s")[
                            ["pricer", "cell_id", "bytes", "measured_s", "predicted_s", "role", "metric"]
                        ]
                    )
            if len(it):
                e, r = (gpu.efficiency, None) if name == "roofline" else (eff_r, ref_r)
                tables = _splitwise_tables(data, gpu, it, e, r) if name == "table" else None
                sub = it if tables is None else it[it["cell_id"].isin(list(tables))].reset_index(drop=True)
                if len(sub):
                    pred = CP.predict_iterations(sub, gpu, data.specs, data.tps, e, r, pricers=tables)  # type: ignore
                    metric_parts.append(
                        sub.assign(pricer=name, predicted_s=pred, metric=sub["group"] + "_s")[
                            [
                                "pricer",
                                "cell_id",
                                "num_tokens",
                                "batch_size",
                                "context_tokens",
                                "measured_s",
                                "predicted_s",
                                "role",
                                "metric",
                            ]
                        ]
                    )
    cols = [
        "pricer",
        "cell_id",
        "gpu",
        "group",
        "probe",
        "num_tokens",
        "batch_size",
        "context_tokens",
        "measured_s",
        "predicted_s",
        "rel_error",
        "role",
    ]
    opdf = pd.concat(op_parts, ignore_index=True)
    opdf["rel_error"] = opdf["predicted_s"] / opdf["measured_s"] - 1
    met = pd.concat([p for p in metric_parts if len(p)], ignore_index=True)
    met = met.rename(columns={"measured_s": "measured", "predicted_s": "simulated"})
    met["gpu"] = met["cell_id"].map(data.cells.set_index("cell_id")["gpu"])
    met["source"] = met["cell_id"].map(C.source_of)
    met["rel_error"] = met["simulated"] / met["measured"] - 1
    for col in ("num_tokens", "batch_size", "context_tokens", "bytes"):
        met[col] = pd.array(met[col] if col in met else [None] * len(met), dtype="Int64")
    met = met[
        [
            "pricer",
            "source",
            "cell_id",
            "gpu",
            "metric",
            "measured",
            "simulated",
            "rel_error",
            "role",
            "num_tokens",
            "batch_size",
            "context_tokens",
            "bytes",
        ]
    ]
    return met.reset_index(drop=True), opdf[cols]


def _allreduce_held_out(ar: pd.DataFrame, gpu: Any, eff: Any, ref: Any) -> tuple[np.ndarray, np.ndarray]:
    """(seconds, in table) of one GPU's all-reduce points under the table-fidelity protocol: each curve's table
    is built from every other of its sizes (:func:`validation.components.profiles.allreduce_in_table`: True) and
    judged on the rest, the roofline ``(eff, ref)`` as its fallback."""
    cal = C.allreduce_in_table(ar)
    pred = np.empty(len(ar))
    for _, idx in ar.groupby("cell_id", sort=False).indices.items():
        d = ar.iloc[idx]
        table = C.allreduce_table(d[cal[idx]])
        pred[idx] = CP.predict_allreduce(d, gpu, eff, ref, tables={table.tp: table})
    return pred, cal


def _splitwise_tables(data: K.ComponentData, gpu: Any, it: pd.DataFrame, eff: Any, ref: Any) -> dict[str, Any]:
    """Splitwise cell -> table pricer from the Vidur TP=1 profile of the same GPU and model (another source; a
    calibration cell), scaled to the cell's TP by the roofline ``(eff, ref)``, with Vidur's all-reduce curve of
    the GPU at that TP where that curve calibrates (:data:`validation.protocol.rules.ALLREDUCE_CALIBRATION_GPUS`)."""
    out = {}
    g = gpu.name
    ar = data.allreduce_full[data.allreduce_full["gpu"] == g] if len(data.allreduce_full) else data.allreduce_full
    for cid in it["cell_id"].unique():
        spec, tp = data.specs[cid], data.tps[cid]
        vid = f"vidur/{g}/{spec.name}/tp1"  # type: ignore[attr-defined]
        f = data.full[data.full["cell_id"] == vid]
        if len(ar):
            cal = np.array([K.role(c, t) == "calibration" for c, t in zip(ar["cell_id"], ar["tp"], strict=True)])
            a = ar[(ar["tp"] == tp).to_numpy() & cal]
        else:
            a = ar
        if len(f):
            out[cid] = TablePerfModel(
                C.table_from_points(f, vid, g, spec.name, 1),  # type: ignore[attr-defined]
                CP.roofline(gpu, spec, tp, eff, ref),  # type: ignore[arg-type]
                CP.roofline(gpu, spec, 1, eff, ref),  # type: ignore[arg-type]
                all_reduce=C.allreduce_table(a) if tp > 1 and len(a) else None,
            )
    return out
