"""TOML loaders of the pricers' catalog files, beside the GPU catalog or packaged: ``roofline.toml`` (the refined
roofline's parameters per GPU, :func:`load_refinement`), ``tables.toml`` (measured tables, where each was measured
and all-reduce curves: :func:`load_tables`, :func:`load_table_origins`, :func:`load_allreduce_tables`; parsed once
per file version) and the path of ``calibration.json`` (what ``agentreplay calibrate`` fitted). Bad entries raise
ValueError naming the file and key."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path

from agentreplay.perf.catalog import Efficiency, GpuSpec, packaged_file
from agentreplay.perf.measured import AllReduceTable, MeasuredTable
from agentreplay.perf.refinement import EFFICIENCY_FIELDS, REFINEMENT_FIELDS, Refinement


@dataclass(frozen=True, slots=True)
class TableOrigin:
    """Where the table ``tables.toml`` holds under ``key`` (``gpu/model/tpN``) was measured.

    ``engine`` / ``engine_version``: the serving engine whose own forward pass was profiled, layer by layer, on
    the table's GPU, at the table's TP (each rank's shapes), dtype and KV-cache dtype (LLMServingSim's vLLM
    profiler: a *deployment profile*, DESIGN §5 "Profiled deployments"); None for a kernel profile taken outside
    a serving engine (HF-transformers modules, Vidur's operator re-implementations), which is no profile of a
    deployment however close its shapes.
    """

    key: str
    source: str  #: the measured cell the table was made from (``cell_id``)
    engine: str | None = None  #: e.g. ``"vllm"``
    engine_version: str | None = None  #: e.g. ``"0.19.0"``
    kv_dtype: str | None = None  #: the KV cache's dtype when the profile ran (deployment profiles)

    @property
    def deployment_profile(self) -> bool:
        """True when the table is the serving engine's own per-layer profile (``engine`` set)."""
        return self.engine is not None


def catalog_file(catalog: str | Path | None, name: str) -> Path:
    """Which ``name`` a catalog reads: the one beside the GPU catalog file ``catalog`` (its ``gpus.toml``) when
    it exists there, else the packaged one (:func:`agentreplay.perf.catalog.packaged_file`)."""
    if catalog is not None and (Path(catalog).parent / name).exists():
        return Path(catalog).parent / name
    return packaged_file(name)


def refinement_path(catalog: str | Path | None = None) -> Path:
    """``roofline.toml`` beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return catalog_file(catalog, "roofline.toml")


def tables_path(catalog: str | Path | None = None) -> Path:
    """``tables.toml`` beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return catalog_file(catalog, "tables.toml")


def calibration_path(catalog: str | Path | None = None) -> Path:
    """``calibration.json`` (what ``agentreplay calibrate`` fitted, on which points, or borrowed from which GPU)
    beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return catalog_file(catalog, "calibration.json")


def load_refinement(gpu: GpuSpec, path: str | Path | None = None) -> tuple[Efficiency, Refinement]:
    """``(efficiency, refinement)`` of ``gpu`` from a ``roofline.toml`` (``[gpu."name"]`` tables holding
    Efficiency keys, which override the GPU catalog's, and :class:`Refinement` keys). No entry: the catalog
    efficiency and no refinement."""
    p = Path(path) if path else packaged_file("roofline.toml")
    if not p.exists():
        return gpu.efficiency, Refinement()
    with open(p, "rb") as fh:
        entry = dict(tomllib.load(fh).get("gpu", {}).get(gpu.name, {}))
    unknown = set(entry) - set(EFFICIENCY_FIELDS) - set(REFINEMENT_FIELDS)
    if unknown:
        raise ValueError(f"{p}: gpu.{gpu.name}: unknown field(s) {sorted(unknown)}")
    eff = replace(gpu.efficiency, **{k: float(v) for k, v in entry.items() if k in EFFICIENCY_FIELDS})
    return eff, Refinement(**{k: float(v) for k, v in entry.items() if k in REFINEMENT_FIELDS})


def _stamp(path: str | Path | None) -> tuple[str, int, int] | None:
    """(resolved path, modification time, size) of a ``tables.toml`` (default: the packaged one), the key its
    parse is memoised on; None when the file does not exist."""
    p = Path(path) if path else packaged_file("tables.toml")
    if not p.exists():
        return None
    st = p.stat()
    return str(p.resolve()), st.st_mtime_ns, st.st_size


def load_tables(path: str | Path | None = None) -> dict[str, MeasuredTable]:
    """Every table in a ``tables.toml`` (default: the packaged ``catalog/tables.toml``), keyed
    ``gpu/model/tpN``; parsed once per (path, modification time)."""
    stamp = _stamp(path)
    return dict(_parse(*stamp)[0]) if stamp else {}


def load_allreduce_tables(path: str | Path | None = None) -> dict[str, AllReduceTable]:
    """Every ``[allreduce."gpu/tpN"]`` table in a ``tables.toml`` (default: the packaged one), keyed ``gpu/tpN``;
    parsed once per (path, modification time)."""
    stamp = _stamp(path)
    return dict(_parse(*stamp)[1]) if stamp else {}


def load_table_origins(path: str | Path | None = None) -> dict[str, TableOrigin]:
    """Where each table of a ``tables.toml`` (default: the packaged one) was measured (:class:`TableOrigin`),
    keyed as :func:`load_tables`; parsed once per (path, modification time)."""
    stamp = _stamp(path)
    return dict(_parse(*stamp)[2]) if stamp else {}


def _origin(path: str, key: str, t: dict) -> TableOrigin:
    """The :class:`TableOrigin` of ``[table."key"]``: ``engine``, ``engine_version`` and ``kv_dtype`` all or none."""
    given = [f for f in ("engine", "engine_version", "kv_dtype") if f in t]
    if given and len(given) != 3:
        raise ValueError(f'{path}: [table."{key}"]: engine, engine_version and kv_dtype go together, got {given}')
    return TableOrigin(
        key,
        str(t.get("source", key)),
        *(str(t[f]) if f in t else None for f in ("engine", "engine_version", "kv_dtype")),
    )


@cache
def _parse(
    path: str, _mtime_ns: int, _size: int
) -> tuple[dict[str, MeasuredTable], dict[str, AllReduceTable], dict[str, TableOrigin]]:
    """The ``[table]`` and ``[allreduce]`` sections of one ``tables.toml``, read once."""
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    tables = {}
    origins = {}
    for key, t in raw.get("table", {}).items():
        origins[key] = _origin(path, key, t)
        pf, dec = t.get("attention_prefill"), t.get("attention_decode")
        tables[key] = MeasuredTable(
            name=str(t.get("source", key)),
            gpu=str(t["gpu"]),
            model=str(t["model"]),
            tp=int(t["tp"]),
            dtype=str(t.get("dtype", "bf16")),
            ops={op: (v["tokens"], v["seconds"]) for op, v in t.get("op", {}).items()},
            attention_prefill=(pf["tokens"], pf["context"], pf["seconds"]) if pf else None,
            attention_decode=(dec["batch"], dec["context"], dec["seconds"]) if dec else None,
        )
    allreduce = {}
    for key, t in raw.get("allreduce", {}).items():
        try:
            allreduce[key] = AllReduceTable(
                name=str(t.get("source", key)),
                gpu=str(t["gpu"]),
                tp=int(t["tp"]),
                nbytes=[int(v) for v in t["bytes"]],
                seconds=[float(v) for v in t["seconds"]],
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f'{path}: [allreduce."{key}"]: {exc}') from exc
    return tables, allreduce, origins
