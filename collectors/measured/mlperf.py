"""MLPerf Inference LoadGen summaries (``mlperf_log_summary.txt``, LLM benchmarks) -> one end-to-end cell each.

Native format: LoadGen's plain-text summary, ``key : value`` lines in three blocks (results, additional stats,
test parameters). Keys read (case and spacing normalised):

- ``Scenario`` (``Server`` / ``Offline``), ``SUT name``, ``Mode``, ``Result is`` (``VALID`` / ``INVALID``);
- the headline result: ``Completed tokens per second`` (Server) or ``Tokens per second`` (Offline), in
  output tokens per second; ``Completed samples per second`` / ``Samples per second`` (requests per second);
- Server only: ``Mean latency (ns)``, ``<q> percentile latency (ns)`` (end to end), ``Mean First Token latency
  (ns)``, ``<q> percentile first token latency (ns)`` (TTFT), ``Mean Time to Output Token (ns)``, ``<q>
  percentile time to output token (ns)`` (TPOT = (latency - TTFT) / (output tokens - 1) per sample, LoadGen's
  definition, the project's too), ``target_qps`` (the Poisson arrival rate asked for), the ``ttft_latency (ns)`` /
  ``tpot_latency (ns)`` limits.

Units: every latency is in **nanoseconds** (``(ns)`` in the key) and becomes seconds (x 1e-9); throughputs are
per second already. In the Offline scenario all samples are one query issued at t = 0, so its "latency" is the
completion time of each sample since the start of the run, not a request latency: it is kept in
``config_json`` only, not mapped to ``e2e_*``. Nor is ``samples_per_query`` reported as ``completed_requests``
(the Offline summary's samples/s x duration does not reproduce it); the summaries carry no completed count.

Mapping: ``throughput_output_tok_s``, ``throughput_req_s``, and for Server ``target_qps``, ``e2e_*``, ``ttft_*``,
``tpot_*`` as mean and p50/p90/p95/p99. The cell comes from the results-repository path,
``closed/<submitter>/results/<system>/<benchmark>/<scenario>/performance/run_1/mlperf_log_summary.txt``, or the
flattened file name ``<system>__<benchmark>__<scenario>__mlperf_log_summary.txt``: the system
``DGX-H100_H100-SXM-80GBx8_TRT`` gives the GPU (``H100-SXM-80GB`` -> ``h100-sxm``), ``n_gpus = 8`` and the
engine (``_TRT`` -> ``tensorrt-llm``); the benchmark ``llama2-70b-99.9`` the model (``llama-2-70b``). dtype
``fp8`` is not in the file: NVIDIA's llama2-70b TensorRT-LLM submission runs FP8 (PROVENANCE.md); TP is not in
the summary (null).

Bad input -> :class:`~collectors.base.Skip` naming the file: no ``Scenario``, no tokens-per-second result line,
a non-numeric or negative figure.
"""

from __future__ import annotations

import re
from pathlib import Path

from collectors.base import BadInput, per_file
from collectors.measured.common import MeasuredResult, cell, frame, normalize_gpu, rel, slug, unique_id
from collectors.measured.vllm_run import metric_rows

SOURCE = "mlperf"
SUFFIX = "mlperf_log_summary.txt"
_NS = 1e-9
_QUANTILES = {"50.00": 50, "90.00": 90, "95.00": 95, "99.00": 99}
_ENGINES = {"trt": "tensorrt-llm", "vllm": "vllm", "sglang": "sglang"}
#: from PROVENANCE.md (not in the summary): NVIDIA's TensorRT-LLM llama2-70b submission serves FP8
DTYPE = "fp8"


def parse_summary(path: Path) -> dict[str, str]:
    """``key -> value`` of every ``key : value`` line (keys lower-case, single-spaced; the first occurrence wins)."""
    out: dict[str, str] = {}
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            m = re.match(r"^\s*([^:=]+?)\s*:\s*(.+?)\s*$", line)
            if m:
                out.setdefault(re.sub(r"\s+", " ", m.group(1).lower()), m.group(2))
    return out


def _num(kv: dict[str, str], key: str) -> float | None:
    if key not in kv:
        return None
    try:
        v = float(kv[key])
    except ValueError as exc:
        raise BadInput(f"{key!r}: non-numeric value {kv[key]!r}") from exc
    if v < 0:
        raise BadInput(f"{key!r}: negative value {v}")
    return v


def _dist(kv: dict[str, str], prefix: str, mean_key: str, pct_key: str) -> dict[str, float]:
    out = {}
    mean = _num(kv, mean_key)
    if mean is not None:
        out[f"{prefix}_mean_s"] = mean * _NS
    for q, n in _QUANTILES.items():
        v = _num(kv, f"{q} percentile {pct_key}")
        if v is not None:
            out[f"{prefix}_p{n}_s"] = v * _NS
    return out


def summary_metrics(kv: dict[str, str]) -> tuple[str, dict[str, float]]:
    """``(scenario, metrics)`` of a parsed summary; :class:`BadInput` without a scenario or a tokens/s line."""
    scenario = kv.get("scenario")
    if not scenario:
        raise BadInput("no 'Scenario' line")
    tok = _num(kv, "completed tokens per second")
    if tok is None:
        tok = _num(kv, "tokens per second")
    if tok is None:
        raise BadInput("no result line ('Completed tokens per second' / 'Tokens per second')")
    m = {"throughput_output_tok_s": tok}
    req = _num(kv, "completed samples per second")
    req = _num(kv, "samples per second") if req is None else req
    if req is not None:
        m["throughput_req_s"] = req
    if scenario.lower() != "offline":
        m.update(_dist(kv, "e2e", "mean latency (ns)", "latency (ns)"))
        m.update(_dist(kv, "ttft", "mean first token latency (ns)", "first token latency (ns)"))
        m.update(_dist(kv, "tpot", "mean time to output token (ns)", "time to output token (ns)"))
        qps = _num(kv, "target_qps")
        if qps is not None:
            m["target_qps"] = qps
    return scenario, m


