"""The ``inference-perf`` end-to-end cells: each measured run replayed with its client and deployment as they ran.

**The client** (kubernetes-sigs/inference-perf, ``datagen/shared_prefix_datagen.py`` and the constant load type):
``num_groups x num_prompts_per_group`` prompts are generated once, each a group's system prompt of S tokens, a
space and its own Q-token question (single-turn mode), shuffled once; request ``i`` sends prompt ``i mod P``
(``load_lazy_data``), so every prompt recurs every P requests and, after the first P, the whole prompt is in vLLM's
prefix cache up to its last full block (vLLM recomputes at least the last token: ``agentreplay.kv.manager``).
Each prompt is one shared-prefix segment here (``shared_prefix_id`` = the prompt), which is exactly that reuse; the
100-token group prefix shared between a group's prompts matters only for the first P requests and is not kept.
Arrivals: each stage sends ``rate x duration`` requests evenly spaced at ``1 / rate`` (``constant``; ``poisson``
draws exponential gaps, seeded), stages back to back. ``ignore_eos`` makes every request decode exactly its
``max_tokens`` = O. Prompt length: the client's measured mean ``prompt_len`` where the run records it (the
server's re-tokenisation of the random text adds ~5% in those runs), else S + Q + 1 (BOS), said in the note.

**The deployment**: vLLM v0.15.1 limits (``max_num_seqs``, ``max_num_batched_tokens``), block size 16, prefix
caching and chunked prefill on (V1 defaults), TP; the GPU KV block count from the run's vLLM log where recorded,
else the memory model at the run's ``gpu_memory_utilization`` (:func:`agentreplay.sim.run.plan_instance`); fp16
checkpoints priced as bf16 (same width and tensor-core peak on Hopper), FP8 checkpoints as fp8 W8A8. The CPU KV
tier (``cpu_kv_blocks``) is reported with the GPU blocks the replay peaked at: it only holds blocks evicted from a
full GPU cache, which these runs (100 recurring prompts) never fill; the note says so per cell.

**The comparison** (client side, as inference-perf times it): TTFT and E2E mean / p90 / p99 over the requests that
arrived in the cell's stage (or the first 300, or the whole run), and the sources' per-token time
``itl_mean_s`` = (E2E mean - TTFT mean) / (O_client - 1), with the *measured* run's client token count
(O_client - 1 = (E2E - TTFT) / itl of the measurement): its error is the error of the decode span E2E - TTFT.
The engine's client path (HTTP, tokenisation, detokenisation and stream delivery) is added to each request as the
fitted :class:`ClientPath` (``catalog/engine_cost.json``; zero when none is given).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pandas as pd

from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import plan_instance, simulate
from agentreplay.trace.io import Trace
from validation.e2e.common import _metrics, _rows, single_turn_trace

SOURCE: Final = "inference-perf"
METRICS: Final = ("ttft_mean_s", "ttft_p90_s", "ttft_p99_s", "e2e_mean_s", "e2e_p90_s", "e2e_p99_s", "itl_mean_s")
_DTYPES: Final = {"fp16": "bf16", "float16": "bf16", "bf16": "bf16", "bfloat16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True, slots=True)
class ClientPath:
    """Client-side time a request spends outside the engine, seconds: before its first token reaches the client
    (HTTP, the API server's tokenisation, hand-off to the engine core, the first chunk's delivery) and per output
    token after it (detokenisation and the stream's delivery, ``OutputProcessor`` and the API server's SSE writer)."""

    ttft_s: float = 0.0
    per_output_token_s: float = 0.0
    #: engine steps between a token's step and its delivery (vLLM v1 processes a step's outputs while the next
    #: step runs: ``EngineCore.step_with_batch_queue`` / async scheduling), priced at the request's own mean step
    lag_steps: float = 0.0


class NotReplayable(ValueError):
    """A run whose measurements cannot be replayed (overloaded: survivors' aggregates); the message says why."""


def run_config(cell: pd.Series) -> dict[str, Any]:
    return json.loads(cell["config_json"])


def trace_for(cfg: dict[str, Any], model: str, seed: int = 0) -> tuple[Trace, np.ndarray, str]:
    """The run's requests as one-turn programs: (trace, stage index per request, note on the prompt length)."""
    sp = cfg["shared_prefix"]
    n_prompts = int(sp["num_groups"]) * int(sp["num_prompts_per_group"])
    arrivals, stage_of = [], []
    t0 = 0.0
    rng = np.random.default_rng(seed)
    for k, (rate, duration) in enumerate(cfg["stages"]):
        n = round(rate * duration)
        if cfg.get("arrivals") == "poisson":
            gaps = rng.exponential(1.0 / rate, n)
            times = t0 + np.cumsum(gaps) - gaps[0]
        else:
            times = t0 + np.arange(n) / rate
        arrivals.append(times)
        stage_of.append(np.full(n, k, dtype=np.int32))
        t0 += duration
    arrival = np.concatenate(arrivals)
    stage = np.concatenate(stage_of)
    n = len(arrival)
    measured_len = (cfg.get("stage_info") or {}).get("prompt_len_mean")
    nominal = int(sp["system_prompt_len"]) + int(sp["question_len"]) + 1
    if measured_len:
        prompt, note = round(measured_len), f"prompt {round(measured_len)} tokens (the client's measured mean)"
    else:
        prompt, note = nominal, f"prompt {nominal} tokens (S + Q + BOS; the run does not record its prompt length)"
    ids = [f"r{i}" for i in range(n)]
    trace = single_turn_trace(
        ids,
        arrival,
        np.full(n, prompt, dtype=np.int64),
        np.full(n, int(sp["output_len"]), dtype=np.int64),
        model,
        shared_prefix_ids=[f"prompt{p}" for p in np.arange(n) % n_prompts],
        source=SOURCE,
    )
    return trace, stage, note


def sim_config(cell: pd.Series, cfg: dict[str, Any], base: SimConfig | None = None) -> tuple[SimConfig, str]:
    """The SimConfig of the run's deployment and the note on its KV blocks."""
    dtype = _DTYPES.get(str(cell["dtype"]).lower())
    if dtype is None:
        raise ValueError(f"{cell['cell_id']}: precision {cell['dtype']!r} is not priced (fp16, bf16, fp8)")
    sim = (base or SimConfig()).replace(
        hardware={"gpu": cell["gpu"], "model": cell["model"], "dtype": dtype, "tp": int(cell["tp"])},
        cache={"block_size": 16, "enable_prefix_caching": True, "gpu_memory_utilization": float(cfg["gpu_mem_util"])},
        scheduler={
            "max_num_seqs": int(cfg["max_num_seqs"]),
            "max_num_batched_tokens": int(cfg["max_num_batched_tokens"]),
            "max_model_len": int(cfg["max_model_len"]),
        },
        workload={"arrival": "trace"},
        router={"policy": "round-robin"},
    )
    if cfg.get("total_kv_blocks"):
        blocks, how = int(cfg["total_kv_blocks"]), "from the run's vLLM log"
    else:
        hw = sim.hardware
        blocks = plan_instance(sim, hw.gpu, hw.tp, hw.dtype).num_gpu_blocks
        how = f"from the memory model at utilisation {float(cfg['gpu_mem_util']):g}"
    sim = sim.replace(cache={"num_gpu_blocks": blocks})
    return sim, f"{blocks} GPU KV blocks {how}"


def is_stage_cell(cfg: dict[str, Any]) -> bool:
    """A cell of one stage (not the whole run, not a window of requests): the cells the targets judge."""
    return int(cfg["stage"]) >= 0 and not cfg.get("window_requests")


def _window(arrival: np.ndarray, stage_of: np.ndarray, cfg: dict[str, Any]) -> np.ndarray:
    """Boolean mask of the requests the cell's metrics cover (by arrival order)."""
    if cfg.get("window_requests"):
        order = np.argsort(arrival, kind="stable")[: int(cfg["window_requests"])]
        mask = np.zeros(len(arrival), dtype=bool)
        mask[order] = True
        return mask
    if int(cfg["stage"]) < 0:
        return np.ones(len(arrival), dtype=bool)
    return stage_of == int(cfg["stage"])


def simulated_metrics(
    ttft: np.ndarray, e2e: np.ndarray, output_tokens: int, measured: dict[str, float], client: ClientPath
) -> dict[str, float]:
    """The cell's metrics from per-request engine TTFT and E2E (seconds) plus the client path."""
    step = (e2e - ttft) / max(output_tokens - 1, 1)
    ttft = ttft + client.ttft_s + client.lag_steps * step
    e2e = e2e + client.ttft_s + client.lag_steps * step + client.per_output_token_s * max(output_tokens - 1, 0)
    out = {
        "ttft_mean_s": float(ttft.mean()),
        "ttft_p90_s": float(np.percentile(ttft, 90)),
        "ttft_p99_s": float(np.percentile(ttft, 99)),
        "e2e_mean_s": float(e2e.mean()),
        "e2e_p90_s": float(np.percentile(e2e, 90)),
        "e2e_p99_s": float(np.percentile(e2e, 99)),
    }
    span = measured.get("e2e_mean_s", 0.0) - measured.get("ttft_mean_s", 0.0)
    itl = measured.get("itl_mean_s")
    denom = span / itl if itl and span > 0 else output_tokens - 1
    out["itl_mean_s"] = (out["e2e_mean_s"] - out["ttft_mean_s"]) / denom
    return out


@dataclass
class RunReplay:
    """One run simulated once: per-request engine times and what the cells of the run need."""

    run: str
    arrival: np.ndarray
    stage_of: np.ndarray
    ttft_s: np.ndarray
    e2e_s: np.ndarray
    output_tokens: int
    summary: dict[str, Any]
    note: str


def replay_run(
    cell: pd.Series, cfg: dict[str, Any], perf: Any, base: SimConfig | None = None, *, max_requests: int | None = None
) -> RunReplay:
    """Simulate the run of ``cell`` (any cell of it) with pricer ``perf``; ``max_requests`` keeps the first N."""
    if not cfg.get("replayable", True):
        raise NotReplayable(cfg.get("not_replayable") or "not replayable")
    trace, stage_of, prompt_note = trace_for(cfg, cell["model"])
    sim, kv_note = sim_config(cell, cfg, base)
    if max_requests is not None:
        sim = sim.replace(workload={"max_programs": max_requests})
        stage_of = stage_of[:max_requests]
    res = simulate(trace, sim, perf=perf)
    t = res.turns.sort_values("program_id", key=lambda s: s.str[1:].astype(int))
    arrival = trace.programs["arrival_s"].to_numpy()[: len(t)]
    ttft = t["ttft_s"].to_numpy(dtype=float)
    e2e = (t["finish_s"] - t["release_s"]).to_numpy(dtype=float)
    s = res.summary
    cpu = cfg.get("cpu_kv_blocks")
    peak = int(res.instances["kv_used_blocks"].max())
    tier = f"; CPU KV tier of {cpu} blocks recorded, not exercised (GPU KV peaked at {peak} blocks)" if cpu else ""
    note = (
        f"{len(t):,} requests replayed ({prompt_note}; {sim.hardware.dtype} weights); {kv_note}{tier}; prefix hit "
        f"rate {s['prefix_hit_rate']:.3f}, {s['preemptions']} preemptions"
    )
    if cfg.get("assumed"):
        note += "; assumed: " + "; ".join(f"{k}: {v}" for k, v in cfg["assumed"].items())
    return RunReplay(cfg["run"], arrival, stage_of, ttft, e2e, int(cfg["shared_prefix"]["output_len"]), s, note)


def cell_rows(
    cell: pd.Series, replay: RunReplay, tables: dict[str, pd.DataFrame], client: ClientPath, role: str = "validation"
) -> list[dict[str, Any]]:
    """Error rows of one cell of a replayed run (:func:`validation.e2e.common._rows`, metrics in :data:`METRICS`
    order)."""
    meas = _metrics(tables, cell["cell_id"])
    mask = _window(replay.arrival, replay.stage_of, run_config(cell))
    sim = simulated_metrics(replay.ttft_s[mask], replay.e2e_s[mask], replay.output_tokens, meas, client)
    return _rows(cell, meas, sim, replay.note, role)


def configuration(cell: pd.Series) -> str:
    """The (GPU, model, TP) configuration a cell belongs to (the unit left out by the out-of-configuration fit)."""
    return f"{cell['gpu']}/{cell['model']}/tp{int(cell['tp'])}"
