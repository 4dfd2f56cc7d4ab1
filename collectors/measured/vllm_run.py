"""A real vLLM serving run with per-request timestamps (LLMServingSim ``bench`` format) -> one end-to-end cell.

Native format: a run folder ``.../vllm/`` with (written by LLMServingSim ``bench/core/recorder.py``)

``requests.jsonl``
    One JSON object per request: ``request_id``, ``input_toks``, ``output_toks`` and vLLM's
    ``RequestStateStats`` timestamps ``arrival_time``, ``queued_ts``, ``scheduled_ts``, ``first_token_ts``,
    ``last_token_ts``, all in **seconds** but on **two clocks**: ``arrival_time`` is wall-clock epoch time
    (``time.time()`` in the frontend, ~1.7e9), the other four are the engine core's ``time.monotonic()``
    (seconds since boot, ~2.7e4 in the RTX 4090 run). The offset between the clocks is not recorded.
``meta.json``
    ``model``, ``vllm_version``, ``engine_kwargs`` (tensor/data parallel size, dtype, max_num_seqs,
    max_num_batched_tokens...), ``kv_cache`` (``num_gpu_blocks``, ``block_size``, ``gpu_memory_utilization``...),
    ``hardware`` (``device_name``...), ``resolved_config`` (vLLM's whole resolved config), ``dataset_path``.
    ``kv_cache``, ``hardware`` and ``resolved_config`` are absent from runs recorded by older versions of the
    recorder (``engine_kwargs`` only) and ``{}`` where collection failed (the recorder's docstring).
``../config.json`` (optional)
    LLMServingSim's cluster configuration for the same run; only its instance ``hardware`` is read, as a
    fallback GPU name when ``meta.json`` has no ``hardware.device_name``.

Mapping (times in seconds, relative to the first arrival):

- clocks: when ``arrival_time`` and the engine stamps are more than 1e5 s apart they are on different clocks;
  the engine stamps are then moved onto the arrival clock by ``offset = min_i(queued_ts_i - arrival_time_i)``,
  i.e. assuming the request that reached the scheduler fastest did so instantly. This keeps the real
  frontend-to-scheduler delay (0-0.2 s here, up to one engine step) inside TTFT, as the project defines it, and
  is a lower bound on the true offset. LLMServingSim's own ``validate.py`` instead uses ``queued_ts`` as the
  arrival; both TTFT means are given in the notes (they differ by ~0.03 s of ~65 s on the RTX 4090 run).
- ``requests``: ``arrival_s``, ``queued_s``, ``scheduled_s``, ``first_token_s``, ``last_token_s`` as above,
  ``input_tokens = input_toks``, ``output_tokens = output_toks``.
- ``metrics`` (project definitions, DESIGN §4): TTFT = first token - arrival; TPOT = (last token - first token)
  / (output tokens - 1), over requests with more than one output token; E2E = last token - arrival; quantiles
  by linear interpolation (numpy's default, what the source's summary uses); ``throughput_output_tok_s`` =
  output tokens / (last token of the run - first arrival), ``throughput_total_tok_s`` the same with input
  tokens added, ``throughput_req_s`` = requests / the same span; ``input_tokens_mean``, ``output_tokens_mean``,
  ``completed_requests``.
- cell: GPU from ``meta.hardware.device_name`` (else ``config.json``), model from ``meta.model``, dtype from
  ``engine_kwargs.dtype`` (``bfloat16`` -> ``bf16``; ``auto`` -> the resolved ``model_config.dtype``; ``fp8`` when
  ``model_config.quantization`` is ``fp8``), ``tp``, ``pp``, ``dp`` from the resolved ``parallel_config`` (else
  ``engine_kwargs``), ``n_gpus = tp x pp x dp``, engine ``vllm`` at ``vllm_version``; cell id
  ``vllm-run/<gpu>/<model>/tp<tp>[-pp<pp>][-dp<dp>]/<r>rps``; workload ``sharegpt <n> req @ <r> req/s`` where
  ``r`` comes from the dataset file name (``...-sps10.jsonl``) or else from the observed arrivals.
- ``config_json``: the flat KV / batching facts (``num_gpu_blocks``... None when not recorded), the raw
  ``engine_kwargs`` and ``kv_cache`` blocks, ``resolved_config`` trimmed to the deployment fields of its
  ``parallel_config``, ``cache_config``, ``scheduler_config``, ``model_config`` and ``compilation_config``
  plus the whole ``quant_config`` / ``speculative_config`` / ``lora_config`` / ``kv_transfer_config``
  (:data:`_RESOLVED_KEYS`), ``meta_file`` (the meta.json path, for error messages), ``meta_schema`` (which
  recorder variant: with or without ``kv_cache`` / ``resolved_config``) and the run's dataset, times and clock
  facts. :mod:`validation.e2e.deployment` reads the deployment from it. A run with a deployment the simulator does
  not model (data / expert / pipeline parallelism...) is still ingested: it is valid data, refused only when
  replayed.

Bad input -> :class:`~collectors.base.Skip` of the run naming the offending file: invalid or truncated JSON,
a missing or null field, a negative or decreasing lifecycle (arrival <= queued <= scheduled <= first <= last),
an unreadable ``meta.json`` or one without ``model`` / ``engine_kwargs``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from itertools import pairwise
from pathlib import Path

import numpy as np
import pandas as pd

from collectors.base import BadInput, Skip, per_file
from collectors.measured.common import (
    MeasuredResult,
    cell,
    first_file,
    frame,
    head_line,
    rel,
    slug,
    unique_id,
    walk_files,
)
from collectors.measured.schema import METRIC_NAMES

SOURCE = "vllm-run"
_TS = ("queued_ts", "scheduled_ts", "first_token_ts", "last_token_ts")
_SAME_CLOCK_S = 1e5  # two stamps further apart than this are on different clocks (as in the source's validate.py)
_DTYPES = {
    "bfloat16": "bf16",
    "bf16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp16": "fp16",
    "float32": "fp32",
    "fp8": "fp8",
}
_SCHED_KEYS = (
    "max_num_seqs",
    "max_num_batched_tokens",
    "enable_chunked_prefill",
    "policy",
    "async_scheduling",
    "long_prefill_token_threshold",
    "max_num_partial_prefills",
    "scheduler_reserve_full_isl",
    "max_num_scheduled_tokens",
)
_CACHE_KEYS = (
    "block_size",
    "gpu_memory_utilization",
    "enable_prefix_caching",
    "num_gpu_blocks",
    "cache_dtype",
    "prefix_caching_hash_algo",
    "kv_cache_memory_bytes",
    "num_gpu_blocks_override",
    "kv_offloading_size",
    "kv_offloading_backend",
    "kv_cache_size_tokens",
    "sliding_window",
)
#: What the deployment (validation.e2e.deployment) needs from each block of ``resolved_config``; None = the whole block
_RESOLVED_KEYS: dict[str, tuple[str, ...] | None] = {
    "parallel_config": (
        "tensor_parallel_size",
        "pipeline_parallel_size",
        "data_parallel_size",
        "data_parallel_size_local",
        "enable_expert_parallel",
        "decode_context_parallel_size",
        "prefill_context_parallel_size",
        "enable_dbo",
        "enable_eplb",
        "is_moe_model",
        "world_size",
        "distributed_executor_backend",
        "disable_custom_all_reduce",
    ),
    "cache_config": _CACHE_KEYS,
    "scheduler_config": _SCHED_KEYS,
    "model_config": ("dtype", "quantization", "max_model_len", "enforce_eager", "served_model_name"),
    "compilation_config": ("mode", "cudagraph_mode", "max_cudagraph_capture_size"),
    "quant_config": None,
    "speculative_config": None,
    "lora_config": None,
    "kv_transfer_config": None,
}


def metric_rows(cell_id: str, values: Mapping[str, float]) -> list[dict[str, object]]:
    """``metrics`` rows for one cell; every name must be in :data:`METRIC_NAMES` (a typo is a bug, not data)."""
    unknown = [k for k in values if k not in METRIC_NAMES]
    if unknown:
        raise ValueError(f"metric names {unknown} are not in schema.METRIC_NAMES")
    return [
        {"cell_id": cell_id, "metric": k, "value": float(v)}
        for k, v in values.items()
        if v is not None and np.isfinite(v)
    ]


def dist_stats(prefix: str, values: Iterable[float], quantiles: Iterable[int] = (50, 90, 95, 99)) -> dict[str, float]:
    """``<prefix>_mean_s`` and ``<prefix>_p<q>_s`` of ``values`` (linear interpolation), {} when empty."""
    v = np.asarray(list(values), dtype=float)
    if v.size == 0:
        return {}
    out = {f"{prefix}_mean_s": float(v.mean())}
    out.update({f"{prefix}_p{q}_s": float(np.percentile(v, q)) for q in quantiles})
    return out


def read_meta(path: Path) -> dict:
    """meta.json, checked for what the cell needs."""
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"invalid JSON ({exc})") from exc
    if not isinstance(meta, dict):
        raise BadInput("not a JSON object")
    for key, typ in (("model", str), ("engine_kwargs", dict)):
        if not isinstance(meta.get(key), typ):
            raise BadInput(f"field {key!r} missing or not a {typ.__name__}")
    return meta


def read_requests(path: Path) -> pd.DataFrame:
    """requests.jsonl -> DataFrame of the native fields, each line checked (fields present, lifecycle ordered)."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BadInput(f"line {n}: invalid or truncated JSON ({exc.msg})") from exc
            if not isinstance(r, dict):
                raise BadInput(f"line {n}: not a JSON object")
            for key in ("request_id", "input_toks", "output_toks", "arrival_time", *_TS):
                if r.get(key) is None:
                    raise BadInput(f"line {n}: field {key!r} missing or null")
            try:
                row = {
                    "request_id": str(r["request_id"]),
                    "input_toks": int(r["input_toks"]),
                    "output_toks": int(r["output_toks"]),
                    **{k: float(r[k]) for k in ("arrival_time", *_TS)},
                }
            except (TypeError, ValueError) as exc:
                raise BadInput(f"line {n}: non-numeric field ({exc})") from exc
            if row["input_toks"] < 0 or row["output_toks"] < 1:
                raise BadInput(
                    f"line {n}: input_toks={row['input_toks']}, output_toks={row['output_toks']} (need >= 0 and >= 1)"
                )
            stamps = [row[k] for k in ("arrival_time", *_TS)]
            if not all(np.isfinite(stamps)) or min(stamps) < 0:
                raise BadInput(f"line {n}: negative or non-finite timestamp")
            for a, b in pairwise(_TS):
                if row[b] < row[a]:
                    raise BadInput(f"line {n}: non-monotonic timestamps, {b}={row[b]!r} < {a}={row[a]!r}")
            rows.append(row)
    if not rows:
        raise BadInput("no requests")
    df = pd.DataFrame(rows)
    if df["request_id"].duplicated().any():
        raise BadInput(f"duplicate request_id {df.loc[df['request_id'].duplicated(), 'request_id'].iloc[0]!r}")
    return df


