"""Vidur operator profiles (microsoft/vidur ``data/profiling/``) -> measured ``cells`` + ``component``.

**Compute** ``compute/<gpu>/<org>/<model>/mlp.csv``: one row per (``num_tokens``,
``num_tensor_parallel_workers``) with, per operator, ``time_stats.<op>.{min,max,mean,median,std}`` in
**milliseconds** (Vidur's ``CudaTimer`` records CUDA time ``* 1e-3`` "to ms"), plus the model shape
(``n_head, n_kv_head, n_embd, n_expanded_embd, vocab_size, use_gated_mlp``). Operators (Vidur's names kept):
``emb``, ``input_layernorm``, ``attn_pre_proj`` (QKV projection), ``attn_rope``, ``attn_post_proj`` (output
projection), ``post_attention_layernorm``, ``mlp_up_proj`` (gate+up), ``mlp_act``, ``mlp_down_proj``, ``add``
(residual add). One cell per (gpu, model, TP = ``num_tensor_parallel_workers``); each (row, operator) becomes a
component row ``seconds = median_ms / 1000`` (``stat = median``; the mean is used, and recorded, only where a
file has no median column), ``num_tokens``, ``scope = model`` for ``emb`` (once per forward) and ``layer`` for the
rest (one decoder layer's instance; the shape the profiler ran is per TP rank). Rows that repeat a
(``num_tokens``, TP) point are kept: they are separate measurements.

**Network** ``network/<topology>/{all_reduce,send_recv}.csv``: ``time_stats.<collective>.{min,...}`` (ms),
``rank, num_workers, size, collective, devices_per_node, max_devices_per_node``. Vidur's collective profiler
writes ``size = elements * 2``, "bytes" of an fp16 buffer (``collectives_wrapper.py``). One cell per (topology,
collective, ``num_workers``, ``devices_per_node``) with ``model = "none"``, ``n_gpus = num_workers`` and, for
all-reduce, ``tp = num_workers``; rows ``op`` = the collective, ``scope = op``, ``bytes = size``,
``seconds = median_ms / 1000``. The GPU is the topology's prefix (``a100_dgx`` -> ``a100-80gb``), the topology
is kept in ``gpu_raw`` and the cell id.

GPU names: Vidur's ``a100`` is the 80 GB part, ``h100`` the SXM part (DGX), per ``normalize_gpu``.
Bad files (unreadable, missing column, non-numeric or missing cell, non-positive time) are skipped with the
reason; the rest are ingested. ``attention.csv`` was not brought in (PROVENANCE) and is not read here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from collectors.base import BadInput, per_file
from collectors.measured.common import (
    MeasuredResult,
    cell,
    component,
    first_file,
    frame,
    head_line,
    normalize_gpu,
    normalize_model,
    numeric,
    positive_times,
    read_csv,
    rel,
    slug,
    unique_id,
    walk_files,
)

SOURCE = "vidur"
NO_MODEL = "none"
SHAPE = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp")
MODEL_SCOPE_OPS = frozenset({"emb"})
NETWORK_FILES = ("all_reduce.csv", "send_recv.csv")
STAT_PREFERENCE = ("median", "mean")


def _ops(columns: pd.Index, prefix: str = "time_stats.") -> dict[str, tuple[str, str]]:
    """operator -> (column, stat) using the first available stat of :data:`STAT_PREFERENCE`."""
    stats: dict[str, dict[str, str]] = {}
    for c in columns:
        m = re.fullmatch(re.escape(prefix) + r"(.+)\.(\w+)", str(c))
        if m:
            stats.setdefault(m.group(1), {})[m.group(2)] = str(c)
    out = {}
    for op, by_stat in stats.items():
        for stat in STAT_PREFERENCE:
            if stat in by_stat:
                out[op] = (by_stat[stat], stat)
                break
    return out


def _ints(df: pd.DataFrame, col: str, *, minimum: int) -> np.ndarray:
    values = numeric(df, col, integer=True).to_numpy(dtype=np.int64)
    bad = values < minimum
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadInput(f"column {col!r}: value {values[i]} below {minimum} at line {i + 2}")
    return values


def parse_mlp(path: Path) -> tuple[dict[int, pd.DataFrame], dict[int, dict[str, object]]]:
    """``mlp.csv`` -> (component rows keyed by TP with a placeholder cell id, model shape per TP)."""
    df = read_csv(path, ("num_tokens", "num_tensor_parallel_workers"))
    ops = _ops(df.columns)
    if not ops:
        raise BadInput("no time_stats.<op>.median (or .mean) columns")
    tokens = _ints(df, "num_tokens", minimum=1)
    tps = _ints(df, "num_tensor_parallel_workers", minimum=1)
    ms, names, stats = [], [], []
    for op, (col, stat) in sorted(ops.items()):
        ms.append(positive_times(numeric(df, col), col).to_numpy())
        names.append(np.full(len(df), op, dtype=object))
        stats.append(np.full(len(df), stat, dtype=object))
    op_col = np.concatenate(names)
    rows = component(
        "",
        op_col,
        np.where(np.isin(op_col, list(MODEL_SCOPE_OPS)), "model", "layer"),
        np.concatenate(ms) * 1e-3,
        np.concatenate(stats),
        num_tokens=np.tile(tokens, len(ops)),
    )
    tp_col = np.tile(tps, len(ops))
    by_tp = {int(tp): rows[tp_col == tp].reset_index(drop=True) for tp in np.unique(tps)}
    shapes = {}
    for tp in by_tp:
        first = df.loc[tps == tp].iloc[0]
        shapes[tp] = {c: (first[c].item() if hasattr(first[c], "item") else first[c]) for c in SHAPE if c in df.columns}
    return by_tp, shapes


def parse_network(path: Path) -> dict[tuple[str, int, int], pd.DataFrame]:
    """``all_reduce.csv`` / ``send_recv.csv`` -> rows keyed by (collective, num_workers, devices_per_node)."""
    df = read_csv(path, ("num_workers", "size", "devices_per_node"))
    ops = _ops(df.columns)
    if len(ops) != 1:
        raise BadInput(f"expected the time_stats of one collective, found {sorted(ops) or 'none'}")
    ((collective, (col, stat)),) = ops.items()
    if "collective" in df.columns and not (df["collective"].astype(str) == collective).all():
        raise BadInput(f"column 'collective' disagrees with time_stats.{collective}.*")
    ms = positive_times(numeric(df, col), col).to_numpy()
    workers, per_node = _ints(df, "num_workers", minimum=1), _ints(df, "devices_per_node", minimum=1)
    size = _ints(df, "size", minimum=0)
    out = {}
    for w, d in sorted({(int(a), int(b)) for a, b in zip(workers, per_node, strict=True)}):
        k = (workers == w) & (per_node == d)
        out[(collective, w, d)] = component("", collective, "op", ms[k] * 1e-3, stat, nbytes=size[k])
    return out


class VidurProfileCollector:
    name = "vidur-profile"
    description = "Vidur operator profiles: compute/<gpu>/<org>/<model>/mlp.csv and network/<topology>/*.csv"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else first_file(path, ("mlp.csv", *NETWORK_FILES))
        if f is None or f.name not in ("mlp.csv", *NETWORK_FILES):
            return False
        head = head_line(f)
        return "time_stats." in head and ("num_tensor_parallel_workers" in head or "num_workers" in head)

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        cells, parts, taken = [], [], set()
        for f, (by_tp, shapes) in per_file(walk_files(root, ("mlp.csv",)), parse_mlp, result.skips):
            result.files_read += 1
            parents = [q.name for q in f.resolve().parents[:3]] + ["unknown"] * 3
            model_dir, org, gpu_raw = parents[0], parents[1], parents[2]
            model_raw = f"{org}/{model_dir}"
            model = normalize_model(model_raw)
            gpu = normalize_gpu(gpu_raw)
            for tp, df in sorted(by_tp.items()):
                cid = unique_id(f"{SOURCE}/{gpu or slug(gpu_raw)}/{model}/tp{tp}", taken)
                cells.append(
                    cell(
                        cid,
                        SOURCE,
                        gpu_raw,
                        model_raw,
                        rel(f, root),
                        tp=tp,
                        dtype="fp16",
                        engine="vidur-profiler",
                        config={"model_raw": model_raw, **shapes[tp]},
                    )
                )
                parts.append(df.assign(cell_id=cid))
        network = walk_files(root, NETWORK_FILES)
        for f, by_key in per_file(network, parse_network, result.skips):
            result.files_read += 1
            topology = f.resolve().parent.name
            for (collective, workers, per_node), df in by_key.items():
                cid = unique_id(f"{SOURCE}/network/{topology}/{collective}/n{workers}-pernode{per_node}", taken)
                row = cell(
                    cid,
                    SOURCE,
                    topology,
                    NO_MODEL,
                    rel(f, root),
                    n_gpus=workers,
                    model=NO_MODEL,
                    tp=workers if collective == "all_reduce" else None,
                    dtype="fp16",
                    engine="vidur-profiler",
                    config={
                        "topology": topology,
                        "collective": collective,
                        "num_workers": workers,
                        "devices_per_node": per_node,
                    },
                )
                cells.append(row)
                parts.append(df.assign(cell_id=cid))
        result.tables = {"cells": frame(cells, "cells"), "component": frame(parts, "component")}
        attention = walk_files(root, ("attention.csv",))
        if attention:
            result.notes.append(f"{len(attention)} Vidur attention.csv file(s) not ingested (not supported here)")
        return result
