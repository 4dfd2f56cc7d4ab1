"""The measured tables ``agentreplay calibrate`` ships for :class:`~agentreplay.perf.table_model.TablePerfModel`:
per (GPU, model, TP) of a calibration profile cell or of a deployment profile (:func:`shipped_tables`, where each
came from: :func:`shipped_origins`) and per single-node all-reduce curve (:func:`shipped_allreduce`)."""

from __future__ import annotations

import dataclasses
import re
from typing import Final

import pandas as pd

from agentreplay.perf import list_gpus, list_models
from agentreplay.perf.table import AllReduceTable, MeasuredTable, TableOrigin, allreduce_key, table_key
from validation.calibration.data import ComponentData, role
from validation.calibration.settings import FIT_EXCLUDE
from validation.components import profiles as C
from validation.protocol import rules as P

#: Source preference when several profiles cover one (GPU, model, TP): serving-engine kernels first.
TABLE_SOURCES: Final = ("llmservingsim-perf", "vidur", "llmservingsim-v0")
#: Sources whose cells are *deployment profiles* (DESIGN §5 "Profiled deployments"): the serving engine's own
#: forward pass profiled layer by layer at each TP degree, as a user's own profiling run would be. LLMServingSim's
#: vLLM profiler runs every TP degree on one GPU with each rank's shapes (``profiler/core/engine.py``
#: ``fuse_engine_kwargs``: ``tensor_parallel_size=1``, heads, intermediate size and vocabulary divided by TP), so
#: its per-layer times hold no TP collective: LLMServingSim adds an ALLREDUCE after ``o_proj`` and ``down_proj``
#: itself (``serving/core/trace_generator.py`` ``_emit_sequence``, ``_TP_ALLREDUCE_AFTER``), simulated by
#: ASTRA-Sim; the table pricer adds its own all-reduces the same way (measured curve or the roofline's). Their
#: tables ship at every TP; their TP>1 cells stay validation cells of the table pricer's out-of-cell check (TP=1
#: scaled, :func:`validation.components.pricers.out_of_cell_tables`, which builds its own tables).
DEPLOYMENT_PROFILE_SOURCES: Final = ("llmservingsim-perf",)
#: A deployment profile's variant (LLMServingSim names it from the weight and KV dtypes: ``bf16``, ``bf16-kvfp8``,
#: ``fp8-kvfp8``): weight dtype, then the KV cache's when it differs from the activations' (bf16).
_VARIANT: Final = re.compile(r"(?P<w>bf16|fp8)(?:-kv(?P<kv>fp8))?")


def variant_dtypes(variant: object) -> tuple[str, str] | None:
    """``(dtype, kv_dtype)`` of a deployment profile's variant; None for one the simulator cannot name (a
    quantization scheme, an experiment's own name)."""
    m = _VARIANT.fullmatch(str(variant))
    return None if m is None else (m["w"], m["kv"] or "bf16")


def deployment_profile(cell: pd.Series) -> TableOrigin | None:
    """The origin of a deployment profile (a cell of :data:`DEPLOYMENT_PROFILE_SOURCES` recording its engine,
    engine version and a variant the simulator can name: :func:`variant_dtypes`), None for any other cell."""
    cid = str(cell["cell_id"])
    engine, version, dtypes = cell["engine"], cell["engine_version"], variant_dtypes(cell["dtype"])
    if C.source_of(cid) not in DEPLOYMENT_PROFILE_SOURCES or dtypes is None:
        return None
    if not isinstance(engine, str) or not isinstance(version, str):
        return None
    return TableOrigin(cid, cid, engine, version, dtypes[1])


def _profiles(data: ComponentData) -> dict[str, TableOrigin]:
    """Deployment profiles among the component cells, by cell id."""
    out = {}
    for _, cell in data.cells.iterrows():
        origin = deployment_profile(cell)
        if origin is not None:
            out[origin.source] = origin
    return out


def shipped_tables(data: ComponentData) -> dict[str, MeasuredTable]:
    """The measured tables ``TablePerfModel.from_names`` reads: every calibration profile cell (TP=1,
    :mod:`validation.protocol.rules`) of a catalog GPU and model, and every deployment profile
    (:func:`deployment_profile`) at its own TP, all its points (dense curves at
    :data:`validation.components.profiles.TABLE_POINTS` log-spaced token counts, attention grids whole), one source per
    (GPU, model, TP) by :data:`TABLE_SOURCES`; HF-eager modules of LLMServingSim v0 (:data:`FIT_EXCLUDE`) are
    left to the roofline, as in the fit. A deployment profile's table carries its variant's weight dtype; one of a
    KV dtype other than the activations' is not shipped (one table per (GPU, model, TP)). Other validation cells
    ship no table: ``from_names`` scales the table of the nearest TP."""
    models = set(list_models())
    profiles = _profiles(data)
    out: dict[str, MeasuredTable] = {}
    rank = {s: i for i, s in enumerate(TABLE_SOURCES)}
    cids = sorted(
        (c for c in data.full["cell_id"].unique() if c in profiles or role(c, data.tps[c]) == P.CALIBRATION),
        key=lambda c: (rank.get(C.source_of(c), 99), c),
    )
    info = data.cells.set_index("cell_id")
    for cid in cids:
        spec, src = data.specs[cid], C.source_of(cid)
        name = spec.name  # type: ignore[attr-defined]
        dtype = variant_dtypes(info.loc[cid, "dtype"]) if cid in profiles else ("bf16", "bf16")
        if name not in models or dtype is None or dtype[1] != "bf16":
            continue
        f = data.full[data.full["cell_id"] == cid]
        f = f[[(src, grp) not in FIT_EXCLUDE for grp in f["group"]]]
        key = table_key(str(f["gpu"].iloc[0]), name, data.tps[cid]) if len(f) else ""
        if not len(f) or key in out:
            continue
        table = C.table_from_points(f, cid, str(f["gpu"].iloc[0]), name, data.tps[cid])
        out[key] = dataclasses.replace(table, dtype=dtype[0])
    return out


def shipped_origins(data: ComponentData, tables: dict[str, MeasuredTable]) -> dict[str, TableOrigin]:
    """Where each of ``tables`` (:func:`shipped_tables`) was measured: the serving engine, its version and the KV
    dtype for a deployment profile (:class:`~agentreplay.perf.loaders.TableOrigin`), the cell alone otherwise."""
    profiles = _profiles(data)
    out = {}
    for key, t in tables.items():
        p = profiles.get(t.name)
        out[key] = TableOrigin(key, t.name) if p is None else dataclasses.replace(p, key=key)
    return out


def shipped_allreduce(data: ComponentData) -> dict[str, AllReduceTable]:
    """The all-reduce tables ``TablePerfModel.from_names`` reads: every calibration single-node all-reduce curve
    of a catalog GPU (:func:`validation.components.profiles.allreduce_points`,
    :data:`validation.components.profiles.TABLE_POINTS` log-spaced sizes; the 2- and 8-GPU curves,
    :mod:`validation.protocol.rules`), keyed ``gpu/tpN``; one curve per key (the first cell in name order)."""
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
