"""LLMServingSim GPU profiles (casys-kaist/LLMServingSim) -> measured ``cells`` + ``component``.

Two on-disk formats, both one folder per (GPU, model, TP[, variant]); each folder becomes one cell.

**v0** ``profiler/v0/perf_models/<GPU>/<org>/<model>/tp<N>/`` (source ``llmservingsim-v0``):

- ``layers.csv``: ``layer_name, input, kv_cache, tp_size, latency(ns)``. Written by the v0 layer profiler
  (``llm_profile/profiler/layers/main.py``): a one-decoder-layer HF-transformers model in fp16 runs a batch of one
  sequence of ``input`` tokens with ``kv_cache`` = 0 (prefill sweep, 1..2048 tokens); ``latency(ns)`` is
  ``int(median_ms * 1e6)`` over the repeats, so ``seconds = latency(ns) * 1e-9``, ``stat = median``. Rows become
  ``op = layer_name`` (native names: ``q_proj``, ``attn``, ``expert.w1``...), ``num_tokens = input``,
  ``batch_size = 1``, ``context_tokens = kv_cache``; ``scope = model`` for the once-per-forward operators
  (``embedding``, ``final_layernorm``, ``lm_head``; the HF ``lm_head`` runs on all ``input`` tokens) and
  ``layer`` for the per-decoder-layer ones; ``phase = prefill`` for ``attn``, null for the token-wise operators.
- ``attention.csv`` (some folders), Vidur's attention-profiler layout: ``time_stats.attn_{prefill,decode}.
  {min,max,mean,median,std}`` in **milliseconds** (Vidur's CUDA timer records ms), ``prefill_chunk_size,
  kv_cache_size, batch_size, is_prefill`` (+ model shape columns). Following Vidur's ``AttentionInput``, a prefill
  row is one sequence with ``prefill_chunk_size`` new tokens over ``kv_cache_size`` tokens already cached; a
  decode row is ``batch_size`` sequences of one new token, each over ``kv_cache_size`` cached tokens. The
  TPU-v6e folder uses ``prefill_chunk_size, kv_cache_size, batch_size, is_prefill, mean_ns, p50_ns, p90_ns,
  max_ns`` (nanoseconds; ``p50_ns`` is used as the median). Rows: ``op = attention``, ``scope = layer``,
  ``phase`` prefill/decode, ``num_tokens`` = chunk (prefill) or batch (decode), ``context_tokens =
  kv_cache_size``, ``stat = median``.

**perf** ``profiler/perf/<GPU>/<org>/<model>/<variant>/{meta.yaml, tp<N>/...}`` (source ``llmservingsim-perf``),
the vLLM-based layer-wise profiler (``profiler/README.md``: "Times are in microseconds"; each shot is the mean
of ``measurement_iterations`` timed forwards, so ``stat = mean``):

- ``dense.csv``: ``layer, tokens, time_us``: one decoder layer's operator (``qkv_proj``, ``layernorm``...) or a
  once-per-forward one (``embedding``, ``final_layernorm``: ``scope = model``) at ``tokens`` new tokens.
- ``per_sequence.csv``: ``layer, sequences, time_us``: ``lm_head`` and ``sampler``, once per forward over
  ``sequences`` sequences (``num_tokens = batch_size = sequences``, ``scope = model``).
- ``attention.csv``: ``prefill_chunk, kv_prefill, n_decode, kv_decode, time_us`` (newer versions add ``layer``
  and ``decode_q_len``): one prefill chunk over ``kv_prefill`` cached tokens plus ``n_decode`` decodes over
  ``kv_decode`` each. Pure-prefill rows (``n_decode = 0``) and pure-decode rows (``prefill_chunk = 0``) are
  ingested; mixed shots are not, because a component row has one ``context_tokens`` (counted in the notes).
- ``meta.yaml`` (read with a small ``key: value`` reader, no PyYAML): ``hardware``, ``gpu``, ``model``,
  ``variant``, ``vllm_version``... fill the cell (``dtype`` = variant, ``engine = vllm``).
- ``moe.csv`` (per activated-expert count), ``skew.csv`` / ``skew_fit.csv`` (heterogeneous-batch corrections),
  ``step.csv``, ``mtp.csv``, ``linear_attention.csv``: not ingested (counted in the notes).

A bad file (unreadable, missing column, non-numeric or missing cell, non-positive time, ``tp_size`` disagreeing
with its folder) is skipped with its reason; its siblings are still ingested.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from collectors.base import BadInput, Skip, per_file
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

MODEL_SCOPE_OPS = frozenset({"embedding", "final_layernorm", "lm_head", "sampler"})
V0_LAYERS = ("layer_name", "input", "kv_cache", "tp_size", "latency(ns)")
V0_ATTN = ("prefill_chunk_size", "kv_cache_size", "batch_size", "is_prefill")
PERF_ATTN = ("prefill_chunk", "kv_prefill", "n_decode", "kv_decode", "time_us")
INGESTED = ("layers.csv", "attention.csv", "dense.csv", "per_sequence.csv")
NOT_INGESTED = ("moe.csv", "skew.csv", "skew_fit.csv", "step.csv", "mtp.csv", "linear_attention.csv")


def read_meta(path: Path) -> dict[str, object]:
    """Minimal reader for the profiler's ``meta.yaml``: ``key: value`` lines, nested by two-space indentation.

    Scalars are strings with surrounding quotes removed; list and other YAML syntax is kept verbatim.
    """
    root: dict[str, object] = {}
    stack: list[tuple[int, dict[str, object]]] = [(-1, root)]
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip() or line.lstrip().startswith("#") or ":" not in line:
            continue
        indent = len(line) - len(line.lstrip(" "))
        key, _, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        value = value.strip()
        if value:
            parent[key.strip()] = value.strip("'\"")
        else:
            child: dict[str, object] = {}
            parent[key.strip()] = child
            stack.append((indent, child))
    return root


def _up(folder: Path, n: int) -> str:
    """Name of the n-th folder above ``folder`` ('unknown' past the file system root)."""
    parents = folder.resolve().parents
    return parents[n].name or "unknown" if n < len(parents) else "unknown"


def _bool(df: pd.DataFrame, col: str) -> np.ndarray:
    s = df[col].astype(str).str.strip().str.lower()
    ok = s.isin(["true", "false", "1", "0"])
    if not ok.all():
        i = int(np.flatnonzero(~ok.to_numpy())[0])
        raise BadInput(f"column {col!r}: not a boolean {df[col].iloc[i]!r} at line {i + 2}")
    return s.isin(["true", "1"]).to_numpy()


def _count(df: pd.DataFrame, col: str) -> np.ndarray:
    """A non-negative integer column (token, sequence or context counts) as int64."""
    values = numeric(df, col, integer=True).to_numpy(dtype=np.int64)
    bad = values < 0
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise BadInput(f"column {col!r}: negative value {values[i]} at line {i + 2}")
    return values


def _scope(ops: pd.Series) -> np.ndarray:
    return np.where(ops.isin(MODEL_SCOPE_OPS), "model", "layer")


def parse_v0_layers(path: Path, cid: str, tp: int) -> pd.DataFrame:
    df = read_csv(path, V0_LAYERS)
    ops = df["layer_name"].astype(str).str.strip()
    tokens, kv, tps = _count(df, "input"), _count(df, "kv_cache"), _count(df, "tp_size")
    if (tps != tp).any():
        raise BadInput(f"tp_size {int(tps[tps != tp][0])} in the file but the folder says tp{tp}")
    ns = positive_times(numeric(df, "latency(ns)"), "latency(ns)")
    return component(
        cid,
        ops,
        _scope(ops),
        ns.to_numpy() * 1e-9,
        "median",
        phase=np.where(ops == "attn", "prefill", None),
        num_tokens=tokens,
        batch_size=1,
        context_tokens=kv,
    )


def parse_v0_attention(path: Path, cid: str) -> pd.DataFrame:
    df = read_csv(path, V0_ATTN)
    prefill = _bool(df, "is_prefill")
    chunk, kv, batch = _count(df, "prefill_chunk_size"), _count(df, "kv_cache_size"), _count(df, "batch_size")
    pre_col, dec_col = "time_stats.attn_prefill.median", "time_stats.attn_decode.median"
    if pre_col in df.columns and dec_col in df.columns:
        t = np.where(prefill, numeric(df, pre_col, allow_missing=True), numeric(df, dec_col, allow_missing=True))
        col, scale = f"{pre_col} / {dec_col}", 1e-3  # Vidur time_stats are milliseconds
    elif "p50_ns" in df.columns:
        t, col, scale = numeric(df, "p50_ns").to_numpy(), "p50_ns", 1e-9
    else:
        raise BadInput(f"missing time columns ({pre_col} and {dec_col}, or p50_ns)")
    seconds = positive_times(pd.Series(t), col).to_numpy() * scale
    return component(
        cid,
        "attention",
        "layer",
        seconds,
        "median",
        phase=np.where(prefill, "prefill", "decode"),
        num_tokens=np.where(prefill, chunk, batch),
        batch_size=batch,
        context_tokens=kv,
    )


def parse_perf_dense(path: Path, cid: str) -> pd.DataFrame:
    df = read_csv(path, ("layer", "tokens", "time_us"))
    ops = df["layer"].astype(str).str.strip()
    tokens = _count(df, "tokens")
    us = positive_times(numeric(df, "time_us"), "time_us")
    return component(cid, ops, _scope(ops), us.to_numpy() * 1e-6, "mean", num_tokens=tokens)


def parse_perf_per_sequence(path: Path, cid: str) -> pd.DataFrame:
    df = read_csv(path, ("layer", "sequences", "time_us"))
    seqs = _count(df, "sequences")
    us = positive_times(numeric(df, "time_us"), "time_us")
    return component(
        cid,
        df["layer"].astype(str).str.strip(),
        "model",
        us.to_numpy() * 1e-6,
        "mean",
        num_tokens=seqs,
        batch_size=seqs,
    )


def parse_perf_attention(path: Path, cid: str, mixed: Counter) -> pd.DataFrame:
    df = read_csv(path, PERF_ATTN)
    pc, kvp, nd, kvd = (_count(df, c) for c in PERF_ATTN[:4])
    us = positive_times(numeric(df, "time_us"), "time_us")
    q = _count(df, "decode_q_len") if "decode_q_len" in df.columns else 1
    empty = (pc == 0) & (nd == 0)
    if empty.any():
        raise BadInput(f"a shot with no prefill and no decode at line {int(np.flatnonzero(empty)[0]) + 2}")
    pure_prefill, pure_decode = nd == 0, pc == 0
    keep = pure_prefill | pure_decode
    mixed[path.as_posix()] = int((~keep).sum())
    ops = df["layer"].astype(str).str.strip() if "layer" in df.columns else pd.Series("attention", index=df.index)
    decode_tokens = nd * q
    k = keep
    return component(
        cid,
        ops[k].to_numpy(),
        "layer",
        us[k].to_numpy() * 1e-6,
        "mean",
        phase=np.where(pure_prefill, "prefill", "decode")[k],
        num_tokens=np.where(pure_prefill, pc, decode_tokens)[k],
        batch_size=np.where(pure_prefill, 1, nd)[k],
        context_tokens=np.where(pure_prefill, kvp, kvd)[k],
    )


class LLMServingSimProfileCollector:
    name = "llmservingsim-profile"
    description = "LLMServingSim per-layer GPU profiles (v0 layers.csv/attention.csv and perf/ dense.csv...)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else first_file(path, ("layers.csv", "dense.csv"))
        if f is None:
            return False
        head = head_line(f)
        return (f.name == "layers.csv" and head.startswith("layer_name,input,kv_cache")) or (
            f.name == "dense.csv" and head.startswith("layer,tokens,time_us")
        )

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        folders: dict[Path, list[Path]] = defaultdict(list)
        for f in walk_files(root, INGESTED):
            folders[f.parent].append(f)
        not_ingested = Counter(f.name for f in walk_files(root, NOT_INGESTED))
        cells, parts, taken, mixed = [], [], set(), Counter()
        for folder, files in sorted(folders.items()):
            m = re.fullmatch(r"tp(\d+)", folder.name)
            if m is None:
                result.skips.extend(Skip(str(f), f"not in a tp<N> folder ({folder.name!r})") for f in files)
                continue
            tp = int(m.group(1))
            names = {f.name for f in files}
            v0 = "layers.csv" in names or (
                names == {"attention.csv"} and not head_line(files[0]).startswith("prefill_chunk,")
            )
            row, parsers = (
                self._v0_cell(root, folder, tp, taken) if v0 else self._perf_cell(root, folder, tp, taken, result)
            )
            got = []
            for _, df in per_file(
                sorted(files), lambda p, ps=parsers, c=row["cell_id"]: ps[p.name](p, c, mixed), result.skips
            ):
                got.append(df)
                result.files_read += 1
            if got:
                cells.append(row)
                parts.extend(got)
        result.tables = {"cells": frame(cells, "cells"), "component": frame(parts, "component")}
        if sum(mixed.values()):
            result.notes.append(
                f"{sum(mixed.values())} mixed prefill+decode attention shots in "
                f"{sum(1 for v in mixed.values() if v)} perf attention.csv file(s) not ingested "
                "(one context per component row)"
            )
        if not_ingested:
            result.notes.append(
                "not ingested (no component-row equivalent): "
                + ", ".join(f"{n} {name}" for name, n in sorted(not_ingested.items()))
            )
        return result

    @staticmethod
    def _v0_cell(root: Path, folder: Path, tp: int, taken: set[str]):
        gpu_raw, org, model_dir = _up(folder, 2), _up(folder, 1), _up(folder, 0)
        model = normalize_model(model_dir)
        gpu = normalize_gpu(gpu_raw)
        cid = unique_id(f"llmservingsim-v0/{gpu or slug(gpu_raw)}/{model}/tp{tp}", taken)
        row = cell(
            cid,
            "llmservingsim-v0",
            gpu_raw,
            f"{org}/{model_dir}",
            rel(folder, root),
            tp=tp,
            dtype=None if gpu_raw.lower().startswith("tpu") else "fp16",
            config={
                "model_raw": f"{org}/{model_dir}",
                "layers": "HF transformers modules, one decoder layer, batch 1, kv 0; median of repeats",
            },
        )
        parsers = {
            "layers.csv": lambda p, c, _m: parse_v0_layers(p, c, tp),
            "attention.csv": lambda p, c, _m: parse_v0_attention(p, c),
        }
        return row, parsers

    @staticmethod
    def _perf_cell(root: Path, folder: Path, tp: int, taken: set[str], result: MeasuredResult):
        variant_dir = folder.resolve().parent
        meta: dict[str, object] = {}
        meta_path = variant_dir / "meta.yaml"
        if meta_path.is_file():
            try:
                meta = read_meta(meta_path)
            except OSError as exc:
                result.skips.append(Skip(str(meta_path), f"{type(exc).__name__}: {exc}"))
        gpu_raw = str(meta.get("hardware") or _up(variant_dir, 2))
        model_raw = str(meta.get("model") or f"{_up(variant_dir, 1)}/{_up(variant_dir, 0)}")
        variant = str(meta.get("variant") or variant_dir.name)
        gpu = normalize_gpu(gpu_raw) or normalize_gpu(meta.get("gpu"))
        model = normalize_model(model_raw)
        cid = unique_id(f"llmservingsim-perf/{gpu or slug(gpu_raw)}/{model}/{slug(variant)}/tp{tp}", taken)
        config = {k: v for k, v in meta.items() if not isinstance(v, dict)}
        config.update({k: meta[k] for k in ("engine_effective", "attention_grid") if isinstance(meta.get(k), dict)})
        config["model_raw"] = model_raw
        row = cell(
            cid,
            "llmservingsim-perf",
            gpu_raw,
            model_raw,
            rel(folder, root),
            tp=tp,
            dtype=variant,
            engine="vllm",
            engine_version=meta.get("vllm_version"),
            config=config,
        )
        row["gpu"] = gpu
        parsers = {
            "dense.csv": lambda p, c, _m: parse_perf_dense(p, c),
            "per_sequence.csv": lambda p, c, _m: parse_perf_per_sequence(p, c),
            "attention.csv": parse_perf_attention,
        }
        return row, parsers
