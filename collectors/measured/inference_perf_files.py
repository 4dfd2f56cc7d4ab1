"""Readers of the files an inference-perf measurement campaign leaves (see :mod:`collectors.measured.inference_perf`).

Each reader takes one file (or one run folder) and returns plain records; :class:`~collectors.base.BadInput` names
what is wrong. Four kinds, any subset of which may be present:

- a **native run folder** (inference-perf's own output plus the launch record): ``exp-config.yaml`` (vLLM limits:
  ``model``, ``tensor_parallelism``, ``max_model_len``, ``max_num_batched_tokens``, ``max_num_seqs``),
  ``profile.yaml`` (the profile as submitted), ``results/config.yaml`` (the profile inference-perf resolved: the
  workload that ran) and ``results/stage_<i>_lifecycle_metrics.json`` (``successes.latency`` distributions in
  seconds: ``time_to_first_token``, ``request_latency``; ``prompt_len`` and ``output_len`` as the client counted
  them; ``failures.count``; ``load_summary.requested_rate`` / ``achieved_rate``);
- a **sim-to-real error table** (``*error_records*.csv``): one row per simulator, experiment, stage
  (``stage_index`` -1 = the whole run) and metric (``ttft_mean``...``itl_mean``, milliseconds); only ``actual``
  is a measurement, ``predicted`` is that simulator's output;
- the **BLIS testdata** file (``trained_physics*.json``): per experiment the inference-perf workload as written
  (stages, shared-prefix keys), ``max_num_seqs``, ``max_num_batched_tokens``, ``total_kv_blocks`` and
  ``cpu_kv_blocks`` (read from the run's vllm.log); its ``expected`` values are BLIS outputs and are not read;
- the **experiment index** (``experiment_index.csv``): one row per run with its configuration, workload, KV blocks
  where known and ``workload_source``.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Final

import pandas as pd
import yaml

from collectors.base import BadInput
from collectors.measured.common import read_csv

#: error-table metric -> canonical metric name (values in ms -> seconds).
ERROR_METRICS: Final = {
    "ttft_mean": "ttft_mean_s",
    "ttft_p90": "ttft_p90_s",
    "ttft_p99": "ttft_p99_s",
    "e2e_mean": "e2e_mean_s",
    "e2e_p90": "e2e_p90_s",
    "e2e_p99": "e2e_p99_s",
    "itl_mean": "itl_mean_s",
}
ERROR_COLUMNS: Final = ("simulator", "experiment_folder", "model", "stage_index", "metric_name", "predicted", "actual")
INDEX_COLUMNS: Final = ("experiment", "model", "tp", "stages")
#: lifecycle distribution -> canonical prefix
_LIFECYCLE: Final = {"time_to_first_token": "ttft", "request_latency": "e2e"}


def run_name(folder: object) -> str:
    """The run's name: the last component of an experiment folder path (the tables keep the collector's host path)."""
    return str(folder).rstrip("/").rsplit("/", 1)[-1]


def _yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise BadInput(f"{path.name}: unreadable YAML ({type(exc).__name__})") from exc
    if not isinstance(data, dict):
        raise BadInput(f"{path.name}: not a mapping")
    return data


def _num(d: dict[str, Any], key: str, where: str) -> float:
    v = d.get(key)
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
        raise BadInput(f"{where}: {key} missing or not a number ({v!r})")
    return float(v)


def stage_metrics(path: Path) -> dict[str, Any]:
    """One ``stage_<i>_lifecycle_metrics.json`` (or the summary): metrics in seconds and the client's counts."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"{path.name}: unreadable JSON ({type(exc).__name__})") from exc
    ok = data.get("successes") if isinstance(data, dict) else None
    lat = ok.get("latency") if isinstance(ok, dict) else None
    if not isinstance(lat, dict):
        raise BadInput(f"{path.name}: no successes.latency")
    m: dict[str, float] = {}
    for key, prefix in _LIFECYCLE.items():
        d = lat.get(key)
        if not isinstance(d, dict):
            raise BadInput(f"{path.name}: successes.latency.{key} missing")
        m[f"{prefix}_mean_s"] = _num(d, "mean", f"{path.name}: {key}")
        for q in (90, 99):
            m[f"{prefix}_p{q}_s"] = _num(d, f"p{q}", f"{path.name}: {key}")
        if m[f"{prefix}_mean_s"] <= 0:
            raise BadInput(f"{path.name}: {key}.mean = {m[f'{prefix}_mean_s']} is not a positive time")
    out_len = (ok.get("output_len") or {}).get("mean")
    prompt_len = (ok.get("prompt_len") or {}).get("mean")
    if isinstance(out_len, int | float) and out_len > 1:
        # the source's per-token time: (E2E - TTFT) / (output tokens - 1) over the means, the client's token count
        m["itl_mean_s"] = (m["e2e_mean_s"] - m["ttft_mean_s"]) / (float(out_len) - 1)
    load = data.get("load_summary") or {}
    fails = (data.get("failures") or {}).get("count")
    return {
        "metrics": m,
        "successes": int(ok.get("count") or 0),
        "failures": int(fails or 0),
        "requested_rate": load.get("requested_rate"),
        "achieved_rate": load.get("achieved_rate"),
        "prompt_len_mean": float(prompt_len) if isinstance(prompt_len, int | float) else None,
        "output_len_mean": float(out_len) if isinstance(out_len, int | float) else None,
    }


