"""The measured tables ``agentreplay calibrate`` ships for :class:`~agentreplay.perf.table_model.TablePerfModel`:
per (GPU, model, TP) of a calibration profile cell (:func:`shipped_tables`) and per single-node all-reduce curve
(:func:`shipped_allreduce`)."""

from __future__ import annotations

from typing import Final

from agentreplay.perf import list_gpus, list_models
from agentreplay.perf.table import AllReduceTable, MeasuredTable, allreduce_key, table_key
from validation import components as C
from validation import protocol as P
from validation.calibrate_data import ComponentData, role
from validation.calibrate_settings import FIT_EXCLUDE

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
    cids = sorted(
        (c for c in data.full["cell_id"].unique() if role(c, data.tps[c]) == P.CALIBRATION),
        key=lambda c: (rank.get(C.source_of(c), 99), c),
    )
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
        if (
            not isinstance(g, str)
            or g not in known
            or role(str(d["cell_id"].iloc[0]), int(d["tp"].iloc[0])) != P.CALIBRATION
        ):
            continue
        key = allreduce_key(g, int(d["tp"].iloc[0]))
        if key not in out:
            out[key] = C.allreduce_table(d)
    return out
