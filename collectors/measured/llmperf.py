"""LLMPerf closed-loop benchmark runs (tech-grandpa/llmperf fork, SQLite ``benchmark_runs``) -> end-to-end cells.

Native format: a SQLite database with one table ``benchmark_runs``, one row per benchmark invocation, written
by the fork's ``src/llmperf/database.py``. Columns used: ``id``, ``timestamp``, ``model``, ``gpu_info`` (free
text: ``RTX 3090``, ``(runpod) RTX A6000 Ada``), ``data_type`` (``BF16`` / ``FP8``), ``num_concurrent_requests``,
``error_rate``, ``price_per_hour`` and ``raw_results``: the JSON summary of ``token_benchmark_ray.py``, whose
``results`` hold per-metric ``{mean, min, max, stddev, quantiles: {p25..p99}}`` for ``ttft_s``,
``inter_token_latency_s``, ``end_to_end_latency_s``, ``number_input_tokens``, ``number_output_tokens``, plus
``mean_output_throughput_token_per_s``, ``num_completed_requests``, ``num_completed_requests_per_min``.

Units: every latency is in **seconds** (the ``_s`` suffixes; checked against the values: TTFT 0.03-0.5 s, ITL
~0.03 s, E2E 3-8 s for ~150 output tokens, and ``mean_latency`` / ``ttft`` / ``overall_throughput`` columns
equal the JSON's E2E mean / TTFT mean / output throughput, which :func:`run_metrics` checks). Throughput is
tokens per second, ``num_completed_requests_per_min`` requests per minute.

Mapping, **one cell per row** (a repetition of the same GPU/dtype is its own cell, ``cell_id =
llmperf/<db>/run<id>/<gpu>/<dtype>``): repetitions are kept apart so a validation sees the run-to-run spread
(e.g. the two RunPod A6000 FP8 pairs differ by 2x in throughput); group on gpu/dtype/workload to average.
Metrics: ``throughput_output_tok_s`` = ``mean_output_throughput_token_per_s``, ``throughput_req_s`` =
requests per minute / 60, ``ttft_*``, ``itl_*``, ``e2e_*`` mean and p50/p90/p95/p99, ``input_tokens_mean``,
``output_tokens_mean`` (measured means, not the requested 550/150), ``completed_requests``, ``concurrency``.
``config_json`` keeps every recorded distribution whole (``distributions``: min, max, p25..p99, mean, stddev of
TTFT, ITL, E2E, per-request output throughput, input and output tokens), ``num_requests_started`` and
``number_errors``, for the client reconstruction (:mod:`validation.e2e.llmperf_client`).

Caveats (from the fork's ``token_benchmark_ray.py``; also in each cell's ``config_json``):

- token counts are LLMPerf's re-tokenisation of prompt and generated text with the **Llama-2** tokenizer
  (``hf-internal-testing/llama-tokenizer``), not the served Llama-3.1 tokenizer: ~178 counted output tokens for
  ``max_tokens`` ~150, so ``throughput_output_tok_s`` and the token means are in Llama-2 tokens (~1.2x the
  model's own count). ITL is the client's per-chunk latency (summed gaps / the client's chunk count).
- the client (``get_token_throughput_latencies``): 64 threads, each first starts its own client (a Ray actor),
  then loops sending one request and waiting for its whole response while fewer than
  ``max_num_completed_requests`` (64, ``perfTest.sh``) are recorded; a thread re-sends its own prompt, the
  summary keeps the **first 64 completions**, and the test time both throughputs divide by (completed / requests
  per second, ~15.8 s for RTX 3090 BF16, about twice the longest request) ends when the last thread's last
  request finishes, unrecorded re-sends included. The thread start times are not recorded (mean TTFTs of
  0.05-0.5 s say the launch was staggered, not one burst); :mod:`validation.e2e.llmperf_client` reconstructs the
  launch from ``test_span_s`` and the recorded distributions.
- TP and the GPU count are not recorded; ``gpu_info`` names one GPU and an 8B model fits one, so ``tp = n_gpus
  = 1`` is assumed. The engine is a vLLM OpenAI endpoint (PROVENANCE), version not recorded.

Bad input -> :class:`~collectors.base.Skip`: an unreadable database or one without ``benchmark_runs`` skips
the file; a row with invalid ``raw_results`` JSON, missing metrics, non-positive latencies or disagreeing
columns skips that row (``<file>#id=<id>``). The database is opened read-only (``mode=ro`` URI).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from collectors.base import BadInput, Skip
from collectors.measured.common import MeasuredResult, cell, frame, normalize_gpu, rel, slug, unique_id
from collectors.measured.vllm_run import metric_rows

SOURCE = "llmperf"
_SQLITE_MAGIC = b"SQLite format 3\x00"
_DIST = {"ttft": "ttft_s", "itl": "inter_token_latency_s", "e2e": "end_to_end_latency_s"}
_QUANTILES = (50, 90, 95, 99)
_REL_TOL = 1e-6
_KEPT_DISTRIBUTIONS = (
    "ttft_s",
    "inter_token_latency_s",
    "end_to_end_latency_s",
    "request_output_throughput_token_per_s",
    "number_input_tokens",
    "number_output_tokens",
)


def _is_sqlite(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(16) == _SQLITE_MAGIC
    except OSError:
        return False


def _candidates(root: Path) -> list[Path]:
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.suffix in (".db", ".sqlite", ".sqlite3") and p.is_file())


def read_runs(path: Path) -> list[dict]:
    """All ``benchmark_runs`` rows as dicts; :class:`BadInput` when the file is not a readable LLMPerf DB."""
    if not _is_sqlite(path):
        raise BadInput("not a SQLite database")
    uri = f"{path.resolve().as_uri()}?mode=ro"
    try:
        con = sqlite3.connect(uri, uri=True)
    except sqlite3.Error as exc:
        raise BadInput(f"cannot open read-only ({exc})") from exc
    try:
        con.row_factory = sqlite3.Row
        tables = {r[0] for r in con.execute("select name from sqlite_master where type='table'")}
        if "benchmark_runs" not in tables:
            raise BadInput(f"no benchmark_runs table (tables: {sorted(tables)})")
        rows = [dict(r) for r in con.execute("select * from benchmark_runs order by id")]
    except sqlite3.Error as exc:
        raise BadInput(f"unreadable database ({exc})") from exc
    finally:
        con.close()
    missing = {"id", "model", "gpu_info", "raw_results"} - set(rows[0]) if rows else set()
    if missing:
        raise BadInput(f"benchmark_runs lacks column(s) {sorted(missing)}")
    return rows


def _num(d: dict, key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise BadInput(f"{where}.{key} missing or not a number ({v!r})")
    return float(v)


def run_metrics(row: dict) -> tuple[dict[str, float], dict]:
    """Metrics of one ``benchmark_runs`` row (and the raw summary), cross-checked with the row's columns."""
    try:
        raw = json.loads(row.get("raw_results") or "")
    except json.JSONDecodeError as exc:
        raise BadInput(f"raw_results is not valid JSON ({exc.msg})") from exc
    res = raw.get("results") if isinstance(raw, dict) else None
    if not isinstance(res, dict):
        raise BadInput("raw_results has no 'results' object")
    m: dict[str, float] = {}
    for prefix, key in _DIST.items():
        d = res.get(key)
        if not isinstance(d, dict) or not isinstance(d.get("quantiles"), dict):
            raise BadInput(f"results.{key} missing")
        m[f"{prefix}_mean_s"] = _num(d, "mean", key)
        for q in _QUANTILES:
            m[f"{prefix}_p{q}_s"] = _num(d["quantiles"], f"p{q}", f"{key}.quantiles")
        if min(_num(d, "min", key), m[f"{prefix}_mean_s"]) <= 0:
            raise BadInput(f"results.{key}: non-positive latency")
    if m["e2e_mean_s"] < m["ttft_mean_s"]:
        raise BadInput(f"E2E mean {m['e2e_mean_s']} s < TTFT mean {m['ttft_mean_s']} s (units?)")
    m["throughput_output_tok_s"] = _num(res, "mean_output_throughput_token_per_s", "results")
    m["throughput_req_s"] = _num(res, "num_completed_requests_per_min", "results") / 60.0
    m["completed_requests"] = _num(res, "num_completed_requests", "results")
    for name, key in (("input_tokens_mean", "number_input_tokens"), ("output_tokens_mean", "number_output_tokens")):
        d = res.get(key)
        if isinstance(d, dict) and isinstance(d.get("mean"), int | float):
            m[name] = float(d["mean"])
    conc = row.get("num_concurrent_requests", raw.get("num_concurrent_requests"))
    if conc is not None:
        m["concurrency"] = float(conc)
    for col, metric in (
        ("overall_throughput", "throughput_output_tok_s"),
        ("mean_latency", "e2e_mean_s"),
        ("ttft", "ttft_mean_s"),
        ("completed_requests", "completed_requests"),
    ):
        v = row.get(col)
        if v is not None and abs(float(v) - m[metric]) > _REL_TOL * max(abs(m[metric]), 1e-12):
            raise BadInput(f"column {col}={v} disagrees with raw_results ({metric}={m[metric]})")
    return m, raw