def _stages(load: dict[str, Any], where: str) -> list[tuple[float, float]]:
    stages = load.get("stages")
    if not isinstance(stages, list) or not stages:
        raise BadInput(f"{where}: load.stages missing")
    out = []
    for i, st in enumerate(stages):
        rate, dur = _num(st, "rate", f"{where}: load.stages[{i}]"), _num(st, "duration", f"{where}: load.stages[{i}]")
        if rate <= 0 or dur <= 0:
            raise BadInput(f"{where}: load.stages[{i}] rate {rate} / duration {dur} must be > 0")
        out.append((rate, dur))
    return out


def shared_prefix(sp: dict[str, Any], where: str) -> dict[str, Any]:
    """A ``shared_prefix`` block in either spelling (``num_groups`` / ``num_prompts_per_group``, or the aliases
    ``num_unique_system_prompts`` / ``num_users_per_system_prompt``)."""
    groups = sp.get("num_groups", sp.get("num_unique_system_prompts"))
    per = sp.get("num_prompts_per_group", sp.get("num_users_per_system_prompt"))
    out = {
        "num_groups": groups,
        "num_prompts_per_group": per,
        "system_prompt_len": sp.get("system_prompt_len"),
        "question_len": sp.get("question_len"),
        "output_len": sp.get("output_len"),
        "multi_turn_flag": bool(sp.get("enable_multi_turn_chat", False)),
        "keys": "num_groups" if "num_groups" in sp else "num_unique_system_prompts",
    }
    for k in ("system_prompt_len", "question_len", "output_len"):
        v = out[k]
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise BadInput(f"{where}: shared_prefix.{k} = {v!r} is not a token count")
    if out["output_len"] < 1:
        raise BadInput(f"{where}: shared_prefix.output_len = {out['output_len']} must be >= 1")
    return out


def native_run(folder: Path) -> dict[str, Any]:
    """A native run folder: deployment limits, the workload as resolved, measured metrics per stage."""
    exp = _yaml(folder / "exp-config.yaml")
    resolved_path = folder / "results" / "config.yaml"
    resolved = _yaml(resolved_path) if resolved_path.exists() else None
    profile = _yaml(folder / "profile.yaml") if (folder / "profile.yaml").exists() else None
    wl = resolved or profile
    if wl is None:
        raise BadInput(f"{folder.name}: neither results/config.yaml nor profile.yaml")
    where = "results/config.yaml" if resolved else "profile.yaml"
    data = wl.get("data") or {}
    if data.get("type") != "shared_prefix" or not isinstance(data.get("shared_prefix"), dict):
        raise BadInput(
            f"{folder.name}/{where}: data.type {data.get('type')!r}: only shared_prefix prompts are replayed"
        )
    if resolved and data["shared_prefix"].get("enable_multi_turn_chat"):
        raise BadInput(
            f"{folder.name}/{where}: shared_prefix.enable_multi_turn_chat is on in the resolved profile: multi-turn "
            "user sessions (each request extending its session's context) are not replayed; refused rather than "
            "replayed as single-turn prompts"
        )
    load = wl.get("load") or {}
    if load.get("type") not in ("constant", "poisson"):
        raise BadInput(f"{folder.name}/{where}: load.type {load.get('type')!r} is not constant or poisson")
    stages: dict[int, dict[str, Any]] = {}
    for f in sorted((folder / "results").glob("stage_*_lifecycle_metrics.json")):
        m = re.match(r"stage_(\d+)_lifecycle_metrics\.json$", f.name)
        if m:
            stages[int(m.group(1))] = stage_metrics(f)
    if not stages:
        raise BadInput(f"{folder.name}: no results/stage_<i>_lifecycle_metrics.json")
    summary = folder / "results" / "summary_lifecycle_metrics.json"
    if summary.exists():
        stages[-1] = stage_metrics(summary)
    server = wl.get("server") or {}
    return {
        "name": folder.name,
        "model_raw": exp.get("model") or server.get("model_name"),
        "tp": exp.get("tensor_parallelism"),
        "max_model_len": exp.get("max_model_len"),
        "max_num_batched_tokens": exp.get("max_num_batched_tokens"),
        "max_num_seqs": exp.get("max_num_seqs"),
        "stages": _stages(load, f"{folder.name}/{where}"),
        "arrivals": load.get("type"),
        "shared_prefix": shared_prefix(data["shared_prefix"], f"{folder.name}/{where}"),
        "workload_source": f"{where} of this run (resolved by inference-perf)"
        if resolved
        else "profile.yaml of this run (as submitted; the resolution is not recorded)",
        "ignore_eos": bool(server.get("ignore_eos", False)),
        "streaming": bool((wl.get("api") or {}).get("streaming", True)),
        "measured": stages,
    }


