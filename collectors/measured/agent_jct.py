"""Measured agent job completion times (Continuum experiments, ``results.json``) -> one end-to-end cell.

Native format: ``results.json`` of a batch of agent jobs (Whrlicht/vllm-continuum,
``continuum_exp/swebench_llama70B_vllm/``): ``num_jobs``, ``average_duration``, ``median_duration``,
``percentile_95``, ``percentile_99``, ``min_duration``, ``max_duration``, ``total_duration`` (the makespan) and
``job_durations`` ``{submission index: seconds}``; all durations in **seconds** (wall clock per job; the
makespan of 500 jobs at 64 in flight is ~3800 s, a job 24-1200 s). ``verification.json`` beside it (resolve
status per SWE-bench instance) is not needed for timing and is not read (it counts 498 submitted / completed
instances against the 500 durations of results.json; not reconciled here).

Mapping:

- ``programs``: one row per ``job_durations`` entry, ``program_id`` = the submission index (as a string),
  ``jct_s`` = its duration. The project's JCT (finish of the last turn - program arrival) is what the file's
  per-job duration measures for a job submitted when a worker frees up.
- ``metrics`` recomputed from ``job_durations``: ``jct_mean_s``, ``jct_p50_s`` (median), ``jct_p95_s``,
  ``jct_p99_s`` (linear interpolation, which reproduces the file's percentiles), ``jct_min_s``, ``jct_max_s``,
  ``num_programs``; ``makespan_s`` = ``total_duration`` (not recomputable: start times are not in the file) and
  ``throughput_programs_s`` = jobs / makespan. Each recomputed figure is compared with the file's own; both
  are given in the notes, and a disagreement beyond 1e-6 relative is a skip (the file contradicts itself).

The run's setup is **not in the file**; it comes from the source repository's README as recorded in
``PROVENANCE.md``: mini-swe-agent on SWE-bench Verified (500 jobs), ``--workers 64`` (closed loop, 64 jobs in
flight), meta-llama/Llama-3.1-70B-Instruct served by vLLM with TP=4 on 4x H100 (SXM assumed: the README says
H100). Hence the cell: gpu ``h100-sxm``, ``n_gpus = 4``, ``llama-3.1-70b``, ``tp = 4``, engine ``vllm``
(version not recorded; the fork's stock scheduler), dtype ``bf16`` (the served checkpoint's dtype; not stated
explicitly), workload ``swebench-verified mini-swe-agent 500 jobs``, load ``64 in flight``. The trajectories
of this run are not public, so a replay must use other SWE-bench Verified trajectories as a stand-in.

Bad input -> :class:`~collectors.base.Skip` naming the file: invalid JSON, no ``job_durations`` object, a
non-numeric, negative or non-finite duration, ``num_jobs`` not matching the durations, self-contradicting
summary figures.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from collectors.base import BadInput, per_file
from collectors.measured.common import MeasuredResult, cell, first_file, frame, rel, unique_id, walk_files
from collectors.measured.vllm_run import metric_rows

SOURCE = "agent-jct"
_REL_TOL = 1e-6
#: The setup from PROVENANCE.md / the source README (not in results.json).
SETUP = {
    "gpu_raw": "4x H100 (per source README)",
    "gpu": "h100-sxm",
    "n_gpus": 4,
    "model_raw": "meta-llama/Llama-3.1-70B-Instruct",
    "tp": 4,
    "dtype": "bf16",
    "engine": "vllm",
    "workload": "swebench-verified mini-swe-agent 500 jobs",
    "load": "64 in flight",
}
#: file key -> (metric, how to recompute it from the durations)
_CHECKS = {
    "average_duration": ("jct_mean_s", np.mean),
    "median_duration": ("jct_p50_s", np.median),
    "percentile_95": ("jct_p95_s", lambda v: np.percentile(v, 95)),
    "percentile_99": ("jct_p99_s", lambda v: np.percentile(v, 99)),
    "min_duration": ("jct_min_s", np.min),
    "max_duration": ("jct_max_s", np.max),
}


def read_results(path: Path) -> tuple[dict[str, float], dict[str, float], dict]:
    """``(durations by submission index, metrics, file's own figures)`` of one results.json."""
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BadInput(f"invalid or truncated JSON ({exc.msg} at line {exc.lineno})") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("job_durations"), dict):
        raise BadInput("no 'job_durations' object")
    durations = {}
    for key, v in doc["job_durations"].items():
        if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v):
            raise BadInput(f"job {key!r}: duration {v!r} is not a finite number")
        if v < 0:
            raise BadInput(f"job {key!r}: negative duration {v!r}")
        durations[str(key)] = float(v)
    if not durations:
        raise BadInput("job_durations is empty")
    n = doc.get("num_jobs")
    if n is not None and n != len(durations):
        raise BadInput(f"num_jobs={n} but {len(durations)} job_durations")
    v = np.fromiter(durations.values(), dtype=float)
    metrics = {metric: float(fn(v)) for metric, fn in _CHECKS.values()}
    metrics["num_programs"] = float(len(v))
    own = {k: doc[k] for k in (*_CHECKS, "total_duration") if isinstance(doc.get(k), int | float)}
    for key, (metric, _) in _CHECKS.items():
        if key in own and abs(own[key] - metrics[metric]) > _REL_TOL * max(abs(own[key]), 1e-12):
            raise BadInput(f"{key}={own[key]} but recomputed from job_durations {metrics[metric]}")
    makespan = own.get("total_duration")
    if makespan is not None:
        if makespan <= 0 or makespan < metrics["jct_max_s"] * (1 - _REL_TOL):
            raise BadInput(f"total_duration={makespan} shorter than the longest job ({metrics['jct_max_s']})")
        metrics["makespan_s"] = float(makespan)
        metrics["throughput_programs_s"] = len(v) / float(makespan)
    return durations, metrics, own


