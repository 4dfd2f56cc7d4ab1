"""Speculative decoding per workload: the expected-value step model (``[speculative]``:
:mod:`agentreplay.features.speculation.config`).

Semantics modelled (vLLM v1; Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding",
ICML, §3.1 eq. 1):

- A decoding request proposes ``k`` draft tokens per step (``num_speculative_tokens``); the target verifies the
  ``k + 1`` positions in one forward (vllm/v1/core/sched/scheduler.py ``Scheduler.schedule``: ``num_new_tokens =
  1 + len(spec_token_ids)``) and keeps the accepted prefix of the drafts plus one token of its own
  (vllm/v1/sample/rejection_sampler.py ``RejectionSampler``); rejected positions roll back
  ``num_computed_tokens`` (``Scheduler.update_from_output``: ``request.num_computed_tokens -= num_rejected``).
- With a per-token acceptance rate ``a`` (independent drafts), a step emits on average
  ``E(a, k) = (1 - a^(k+1)) / (1 - a)`` tokens (``k + 1`` at ``a = 1``; 1 at ``a = 0``).
- The first output token comes from the prefill (no drafts exist before it), so TTFT changes only by the draft
  model's own prefill of the prompt in the same engine step (none for n-gram); the other ``out - 1`` tokens take
  ``S = ceil((out - 1) / E)`` verification steps.
- Acceptance is a constant or per tool class (``acceptance_by_tool_class``): the class of the tool call the turn
  produces (``Request.tool_class``; edits and tool-call JSON are low-entropy, n-gram lookup of the context hits).
- Drafter cost: none for ``ngram`` (prompt lookup, vllm/v1/spec_decode/ngram_proposer.py); for ``draft_model``
  a catalogue model priced by the same performance model, or a fixed fraction of the target
  (:mod:`agentreplay.perf.speculative`).

How it runs (what is exact, what is the expected-value approximation):

- **Expected value** (``acceptance_model = "expected"``, the default): the number of verification steps of a turn
  is ``S`` above, deterministic. ``"sampled"`` draws each step's accepted count instead (:func:`sampled_steps`,
  seeded), which adds the turn-to-turn spread of real acceptance; the steps are still fixed before the run.
  The engine schedules a speculating turn as one that emits ``1 + S`` "tokens": one from the
  prefill, then one per verification step. The scheduler, the decode cohort and the fast-decode runs are the
  unchanged one-token-per-step machinery, so runs stay exact (same result as step by step) and cheap.
- **Exact given S**: each step is priced as the verification batch plus the drafter
  (:class:`agentreplay.perf.speculative.SpeculativePricer`); the turn's decode time is the sum of its ``S`` step
  prices at the batch it ran in; first token, finish and JCT follow from the simulated schedule.
- **Metrics from real tokens**: the output tables and summary count the trace's output tokens (TPOT = (finish -
  first token) / (out - 1), output throughput from ``out``), not steps: the recorder reads the token workload.
- **Approximations** (stated; small on agent traces, whose outputs are short next to their contexts): during decode
  the KV cache grows one slot per step instead of ``E`` (the ``out - 1 - S`` accepted tokens beyond are not held,
  and attention reads a context shorter by as much), and the next turn's prefix-cache hit stops where the cached
  history stops, so it prefills those tokens again (at most the summary's ``reprefilled_tokens_bound``); the drafts
  take no KV slots (vLLM allocates slots for them, ``num_lookahead_tokens``); attained-service policies count steps
  for a speculating turn's output.
- **Token budget** (exact, vLLM): every decoding request takes ``1 + k`` of the step's token budget
  (``max_num_batched_tokens``; the scheduler's ``decode_tokens``), so fewer prompt tokens are prefilled beside a
  speculating decode batch; a request reached with less budget left is scheduled with fewer drafts. For
  ``ngram`` this is an upper bound: the prompt-lookup proposer proposes nothing when it finds no match
  (ngram_proposer.py), and such a step takes 1 (the trace does not say how often).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from agentreplay.features.speculation.config import SpeculativeConfig
from agentreplay.perf.pricer import IterationPricer
from agentreplay.perf.speculative import DraftPasses, ScaledPricer, SpeculativePricer
from agentreplay.sim.workload import Workload


def expected_tokens(a: float, k: int) -> float:
    """Tokens one verification step emits on average: ``(1 - a^(k+1)) / (1 - a)`` (Leviathan et al. eq. 1)."""
    if a >= 1.0:
        return float(k + 1)
    return (1.0 - a ** (k + 1)) / (1.0 - a)


def verification_steps(tokens: int, a: float, k: int) -> int:
    """Steps to emit ``tokens`` decode tokens at ``E(a, k)`` per step: ``ceil(tokens / E)`` (0 for 0 tokens). A
    quotient within 1e-9 of an integer counts as that integer (float rounding of an exact division)."""
    if tokens <= 0:
        return 0
    q = tokens / expected_tokens(a, k)
    return max(1, math.ceil(q - 1e-9))


def step_workload(w: Workload, cfg: SpeculativeConfig, seed: int = 0) -> Workload:
    """``w`` with each turn's output as the engine schedules it: ``1 + S`` (the prefill's token, then one per
    verification step: :func:`verification_steps` of ``out - 1`` at the turn's acceptance rate, or
    :func:`sampled_steps` under ``acceptance_model = "sampled"``, from a generator of its own, the third child of
    ``SeedSequence(seed)``, so the arrival and tool draws of :func:`agentreplay.sim.run.simulate` are unchanged)."""
    k = cfg.num_speculative_tokens
    rates = np.array([cfg.rate(c) for c in w.tool_class], dtype=np.float64)
    dec = w.output_tokens - 1
    if cfg.acceptance_model == "sampled":
        rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(2,)))
        steps = sampled_steps(dec, rates, k, rng)
    else:
        e = np.array([expected_tokens(a, k) for a in rates.tolist()], dtype=np.float64)
        steps = np.where(dec > 0, np.maximum(1, np.ceil(dec / e - 1e-9)), 0).astype(np.int64)
    return dataclasses.replace(w, output_tokens=1 + steps)


def sampled_steps(tokens: np.ndarray, rates: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """Verification steps to emit ``tokens[i]`` tokens when every step accepts ``N = min(G, k)`` drafts, ``G`` the
    drafts accepted before the first rejection (``P(G >= j) = a^j``), and emits ``N + 1`` tokens (the accepted
    drafts plus the target's own token; Leviathan et al. 2023 §3.1, vLLM ``RejectionSampler``); draws turn by
    turn, in turn order (deterministic for a seeded ``rng``)."""
    out = np.zeros(len(tokens), dtype=np.int64)
    for i, (n, a) in enumerate(zip(tokens.tolist(), rates.tolist(), strict=True)):
        if n <= 0:
            continue
        if a >= 1.0 or a <= 0.0:
            out[i] = -(-n // (k + 1)) if a >= 1.0 else n
            continue
        done = steps = 0
        while done < n:
            m = max(8, int((n - done) / expected_tokens(a, k)) + 8)
            emitted = np.minimum(rng.geometric(1.0 - a, size=m) - 1, k) + 1
            cum = done + np.cumsum(emitted)
            j = int(np.searchsorted(cum, n))  # first step reaching n (cum[j] >= n), or m if none
            if j < m:
                steps += j + 1
                break
            steps += m
            done = int(cum[-1])
        out[i] = steps
    return out


def speculative_pricer(
    target: IterationPricer, cfg: SpeculativeConfig, draft: IterationPricer | None = None
) -> SpeculativePricer:
    """The pricer of an instance speculating as ``cfg`` says: ``draft`` is the drafter model's pricer (method
    ``draft_model`` with ``draft_model`` set; built by the caller from the catalogue), else none or the fraction."""
    drafter: IterationPricer | None = None
    if cfg.method == "draft_model":
        if cfg.draft_cost_fraction is not None:
            drafter = ScaledPricer(target, cfg.draft_cost_fraction)
        else:
            assert draft is not None, "draft_model: the caller builds the drafter's pricer"
            drafter = draft
    return SpeculativePricer(target, cfg.num_speculative_tokens, drafter)


def summary(tokens: Workload, steps: Workload, cfg: SpeculativeConfig) -> dict[str, Any]:
    """Run-summary figures of speculation: verification steps, realised tokens per step, and the bound on tokens
    the next turns prefill again (the KV approximation of the module docstring: ``out - 1 - S`` per non-last turn)."""
    dec = int((tokens.output_tokens - 1).sum())
    n_steps = int((steps.output_tokens - 1).sum())
    last = tokens.turn_start[1:] - 1
    behind = tokens.output_tokens - steps.output_tokens
    behind[last] = 0
    return {
        "method": cfg.method,
        "num_speculative_tokens": cfg.num_speculative_tokens,
        "acceptance": cfg.acceptance,
        "acceptance_by_tool_class": dict(cfg.acceptance_by_tool_class or {}),
        "draft_model": cfg.draft_model,
        "draft_cost_fraction": cfg.draft_cost_fraction,
        "acceptance_model": cfg.acceptance_model,
        "decode_tokens": dec,
        "verification_steps": n_steps,
        "tokens_per_step": dec / n_steps if n_steps else float("nan"),
        "reprefilled_tokens_bound": int(behind.sum()),
    }


def draft_pricer(cfg: Any, instance: tuple[str, int, str]) -> IterationPricer | None:
    """The draft model's pricer for an instance ``(gpu, tp, dtype)`` of ``cfg`` (a :class:`SimConfig`): the
    catalogue roofline of ``[speculative] draft_model`` on the same GPUs, TP and dtype (vLLM requires the draft's
    TP to equal the target's, draft_model.py ``_raise_if_draft_tp_mismatch``), without the per-step host cost
    (:class:`agentreplay.perf.speculative.DraftPasses`); None for other methods. With DP each rank runs its own
    drafter; a MoE model's lockstep group step verifies ``1 + k`` tokens a decode through the experts and the
    dispatch (:class:`agentreplay.perf.parallel.DPStepPricer` ``decode_tokens``)."""
    sc: SpeculativeConfig = cfg.speculative
    hw = cfg.hardware
    if sc.method != "draft_model" or sc.draft_model is None:
        return None
    from agentreplay.perf.deploy import kv_cache_dtype
    from agentreplay.perf.model import PerfModel

    gpu, tp, dtype = instance
    model = PerfModel.from_names(
        gpu,
        sc.draft_model,
        dtype,  # type: ignore[arg-type]
        tp,
        mixed_attention=hw.mixed_attention,
        kv_dtype=kv_cache_dtype(hw.kv_cache_dtype),
    )
    return DraftPasses(model, model.efficiency)