def error_table(path: Path) -> pd.DataFrame:
    """An error table, one row per (simulator, run, stage, metric); times in seconds; exact duplicates dropped."""
    df = read_csv(path, ERROR_COLUMNS)
    df = df[df["metric_name"].isin(ERROR_METRICS)].copy()
    if df.empty:
        raise BadInput(f"no rows with a metric_name in {sorted(ERROR_METRICS)}")
    for col in ("predicted", "actual"):
        df[col] = pd.to_numeric(df[col], errors="coerce") / 1000.0
    bad = df["actual"].isna() | (df["actual"] <= 0)
    if bad.any():
        i = df.index[bad][0]
        raise BadInput(f"line {i + 2}: actual = {df.loc[i, 'actual']!r} is not a positive time")
    df["run"] = df["experiment_folder"].map(run_name)
    df["stage"] = pd.to_numeric(df["stage_index"], errors="raise").astype(int)
    df["metric"] = df["metric_name"].map(ERROR_METRICS)
    df["origin"] = path.as_posix()
    keep = ["simulator", "run", "model", "stage", "metric", "predicted", "actual", "origin"]
    keep += [
        c
        for c in (
            "tp",
            "max_num_batched_tokens",
            "gpu_mem_util",
            "cpu_offload",
            "precision",
            "hardware",
            "workload",
            "dp",
        )
        if c in df.columns
    ]
    return df[keep].drop_duplicates(["simulator", "run", "stage", "metric", "predicted", "actual"])


def testdata(path: Path) -> dict[str, dict[str, Any]]:
    """BLIS ``trained_physics*.json``: experiment id -> deployment and workload as written (no ``expected``)."""
    try:
        data = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise BadInput(f"unreadable JSON ({type(exc).__name__})") from exc
    exps = data.get("experiments") if isinstance(data, dict) else None
    if not isinstance(exps, list):
        raise BadInput("no 'experiments' list")
    out = {}
    for i, e in enumerate(exps):
        where = f"experiments[{i}] (id {e.get('id')!r})"
        ip = ((e.get("workload") or {}).get("inference_perf")) or {}
        if not ip:
            raise BadInput(f"{where}: workload.inference_perf missing")
        out[str(e.get("id"))] = {
            "model_raw": e.get("model"),
            "tp": e.get("tp"),
            "hardware": e.get("hardware"),
            "max_num_seqs": e.get("max_num_seqs"),
            "max_num_batched_tokens": e.get("max_num_batched_tokens"),
            "total_kv_blocks": e.get("total_kv_blocks"),
            "cpu_kv_blocks": e.get("cpu_kv_blocks"),
            "stages": _stages(ip, where),
            "shared_prefix": shared_prefix(ip.get("shared_prefix") or {}, where),
        }
    return out


_STAGE_SPEC = re.compile(r"^\s*([0-9.]+)@([0-9.]+)s\s*$")


def index(path: Path) -> pd.DataFrame:
    """The experiment index, one row per run (``experiment`` = the run's name)."""
    df = read_csv(path, INDEX_COLUMNS)
    if df["experiment"].duplicated().any():
        raise BadInput(f"experiment {df.loc[df['experiment'].duplicated(), 'experiment'].iloc[0]!r} listed twice")
    return df


def index_stages(spec: object, where: str) -> list[tuple[float, float]]:
    """``"8@600s,20@600s"`` -> [(8.0, 600.0), (20.0, 600.0)]."""
    out = []
    for part in str(spec).split(","):
        m = _STAGE_SPEC.match(part)
        if not m:
            raise BadInput(f"{where}: stages {spec!r}: expected 'RATE@DURATIONs' items")
        out.append((float(m.group(1)), float(m.group(2))))
    return out