def _dtype(row: dict) -> str | None:
    raw = str(row.get("data_type") or "").strip().lower()
    if raw:
        return raw
    return "fp8" if "fp8" in str(row.get("model", "")).lower() else None


class LLMPerfCollector:
    name = "llmperf"
    description = "LLMPerf closed-loop serving benchmark runs (SQLite benchmark_runs)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        files = [path] if path.is_file() else sorted(path.glob("*.db"))[:4]
        for f in files:
            if not _is_sqlite(f):
                continue
            try:
                read_runs(f)
                return True
            except BadInput:
                continue
        return False

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        cells, metrics, taken = [], [], set()
        for db in _candidates(root):
            try:
                rows = read_runs(db)
            except BadInput as exc:
                result.skips.append(Skip(str(db), str(exc)))
                continue
            result.files_read += 1
            errors = 0
            for row in rows:
                try:
                    m, raw = run_metrics(row)
                except BadInput as exc:
                    result.skips.append(Skip(f"{db}#id={row.get('id')}", str(exc)))
                    continue
                errors += bool(row.get("error_rate"))
                row_cell = self._cell(row, raw, m, db, root, taken)
                cells.append(row_cell)
                metrics.extend(metric_rows(row_cell["cell_id"], m))
            if errors:
                result.notes.append(
                    f"{db.name}: {errors} run(s) with a non-zero error_rate (metrics over the completed requests only)"
                )
        if cells:
            result.notes.append(
                f"{len(cells)} LLMPerf runs, one cell each; token counts are LLMPerf's Llama-2 "
                "tokenizer counts; tp = n_gpus = 1 assumed (not recorded)"
            )
        result.tables = {"cells": frame(cells, "cells"), "metrics": frame(metrics, "metrics")}
        return result

    @staticmethod
    def _cell(row: dict, raw: dict, m: dict[str, float], db: Path, root: Path, taken: set[str]) -> dict:
        gpu_raw = str(row.get("gpu_info") or "unknown")
        gpu = normalize_gpu(gpu_raw)
        dtype = _dtype(row)
        cid = unique_id(f"{SOURCE}/{db.stem}/run{row['id']}/{gpu or slug(gpu_raw)}/{dtype or 'unknown'}", taken)
        mi, si = raw.get("mean_input_tokens"), raw.get("stddev_input_tokens")
        mo, so = raw.get("mean_output_tokens"), raw.get("stddev_output_tokens")
        conc = row.get("num_concurrent_requests", raw.get("num_concurrent_requests"))
        config = {
            "db": db.name,
            "run_id": row["id"],
            "timestamp": row.get("timestamp"),
            "model_raw": row["model"],
            "requested_input_tokens": {"mean": mi, "stddev": si},
            "requested_output_tokens": {"mean": mo, "stddev": so},
            "num_concurrent_requests": conc,
            "error_rate": row.get("error_rate"),
            "price_per_hour": row.get("price_per_hour"),
            "additional_sampling_params": raw.get("additional_sampling_params"),
            "token_counter": "LLMPerf re-tokenises with hf-internal-testing/llama-tokenizer (Llama-2)",
            "tp_assumed": True,
            "arrivals": "64 client threads, staggered by client start-up (not recorded), each re-sending while fewer "
            "than 64 are recorded",
            "test_span_s": m["completed_requests"] / m["throughput_req_s"] if m.get("throughput_req_s") else None,
            "e2e_max_s": (raw.get("results", {}).get("end_to_end_latency_s") or {}).get("max"),
            "num_requests_started": raw.get("results", {}).get("num_requests_started"),
            "number_errors": raw.get("results", {}).get("number_errors"),
            # the whole recorded distributions (min, max, p25..p99, mean, stddev): the client reconstruction
            # (validation.e2e.llmperf_client) reads the E2E and TTFT quantile functions from them
            "distributions": {
                k: raw["results"][k] for k in _KEPT_DISTRIBUTIONS if isinstance(raw.get("results", {}).get(k), dict)
            },
        }
        out = cell(
            cid,
            SOURCE,
            gpu_raw,
            row["model"],
            rel(db, root),
            tp=1,
            n_gpus=1,
            dtype=dtype,
            engine="vllm",
            config=config,
            kind="end-to-end",
        )
        out["gpu"] = gpu
        out["workload"] = f"llmperf sonnet in {mi}+-{si} / out {mo}+-{so} tok"
        out["load"] = f"{conc} concurrent (closed loop)"
        return out