def _order(key: str) -> tuple[int, object]:
    return (0, int(key)) if key.isdigit() else (1, key)


class AgentJctCollector:
    name = "agent-jct"
    description = "Measured agent job completion times (Continuum results.json with job_durations)"

    def detect(self, path: Path) -> bool:
        path = Path(path)
        f = path if path.is_file() else first_file(path, ("results.json",))
        if f is None or f.name != "results.json":
            return False
        try:
            with open(f, "rb") as fh:
                head = fh.read(2048)
        except OSError:
            return False
        return b'"job_durations"' in head or (b'"num_jobs"' in head and b'"total_duration"' in head)

    def collect(self, path: Path) -> MeasuredResult:
        root = Path(path)
        result = MeasuredResult(fmt=self.name)
        cells, programs, metrics, taken = [], [], [], set()
        for f, (durations, m, own) in per_file(walk_files(root, ("results.json",)), read_results, result.skips):
            result.files_read += 1
            cid = unique_id(f"{SOURCE}/{SETUP['gpu']}/llama-3.1-70b/tp{SETUP['tp']}/{f.parent.name}", taken)
            row = cell(
                cid,
                SOURCE,
                SETUP["gpu_raw"],
                SETUP["model_raw"],
                rel(f, root),
                tp=SETUP["tp"],
                n_gpus=SETUP["n_gpus"],
                dtype=SETUP["dtype"],
                engine=SETUP["engine"],
                kind="end-to-end",
                config={
                    "setup_from": "source README via PROVENANCE.md, not results.json",
                    "agent": "mini-swe-agent",
                    "workers": 64,
                    "scheduler": "vLLM stock (Continuum baseline)",
                    "file_figures": own,
                },
            )
            row.update(gpu=SETUP["gpu"], workload=SETUP["workload"], load=SETUP["load"])
            cells.append(row)
            programs.extend(
                {"cell_id": cid, "program_id": k, "jct_s": durations[k]} for k in sorted(durations, key=_order)
            )
            metrics.extend(metric_rows(cid, m))
            result.notes.append(
                f"{cid}: {len(durations)} jobs; mean {m['jct_mean_s']:.6f} s (file {own.get('average_duration')}), "
                f"median {m['jct_p50_s']:.6f} s (file {own.get('median_duration')}), p95 {m['jct_p95_s']:.3f} s "
                f"(file {own.get('percentile_95')}), makespan {m.get('makespan_s')} s; setup from PROVENANCE.md"
            )
        result.tables = {
            "cells": frame(cells, "cells"),
            "programs": frame(programs, "programs"),
            "metrics": frame(metrics, "metrics"),
        }
        return result
