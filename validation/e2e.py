"""End-to-end validation cells: replay each measured serving or agent run in the simulator and compare.

- ``vllm-run`` (per-request timestamps): every request becomes a one-turn program arriving at its measured
  arrival time (``arrival = "trace"``), with the engine's KV block count, block size, prefix caching and
  batching limits from the cell's ``config_json``. Compared: TTFT, TPOT, E2E (mean, p50, p90, p99), output
  throughput; per-request values are kept for CDF overlays.
- ``llmperf`` (aggregates only): 64 one-turn requests. The collector's notes drive the stand-in: token counts are
  Llama-2-tokenizer counts, so ``r = measured output mean / requested output mean`` (the requested max_tokens is
  in the served model's tokens) converts both ways; inputs ~ N(measured input mean, requested sd) / r, outputs ~
  N(requested mean, sd), seeded per cell. Arrivals are staggered (the client starts one thread per request;
  times not recorded): uniform over ``[0, test span - measured mean E2E]``, which uses two measured aggregates
  as inputs, so the throughput comparison mostly checks the simulated latency of the last requests (said in the
  report). GPU memory: vLLM's default 0.9 utilisation (the engine config is not recorded). Compared: throughput,
  TTFT, E2E and ITL as LLMPerf defines it (:func:`llmperf_itl`: end-to-end time per received chunk, TTFT
  included), not vLLM's TPOT.
- ``agent-jct``: the measured run's trajectories are not public; the bundled ``datasets/swebench-verified``
  (mini-swe-agent + Gemini 3 Pro) stands in, closed loop with 64 in flight, the ``vllm`` preset.
- ``mlperf``: not simulated (see :data:`SKIPPED_SOURCES`).

Every row is role ``validation``: no end-to-end cell feeds the calibration.
"""

from __future__ import annotations

import json
import zlib
from pathlib import Path
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.perf import PerfModel, list_gpus, load_gpu, load_model
from agentreplay.perf.table import TablePerfModel, pricer_from_names
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import SimResult, simulate
from agentreplay.trace.io import Trace, read_trace
from validation.components import iteration_floor_s

QUANTILES: Final = (50, 90, 99)
SKIPPED_SOURCES: Final = {
    "mlperf": "not simulated: the OpenOrca input-length distribution is not in the measured summaries (only "
              "outputs per sample = tokens/s / samples/s), TP and batching of the TensorRT-LLM engine are not "
              "recorded, and the simulator models vLLM scheduling; any replay would rest on typed-in assumptions",
}
AGENT_CAVEAT: Final = ("stand-in trajectories: mini-swe-agent + Gemini 3 Pro (datasets/swebench-verified), whose "
                       "turns are far longer than the measured run's Llama-3.1-70B agent turns; the measured run's "
                       "own trajectories are not public")
DATASET: Final = Path(__file__).resolve().parents[1] / "datasets" / "swebench-verified"


def single_turn_trace(ids: list[str], arrival_s: np.ndarray | None, input_tokens: np.ndarray,
                      output_tokens: np.ndarray, model: str) -> Trace:
    """One program per request, one turn each (no tool call, no shared prefix)."""
    n = len(ids)
    progs = pd.DataFrame({
        "program_id": ids, "source": "validation", "task_id": ids, "agent": "none", "model": model,
        "n_turns": np.ones(n, dtype=np.int32), "resolved": pd.array([None] * n, dtype="boolean"),
        "arrival_s": np.full(n, np.nan) if arrival_s is None else np.asarray(arrival_s, dtype=float),
        "shared_prefix_id": [None] * n, "shared_prefix_tokens": np.zeros(n, dtype=np.int64)})
    nan = np.full(n, np.nan)
    turns = pd.DataFrame({
        "program_id": ids, "turn_idx": np.zeros(n, dtype=np.int32),
        "input_tokens": np.asarray(input_tokens, dtype=np.int64),
        "output_tokens": np.asarray(output_tokens, dtype=np.int64), "reused_tokens": np.zeros(n, dtype=np.int64),
        "provider_cached_tokens": pd.array([None] * n, dtype="Int64"),
        "reasoning_tokens": pd.array([None] * n, dtype="Int64"), "tokens_kind": "exact", "tool_class": "other",
        "tool_name": [None] * n, "tool_duration_s": nan, "tool_duration_kind": [None] * n, "llm_latency_s": nan,
        "t_request_s": nan, "t_response_s": nan})
    return Trace(progs, turns)


