"""A live run's records -> the measured schema (one end-to-end cell) plus the ``live_turns`` sidecar.

Tables (``collectors.measured.schema``), all times in seconds from the run start (the first release):

- ``cells``: one ``end-to-end`` row, source ``live``; ``engine`` is ``vllm`` when the server exposes ``vllm:``
  metrics; ``config_json`` holds ``partial`` / ``error``, the driver options (token scale included), the
  workload and tool configs, what discovery found, the engine's ``*_info`` labels (``num_gpu_blocks``,
  ``block_size``...) and the raw counters before and after.
- ``requests``: one row per finished turn, ``request_id = "<program_id>#<turn_idx>"``; ``arrival_s`` = release,
  ``scheduled_s`` = send of the successful attempt, first / last token; ``input_tokens`` / ``output_tokens`` as
  the server reported them (usage), else as sent / streamed.
- ``programs``: one row per finished program, ``jct_s`` = its last token - its arrival.
- ``metrics``: TTFT / TPOT / E2E / JCT aggregates and throughput (definitions of
  :func:`collectors.measured.vllm_run.request_metrics`, DESIGN §4) plus :data:`LIVE_METRIC_NAMES`.

``live_turns.parquet`` (not a measured table; named so it is never mistaken for a trace's ``turns.parquet``)
keeps what the measured schema has no column for: planned release, first-attempt send, target vs sent vs
reported tokens, kept prefix, cached tokens, retries, tool gaps and where the next context's output ids came from.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from agentreplay.sim.config import ToolConfig, WorkloadConfig
from agentreplay.sim.workload import Workload
from agentreplay.trace.io import write_tables
from collectors.live.client import StreamResult
from collectors.live.endpoint import DriveOptions, EndpointInfo
from collectors.live.metrics_scrape import EngineSnapshot, deltas
from collectors.measured.common import cell, frame, normalize_gpu, slug, to_tables, validate_measured
from collectors.measured.schema import PROGRAMS, REQUESTS
from collectors.measured.vllm_run import dist_stats, request_metrics

SOURCE = "live"
SIDECAR = "live_turns"
SIDECAR_VERSION_KEY = b"agentreplay.live_turns_version"
SIDECAR_VERSION = "1"

#: Metric names a live run adds to ``collectors.measured.schema.METRIC_NAMES`` (units in the names).
LIVE_METRIC_NAMES: tuple[str, ...] = (
    "completed_programs",
    "programs_planned",
    "prefix_cache_hit_tokens",
    "prefix_cache_query_tokens",
    "prefix_hit_rate",
    "preemptions",
    "engine_prompt_tokens",
    "engine_generation_tokens",
    "kv_cache_usage_max",
    "kv_cache_usage_mean",
    "num_requests_waiting_max",
    "retries_total",
    "token_scale",
)


_SIDECAR_COLUMNS: dict[str, str] = {
    "program_id": "string",
    "turn_idx": "int32",
    "planned_release_s": "float64",
    "release_s": "float64",
    "first_send_s": "float64",
    "send_s": "float64",
    "first_token_s": "float64",
    "last_token_s": "float64",
    "input_tokens": "int64",
    "prompt_ids_sent": "int64",
    "prompt_tokens_reported": "Int64",
    "reused_tokens": "int64",
    "kept_tokens": "int64",
    "cached_tokens_reported": "Int64",
    "output_tokens": "int64",
    "output_tokens_reported": "Int64",
    "output_tokens_streamed": "int64",
    "retries": "int32",
    "finish_reason": "string",
    "output_ids_source": "string",
    "gap_before_s": "float64",
    "tool_gap_s": "float64",
    "engine_queue_s": "Float64",
    "engine_ttft_s": "Float64",
    "engine_decode_s": "Float64",
}


@dataclass(slots=True)
class TurnRecord:
    """One finished turn as the driver saw it (times on the driver clock, seconds)."""

    program: int
    turn_idx: int
    planned_release_s: float  #: previous turn's last token + tool gap (arrival for turn 0)
    release_s: float  #: when the driver actually released it
    result: StreamResult
    input_tokens: int  #: target prompt length (trace, scaled)
    prompt_ids_sent: int  #: ids sent (== input_tokens; text mode sends as many words)
    reused_tokens: int  #: target reuse (trace, scaled)
    kept_tokens: int  #: leading ids kept from the previous context
    output_tokens: int  #: target output length (max_tokens)
    output_ids_source: str  #: "server" or "placeholder": ids appended to the context for the next turn
    tool_gap_s: float  #: tool gap slept after this turn (NaN for the last)
    gap_before_s: float  #: tool gap slept before this turn (NaN for turn 0)


@dataclass(slots=True)
class RunFacts:
    workload: Workload
    cfg: WorkloadConfig
    tools: ToolConfig
    opts: DriveOptions
    info: EndpointInfo
    t_start_s: float
    arrival_s: dict[int, float]
    finish_s: dict[int, float]
    before: EngineSnapshot | None
    after: EngineSnapshot | None
    samples: list[EngineSnapshot] = field(default_factory=list)
    partial: bool = False
    error: str | None = None


def turns_frame(records: list[TurnRecord], facts: RunFacts) -> pd.DataFrame:
    """The ``live_turns`` sidecar, sorted by (program, turn); times relative to the run start."""
    t0, w = facts.t_start_s, facts.workload
    rows = []
    for r in sorted(records, key=lambda r: (r.program, r.turn_idx)):
        s = r.result
        rows.append(
            {
                "program_id": w.program_ids[r.program],
                "turn_idx": r.turn_idx,
                "planned_release_s": r.planned_release_s - t0,
                "release_s": r.release_s - t0,
                "first_send_s": s.first_send_s - t0,
                "send_s": s.send_s - t0,
                "first_token_s": s.first_token_s - t0,
                "last_token_s": s.last_token_s - t0,
                "input_tokens": r.input_tokens,
                "prompt_ids_sent": r.prompt_ids_sent,
                "prompt_tokens_reported": s.prompt_tokens,
                "reused_tokens": r.reused_tokens,
                "kept_tokens": r.kept_tokens,
                "cached_tokens_reported": s.cached_tokens,
                "output_tokens": r.output_tokens,
                "output_tokens_reported": s.completion_tokens,
                "output_tokens_streamed": s.stream_tokens,
                "retries": s.retries,
                "finish_reason": s.finish_reason,
                "output_ids_source": r.output_ids_source,
                "gap_before_s": r.gap_before_s,
                "tool_gap_s": r.tool_gap_s,
                "engine_queue_s": s.engine_queue_s,
                "engine_ttft_s": s.engine_ttft_s,
                "engine_decode_s": s.engine_decode_s,
            }
        )
    df = pd.DataFrame(rows, columns=list(_SIDECAR_COLUMNS))
    for col, dtype in _SIDECAR_COLUMNS.items():
        df[col] = pd.array(df[col].tolist(), dtype=dtype)
    return df


def _load(cfg: WorkloadConfig) -> str:
    if cfg.arrival == "closed":
        return f"closed {cfg.concurrency} in flight"
    if cfg.arrival == "poisson":
        return f"poisson {cfg.rate_per_s:g} programs/s"
    return "trace arrivals"


def _engine_metrics(facts: RunFacts) -> dict[str, float]:
    d = deltas(facts.before, facts.after)
    m: dict[str, float] = {}
    for key, name in (
        ("prefix_cache_hits_tokens", "prefix_cache_hit_tokens"),
        ("prefix_cache_queries_tokens", "prefix_cache_query_tokens"),
        ("preemptions", "preemptions"),
        ("prompt_tokens", "engine_prompt_tokens"),
        ("generation_tokens", "engine_generation_tokens"),
    ):
        if key in d:
            m[name] = d[key]
    if m.get("prefix_cache_query_tokens"):
        m["prefix_hit_rate"] = m.get("prefix_cache_hit_tokens", 0.0) / m["prefix_cache_query_tokens"]
    snaps = [s for s in (facts.before, *facts.samples, facts.after) if s is not None]
    kv = [s.gauges["kv_cache_usage"] for s in snaps if "kv_cache_usage" in s.gauges]
    if kv:
        m.update(kv_cache_usage_max=max(kv), kv_cache_usage_mean=float(np.mean(kv)))
    waiting = [s.gauges["num_requests_waiting"] for s in snaps if "num_requests_waiting" in s.gauges]
    if waiting:
        m["num_requests_waiting_max"] = max(waiting)
    return m


def _config(facts: RunFacts) -> dict[str, object]:
    snap = facts.after or facts.before
    engine: dict[str, object] = {"metrics_available": snap is not None}
    if snap is not None:
        engine.update(snap.cache_config(), info=snap.info, bad_metric_lines=snap.bad_lines)
    engine["counters_before"] = facts.before.counters if facts.before else None
    engine["counters_after"] = facts.after.counters if facts.after else None
    return {
        "partial": facts.partial,
        "error": facts.error,
        "driver": facts.opts.to_dict(),
        "token_scale": facts.opts.token_scale,
        "workload_config": dataclasses.asdict(facts.cfg),
        "tools": dataclasses.asdict(facts.tools),
        "endpoint": facts.info.to_dict(),
        "engine": engine,
        "clock": "time.monotonic seconds; tables relative to the run start (first release)",
        "ttft_from": "release (turn ready, after the tool gap)",
        "queued_s": "not observable from the client",
    }


def build_tables(records: list[TurnRecord], facts: RunFacts) -> tuple[dict[str, pd.DataFrame], pd.DataFrame]:
    """The measured tables and the sidecar for one run (see the module docstring)."""
    w, opts, info = facts.workload, facts.opts, facts.info
    gpu_raw = opts.gpu or "unknown"
    snap = facts.after or facts.before
    row = cell(
        "",
        SOURCE,
        gpu_raw,
        info.model,
        os.fspath(info.endpoint),
        tp=opts.tp,
        engine=snap.engine if snap else None,
        engine_version=info.version,
        config=_config(facts),
        kind="end-to-end",
    )
    load = _load(facts.cfg)
    label = opts.workload_label or "trace"
    scale = f", tokens x{opts.token_scale:g}" if opts.token_scale != 1 else ""
    cid = f"{SOURCE}/{normalize_gpu(gpu_raw) or slug(gpu_raw)}/{row['model']}/{slug(load)}"
    row.update(cell_id=cid, workload=f"{label}: {w.n_programs} programs, {w.n_turns} turns{scale}", load=load)
    turns = turns_frame(records, facts)
    req = pd.DataFrame(
        {
            "cell_id": cid,
            "request_id": [f"{p}#{t}" for p, t in zip(turns["program_id"], turns["turn_idx"], strict=True)],
            "arrival_s": turns["release_s"],
            "queued_s": np.nan,
            "scheduled_s": turns["send_s"],
            "first_token_s": turns["first_token_s"],
            "last_token_s": turns["last_token_s"],
            "input_tokens": turns["prompt_tokens_reported"].fillna(turns["prompt_ids_sent"]).astype("int64"),
            "output_tokens": turns["output_tokens_reported"]
            .fillna(turns["output_tokens_streamed"].where(turns["output_tokens_streamed"] > 0, turns["output_tokens"]))
            .astype("int64"),
        }
    )
    done = sorted(facts.finish_s)
    progs = pd.DataFrame(
        {
            "cell_id": cid,
            "program_id": [w.program_ids[p] for p in done],
            "jct_s": [facts.finish_s[p] - facts.arrival_s[p] for p in done],
        }
    )
    metrics: dict[str, float] = {}
    if len(req):
        metrics.update(request_metrics(req))
    jct = progs["jct_s"].to_numpy(dtype=float)
    if jct.size:
        metrics.update({k: v for k, v in dist_stats("jct", jct, (50, 95, 99)).items()})
        metrics.update(jct_min_s=float(jct.min()), jct_max_s=float(jct.max()))
    if len(req):
        makespan = float(req["last_token_s"].max() - req["arrival_s"].min())
        metrics["makespan_s"] = makespan
        if makespan > 0:
            metrics["throughput_programs_s"] = len(progs) / makespan
    metrics.update(
        num_programs=float(len(progs)),
        completed_programs=float(len(progs)),
        programs_planned=float(w.n_programs),
        token_scale=float(opts.token_scale),
        retries_total=float(turns["retries"].sum()) if len(turns) else 0.0,
    )
    if facts.cfg.arrival == "closed":
        metrics["concurrency"] = float(facts.cfg.concurrency)
    metrics.update(_engine_metrics(facts))
    mrows = [
        {"cell_id": cid, "metric": k, "value": float(v)} for k, v in metrics.items() if v is not None and np.isfinite(v)
    ]
    tables = {
        "cells": frame([row], "cells"),
        "requests": req.reindex(columns=[f.name for f in REQUESTS]),
        "programs": progs.reindex(columns=[f.name for f in PROGRAMS]),
        "metrics": frame(mrows, "metrics"),
    }
    return tables, turns


def write_run(out_dir: str | os.PathLike[str], tables: dict[str, pd.DataFrame], turns: pd.DataFrame) -> dict[str, Path]:
    """Validate, then write the measured tables and the sidecar atomically (all temporaries, then renames)."""
    validate_measured(tables, where=os.fspath(out_dir))
    arrow = to_tables(tables)
    side = pa.Table.from_pandas(turns, preserve_index=False)
    meta = {
        SIDECAR_VERSION_KEY: SIDECAR_VERSION.encode(),
        b"agentreplay.table": SIDECAR.encode(),
        b"agentreplay.cell": json.dumps(tables["cells"]["cell_id"].tolist()).encode(),
    }
    arrow[SIDECAR] = side.replace_schema_metadata({**(side.schema.metadata or {}), **meta})
    return write_tables(out_dir, arrow)
