"""Pricing an engine step under speculative decoding: the target's verification batch plus the drafter's passes.

What vLLM v1 runs per step with ``num_speculative_tokens = k`` (vllm/v1/core/sched/scheduler.py
``Scheduler.schedule``: a running request with drafts gets ``num_new_tokens = 1 + len(spec_token_ids)``; the
model runner computes logits for every scheduled position and ``RejectionSampler`` (vllm/v1/sample/
rejection_sampler.py) keeps the accepted prefix plus one bonus / recovered token):

- the **target** forwards ``k + 1`` tokens of every decoding sequence (the last emitted token and ``k`` drafts):
  linear layers, norms, LM head and sampler see ``n (k + 1)`` tokens. Attention reads each sequence's KV once for
  its ``k + 1`` queries (one varlen / decode kernel call with ``q_len = k + 1``; decode attention is
  memory-bound, so its cost stays the per-context-token cost of one query). Here: the wrapped pricer's step of
  ``n (k + 1)`` decode tokens whose contexts sum to the sequences' context sum, i.e. ``decode_coeffs(n (k + 1))``'s
  constant with ``decode_coeffs(n)``'s per-context-token slope;
- the **drafter**: none for n-gram prompt lookup (vllm/v1/spec_decode/ngram_proposer.py ``NgramProposer``: a
  numba search of the request's own tokens on the CPU, overlapped with nothing and not priced here); for a draft
  model (vllm/v1/spec_decode/draft_model.py ``DraftModelProposer``; same TP as the target, which vLLM requires,
  ``_raise_if_draft_tp_mismatch``) ``k`` sequential forward passes of the draft model at the batch (the first
  proposes from the newly accepted tokens, each next one from the previous draft), priced by the draft model's own
  pricer as ``k`` decode steps of ``n`` sequences over the same contexts; prompt chunks are prefilled by the
  draft model too (its KV cache must hold the prompt), priced as the same chunks on the draft pricer. A drafter
  given as a fraction ``f`` of the target is the target's own pricer scaled by ``f`` (:class:`ScaledPricer`).

Decode-only steps keep the linear form ``A + c * sum_ctx`` the simulator's fast-decode runs need
(:class:`agentreplay.perf.pricer.IterationPricer`), so runs of verification steps stay exact and cheap.
The draft tokens' share of the token budget is the scheduler's (``Scheduler.decode_tokens``); the lookahead KV
slots vLLM allocates for the drafts are not modelled; see :mod:`agentreplay.features.speculation.speculative`.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentreplay.perf.catalog import Efficiency
from agentreplay.perf.pricer import IterationPricer, PrefillItem
from agentreplay.perf.stepcost import StepCost


class ScaledPricer:
    """``pricer`` with every price multiplied by ``factor`` (a drafter priced as a fraction of the target)."""

    def __init__(self, pricer: IterationPricer, factor: float) -> None:
        if not factor > 0:
            raise ValueError(f"ScaledPricer factor={factor!r} must be > 0")
        self.pricer = pricer
        self.factor = factor
        self.needs_decode_contexts = bool(getattr(pricer, "needs_decode_contexts", False))

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        return self.factor * self.pricer.iteration_time_s(prefill, decode_ctx)

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        a, c = self.pricer.decode_coeffs(n_seqs)
        return self.factor * a, self.factor * c


class DraftPasses:
    """A draft model's forward passes inside the target's engine step: its pricer without the per-step host cost
    (:mod:`agentreplay.perf.stepcost`: scheduling, input preparation and output processing happen once per engine
    step, for the target; vLLM runs the proposer inside the same ``execute_model``, gpu_model_runner.py
    ``propose_draft_token_ids``). Kernel launches, TP collectives and the drafter's own kernels stay."""

    def __init__(self, pricer: IterationPricer, efficiency: Efficiency) -> None:
        self.pricer = pricer
        self.step = StepCost.of(efficiency)
        self.needs_decode_contexts = bool(getattr(pricer, "needs_decode_contexts", False))

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        return self.pricer.iteration_time_s(prefill, decode_ctx) - self.step.time_s(len(prefill) + len(decode_ctx))

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        a, c = self.pricer.decode_coeffs(n_seqs)
        return a - self.step.time_s(n_seqs), c


class SpeculativePricer:
    """An :class:`IterationPricer` for a target running speculative decoding with ``k`` draft tokens per step.

    ``drafter`` None: n-gram prompt lookup (no model cost). Otherwise the drafter's pricer (a draft model on the
    same GPUs, or :class:`ScaledPricer` of the target). See the module docstring for what each step prices.
    """

    def __init__(self, target: IterationPricer, k: int, drafter: IterationPricer | None = None) -> None:
        if k < 1:
            raise ValueError(f"SpeculativePricer k={k} must be >= 1")
        self.target = target
        self.k = k
        self.drafter = drafter
        self.needs_decode_contexts = bool(getattr(target, "needs_decode_contexts", False)) or bool(
            getattr(drafter, "needs_decode_contexts", False)
        )
        self._coeffs: dict[int, tuple[float, float]] = {}
        # the target's hooks a lockstep DP group's pricer reads (agentreplay.perf.parallel.DPStepPricer: the
        # group's expert work replaces each rank's own, at the verification tokens), where the target has them
        for hook in ("experts_time_s", "padded_tokens"):
            if hasattr(target, hook):
                setattr(self, hook, getattr(target, hook))

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        """``(A, c)`` of a decode-only verification step of ``n_seqs`` sequences: target ``A`` at ``n (k + 1)``
        tokens, target slope ``c`` at ``n`` sequences, plus ``k`` drafter decode steps at ``n``."""
        got = self._coeffs.get(n_seqs)
        if got is None:
            k = self.k
            a = self.target.decode_coeffs(n_seqs * (k + 1))[0]
            c = self.target.decode_coeffs(n_seqs)[1]
            if self.drafter is not None:
                ad, cd = self.drafter.decode_coeffs(n_seqs)
                a += k * ad
                c += k * cd
            got = self._coeffs[n_seqs] = (a, c)
        return got

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        """A step with prefill chunks and decoding sequences: each decode verifies ``k + 1`` tokens (its context
        once, then ``k`` zero-context entries: the count and the sum a pricer reads), the drafter prefills the
        chunks and runs ``k`` passes over the decodes."""
        k = self.k
        n = len(decode_ctx)
        t = self.target.iteration_time_s(prefill, [*decode_ctx, *([0] * (k * n))] if n else decode_ctx)
        d = self.drafter
        if d is not None and (prefill or n):
            t += d.iteration_time_s(prefill, decode_ctx)
            if n and k > 1:
                ad, cd = d.decode_coeffs(n)
                t += (k - 1) * (ad + cd * sum(decode_ctx))
        return t