def align(df: pd.DataFrame) -> tuple[pd.DataFrame, dict[str, object]]:
    """Put every stamp on the arrival clock, relative to the first arrival; returns the table and the clock facts."""
    a = df["arrival_time"].to_numpy()
    q = df["queued_ts"].to_numpy()
    same = bool(np.all(np.abs(q - a) < _SAME_CLOCK_S))
    offset = 0.0 if same else float(np.min(q - a))
    if same and np.any(q < a):
        i = int(np.argmax(q < a))
        raise BadInput(f"request {df['request_id'].iloc[i]!r}: queued_ts before arrival_time")
    t0 = float(a.min())
    out = pd.DataFrame({"request_id": df["request_id"], "arrival_s": a - t0})
    for ts, col in zip(_TS, ("queued_s", "scheduled_s", "first_token_s", "last_token_s"), strict=True):
        out[col] = df[ts].to_numpy() - offset - t0
    out["input_tokens"] = df["input_toks"].to_numpy()
    out["output_tokens"] = df["output_toks"].to_numpy()
    clock = {
        "arrival_clock": "wall (epoch s)",
        "engine_clock": "same" if same else "monotonic (s)",
        "engine_minus_arrival_offset_s": offset,
        "first_arrival_epoch_s": t0,
        "queue_entry_delay_max_s": float(np.max(q - a - offset)),
        "alignment": "none needed" if same else "offset = min(queued_ts - arrival_time)",
    }
    return out, clock


