"""Uncontended JCT: what each program's JCT would be with the cluster to itself, priced by the run's own model.

Definition (per program, from the turns of a simulate output and the run's ``config.toml``):

    JCT_0 = sum over turns t of (prefill_t + decode_t) + sum over turns but the last of tool_s[t]

- Each turn runs alone on the instance the run sent it to (that instance's GPU, TP and dtype), with the
  program's history cached: turn ``t`` finds ``H_t = floor(min(R_t, I_t - 1) / B) * B`` prompt tokens in the
  prefix cache, ``R_t`` the tokens that extend the previous turn's context (the trace's ``reused_tokens`` when
  the trace is given, else ``min(I_t, I_{t-1} + O_{t-1})``: append-only context), ``B`` the KV block size.
  Full blocks only, and at most ``prompt - 1`` tokens: vLLM's ``KVCacheManager.get_computed_blocks``
  (``vllm/v1/core/kv_cache_manager.py``: ``max_cache_hit_length = request.num_tokens - 1``) over whole-block
  hashes. Turn 0 finds nothing (an empty cluster holds no shared prefix either).
- ``prefill_t``: the ``I_t - H_t`` new tokens in chunks of at most ``max_num_batched_tokens`` (vLLM v1 chunked
  prefill), one iteration per chunk priced by the run's pricer (``iteration_time_s([(chunk, cached_so_far,
  emits)], ())``); the last chunk emits the first output token.
- ``decode_t``: the other ``O_t - 1`` tokens, one decode step each at batch 1 with ``I_t + j`` tokens in the KV
  cache for step ``j = 0 .. O_t - 2``, each ``A + c * ctx`` with ``(A, c) = decode_coeffs(1)`` (the form the
  engine prices decode-only steps in, :class:`agentreplay.perf.pricer.IterationPricer`), summed in closed form.
- ``tool_s``: the run's own tool time after each turn (replayed or sampled), so JCT and JCT_0 share it.
- Queueing, preemption and the release of a program (arrival mode) do not enter.

The pricer is built exactly as :func:`agentreplay.sim.run.simulate` builds it from the run's config
(read-only use of :mod:`agentreplay.perf`). Not modelled: a DP / EP deployment's lockstep with its other ranks
(the rank is priced alone).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from agentreplay.fleet.outputs import reusable_tokens
from agentreplay.perf.alone import turn_service_s
from agentreplay.perf.deploy import graph_padding, kv_cache_dtype
from agentreplay.perf.table import pricer_from_names
from agentreplay.sim.config import SimConfig
from agentreplay.sim.run import graph_sizes, plan_instance


def pricers_for(cfg: SimConfig) -> tuple[list[Any], list[int]]:
    """Per instance of the run: its pricer and its ``max_num_batched_tokens`` (as the simulation resolved them)."""
    hw = cfg.hardware
    built: dict[tuple[str, int, str], tuple[Any, int]] = {}
    pricers, chunks = [], []
    for spec in hw.instance_specs():
        if spec not in built:
            gpu, tp, dtype = spec
            plan = plan_instance(cfg, gpu, tp, dtype)
            pricer = pricer_from_names(
                hw.perf,
                gpu,
                hw.model,
                dtype,  # type: ignore[arg-type]
                tp,
                mixed_attention=hw.mixed_attention,
                kv_dtype=kv_cache_dtype(hw.kv_cache_dtype),
                cudagraph_sizes=graph_sizes(cfg, gpu, plan),
                graph_mixed=graph_padding(hw.cudagraph_mode)[1],
                custom_allreduce=hw.deployment_kernels and not hw.disable_custom_all_reduce,
            )
            built[spec] = (pricer, plan.max_num_batched_tokens)
        pricers.append(built[spec][0])
        chunks.append(built[spec][1])
    return pricers, chunks


def history_hits(turns: pd.DataFrame, block_size: int, reused_tokens: np.ndarray | None = None) -> np.ndarray:
    """``H_t`` per turn (module docstring); ``turns`` sorted by program then turn_idx."""
    inp = turns["input_tokens"].to_numpy(np.int64)
    reuse = np.minimum(reusable_tokens(turns, reused_tokens), inp - 1)
    return np.maximum(reuse, 0) // block_size * block_size


def uncontended(
    turns: pd.DataFrame,
    cfg: SimConfig,
    reused_tokens: np.ndarray | None = None,
    pricers: tuple[list[Any], list[int]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(per_turn, per_program)`` frames: per turn ``history_hit_tokens``, ``prefill_s``, ``decode_s``; per
    program ``uncontended_jct_s`` (with ``service_s`` and ``tool_s``). ``pricers``: override
    :func:`pricers_for` (tests)."""
    per_inst, chunk = pricers if pricers is not None else pricers_for(cfg)
    hits = history_hits(turns, cfg.cache.block_size, reused_tokens)
    inst = turns["instance"].to_numpy(np.int64)
    if len(inst) and (inst.min() < 0 or inst.max() >= len(per_inst)):
        bad = int(inst[(inst < 0) | (inst >= len(per_inst))][0])
        raise ValueError(f"turns.parquet: instance {bad} outside the {len(per_inst)} instances of config.toml")
    inp = turns["input_tokens"].to_numpy(np.int64)
    out = turns["output_tokens"].to_numpy(np.int64)
    memo: dict[tuple[int, int, int, int], tuple[float, float]] = {}
    pre, dec = np.empty(len(inp)), np.empty(len(inp))
    for k in range(len(inp)):
        key = (int(inst[k]), int(inp[k]), int(hits[k]), int(out[k]))
        got = memo.get(key)
        if got is None:
            got = memo[key] = turn_service_s(per_inst[key[0]], chunk[key[0]], key[1], key[2], key[3])
        pre[k], dec[k] = got
    per_turn = pd.DataFrame(
        {
            "program_id": turns["program_id"].to_numpy(),
            "turn_idx": turns["turn_idx"].to_numpy(),
            "history_hit_tokens": hits,
            "prefill_s": pre,
            "decode_s": dec,
        }
    )
    last = (turns["program_id"] != turns["program_id"].shift(-1)).to_numpy()
    tool = np.where(last, 0.0, np.nan_to_num(turns["tool_s"].to_numpy(float)))
    per_turn["tool_s"] = tool
    g = per_turn.groupby("program_id", sort=False)
    prog = pd.DataFrame({"service_s": g["prefill_s"].sum() + g["decode_s"].sum(), "tool_s": g["tool_s"].sum()})
    prog["uncontended_jct_s"] = prog["service_s"] + prog["tool_s"]
    return per_turn, prog.reset_index()
