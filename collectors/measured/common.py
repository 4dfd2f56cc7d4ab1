"""What the measured-data collectors share: the result type, name normalisers, CSV checks and the atomic writer.

A measured collector reads one native format (a GPU profile, a serving run...) and returns a
:class:`MeasuredResult`: DataFrames named after :data:`collectors.measured.schema.TABLES` plus the ingest
accounting. As for trajectories (DESIGN §8), a bad file is skipped with its reason (:class:`collectors.base.Skip`,
usually through :func:`collectors.base.per_file` and :class:`collectors.base.BadInput`) and never silently dropped;
:func:`write_measured` validates before anything is written and writes all tables atomically.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from agentreplay.trace.io import write_tables
from collectors.base import BadInput, Skip
from collectors.measured.schema import MEASURED_SCHEMA_VERSION, TABLES

SCHEMA_VERSION_KEY = b"agentreplay.measured_schema_version"
TABLE_KEY = b"agentreplay.table"

KINDS = ("component", "end-to-end")
SCOPES = ("layer", "model", "op")
PHASES = ("prefill", "decode", "mixed")
STATS = ("mean", "median", "min", "single")


class MeasuredError(ValueError):
    """Measured tables violate the schema; the message names the table, column and first offending row."""


@dataclass(slots=True)
class MeasuredResult:
    """Measured tables (name -> DataFrame, names from ``schema.TABLES``) with the ingest accounting."""

    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    fmt: str = ""
    files_read: int = 0
    skips: list[Skip] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def count(self, name: str) -> int:
        df = self.tables.get(name)
        return 0 if df is None else len(df)

    def summary(self) -> dict[str, object]:
        return {
            "format": self.fmt,
            "files_read": self.files_read,
            **{name: self.count(name) for name in TABLES if name in self.tables},
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skips],
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------------- names

_GPU_RULES: tuple[tuple[str, str | None], ...] = (
    # (regex on the compact lower-case spelling, catalog name); first match wins, None = known but not in catalog
    (r"tpu", None),
    (r"pcap|powercap", None),  # a power-capped GPU is another operating point than the catalog's
    (r"gh200|gb200", None),
    (r"rtxpro6000", "rtxpro6000"),
    (r"6000ada", "a6000-ada"),
    (r"a6000", "a6000"),
    (r"3090", "rtx3090"),
    (r"4090", "rtx4090"),
    (r"l40s", "l40s"),
    (r"a4000", "a4000"),
    (r"a5000", "a5000"),
    (r"a40(?!\d)", "a40"),
    (r"a100", "a100"),  # refined below: 40 vs 80 GB
    (r"h100", "h100"),  # refined below: PCIe / NVL are not in the catalog
    (r"h200", "h200"),
    (r"b200", "b200"),
)


def normalize_gpu(raw: object) -> str | None:
    """Catalog GPU name for a source's spelling (``"NVIDIA H100 80GB HBM3"`` -> ``"h100-sxm"``), None if unknown.

    A100 without a 40 GB mark is the 80 GB part (what DGX-A100 profiles used); H100 is the SXM part unless the
    spelling says PCIe or NVL; TPUs, GH200/GB200 and power-capped runs are not catalog GPUs.
    """
    if raw is None or (isinstance(raw, float) and np.isnan(raw)):
        return None
    text = re.sub(r"[\s_]+", "-", str(raw).lower().replace("nvidia", "").strip())
    compact = re.sub(r"[^a-z0-9]", "", text)
    for pattern, name in _GPU_RULES:
        if not re.search(pattern, compact):
            continue
        if name == "a100":
            return "a100-40gb" if re.search(r"(?<!\d)40-?g", text) else "a100-80gb"
        if name == "h100":
            return None if re.search(r"pcie|nvl(?!ink)", compact) else "h100-sxm"
        return name
    return None


_MODEL_RULES: tuple[tuple[str, str], ...] = (
    (r"^(?:meta-)?llama-?(\d(?:\.\d)?)-(\d+)b(?![a-z0-9])", "llama-{0}-{1}b"),
    (r"^qwen(\d(?:\.\d)?)-(\d+)b-a(\d+)b(?![a-z0-9])", "qwen{0}-{1}b-a{2}b"),
    (r"^qwen(\d(?:\.\d)?)-(\d+)b(?![a-z0-9])", "qwen{0}-{1}b"),
    (r"^mixtral-(\d+)x(\d+)b(?![a-z0-9])", "mixtral-{0}x{1}b"),
    (r"^codellama-(\d+)b(?![a-z0-9])", "codellama-{0}b"),
    (r"^llama-?(\d)-scout-(\d+)b-(\d+)e(?![a-z0-9])", "llama-{0}-scout-{1}b-{2}e"),
)


def slug(raw: object) -> str:
    """Lower-case, path-safe spelling: runs of anything but ``[a-z0-9.]`` become one ``-``."""
    return re.sub(r"[^a-z0-9.]+", "-", str(raw).lower()).strip("-.")


def normalize_model(raw: object) -> str:
    """Catalog-style model name: ``meta-llama/Llama-3.1-8B-Instruct`` -> ``llama-3.1-8b``, ``llama2-70b`` ->
    ``llama-2-70b``, ``Qwen/Qwen3-30B-A3B-Instruct-2507`` -> ``qwen3-30b-a3b``,
    ``codellama/CodeLlama-34b-Instruct-hf`` -> ``codellama-34b``,
    ``RedHatAI/Llama-4-Scout-17B-16E-Instruct-FP8-dynamic`` -> ``llama-4-scout-17b-16e``; otherwise the slug of
    the name without its organisation and a trailing ``-hf`` (``microsoft/phi-2`` -> ``phi-2``)."""
    name = slug(str(raw).strip().rstrip("/").rsplit("/", 1)[-1])
    for pattern, fmt in _MODEL_RULES:
        m = re.match(pattern, name)
        if m:
            return fmt.format(*m.groups())
    return re.sub(r"-hf$", "", name)


def unique_id(base: str, taken: set[str]) -> str:
    """``base``, or ``base~2``, ``base~3``... so two source folders never share a cell id; records it in taken."""
    cid, k = base, 1
    while cid in taken:
        k += 1
        cid = f"{base}~{k}"
    taken.add(cid)
    return cid


def rel(path: Path, root: Path) -> str:
    """``path`` relative to the collected root (a file given directly is named by its file name)."""
    base = root if root.is_dir() else root.parent
    try:
        return path.relative_to(base).as_posix()
    except ValueError:
        return path.as_posix()


def cell(
    cell_id: str,
    source: str,
    gpu_raw: str,
    model_raw: str,
    path: str,
    *,
    tp: int | None = None,
    dtype: str | None = None,
    engine: str | None = None,
    engine_version: str | None = None,
    n_gpus: int | None = None,
    model: str | None = None,
    config: Mapping[str, object] | None = None,
    kind: str = "component",
) -> dict[str, object]:
    """One ``cells`` row; ``gpu`` and ``model`` are normalised from the raw spellings unless given."""
    return {
        "cell_id": cell_id,
        "source": source,
        "kind": kind,
        "gpu": normalize_gpu(gpu_raw),
        "gpu_raw": gpu_raw,
        "n_gpus": n_gpus if n_gpus is not None else tp,
        "model": model or normalize_model(model_raw),
        "dtype": dtype,
        "tp": tp,
        "engine": engine,
        "engine_version": engine_version,
        "workload": None,
        "load": None,
        "config_json": None if config is None else json.dumps(dict(config), sort_keys=True, default=str),
        "path": path,
    }


def frame(rows: Iterable[dict] | Sequence[pd.DataFrame], name: str) -> pd.DataFrame:
    """Row dicts (or partial DataFrames) -> one DataFrame with the columns of table ``name`` in canonical order;
    integer columns become nullable ``Int64`` where their values allow it."""
    schema = TABLES[name]
    cols = [f.name for f in schema]
    rows = list(rows)
    if rows and isinstance(rows[0], pd.DataFrame):
        df = pd.concat(
            [r.reindex(columns=cols) for r in rows if len(r)] or [rows[0].reindex(columns=cols)], ignore_index=True
        )
    else:
        df = pd.DataFrame(rows).reindex(columns=cols)
    for f in schema:
        if pa.types.is_integer(f.type) and not pd.api.types.is_integer_dtype(df[f.name].dtype):
            with contextlib.suppress(TypeError, ValueError):
                df[f.name] = df[f.name].astype("Int64")
    return df


_INT = ("num_tokens", "batch_size", "context_tokens", "bytes")


def component(
    cell_id: str,
    op: object,
    scope: object,
    seconds: object,
    stat: object,
    *,
    phase: object = None,
    num_tokens: object = None,
    batch_size: object = None,
    context_tokens: object = None,
    nbytes: object = None,
) -> pd.DataFrame:
    """``component`` rows for one cell, vectorised: each argument is a scalar (broadcast) or a column."""
    sec = pd.Series(np.asarray(seconds, dtype=float))
    n, idx = len(sec), pd.RangeIndex(len(sec))
    values = {
        "cell_id": cell_id,
        "op": op,
        "scope": scope,
        "phase": phase,
        "num_tokens": num_tokens,
        "batch_size": batch_size,
        "context_tokens": context_tokens,
        "bytes": nbytes,
        "seconds": sec,
        "stat": stat,
    }
    out = {}
    for name, v in values.items():
        dtype = "Int64" if name in _INT else (float if name == "seconds" else object)
        if isinstance(v, pd.Series | np.ndarray | list):
            col = pd.Series(np.asarray(v) if not isinstance(v, pd.Series) else v.to_numpy(), index=idx)
        else:
            col = pd.Series([v] * n, index=idx)
        out[name] = col.astype(dtype)
    return pd.DataFrame(out, index=idx)


# --------------------------------------------------------------------------------------------- CSV checks


def read_csv(path: Path, required: Sequence[str], **kw) -> pd.DataFrame:
    """Read a CSV, raising :class:`BadInput` when unreadable, empty or missing a required column."""
    try:
        df = pd.read_csv(path, low_memory=False, **kw)
    except pd.errors.EmptyDataError as exc:
        raise BadInput("empty file") from exc
    except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
        raise BadInput(f"unreadable CSV ({type(exc).__name__}: {str(exc).strip()[:200]})") from exc
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise BadInput(f"missing column(s) {missing} (has {list(df.columns)[:12]})")
    if df.empty:
        raise BadInput("no data rows")
    return df


def numeric(df: pd.DataFrame, col: str, *, allow_missing: bool = False, integer: bool = False) -> pd.Series:
    """Column ``col`` as numbers; :class:`BadInput` names the first non-numeric (or missing) cell and its line."""
    raw = df[col]
    num = pd.to_numeric(raw, errors="coerce")
    bad = num.isna() & raw.notna()
    if not allow_missing:
        bad |= raw.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        what = "missing value" if pd.isna(raw.iloc[i]) else f"non-numeric value {raw.iloc[i]!r}"
        raise BadInput(f"column {col!r}: {what} at line {i + 2}")
    if integer:
        finite = num.dropna()
        if (finite != np.round(finite)).any():
            i = int(np.flatnonzero((num != np.round(num)) & num.notna())[0])
            raise BadInput(f"column {col!r}: non-integer value {raw.iloc[i]!r} at line {i + 2}")
        return num.astype("Int64")
    return num.astype(float)


def positive_times(values: pd.Series, col: str) -> pd.Series:
    """Check measured times are finite and > 0 (a zero or negative latency is not a measurement)."""
    v = values.to_numpy(dtype=float)
    bad = ~np.isfinite(v) | (v <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadInput(f"column {col!r}: non-positive or non-finite time {v[i]!r} at line {i + 2}")
    return values


def head_line(path: Path, n: int = 4096) -> str:
    """The first line of a file (at most ``n`` bytes), '' when unreadable: for cheap ``detect`` checks."""
    try:
        with open(path, "rb") as f:
            return f.read(n).split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    except OSError:
        return ""


def walk_files(root: Path, names: Iterable[str]) -> list[Path]:
    """Files named one of ``names`` at or under ``root`` (a file is its own listing), sorted."""
    wanted = set(names)
    if root.is_file():
        return [root] if root.name in wanted else []
    return sorted(Path(d) / f for d, _, fs in os.walk(root) for f in fs if f in wanted)


def first_file(root: Path, names: Iterable[str], *, max_entries: int = 20000) -> Path | None:
    """The first file named one of ``names`` under ``root``, giving up after ``max_entries`` entries (cheap detect)."""
    wanted, seen = set(names), 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for f in sorted(filenames):
            if f in wanted:
                return Path(dirpath) / f
        seen += len(filenames) + len(dirnames)
        if seen > max_entries:
            return None
    return None


# --------------------------------------------------------------------------------------------- writing


def _column(df: pd.DataFrame, f: pa.Field) -> pa.Array:
    if f.name not in df.columns:
        return pa.nulls(len(df), f.type)
    s = df[f.name]
    if pa.types.is_integer(f.type) and not pd.api.types.is_integer_dtype(s.dtype):
        s = pd.to_numeric(s, errors="raise").astype("Int64")
    return pa.array(s, type=f.type, from_pandas=True)


def to_tables(tables: Mapping[str, pd.DataFrame] | MeasuredResult) -> dict[str, pa.Table]:
    """DataFrames -> Arrow tables with the measured schema: canonical column order, missing nullable columns as
    nulls, schema version in the metadata. Unknown tables or columns and missing required columns are errors."""
    frames = tables.tables if isinstance(tables, MeasuredResult) else tables
    out = {}
    for name, df in frames.items():
        if name not in TABLES:
            raise MeasuredError(f"unknown measured table {name!r}; known: {list(TABLES)}")
        schema = TABLES[name]
        extra = [c for c in df.columns if c not in schema.names]
        if extra:
            raise MeasuredError(f"table {name!r}: columns {extra} are not in the measured schema")
        missing = [f.name for f in schema if not f.nullable and f.name not in df.columns]
        if missing:
            raise MeasuredError(f"table {name!r}: required column(s) {missing} missing")
        df = df.reset_index(drop=True)
        try:
            table = pa.Table.from_arrays([_column(df, f) for f in schema], schema=schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, ValueError, TypeError) as exc:
            raise MeasuredError(f"table {name!r}: {exc}") from exc
        meta = {SCHEMA_VERSION_KEY: MEASURED_SCHEMA_VERSION.encode(), TABLE_KEY: name.encode()}
        out[name] = table.replace_schema_metadata(meta)
    return out


def validate_measured(tables: Mapping[str, pd.DataFrame], *, where: str = "<memory>") -> None:
    """Check what consumers rely on; raise :class:`MeasuredError` naming the first violation.

    Required (non-nullable) columns have no nulls; ``cells`` exists, its ``cell_id`` is unique and every other
    table's ``cell_id`` has a cell; vocabularies (kind, scope, phase, stat) hold; ``seconds`` is finite and >= 0.
    """
    if "cells" not in tables or tables["cells"].empty:
        raise MeasuredError(f"{where}: no cells to write")
    _check_required(tables, where)
    cells = tables["cells"]
    dup = cells["cell_id"].duplicated()
    if dup.any():
        raise MeasuredError(f"{where}: cells.cell_id duplicated: {cells.loc[dup, 'cell_id'].iloc[0]!r}")
    _check_vocabularies(tables, where)
    _check_cell_ids(tables, where)
    _check_seconds(tables.get("component"), where)


def _check_required(tables: Mapping[str, pd.DataFrame], where: str) -> None:
    """Every table is a known one and its required (non-nullable) columns are present and hold no null."""
    for name, df in tables.items():
        if name not in TABLES:
            raise MeasuredError(f"{where}: unknown measured table {name!r}")
        for f in TABLES[name]:
            if f.nullable:
                continue
            if f.name not in df.columns:
                raise MeasuredError(f"{where}: {name}: required column {f.name!r} missing")
            nulls = df[f.name].isna()
            if nulls.any():
                i = int(np.flatnonzero(nulls.to_numpy())[0])
                cid = df["cell_id"].iloc[i] if "cell_id" in df.columns else "?"
                raise MeasuredError(f"{where}: {name}.{f.name} is null in row {i} (cell {cid!r})")


def _check_vocabularies(tables: Mapping[str, pd.DataFrame], where: str) -> None:
    """``cells.kind`` and the component table's ``scope``, ``phase`` and ``stat`` hold only their vocabulary."""
    vocab = {
        ("cells", "kind"): KINDS,
        ("component", "scope"): SCOPES,
        ("component", "phase"): PHASES,
        ("component", "stat"): STATS,
    }
    for (name, col), allowed in vocab.items():
        df = tables.get(name)
        if df is None or col not in df.columns:
            continue
        bad = df[col].notna() & ~df[col].isin(allowed)
        if bad.any():
            raise MeasuredError(f"{where}: {name}.{col} = {df.loc[bad, col].iloc[0]!r} not in {list(allowed)}")


