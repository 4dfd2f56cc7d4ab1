"""The ``llmperf`` end-to-end cells: LLMPerf closed-loop runs (aggregates only), replayed by reconstructing the
client (see :mod:`validation.e2e`)."""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from agentreplay.perf import load_gpu, load_model
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import simulate
from validation.components import iteration_floor_s
from validation.e2e_common import _metrics, _perf, _rows, dist, single_turn_trace, turn_metrics


def llmperf_requests(cell: pd.Series, meas: dict[str, float], n: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(input tokens, output tokens) in the served model's tokens, and r = Llama-2 tokens per model token."""
    cfg = json.loads(cell["config_json"])
    req_in, req_out = cfg["requested_input_tokens"], cfg["requested_output_tokens"]
    r = meas["output_tokens_mean"] / float(req_out["mean"])
    rng = np.random.default_rng(zlib.crc32(str(cell["cell_id"]).encode()))
    inp = rng.normal(meas["input_tokens_mean"], float(req_in["stddev"]), n) / r
    out = rng.normal(float(req_out["mean"]), float(req_out["stddev"]), n)
    return np.maximum(np.rint(inp), 1).astype(np.int64), np.maximum(np.rint(out), 2).astype(np.int64), r


def llmperf_itl(e2e_s: np.ndarray, output_tokens: np.ndarray) -> np.ndarray:
    """LLMPerf's per-request "inter-token latency": the client sums the gaps between content chunks starting
    from the request's send time (so the TTFT is the first gap) and divides by every SSE chunk it received,
    the role chunk that vLLM's chat stream sends first included (tech-grandpa/llmperf ``token_benchmark_ray.py``
    divides ``INTER_TOKEN_LAT`` by ``NUM_OUTPUT_TOKENS`` = ``tokens_received`` of
    ``openai_chat_completions_client.py`` before replacing it with the re-tokenised count): end-to-end time /
    (output tokens + 1), one token per chunk. Not vLLM's TPOT, which leaves the first token out."""
    return np.asarray(e2e_s, dtype=float) / (np.asarray(output_tokens, dtype=float) + 1.0)


def llmperf(cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: str | Path | None, *, burst: bool = False,
            pricer: str = "roofline") -> tuple[list[dict], dict[str, Any]]:
    meas = _metrics(tables, cell["cell_id"])
    cfg = json.loads(cell["config_json"])
    n = int(meas.get("completed_requests", cfg.get("num_concurrent_requests") or 64))
    inp, out, r = llmperf_requests(cell, meas, n)
    spread = 0.0 if burst else max(0.0, float(cfg["test_span_s"]) - meas["e2e_mean_s"])
    ids = [f"req{i:03d}" for i in range(n)]
    trace = single_turn_trace(ids, np.linspace(0.0, spread, n), inp, out, cell["model"])
    sim_cfg = SimConfig().replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": cell["dtype"], "tp": 1},
        workload={"arrival": "trace"})
    res = simulate(trace, sim_cfg, perf=_perf(cell["gpu"], cell["model"], cell["dtype"], 1, catalog, pricer))
    sim, per = turn_metrics(res)
    per["itl_s"] = llmperf_itl(per["e2e_s"], res.turns["output_tokens"].to_numpy())
    sim = {**{k: v for k, v in sim.items() if not k.startswith("tpot")}, **dist("itl", per["itl_s"])}
    sim["throughput_output_tok_s"] *= r  # measured throughput counts Llama-2 tokens
    spec, gpu = load_model(cell["model"]), load_gpu(cell["gpu"], catalog)
    floor = iteration_floor_s(spec, gpu, "prefill_iteration", float(np.mean(inp)), 1, cell["dtype"])
    # every prompt and output token of the run once through the linear layers, at the datasheet peak
    run_floor = iteration_floor_s(spec, gpu, "prefill_iteration", float(inp.sum() + out.sum()), 1, cell["dtype"])
    note = (f"{n} requests, arrivals {'all at 0' if burst else f'uniform over {spread:.1f} s'}; inputs "
            f"{inp.mean():.0f} / outputs {out.mean():.0f} model tokens (r = {r:.3f} Llama-2 tokens per token); "
            f"prefill of the mean prompt at the GPU's datasheet peak takes >= {floor:.3f} s, measured mean TTFT "
            f"{meas['ttft_mean_s']:.3f} s")
    return _rows(cell, meas, sim, note), {"simulated": per, "summary": res.summary, "ttft_floor_s": floor,
                                          "measured_ttft_mean_s": meas["ttft_mean_s"], "run_floor_s": run_floor,
                                          "measured_span_s": float(cfg["test_span_s"]),
                                          "gpu_dtype": f"{cell['gpu']} {cell['dtype']}"}


def llmperf_burst(tables: dict[str, pd.DataFrame], catalog: str | Path | None) -> pd.DataFrame:
    """Arrival sensitivity of the LLMPerf RTX 3090 BF16 cells: all 64 requests at t = 0 instead of staggered."""
    cells = tables["cells"]
    sel = cells[(cells["source"] == "llmperf") & (cells["gpu"] == "rtx3090") & (cells["dtype"] == "bf16")]
    rows = []
    for _, cell in sel.iterrows():
        r, _ = llmperf(cell, tables, catalog, burst=True)
        rows.extend(x for x in r if x["metric"] in ("throughput_output_tok_s", "ttft_mean_s", "e2e_mean_s"))
    df = pd.DataFrame(rows)
    if len(df):
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df