def _identity(path: Path) -> tuple[str, str, str | None]:
    """``(system, benchmark, results version)`` from the path or the flattened file name."""
    parts = path.name.split("__")
    if len(parts) >= 3:
        system, bench = parts[0], parts[1]
    elif len(path.parents) >= 5 and path.parents[1].name == "performance":
        system, bench = path.parents[4].name, path.parents[3].name
    else:
        system, bench = "unknown", "unknown"
    version = next((p for p in reversed(path.parts) if re.fullmatch(r"v\d+(?:\.\d+)*", p)), None)
    if version is None:
        m = re.search(r"inference_results_(v\d+(?:\.\d+)*)", path.as_posix())
        version = m.group(1) if m else None
    return system, bench, version


def _system(system: str) -> tuple[str, int | None, str | None]:
    """``(gpu_raw, n_gpus, engine)`` of a system name such as ``DGX-H100_H100-SXM-80GBx8_TRT``."""
    m = re.search(r"(?:^|_)([A-Za-z0-9-]+?)x(\d+)(?:_|$)", system)
    gpu_raw, n = (m.group(1), int(m.group(2))) if m else (system, None)
    tail = system.rsplit("_", 1)[-1].lower()
    return gpu_raw, n, _ENGINES.get(tail)


class MLPerfCollector:
    name = "mlperf"
    description = "MLPerf Inference LoadGen summaries of LLM benchmarks (mlperf_log_summary.txt)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else next(path.rglob(f"*{SUFFIX}"), None) if path.is_dir() else None
        if f is None or not f.name.endswith(SUFFIX):
            return False
        try:
            with open(f, "rb") as fh:
                return b"MLPerf Results Summary" in fh.read(512)
        except OSError:
            return False

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        files = [root] if root.is_file() else sorted(root.rglob(f"*{SUFFIX}"))
        cells, metrics, taken = [], [], set()

        def parse(p: Path) -> tuple[dict[str, str], str, dict[str, float]]:
            kv = parse_summary(p)
            return kv, *summary_metrics(kv)

        for f, (kv, scenario, m) in per_file(files, parse, result.skips):
            result.files_read += 1
            row = self._cell(f, root, kv, scenario, taken)
            cells.append(row)
            metrics.extend(metric_rows(row["cell_id"], m))
            if kv.get("result is", "").upper() != "VALID":
                result.notes.append(f"{f.name}: result is {kv.get('result is')!r}, not VALID")
        if cells:
            result.notes.append(
                "dtype fp8 and the GPU count come from PROVENANCE.md / the system name, not the "
                "summary; Offline latencies are completion times, not mapped to e2e"
            )
        result.tables = {"cells": frame(cells, "cells"), "metrics": frame(metrics, "metrics")}
        return result

    @staticmethod
    def _cell(f: Path, root: Path, kv: dict[str, str], scenario: str, taken: set[str]) -> dict:
        system, bench, version = _identity(f)
        if bench == "unknown":
            bench = re.sub(r"-(server|offline)-sut.*$", "", kv.get("sut name", "unknown").lower())
        gpu_raw, n_gpus, engine = _system(system)
        gpu = normalize_gpu(gpu_raw)
        row = cell(
            "",
            SOURCE,
            gpu_raw,
            bench,
            rel(f, root),
            n_gpus=n_gpus,
            dtype=DTYPE,
            engine=engine,
            kind="end-to-end",
            config={
                "system": system,
                "benchmark": bench,
                "results_version": version,
                "scenario": scenario,
                "sut_name": kv.get("sut name"),
                "mode": kv.get("mode"),
                "result": kv.get("result is"),
                "ttft_limit_s": (_num(kv, "ttft_latency (ns)") or 0) * _NS or None,
                "tpot_limit_s": (_num(kv, "tpot_latency (ns)") or 0) * _NS or None,
                "target_qps": _num(kv, "target_qps"),
                "samples_per_query": _num(kv, "samples_per_query"),
                "min_duration_ms": _num(kv, "min_duration (ms)"),
                "offline_completion_time_mean_s": ((_num(kv, "mean latency (ns)") or 0) * _NS or None)
                if scenario.lower() == "offline"
                else None,
                "dtype_from": "PROVENANCE.md (NVIDIA TRT-LLM FP8 submission)",
            },
        )
        row["gpu"] = gpu
        row["cell_id"] = unique_id(
            f"{SOURCE}/{gpu or slug(gpu_raw)}/{row['model']}/{n_gpus or 'n'}gpu/{slug(scenario)}", taken
        )
        row["workload"] = f"mlperf-inference {version or ''} {bench} {scenario}".replace("  ", " ")
        qps = _num(kv, "target_qps")
        row["load"] = (
            f"{qps:g} qps (poisson)"
            if scenario.lower() == "server" and qps
            else ("offline (all samples at t=0)" if scenario.lower() == "offline" else scenario)
        )
        return row