#: Pricers an end-to-end replay can run with: the default roofline (what ``simulate`` uses), the refined roofline
#: (catalog/roofline.toml) and the measured-table pricer (catalog/tables.toml, refined fallback); ``KIND:apart``
#: is KIND with mixed prefill + decode attention priced apart instead of as one kernel (``[hardware]
#: mixed_attention``; the same on GPUs without the tile form).
E2E_PRICERS: Final = ("roofline", "refined", "table", "roofline:apart", "refined:apart")


def _perf(gpu: str, model: str, dtype: str, tp: int, catalog: str | Path | None,
          pricer: str = "roofline") -> PerfModel | TablePerfModel:
    kind, _, mixed = pricer.partition(":")
    return pricer_from_names(kind, gpu, model, dtype, tp, catalog,  # type: ignore[arg-type]
                             mixed_attention=mixed or "one_kernel")


def dist(prefix: str, values: np.ndarray) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    v = v[np.isfinite(v)]
    out = {f"{prefix}_mean_s": float(v.mean())}
    out.update({f"{prefix}_p{q}_s": float(np.percentile(v, q)) for q in QUANTILES})
    return out


def _rows(cell: pd.Series, measured: dict[str, float], simulated: dict[str, float], note: str = "") -> list[dict]:
    return [{"source": cell["source"], "cell_id": cell["cell_id"], "gpu": cell["gpu"], "model": cell["model"],
             "dtype": cell["dtype"], "tp": int(cell["tp"]), "metric": m, "measured": float(measured[m]),
             "simulated": float(simulated[m]), "role": "validation", "note": note}
            for m in simulated if m in measured and np.isfinite(measured[m]) and np.isfinite(simulated[m])]


def _metrics(measured_tables: dict[str, pd.DataFrame], cell_id: str) -> dict[str, float]:
    m = measured_tables["metrics"]
    m = m[m["cell_id"] == cell_id]
    return dict(zip(m["metric"], m["value"].astype(float), strict=True))


def turn_metrics(res: SimResult) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    t = res.turns
    e2e = (t["finish_s"] - t["release_s"]).to_numpy()
    per = {"ttft_s": t["ttft_s"].to_numpy(), "tpot_s": t["tpot_s"].to_numpy(), "e2e_s": e2e}
    out = {**dist("ttft", per["ttft_s"]), **dist("tpot", per["tpot_s"]), **dist("e2e", e2e)}
    span = float(t["finish_s"].max() - res.programs["arrival_s"].min())
    out["throughput_output_tok_s"] = float(t["output_tokens"].sum()) / span
    return out, per


# ---------------------------------------------------------------------------------------------- vLLM run
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


# ---------------------------------------------------------------------------------------------- LLMPerf
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


# ---------------------------------------------------------------------------------------------- agent JCT
def agent_jct(cell: pd.Series, tables: dict[str, pd.DataFrame], catalog: str | Path | None,
              dataset: Path = DATASET) -> tuple[list[dict], dict[str, Any]]:
    meas = _metrics(tables, cell["cell_id"])
    prog = tables["programs"]
    meas_jct = prog.loc[prog["cell_id"] == cell["cell_id"], "jct_s"].to_numpy(dtype=float)
    cfg = SimConfig().replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": cell["dtype"], "tp": int(cell["tp"])},
        workload={"arrival": "closed", "concurrency": 64})
    try:
        from agentreplay.policy.presets import apply_preset
        cfg = apply_preset(cfg, "vllm")
    except ImportError:  # presets not available: the defaults are vLLM's behaviour
        pass
    res = simulate(read_trace(dataset), cfg,
                   perf=_perf(cell["gpu"], cell["model"], cell["dtype"], int(cell["tp"]), catalog))
    jct = res.programs["jct_s"].to_numpy(dtype=float)
    sim = {"jct_mean_s": float(jct.mean()), "jct_p50_s": float(np.median(jct)),
           "jct_p95_s": float(np.percentile(jct, 95)), "makespan_s": float(res.summary["makespan_s"])}
    w = res.summary
    note = (f"{AGENT_CAVEAT}. Stand-in: {w['turns'] / w['programs']:.1f} turns and "
            f"{w['input_tokens'] / w['turns']:,.0f} input tokens per turn; simulated prefix hit rate "
            f"{w['prefix_hit_rate']:.3f}, {w['preemptions']:,} preemptions, {w['recomputed_tokens']:,} recomputed "
            "tokens")
    return _rows(cell, meas, sim, note), {"measured": {"jct_s": meas_jct}, "simulated": {"jct_s": jct},
                                          "summary": res.summary}


