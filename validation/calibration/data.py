"""The component points ``agentreplay calibrate`` fits and judges (:class:`ComponentData`), each with its role
(whole cells, :data:`SPLIT`), the rows that enter a fit, and the error tables of a fitted model."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Final

import numpy as np
import pandas as pd

from agentreplay.perf import Efficiency, GpuSpec, load_gpu
from validation.calibration.settings import FIT_EXCLUDE
from validation.components import predict as CP
from validation.components import profiles as C
from validation.measured import Measured
from validation.protocol import rules as P

SPLIT: Final = P.SPLIT  #: the whole-cell split, declared in validation/protocol/rules.py


def role(cell_id: str, tp: int) -> str:
    """``calibration`` or ``validation`` of a whole component cell (:func:`validation.protocol.rules.cell_role`)."""
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
    return (
        CP.predict_ops(o, gpu, data.specs, data.tps, eff),  # type: ignore[arg-type]
        CP.predict_iterations(i, gpu, data.specs, data.tps, eff),  # type: ignore[arg-type]
        CP.predict_allreduce(a, gpu, eff),
    )


def fittable(ops: pd.DataFrame) -> np.ndarray:
    """True for the op rows of a kind the fit uses (not :data:`FIT_EXCLUDE`), whatever their role."""
    return np.array(
        [(C.source_of(c), g) not in FIT_EXCLUDE for c, g in zip(ops["cell_id"], ops["group"], strict=True)], dtype=bool
    )


def fit_rows(data: ComponentData, gpu: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The calibration rows of ``gpu`` that enter the fit (op rows without :data:`FIT_EXCLUDE`, all-reduce)."""
    o = data.ops[(data.ops["gpu"] == gpu) & (data.ops["role"] == "calibration")]
    o = o[fittable(o)]
    a = data.allreduce[(data.allreduce["gpu"] == gpu) & (data.allreduce["role"] == "calibration")]
    return o.reset_index(drop=True), a.reset_index(drop=True)


def mape(err: pd.Series | np.ndarray) -> float:
    """Mean absolute relative error in % (NaN without points; NaN errors propagate)."""
    return float(np.mean(np.abs(err)) * 100) if len(err) else float("nan")


def op_errors(data: ComponentData, effs: dict[str, Efficiency]) -> pd.DataFrame:
    """Per-operator-group rows with the model's prediction under ``effs`` and the signed relative error."""
    parts = []
    for g in sorted(set(data.ops["gpu"]) & set(effs)):
        gpu = dataclasses.replace(load_gpu(g), efficiency=effs[g])
        o = data.ops[data.ops["gpu"] == g].reset_index(drop=True)
        parts.append(o.assign(predicted_s=CP.predict_ops(o, gpu, data.specs, data.tps, effs[g])))  # type: ignore
    out = pd.concat(parts, ignore_index=True) if parts else data.ops.assign(predicted_s=np.nan)
    out["rel_error"] = out["predicted_s"] / out["measured_s"] - 1
    return out


def mape_table(ops: pd.DataFrame) -> pd.DataFrame:
    """MAPE (%) per GPU, operator group and role."""
    t = ops.groupby(["gpu", "group", "role"])["rel_error"].apply(mape).unstack("role")
    return t.reindex(columns=["calibration", "validation"])
