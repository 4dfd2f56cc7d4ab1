"""The ``vllm-run`` end-to-end cell: a real vLLM serving run with per-request timestamps, replayed at its
measured arrivals with the engine's own KV block count and batching limits (see :mod:`validation.e2e`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd

from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from validation.e2e_common import _metrics, _perf, _rows, dist, single_turn_trace, turn_metrics


def vllm_run(cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: str | Path | None, pricer: str = "roofline"
             ) -> tuple[list[dict], dict[str, Any]]:
    req = tables["requests"]
    req = req[req["cell_id"] == cell["cell_id"]].reset_index(drop=True)
    cfg_json = json.loads(cell["config_json"])
    trace = single_turn_trace(req["request_id"].astype(str).tolist(), req["arrival_s"].to_numpy(),
                              req["input_tokens"].to_numpy(), req["output_tokens"].to_numpy(), cell["model"])
    cfg = SimConfig().replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": cell["dtype"], "tp": int(cell["tp"])},
        cache={"num_gpu_blocks": int(cfg_json["num_gpu_blocks"]), "block_size": int(cfg_json["block_size"]),
               "enable_prefix_caching": bool(cfg_json.get("enable_prefix_caching", True))},
        scheduler={"max_num_seqs": int(cfg_json["max_num_seqs"]),
                   "max_num_batched_tokens": int(cfg_json["max_num_batched_tokens"])},
        workload={"arrival": "trace"})
    res = simulate(trace, cfg, perf=_perf(cell["gpu"], cell["model"], cell["dtype"], int(cell["tp"]), catalog,
                                          pricer))
    sim, per_sim = turn_metrics(res)
    multi = req["output_tokens"] > 1
    per_meas = {"ttft_s": (req["first_token_s"] - req["arrival_s"]).to_numpy(),
                "tpot_s": ((req["last_token_s"] - req["first_token_s"]) / (req["output_tokens"] - 1))[multi].to_numpy(),
                "e2e_s": (req["last_token_s"] - req["arrival_s"]).to_numpy()}
    meas = {**_metrics(tables, cell["cell_id"])}
    for k, v in per_meas.items():  # p99 etc. recomputed the same way as the simulated ones
        meas.update({m: x for m, x in dist(k[:-2], v).items() if m not in meas})
    note = (f"{len(req)} requests replayed at measured arrivals; KV blocks {cfg_json['num_gpu_blocks']} and batching "
            f"limits {cfg_json['max_num_seqs']} seqs / {cfg_json['max_num_batched_tokens']} tokens from the run")
    return _rows(cell, meas, sim, note), {"measured": per_meas, "simulated": per_sim, "summary": res.summary}