# ---------------------------------------------------------------------------------------------- all
def run_all(tables: dict[str, pd.DataFrame], catalog: str | Path | None = None, *, agent: bool = True,
            dataset: Path = DATASET) -> tuple[pd.DataFrame, dict[str, dict[str, Any]], list[tuple[str, str]]]:
    """Simulate every end-to-end cell; returns (error rows, per-cell distributions, skipped (cell, reason))."""
    cells = tables["cells"]
    cells = cells[cells["kind"] == "end-to-end"]
    known = set(list_gpus(catalog))
    rows: list[dict] = []
    dists: dict[str, dict[str, Any]] = {}
    skipped: list[tuple[str, str]] = []
    handlers = {"vllm-run": vllm_run, "llmperf": llmperf, "agent-jct": agent_jct}
    for _, cell in cells.iterrows():
        src = cell["source"]
        if src in SKIPPED_SOURCES:
            skipped.append((cell["cell_id"], SKIPPED_SOURCES[src]))
        elif src not in handlers:
            skipped.append((cell["cell_id"], f"no replay for source {src!r}"))
        elif not isinstance(cell["gpu"], str) or cell["gpu"] not in known:
            skipped.append((cell["cell_id"], f"GPU {cell['gpu_raw']!r} is not in the catalog"))
        elif src == "agent-jct" and not agent:
            skipped.append((cell["cell_id"], "skipped in --quick mode"))
        elif src == "agent-jct" and not (dataset / "turns.parquet").exists():
            skipped.append((cell["cell_id"], f"stand-in trajectories not found at {dataset}"))
        else:
            r, d = handlers[src](cell, tables, catalog)
            rows.extend(r)
            dists[cell["cell_id"]] = d
    return pd.DataFrame(rows), dists, skipped


def alternatives(tables: dict[str, pd.DataFrame], catalog: str | Path | None = None) -> pd.DataFrame:
    """The RTX 4090 vLLM run and the LLMPerf RTX 3090 BF16 cells replayed with the refined roofline, the table
    pricer and, where mixed attention is one kernel, both rooflines with it apart (rows as :func:`run_all`'s plus
    ``pricer``); the default-roofline rows are in :func:`run_all`."""
    cells = tables["cells"]
    sel = cells[(cells["source"] == "vllm-run") | ((cells["source"] == "llmperf") & (cells["gpu"] == "rtx3090")
                                                   & (cells["dtype"] == "bf16"))]
    known = set(list_gpus(catalog))
    rows: list[dict] = []
    for _, cell in sel.iterrows():
        if cell["gpu"] not in known:
            continue
        one_kernel = _perf(cell["gpu"], cell["model"], cell["dtype"], int(cell["tp"]), catalog).needs_decode_contexts
        for pricer in E2E_PRICERS[1:]:
            if pricer.endswith(":apart") and not one_kernel:
                continue  # no tile form on this GPU: mixed attention is priced apart already
            fn = vllm_run if cell["source"] == "vllm-run" else llmperf
            try:
                r, _ = fn(cell, tables, catalog, pricer=pricer)
            except ValueError as exc:  # no measured table for this GPU and model
                rows.append({"cell_id": cell["cell_id"], "pricer": pricer, "note": str(exc)})
                continue
            rows.extend({**x, "pricer": pricer} for x in r)
    df = pd.DataFrame(rows)
    if len(df) and "measured" in df:
        df["rel_error"] = df["simulated"] / df["measured"] - 1
    return df