def request_metrics(req: pd.DataFrame) -> dict[str, float]:
    """Aggregate metrics from aligned request rows (definitions in the module docstring)."""
    ttft = req["first_token_s"] - req["arrival_s"]
    e2e = req["last_token_s"] - req["arrival_s"]
    multi = req["output_tokens"] > 1
    tpot = (req["last_token_s"] - req["first_token_s"])[multi] / (req["output_tokens"][multi] - 1)
    span = float(req["last_token_s"].max() - req["arrival_s"].min())
    out_tok, in_tok = float(req["output_tokens"].sum()), float(req["input_tokens"].sum())
    m = {**dist_stats("ttft", ttft), **dist_stats("tpot", tpot), **dist_stats("e2e", e2e)}
    if span > 0:
        m.update(
            throughput_output_tok_s=out_tok / span,
            throughput_total_tok_s=(out_tok + in_tok) / span,
            throughput_req_s=len(req) / span,
        )
    m.update(
        input_tokens_mean=in_tok / len(req), output_tokens_mean=out_tok / len(req), completed_requests=float(len(req))
    )
    return m


def _rate(meta: dict, req: pd.DataFrame) -> tuple[str, str]:
    m = re.search(r"sps(\d+(?:\.\d+)?)", str(meta.get("dataset_path", "")))
    if m:
        return m.group(1), "dataset file name"
    span = float(req["arrival_s"].max())
    return (f"{(len(req) - 1) / span:.3g}" if span > 0 else "inf"), "observed arrivals"


