"""The ``vllm-run`` end-to-end cell: a real vLLM serving run with per-request timestamps, replayed at its
measured arrivals with the deployment it ran (:mod:`validation.deployment`: the engine's own KV block count or,
when the run does not record it, the memory model's; block size, prefix caching, batching limits, dtype, KV-cache
dtype, TP, DP / EP), see :mod:`validation.e2e`. A deployment the simulator does not model raises
:class:`~validation.deployment.NotSimulated`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from agentreplay.perf.deploy import kv_cache_dtype
from agentreplay.sim.run import simulate
from validation.deployment import from_config
from validation.deployment_sim import sim_config
from validation.e2e_common import _metrics, _perf, _rows, dist, single_turn_trace, turn_metrics


def vllm_run(
    cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: str | Path | None, pricer: str = "roofline"
) -> tuple[list[dict], dict[str, Any]]:
    req = tables["requests"]
    req = req[req["cell_id"] == cell["cell_id"]].reset_index(drop=True)
    cfg_json = json.loads(cell["config_json"])
    version = cell.get("engine_version")
    dep = from_config(
        cfg_json, str(cfg_json.get("meta_file") or cell["path"]), version if isinstance(version, str) else None
    )
    cfg, derived = sim_config(dep, cell["gpu"], cell["model"])
    cfg = cfg.replace(workload={"arrival": "trace"})
    trace = single_turn_trace(
        req["request_id"].astype(str).tolist(),
        req["arrival_s"].to_numpy(),
        req["input_tokens"].to_numpy(),
        req["output_tokens"].to_numpy(),
        cell["model"],
    )
    hw = cfg.hardware
    res = simulate(
        trace, cfg, perf=_perf(hw.gpu, hw.model, hw.dtype, hw.tp, catalog, pricer, kv_cache_dtype(hw.kv_cache_dtype))
    )
    sim, per_sim = turn_metrics(res)
    multi = req["output_tokens"] > 1
    per_meas = {
        "ttft_s": (req["first_token_s"] - req["arrival_s"]).to_numpy(),
        "tpot_s": ((req["last_token_s"] - req["first_token_s"]) / (req["output_tokens"] - 1))[multi].to_numpy(),
        "e2e_s": (req["last_token_s"] - req["arrival_s"]).to_numpy(),
    }
    meas = {**_metrics(tables, cell["cell_id"])}
    for k, v in per_meas.items():  # p99 etc. recomputed the same way as the simulated ones
        meas.update({m: x for m, x in dist(k[:-2], v).items() if m not in meas})
    blocks = f"KV blocks {dep.num_gpu_blocks} and " if dep.num_gpu_blocks is not None else ""
    limits_from = " from the run" if not {"max_num_seqs", "max_num_batched_tokens"} & set(dep.derived) else ""
    note = (
        f"{len(req)} requests replayed at measured arrivals; {blocks}batching limits {dep.max_num_seqs} "
        f"seqs / {dep.max_num_batched_tokens} tokens{limits_from}" + (f"; {derived}" if derived else "")
    )
    return _rows(cell, meas, sim, note), {
        "measured": per_meas,
        "simulated": per_sim,
        "summary": res.summary,
        "derived": dict(dep.derived),
        "kv_blocks": cfg.cache.num_gpu_blocks,
    }
