"""The refined roofline (:class:`RefinedPerfModel`), the fallback of the table pricer
(:mod:`agentreplay.perf.table_model`). Times are seconds; token counts are tokens.

:class:`PerfModel` with a few more calibrated parameters (:class:`~agentreplay.perf.refinement.Refinement`, data in
``catalog/roofline.toml``), each fixing one measured misfit of the single-efficiency roofline:

- ``gemm_m_half_tokens``: GEMM compute efficiency saturates with the token count M,
  ``eff(M) = compute_efficiency * M / (M + M_half)`` (tiles are padded, small-M GEMMs run few CTAs), i.e. the
  compute time of a linear layer is ``FLOPs per token * (M + M_half) / (peak * compute_efficiency)``. Applies to
  every GEMM (qkv, o, gate_up, down, MoE experts and router, LM head). Still linear in M, so decode-only
  iterations keep the exact ``A(n) + c * sum_ctx`` form.
- per-class fixed kernel costs: ``kernel_overhead_us`` for GEMM kernels, ``elementwise_kernel_us`` for norms,
  rotary, SiLU, embedding, sampler and top-k, ``attn_kernel_us`` for the one attention kernel of a layer;
- ``elementwise_bandwidth_efficiency``: the effective bandwidth of activation-sized elementwise kernels, as a
  fraction of the DRAM bandwidth (may exceed 1: their operands are often L2-resident);
- ``attn_prefill_kv_efficiency``: bandwidth efficiency of the cached-prefix KV read of a prefill chunk (prefill
  kernels parallelise over query blocks, not over keys, so a short chunk over a long cache streams it with few
  CTAs); ``attn_decode_seq_us``: a fixed cost per decoding sequence per layer (KV tile granularity, metadata);
  ``attn_decode_fixed_us``: a fixed cost per layer of an iteration that decodes, beyond the attention kernel's
  launch (``attn_kernel_us``, which prefill pays too): the profiled decode calls cost ~4.5 us more than a
  one-sequence prefill call of the same size (RTX 4090 and RTX PRO 6000 profiles, two or more sequences).
- prefill attention in FlashAttention-2's tile form (:class:`PerfModel`, ``attn_prefill_tile_efficiency``)
  works here as in the plain roofline; calibration fits it for both where a serving engine's FlashAttention-2
  prefill was profiled (validation/calibration/calibrate.py).

With every refinement at its default :class:`RefinedPerfModel` prices exactly like :class:`PerfModel`.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Final

from mypy_extensions import mypyc_attr

from agentreplay.perf.catalog import Dtype, Efficiency, GpuSpec, ModelSpec, load_gpu, load_model
from agentreplay.perf.kernels import KERNELS, PER_FORWARD
from agentreplay.perf.loaders import load_refinement
from agentreplay.perf.model import PerfModel
from agentreplay.perf.refinement import Refinement
from agentreplay.perf.terms import OPERATORS, Terms, terms_of

_IDX: Final = {op: i for i, op in enumerate(OPERATORS)}


def launch_s(pm: PerfModel, op: str) -> float:
    """Seconds of fixed cost per kernel of operator ``op`` under ``pm`` (one per class in the refined model)."""
    if isinstance(pm, RefinedPerfModel):
        return pm.launch[KERNELS[op][0]]
    return pm.efficiency.kernel_overhead_us * 1e-6


def kernels_s(pm: PerfModel, op: str) -> float:
    """Fixed launch seconds of all kernels of one occurrence of ``op`` under ``pm``."""
    if isinstance(pm, RefinedPerfModel):
        return sum(pm.launch[c] for c in KERNELS[op])
    return len(KERNELS[op]) * pm.efficiency.kernel_overhead_us * 1e-6


@mypyc_attr(allow_interpreted_subclasses=True)
class RefinedPerfModel(PerfModel):
    """:class:`PerfModel` with the :class:`Refinement` terms (module docstring). Same invariants and API."""

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        dtype: Dtype = "bf16",
        tp: int = 1,
        efficiency: Efficiency | None = None,
        kv_dtype: Dtype = "bf16",
        refinement: Refinement | None = None,
        mixed_attention: str = "one_kernel",
        cudagraph_sizes: Sequence[int] = (),
        graph_mixed: bool = True,
        custom_allreduce: bool = False,
    ) -> None:
        super().__init__(
            gpu, model, dtype, tp, efficiency, kv_dtype, mixed_attention, cudagraph_sizes, graph_mixed, custom_allreduce
        )
        r = refinement if refinement is not None else Refinement()
        eff = self.efficiency
        self.refinement = r
        self._m_half = float(r.gemm_m_half_tokens)
        self._pf_m_half = float(r.attn_prefill_m_half_tokens)
        if r.elementwise_bandwidth_efficiency is not None:
            s = eff.bandwidth_efficiency / r.elementwise_bandwidth_efficiency
            self._norm_tok *= s
            self._rope_tok *= s
            self._act_tok *= s
            self._embed_tok *= s
            self._final_norm_tok *= s
            self._sampler_tok *= s
        if r.attn_prefill_kv_efficiency is not None:
            self._pf_prefix_s *= eff.attn_decode_efficiency / r.attn_prefill_kv_efficiency
        self._dec_seq_s += self._layers * r.attn_decode_seq_us * 1e-6
        self._dec_fixed_s = self._layers * r.attn_decode_fixed_us * 1e-6
        k = eff.kernel_overhead_us
        self.launch = {
            "gemm": k * 1e-6,
            "elementwise": (k if r.elementwise_kernel_us is None else r.elementwise_kernel_us) * 1e-6,
            "attention": (k if r.attn_kernel_us is None else r.attn_kernel_us) * 1e-6,
        }
        body = [
            op
            for op in KERNELS
            if op not in PER_FORWARD and op != "attention_decode" and (op != "moe_router" or self._moe)
        ]
        self._kernel_layer_s = sum(kernels_s(self, op) for op in body)
        self._kernel_fwd_s = kernels_s(self, "embedding") + kernels_s(self, "final_layernorm")
        self._kernel_emit_s = kernels_s(self, "lm_head") + kernels_s(self, "sampler")

    @classmethod
    def from_names(  # type: ignore[override]
        cls,
        gpu: str,
        model: str,
        dtype: Dtype = "bf16",
        tp: int = 1,
        catalog: str | Path | None = None,
        refinements: str | Path | None = None,
        **kwargs: object,
    ) -> RefinedPerfModel:
        """Build from catalog keys with the refinement of ``gpu`` in ``refinements`` (default: the packaged
        ``catalog/roofline.toml``; a GPU without an entry prices like :class:`PerfModel`)."""
        spec = load_gpu(gpu, catalog)
        eff, ref = load_refinement(spec, refinements)
        if kwargs.pop("async_scheduling", False):  # vLLM --async-scheduling: host step hidden (stepcost.overlapped)
            from agentreplay.perf.stepcost import overlapped

            eff = overlapped(eff)
        return cls(spec, load_model(model), dtype, tp, efficiency=eff, refinement=ref, **kwargs)  # type: ignore

    def _gemm(self, op: tuple[float, float, float], tokens: int) -> float:
        flop_s, weight_s, act_s = op
        return max((tokens + self._m_half) * flop_s, weight_s + tokens * act_s)

    def _terms(
        self, tokens: int, emit: int, seqs: int, pf_work: float, pf_prefix: int, pf_chunk: int, n_dec: int, sum_ctx: int
    ) -> Terms:
        t = list(super()._terms(tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx))
        if tokens == 0:
            return terms_of(t)
        tokens = self.padded_tokens(tokens, pf_chunk == 0)  # as PerfModel._terms: CUDA-graph padding
        n_layers = self._layers
        if n_dec and self._dec_fixed_s:
            t[_IDX["attention_decode"]] += self._dec_fixed_s
        if pf_chunk and self._pf_m_half:  # sum over chunks of (chunk + m) * (prefix + chunk / 2)
            work = pf_work + self._pf_m_half * (pf_prefix + 0.5 * pf_chunk)
            t[_IDX["attention_prefill"]] = n_layers * max(
                work * self._pf_flop_s, pf_prefix * self._pf_prefix_s + pf_chunk * self._pf_chunk_s
            )
        if self._m_half:
            t[_IDX["qkv_proj"]] = n_layers * self._gemm(self._qkv, tokens)
            t[_IDX["o_proj"]] = n_layers * self._gemm(self._o, tokens)
            if self._moe:
                touched, rows = self._moe_rows(tokens)  # fused MoE's padded rows (PerfModel._moe_rows)
                k = self._experts_per_token
                work = (rows + touched * self._m_half) / k  # + per-expert M_half, in token units
                for name, (flop_s, weight_s, act_s) in (("gate_up_proj", self._gate_up), ("down_proj", self._down)):
                    t[_IDX[name]] = n_layers * max(work * flop_s, touched * weight_s + tokens * act_s)
                t[_IDX["moe_router"]] = n_layers * self._gemm(self._router, tokens)
            else:
                t[_IDX["gate_up_proj"]] = n_layers * self._gemm(self._gate_up, tokens)
                t[_IDX["down_proj"]] = n_layers * self._gemm(self._down, tokens)
            t[_IDX["lm_head"]] = self._gemm(self._lm_head, emit) if emit else 0.0
        t[_IDX["kernel_overhead"]] = (
            n_layers * self._kernel_layer_s + self._kernel_fwd_s + (self._kernel_emit_s if emit else 0.0)
        )
        return terms_of(t)

    def __repr__(self) -> str:
        return f"Refined{super().__repr__()}"