def _gpu_raw(meta: dict, run_dir: Path) -> str | None:
    name = (meta.get("hardware") or {}).get("device_name")
    if name:
        return str(name)
    cfg = run_dir.parent / "config.json"
    try:
        nodes = json.loads(cfg.read_text())["nodes"]
        return str(nodes[0]["instances"][0]["hardware"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _resolved(meta: dict) -> dict[str, object]:
    """The blocks of ``resolved_config`` a deployment is read from (those the run recorded), trimmed to
    :data:`_RESOLVED_KEYS`; a block the run recorded as null stays null (e.g. no speculative decoding)."""
    resolved = meta.get("resolved_config")
    if not isinstance(resolved, dict):
        return {}
    out: dict[str, object] = {}
    for block, keys in _RESOLVED_KEYS.items():
        if block not in resolved:
            continue
        v = resolved[block]
        out[block] = {k: v[k] for k in keys if k in v} if keys is not None and isinstance(v, dict) else v
    return out


def _config(meta: dict, clock: dict, rate_from: str, meta_file: str) -> dict[str, object]:
    resolved = _resolved(meta)
    sched, cache = (
        {} if not isinstance(resolved.get(k), dict) else dict(resolved[k])  # type: ignore[arg-type]
        for k in ("scheduler_config", "cache_config")
    )
    kv = meta.get("kv_cache") if isinstance(meta.get("kv_cache"), dict) else {}
    ek = meta["engine_kwargs"]
    flat = {
        "num_gpu_blocks": kv.get("num_gpu_blocks", cache.get("num_gpu_blocks")),
        "block_size": kv.get("block_size", cache.get("block_size")),
        "num_kv_tokens": kv.get("num_kv_tokens"),
        "gpu_memory_utilization": kv.get("gpu_memory_utilization", cache.get("gpu_memory_utilization")),
        "enable_prefix_caching": kv.get("enable_prefix_caching", cache.get("enable_prefix_caching")),
        "max_num_seqs": sched.get("max_num_seqs", ek.get("max_num_seqs")),
        "max_num_batched_tokens": sched.get("max_num_batched_tokens", ek.get("max_num_batched_tokens")),
        "max_model_len": ek.get("max_model_len"),
        "enable_chunked_prefill": sched.get("enable_chunked_prefill"),
    }
    schema = (
        "engine_kwargs only (no kv_cache / resolved_config: an older recorder)"
        if not kv and not resolved
        else "kv_cache + resolved_config"
        if kv and resolved
        else "kv_cache only"
        if kv
        else "resolved_config only"
    )
    return {
        **flat,
        "engine_kwargs": ek,
        "kv_cache": kv,
        "scheduler_config": sched,
        "cache_config": cache,
        "resolved_config": resolved,
        "meta_file": meta_file,
        "meta_schema": schema,
        "schema_version": meta.get("schema_version"),
        "hardware": meta.get("hardware"),
        "dataset_path": meta.get("dataset_path"),
        "dataset_hash": meta.get("dataset_hash"),
        "started_at": meta.get("started_at"),
        "finished_at": meta.get("finished_at"),
        "clock": clock,
        "rate_from": rate_from,
    }


class VllmRunCollector:
    name = "vllm-run"
    description = "vLLM serving run with per-request timestamps (LLMServingSim bench requests.jsonl + meta.json)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else first_file(path, ("requests.jsonl",))
        return (
            f is not None
            and f.name == "requests.jsonl"
            and (f.parent / "meta.json").is_file()
            and "first_token_ts" in head_line(f)
        )

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        cells, reqs, metrics, taken = [], [], [], set()
        for req_path in walk_files(root, ("requests.jsonl",)):
            run_dir, meta_path = req_path.parent, req_path.parent / "meta.json"
            if not meta_path.is_file():
                result.skips.append(Skip(str(req_path), "no meta.json beside it"))
                continue
            meta = next((m for _, m in per_file([meta_path], read_meta, result.skips)), None)
            if meta is None:
                continue
            gpu_raw = _gpu_raw(meta, run_dir)
            if gpu_raw is None:
                result.skips.append(Skip(str(meta_path), "no GPU name (hardware.device_name, ../config.json)"))
                continue
            got = next((d for _, d in per_file([req_path], lambda p: align(read_requests(p)), result.skips)), None)
            if got is None:
                continue
            req, clock = got
            result.files_read += 2
            row, cid = self._cell(meta, gpu_raw, req, clock, rel(run_dir, root), taken, str(meta_path))
            cells.append(row)
            reqs.append(req.assign(cell_id=cid))
            m = request_metrics(req)
            metrics.extend(metric_rows(cid, m))
            ttft_q = float((req["first_token_s"] - req["queued_s"]).mean())
            result.notes.append(
                f"{cid}: {len(req)} requests; mean TTFT {m['ttft_mean_s']:.4f} s from arrival_time with the "
                f"engine clock aligned by min(queued - arrival) (arrival -> queued 0-"
                f"{clock['queue_entry_delay_max_s']:.3f} s), {ttft_q:.4f} s from queued_ts (LLMServingSim validate.py)"
            )
            kv = meta.get("kv_cache")
            if not (isinstance(kv, dict) and kv.get("num_gpu_blocks") is not None):
                result.notes.append(
                    f"{cid}: {meta_path} records no kv_cache.num_gpu_blocks (an older recorder, or "
                    "collection failed): the replay derives the KV block count from the memory model"
                )
        result.tables = {
            "cells": frame(cells, "cells"),
            "requests": frame(reqs, "requests"),
            "metrics": frame(metrics, "metrics"),
        }
        return result

    @staticmethod
    def _cell(meta: dict, gpu_raw: str, req: pd.DataFrame, clock: dict, path: str, taken: set[str], meta_file: str):
        ek = meta["engine_kwargs"]
        res = _resolved(meta)
        par, model_cfg = (
            {} if not isinstance(res.get(k), dict) else res[k] for k in ("parallel_config", "model_config")
        )

        def size(key: str) -> int:
            v = par.get(key) if par.get(key) is not None else ek.get(key)
            return int(v or 1)

        tp, dp, pp = size("tensor_parallel_size"), size("data_parallel_size"), size("pipeline_parallel_size")
        dtype_raw = str(ek.get("dtype") or model_cfg.get("dtype") or "auto").lower().removeprefix("torch.")
        if dtype_raw == "auto" and model_cfg.get("dtype"):
            dtype_raw = str(model_cfg["dtype"]).lower().removeprefix("torch.")
        dtype = "fp8" if model_cfg.get("quantization") == "fp8" else _DTYPES.get(dtype_raw, dtype_raw)
        rate, rate_from = _rate(meta, req)
        row = cell(
            "",
            SOURCE,
            gpu_raw,
            meta["model"],
            path,
            tp=tp,
            n_gpus=tp * dp * pp,
            dtype=dtype,
            engine="vllm",
            engine_version=meta.get("vllm_version"),
            config=_config(meta, clock, rate_from, meta_file),
            kind="end-to-end",
        )
        layout = f"tp{tp}" + (f"-pp{pp}" if pp > 1 else "") + (f"-dp{dp}" if dp > 1 else "")
        cid = unique_id(f"{SOURCE}/{row['gpu'] or slug(gpu_raw)}/{row['model']}/{layout}/{rate}rps", taken)
        m = re.match(r"[a-z]+", Path(str(meta.get("dataset_path") or "")).name.lower())
        dataset = m.group(0) if m else "dataset"
        row.update(cell_id=cid, workload=f"{dataset} {len(req)} req @ {rate} req/s", load=f"{rate} req/s")
        return row, cid