def _check_cell_ids(tables: Mapping[str, pd.DataFrame], where: str) -> None:
    """Every other table's ``cell_id`` has a ``cells`` row."""
    known = set(tables["cells"]["cell_id"])
    for name, df in tables.items():
        if name == "cells" or "cell_id" not in df.columns:
            continue
        orphan = ~df["cell_id"].isin(known)
        if orphan.any():
            raise MeasuredError(f"{where}: {name}.cell_id {df.loc[orphan, 'cell_id'].iloc[0]!r} has no cells row")


def _check_seconds(comp: pd.DataFrame | None, where: str) -> None:
    """The component table's ``seconds`` are finite and >= 0."""
    if comp is None or not len(comp):
        return
    s = comp["seconds"].to_numpy(dtype=float)
    bad = ~np.isfinite(s) | (s < 0)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise MeasuredError(f"{where}: component.seconds = {s[i]!r} in row {i} (cell {comp['cell_id'].iloc[i]!r})")


def write_measured(
    out_dir: str | os.PathLike[str], result: MeasuredResult | Mapping[str, pd.DataFrame]
) -> dict[str, Path]:
    """Validate and write measured tables to ``out_dir/<table>.parquet`` atomically; returns the paths written.

    Nothing is written when validation fails; every table goes to a temporary file first and is renamed only
    after all were written (:func:`agentreplay.trace.io.write_tables`).
    """
    frames = dict(result.tables if isinstance(result, MeasuredResult) else result)
    validate_measured(frames, where=str(out_dir))
    return write_tables(out_dir, to_tables(frames))
