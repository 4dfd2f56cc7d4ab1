"""Operator-level roofline model pricing one engine iteration (a continuous-batching step) in seconds.

An iteration runs every scheduled token through the model once: prefill chunks (``chunk_tokens`` new tokens
after ``cached_prefix_tokens`` already in the KV cache) and decode tokens (one per running sequence, attending to
``ctx`` cached tokens). Each operator costs ``max(FLOPs / (peak * compute_eff), bytes / (bw * bandwidth_eff))``;
the iteration is the sum over operators and layers plus fixed overheads (:mod:`agentreplay.perf.terms`):

- linear layers (qkv, o, gate_up, down; MoE: router + experts) read their weights once per iteration, whatever
  the token count; MoE experts run as vLLM's fused MoE (``fused_experts``, vllm/model_executor/layers/fused_moe/
  fused_moe.py): only the experts the batch touches stream their weights, E * (1 - (1 - k/E) ** tokens) in
  expectation under uniform top-k routing, and the grouped GEMM computes each touched expert's tokens padded to
  whole BLOCK_SIZE_M blocks (``moe_align_block_size``; :meth:`PerfModel._moe_rows`); a shared expert
  (``ModelSpec.shared_expert_intermediate_size``, Llama 4: vllm/model_executor/models/llama4.py
  ``Llama4MoE.shared_expert``, a ``LlamaMLP`` run by ``SharedFusedMoE`` beside the routed experts) is a dense
  gate_up / act / down MLP every token runs in every MoE layer, priced like a dense MLP and added to the
  gate_up_proj / act_fn / down_proj terms;
- attention: prefill FLOPs 4 * chunk * (prefix + chunk/2) * q_width per layer plus the KV bytes it reads/writes
  or, when the GPU's ``attn_prefill_tile_efficiency`` is set, the critical path of FlashAttention-2's CTAs
  (:mod:`agentreplay.perf.tiles`: a short chunk over a long cache runs few long CTAs on an idle GPU, which a
  FLOP count cannot see), never below the same KV bytes; decode is a per-context-token cost max(FLOP time,
  KV-byte time), linear in the context;
- norms, rotary embedding, activation, embedding and sampler: memory-bound on activations;
- TP > 1: two all-reduces per layer plus one after the embedding, each as vLLM runs it on the GPU's link
  (:func:`agentreplay.perf.deploy.allreduce_kind`): the custom all-reduce where the GPUs have P2P (not GeForce),
  there are 2 of them or NVLink connects them all, and the message is under the custom kernel's limit
  (``custom_allreduce_latency_us`` + its one- or two-stage bytes over the link), else NCCL's ring
  (``allreduce_latency_us`` + 2 (tp-1)/tp * bytes / link); and an NCCL gather of the logits;
- LM head and sampler only for sequences that emit a token this iteration;
- a fixed cost per kernel launched, per sequence, and per iteration (framework).

CUDA graphs (``cudagraph_sizes``; :mod:`agentreplay.perf.deploy`): vLLM pads every batch of at most the largest
capture size up to the next capture size (FULL graphs for decode-only batches, PIECEWISE for mixed and prefill
batches under the default FULL_AND_PIECEWISE mode), so every operator but attention, the LM head and the sampler
(which see the real sequences) is priced at the padded token count. ``()`` (the constructor's default, as in the
component profiles, which ran kernels eagerly) prices the real count, as does a simulation unless its
``[hardware] deployment_kernels`` is on (then :func:`agentreplay.perf.table.pricer_from_names` gets vLLM's
default sizes or the configured ones). Likewise ``custom_allreduce`` is off by default (NCCL's ring at every
size, as the all-reduce curves the catalog was calibrated on measured).

Mixed iterations (prefill chunks and decodes together): ``mixed_attention="one_kernel"`` (the default), where
the tile form is on, prices their attention as what vLLM runs on those GPUs: one FlashAttention-2 varlen kernel
whose longest query is longer than one token, so it neither packs the decodes' GQA heads nor splits their KV
(``mha_varlen_fwd``: "Only apply split-k for decoding"); each decode is one query block per head walking its
whole context, list-scheduled with the chunks' blocks (:func:`agentreplay.perf.tiles.makespan_blocks`), decodes
first. ``"apart"`` prices the two parts as the terms above (with the FLOP form, always).
``benchmarks/attention_mixed.py`` compares both on the profiles' mixed shots and on a vLLM run.

Decode-only iterations cost ``A(n) + c * sum_ctx`` exactly (``A`` depends only on the number of sequences):
``decode_coeffs(n)`` gives ``(A, c)``, which the simulator uses to price runs of decode steps in one event, and
``decode_steps_time_s`` sums k steps in closed form.

Precision (:func:`agentreplay.perf.deploy.linear_kernel`): an fp8 checkpoint's linear layers (attention projections,
MLP, experts, shared expert) hold fp8 weights (1 byte; also in the memory model), except the attention projections
of a checkpoint that left them unquantized (``ModelSpec.bf16_attention``: bf16 weights at the bf16 peak). From
compute capability 8.9 (Ada, Hopper, Blackwell) vLLM runs them W8A8 at the fp8 tensor peak; the activations' fp8
quantisation is fused into the preceding RMSNorm / SiLU-and-mul (vllm/config/vllm.py ``enable_norm_fusion`` /
``enable_act_fusion``, or Inductor's own fusion) and is not priced apart. Below 8.9 (Ampere) vLLM runs FP8 Marlin
(``MarlinFP8ScaledMMLinearKernel``, W8A16): fp8 weight bytes, bf16 tensor-core math at the bf16 peak; Marlin
dequantises each weight fragment in registers once per 64-row tile while the tensor cores run, a few integer ops per
weight, so no separate dequantisation term is priced and the GEMM efficiency is the GPU's calibrated
``compute_efficiency`` (no Marlin profile exists to fit one). Embedding, LM head, norms, router and activations stay
bf16; attention runs at the bf16 peak; the KV cache uses ``kv_dtype`` (vLLM ``--kv-cache-dtype``: bytes per token
in decode attention and prefill KV traffic).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from mypy_extensions import mypyc_attr

from agentreplay.perf import coefficients as C
from agentreplay.perf.catalog import Dtype, Efficiency, GpuSpec, ModelSpec, check_dtype, load_gpu, load_model
from agentreplay.perf.deploy import custom_ar_link_bytes, fused_moe_block_m, linear_kernel
from agentreplay.perf.padding import padded_tokens, padding_table
from agentreplay.perf.pricer import IterationPricer, PrefillItem
from agentreplay.perf.terms import OPERATORS, Terms, cost, seq_sum, total
from agentreplay.perf.tiles import block_tiles, makespan_blocks, makespan_tiles

__all__ = ["MIXED_ATTENTION", "OPERATORS", "IterationPricer", "PerfModel", "PrefillItem"]

#: How a mixed iteration's attention is priced (module docstring): its two parts apart, or as one kernel.
MIXED_ATTENTION: tuple[str, ...] = ("apart", "one_kernel")

_ATTN_PREFILL = OPERATORS.index("attention_prefill")
_ATTN_DECODE = OPERATORS.index("attention_decode")


def mixed_pricer(perf: object) -> Callable[[Sequence[PrefillItem], int, int], float] | None:
    """``perf``'s :meth:`PerfModel.mixed_time_s` when it prices a mixed step exactly as its ``iteration_time_s``
    would from the decodes' count and sum (a :class:`PerfModel` that does not read each context, and whose class
    overrides none of the methods ``iteration_time_s`` goes through), else None (the caller then builds the
    contexts list)."""
    if not isinstance(perf, PerfModel) or perf.needs_decode_contexts:
        return None
    cls = type(perf)
    names = ("iteration_time_s", "_summarise", "_summarise_prefill", "_priced_total", "_priced_summary", "mixed_time_s")
    for name in names:
        if getattr(cls, name) is not getattr(PerfModel, name):
            return None
    return perf.mixed_time_s


@mypyc_attr(allow_interpreted_subclasses=True)  # perf.table.RefinedPerfModel refines it
class PerfModel:
    """Prices iterations for one (GPU, model, dtype, TP) with the given efficiencies. Times are seconds.

    Invariants: more tokens or longer contexts never cost less; ``iteration_time_s([], ctxs)`` equals
    ``decode_only_time_s(len(ctxs), sum(ctxs))`` bit for bit; ``sum(breakdown(...).values())`` equals
    ``iteration_time_s(...)`` up to rounding. An empty iteration costs 0.
    """

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        dtype: Dtype = "bf16",
        tp: int = 1,
        efficiency: Efficiency | None = None,
        kv_dtype: Dtype = "bf16",
        mixed_attention: str = "one_kernel",
        cudagraph_sizes: Sequence[int] = (),
        graph_mixed: bool = True,
        custom_allreduce: bool = False,
    ) -> None:
        check_dtype(dtype)
        check_dtype(kv_dtype, "kv_dtype")
        if mixed_attention not in MIXED_ATTENTION:
            raise ValueError(f"mixed_attention={mixed_attention!r}; allowed: {list(MIXED_ATTENTION)}")
        self.mixed_attention = mixed_attention
        model.validate_tp(tp)
        eff = efficiency if efficiency is not None else gpu.efficiency
        self.gpu, self.model, self.dtype, self.tp, self.kv_dtype, self.efficiency = gpu, model, dtype, tp, kv_dtype, eff
        self._coeffs: dict[int, tuple[float, float]] = {}  # decode_coeffs memo, filled on first use
        self.cudagraph_sizes: tuple[int, ...] = tuple(sorted(set(int(x) for x in cudagraph_sizes)))
        self._pad: list[int] = padding_table(self.cudagraph_sizes)  # tokens -> CUDA-graph size run (deploy)
        self._graph_mixed = graph_mixed  # mixed / prefill batches padded too (False: FULL_DECODE_ONLY)
        self.linear_kernel: str = linear_kernel(gpu, dtype)

        self._layers = model.num_hidden_layers
        # the coefficients, by group (agentreplay.perf.coefficients)
        self._qkv, self._o, self._router, self._gate_up, self._down, self._lm_head = C.linear(
            gpu, model, dtype, tp, eff
        )
        self._moe = model.is_moe
        self._n_experts = model.num_experts
        self._experts_per_token = model.experts_per_token
        self._moe_fp8_block = False  # the catalog does not say whether an fp8 checkpoint is block-scaled
        self._shared_gu, self._shared_dn, self._shared_act_tok = C.shared_expert(gpu, model, dtype, tp, eff)
        self._shared = model.shared_expert_intermediate_size > 0
        (self._norm_tok, self._rope_tok, self._act_tok, self._embed_tok, self._final_norm_tok, self._sampler_tok) = (
            C.elementwise(gpu, model, tp, eff)
        )
        (
            self._pf_flop_s,
            self._pf_prefix_s,
            self._pf_chunk_s,
            self._c_key,
            self._dec_seq_s,
            self._tile_s,
            self._tile_slots,
            self._tile_heads,
        ) = C.attention(gpu, model, tp, eff, kv_dtype)
        # one kernel for mixed iterations: only where the tile form prices the kernel
        self._one_kernel = mixed_attention == "one_kernel" and self._tile_s > 0.0
        self._tp_on = tp > 1
        (
            self._car_max,
            self._car_lat,
            self._link,
            self._ar_lat,
            self._ar_byte,
            self._ar_tok_bytes,
            self._n_ar,
            self._gather_tok,
        ) = C.collectives(gpu, model, tp, eff, custom_allreduce)
        self._kernel_s, self._kernels_body, self._framework_s, self._per_seq_s = C.overheads(model, eff)

    @classmethod
    def from_names(cls, gpu: str, model: str, dtype: Dtype = "bf16", tp: int = 1, **kwargs: object) -> PerfModel:
        """Build from catalog keys, e.g. ``PerfModel.from_names("h100-sxm", "llama-3.1-8b")``."""
        return cls(load_gpu(gpu), load_model(model), dtype, tp, **kwargs)  # type: ignore[arg-type]

    # ---- core ---------------------------------------------------------------------------------------------
    def _moe_rows(self, tokens: int, ep: int = 1) -> tuple[float, float]:
        """``(touched, rows)`` of vLLM's fused MoE for ``tokens`` tokens, in expectation under uniform top-k
        routing: distinct experts touched, E (1 - (1 - k/E) ** tokens), and the rows their grouped GEMM computes.
        ``moe_align_block_size`` (vllm/model_executor/layers/fused_moe/moe_align_block_size.py) pads each
        expert's tokens to whole blocks of BLOCK_SIZE_M (``get_default_config`` in fused_moe.py, by the token
        count); an expert touched by n tokens computes ceil(n / B) * B rows, taken here as
        max(B, n + (B - 1) / 2) at the mean n = tokens * k / touched. ``ep``: the ``tokens`` are routed over
        ``ep`` ranks and this rank holds ``1 / ep`` of the experts (its share of the touched experts and of the
        token-expert pairs; :meth:`experts_time_s`)."""
        e, k = self._n_experts, self._experts_per_token
        touched = e / ep * (1.0 - (1.0 - k / e) ** tokens)
        b = fused_moe_block_m(tokens, self._moe_fp8_block)
        rows = max(touched * b, tokens * k / ep + touched * (b - 1) / 2.0)
        return touched, rows

    def _experts(self, tokens: int, ep: int = 1) -> tuple[float, float]:
        """(gate_up, down) seconds per layer for MoE experts: the padded rows of the grouped GEMM
        (:meth:`_moe_rows`) and the weights of the distinct experts touched (only those are streamed); ``ep`` as
        in :meth:`_moe_rows`."""
        touched, rows = self._moe_rows(tokens, ep)
        per_row = rows / self._experts_per_token  # in token units: gate_up / down FLOP terms carry the top-k fan-out
        per = tokens / ep  # tokens whose activations this rank reads and writes
        gu, dn = self._gate_up, self._down
        return (
            max(per_row * gu[0], touched * gu[1] + per * gu[2]),
            max(per_row * dn[0], touched * dn[1] + per * dn[2]),
        )

    def _terms(
        self,
        tokens: int,
        emit: int,
        seqs: int,
        pf_work: float,
        pf_prefix: int,
        pf_chunk: int,
        n_dec: int,
        sum_ctx: int,
    ) -> Terms:
        """Seconds per operator, in :data:`OPERATORS` order. ``pf_work`` = sum(chunk * (prefix + chunk/2))."""
        if tokens == 0:
            return (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
        if pf_chunk == 0 or self._graph_mixed:
            tokens = padded_tokens(self._pad, tokens)  # non-attention kernels run the CUDA graph's padded batch
        n_layers = self._layers
        if self._moe:
            gate_up, down = self._experts(tokens)
            router = cost(self._router, tokens)
            if self._shared:  # every token also runs the shared expert (a dense MLP)
                gate_up += cost(self._shared_gu, tokens)
                down += cost(self._shared_dn, tokens)
        else:
            gate_up, down = cost(self._gate_up, tokens), cost(self._down, tokens)
            router = 0.0
        attn_pf = 0.0
        if pf_chunk:
            attn_pf = n_layers * max(
                pf_work * self._pf_flop_s, pf_prefix * self._pf_prefix_s + pf_chunk * self._pf_chunk_s
            )
        attn_dec = self._c_key * sum_ctx + self._dec_seq_s * n_dec
        lm_head = cost(self._lm_head, emit) if emit else 0.0
        comm = 0.0
        if self._tp_on:
            comm = self._n_ar * self.tp_allreduce_time_s(tokens * self._ar_tok_bytes)
            if emit:
                comm += self._ar_lat + emit * self._gather_tok
        kernels = self._kernels_body + (2 if emit else 0)  # + LM head, sampler
        return (
            tokens * self._embed_tok,
            n_layers * tokens * self._norm_tok,
            n_layers * cost(self._qkv, tokens),
            n_layers * tokens * self._rope_tok,
            attn_pf,
            attn_dec,
            n_layers * cost(self._o, tokens),
            n_layers * router,
            n_layers * gate_up,
            n_layers * tokens * (self._act_tok + self._shared_act_tok),
            n_layers * down,
            tokens * self._final_norm_tok,
            lm_head,
            emit * self._sampler_tok,
            comm,
            kernels * self._kernel_s,
            self._framework_s + seqs * self._per_seq_s,
        )

    def _summarise(
        self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]
    ) -> tuple[int, int, int, float, int, int, int, int]:
        pf_work, pf_prefix, pf_chunk, emit = self._summarise_prefill(prefill)
        n_dec = len(decode_ctx)
        sum_ctx = sum(decode_ctx)
        if sum_ctx < 0:
            raise ValueError(f"decode contexts must be >= 0 tokens; their sum is {sum_ctx}")
        return pf_chunk + n_dec, emit + n_dec, len(prefill) + n_dec, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx

    def _summarise_prefill(self, prefill: Sequence[PrefillItem]) -> tuple[float, int, int, int]:
        """``(sum of chunk * (prefix + chunk / 2), prefix tokens, chunk tokens, chunks that emit)``."""
        pf_work = 0.0
        pf_prefix = pf_chunk = emit = 0
        for item in prefill:
            chunk, prefix = item[0], item[1]
            if chunk < 1 or prefix < 0:
                raise ValueError(f"prefill item {item!r}: need chunk_tokens >= 1 and cached_prefix_tokens >= 0")
            pf_work += chunk * (prefix + 0.5 * chunk)
            pf_prefix += prefix
            pf_chunk += chunk
            if len(item) < 3 or item[2]:
                emit += 1
        return pf_work, pf_prefix, pf_chunk, emit

    def _priced(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> tuple[float, ...]:
        """:meth:`_terms` of the iteration, prefill attention in the tile form when it is on: the kernel's
        critical path, never below the chunks' KV traffic (the FLOP form's memory term)."""
        return self._priced_summary(prefill, decode_ctx, self._summarise(prefill, decode_ctx))

    def _priced_summary(
        self,
        prefill: Sequence[PrefillItem],
        decode_ctx: Sequence[int],
        summary: tuple[int, int, int, float, int, int, int, int],
    ) -> tuple[float, ...]:
        tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx = summary  # (a native call, not *args)
        t = self._terms(tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx)
        if self._tile_s == 0.0 or not prefill:
            return t
        d = self.model.head_dim
        chunks = [(item[0], item[1]) for item in prefill]
        span = makespan_tiles(chunks, self._tile_heads, self._tile_slots, d)
        out = list(t)
        attn = self._layers * max(span * self._tile_s, summary[4] * self._pf_prefix_s + summary[5] * self._pf_chunk_s)
        if self._one_kernel and decode_ctx:
            # one varlen kernel: each decode one query block per head over its context, then the chunks' blocks
            blocks: list[int] = []
            for k in decode_ctx:
                blocks.extend(block_tiles(1, k, d))
            for c, p in chunks:
                blocks.extend(block_tiles(c, p, d))
            one = self._layers * makespan_blocks(blocks, self._tile_heads, self._tile_slots) * self._tile_s
            attn = max(one, attn)
            out[_ATTN_DECODE] = 0.0
        out[_ATTN_PREFILL] = attn
        return tuple(out)

    # ---- public API ---------------------------------------------------------------------------------------
    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        """Seconds for one iteration.

        ``prefill``: (chunk_tokens, cached_prefix_tokens[, emits_token=True]) per prefilling sequence; a chunk
        emits a token when it completes its prompt. ``decode_ctx``: tokens already in the KV cache for each
        decoding sequence (each decodes one token and emits it).
        """
        return self._priced_total(prefill, decode_ctx, self._summarise(prefill, decode_ctx))

    def mixed_time_s(self, prefill: Sequence[PrefillItem], n_dec: int, sum_ctx: int) -> float:
        """:meth:`iteration_time_s` of ``prefill`` plus ``n_dec`` decodes whose contexts sum to ``sum_ctx``, for a
        model that reads only their count and sum (``needs_decode_contexts`` false; the simulator calls it then):
        the same number bit for bit as ``iteration_time_s(prefill, [sum_ctx] + [0] * (n_dec - 1))``, without
        building that list, or boxing the terms, every mixed step."""
        if self._one_kernel:
            raise ValueError("mixed_time_s: this model prices each decode's context (needs_decode_contexts)")
        if sum_ctx < 0:
            raise ValueError(f"decode contexts must be >= 0 tokens; their sum is {sum_ctx}")
        pf_work, pf_prefix, pf_chunk, emit = self._summarise_prefill(prefill)
        summary = (pf_chunk + n_dec, emit + n_dec, len(prefill) + n_dec, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx)
        empty: tuple[int, ...] = ()
        return self._priced_total(prefill, empty, summary)

    def _priced_total(
        self,
        prefill: Sequence[PrefillItem],
        decode_ctx: Sequence[int],
        summary: tuple[int, int, int, float, int, int, int, int],
    ) -> float:
        """:func:`seq_sum` of :meth:`_priced_summary`, without boxing the terms where the tile form leaves them
        as they are (the same additions, the same number)."""
        if self._tile_s == 0.0 or not prefill:
            tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx = summary
            return total(self._terms(tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx))
        return seq_sum(self._priced_summary(prefill, decode_ctx, summary))

    def breakdown(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> dict[str, float]:
        """Seconds per operator (all :data:`OPERATORS`, summed over layers) for the same iteration."""
        return dict(zip(OPERATORS, self._priced(prefill, decode_ctx), strict=True))

    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        """``(A, c)`` with decode-only iteration time ``A + c * sum_ctx`` for ``n_seqs`` sequences. The engine
        prices every decode-only step as ``A + c * sum_ctx`` so that a run of k steps summed one by one gives
        bit-identical times whether or not it is fast-forwarded. Memoised per ``n_seqs`` (a pure function)."""
        got = self._coeffs.get(n_seqs)
        if got is None:
            got = self._coeffs[n_seqs] = (self.decode_only_time_s(n_seqs, 0), self._c_key)
        return got

    def decode_only_time_s(self, n_seqs: int, sum_ctx: int) -> float:
        """Seconds for an iteration of ``n_seqs`` decodes whose contexts sum to ``sum_ctx`` tokens
        (depends on the contexts only through their sum)."""
        if n_seqs < 0 or sum_ctx < 0:
            raise ValueError(f"n_seqs={n_seqs} and sum_ctx={sum_ctx} must be >= 0")
        return total(self._terms(n_seqs, n_seqs, n_seqs, 0.0, 0, 0, n_seqs, sum_ctx))

    def decode_steps_time_s(self, n_seqs: int, sum_ctx: int, k: int) -> float:
        """Seconds for ``k`` consecutive decode-only iterations of ``n_seqs`` sequences, the first with context
        sum ``sum_ctx``, each next one ``n_seqs`` tokens longer. Closed form: k A + c (k S + n k (k-1) / 2)."""
        if k < 0:
            raise ValueError(f"k={k} steps must be >= 0")
        if k == 0 or n_seqs == 0:
            return 0.0
        base = self.decode_only_time_s(n_seqs, 0)
        return k * base + self._c_key * (k * sum_ctx + n_seqs * (k * (k - 1) // 2))

    def decode_steps_within(self, n_seqs: int, sum_ctx: int, horizon_s: float) -> int:
        """Largest k with ``decode_steps_time_s(n_seqs, sum_ctx, k) <= horizon_s`` (0 if even one step is
        longer). Lets the engine stop a run of decode steps at the next external event."""
        if n_seqs <= 0:
            raise ValueError(f"n_seqs={n_seqs} must be >= 1")
        if horizon_s <= 0:
            return 0
        a = self.decode_only_time_s(n_seqs, sum_ctx)  # first step
        g = self._c_key * n_seqs  # each step costs g more than the previous
        # k a + g k (k-1) / 2 <= H  ->  (g/2) k^2 + (a - g/2) k - H <= 0
        if g == 0:
            k = math.floor(horizon_s / a)
        else:
            b = a - g / 2
            k = math.floor((-b + math.sqrt(b * b + 2 * g * horizon_s)) / g)
        k = max(k, 0)
        while k > 0 and self.decode_steps_time_s(n_seqs, sum_ctx, k) > horizon_s:
            k -= 1
        while self.decode_steps_time_s(n_seqs, sum_ctx, k + 1) <= horizon_s:
            k += 1
        return k

    @property
    def needs_decode_contexts(self) -> bool:
        """True when a mixed iteration's price depends on each decode's context, not only on their count and
        sum (``mixed_attention="one_kernel"`` in the tile form); the simulator then passes every context."""
        return self._one_kernel

    @property
    def allreduces_per_forward(self) -> int:
        """TP all-reduces of the hidden states in one forward pass (after attention and MLP in every layer, and
        after the embedding); 0 at TP=1. The logits gather of emitting sequences comes on top."""
        return self._n_ar if self._tp_on else 0

    @property
    def allreduce_bytes_per_token(self) -> int:
        """Bytes one token adds to each TP all-reduce (its hidden state in the activation dtype)."""
        return self._ar_tok_bytes

    def allreduce_time_s(self, nbytes: float) -> float:
        """Seconds of one NCCL ring all-reduce of an ``nbytes`` tensor (what the profiled all-reduce tables
        measured): the fixed latency plus the ring's 2 (tp - 1) / tp x bytes over the link's effective bandwidth
        (nccl-tests doc/PERFORMANCE.md, "bus bandwidth"); 0 at TP=1."""
        return self._ar_lat + nbytes * self._ar_byte if self._tp_on else 0.0

    def uses_custom_allreduce(self, nbytes: float) -> bool:
        """True when vLLM all-reduces an ``nbytes`` tensor with its custom P2P kernel here
        (:func:`agentreplay.perf.deploy.allreduce_kind`), False for NCCL (and at TP=1)."""
        return self._tp_on and nbytes < self._car_max

    def tp_allreduce_time_s(self, nbytes: float) -> float:
        """Seconds of one TP all-reduce of an ``nbytes`` tensor as vLLM runs it on this GPU and link: the custom
        all-reduce (``custom_allreduce_latency_us`` plus the bytes its one- or two-stage kernel moves over the
        link, :func:`agentreplay.perf.deploy.custom_ar_link_bytes`) where it applies, else NCCL's ring
        (:meth:`allreduce_time_s`); 0 at TP=1."""
        if not self._tp_on:
            return 0.0
        if nbytes < self._car_max:
            return self._car_lat + custom_ar_link_bytes(self.tp, nbytes) / self._link
        return self._ar_lat + nbytes * self._ar_byte

    def padded_tokens(self, tokens: int, decode_only: bool = True) -> int:
        """Tokens the non-attention kernels run for a batch of ``tokens``: the next CUDA-graph capture size at or
        above it (``cudagraph_sizes``), or ``tokens`` itself above the largest size, without graphs, or for a
        batch with prefill when only decode batches run graphs (``graph_mixed=False``, FULL_DECODE_ONLY)."""
        if not decode_only and not self._graph_mixed:
            return tokens
        return padded_tokens(self._pad, tokens)

    def experts_time_s(self, tokens: int, ep: int = 1) -> float:
        """Seconds of one rank's MoE expert work (gate_up, activation, down; all layers) when ``tokens`` tokens
        are routed over ``ep`` ranks each holding ``1 / ep`` of this rank's expert weights: ``tokens * k / ep``
        token-expert pairs in the fused MoE's padded rows and the weights of the rank's experts the batch touches
        (:meth:`_experts`). With ``ep = 1``, the expert terms :meth:`iteration_time_s` includes for ``tokens``
        tokens (``tokens`` as the kernels run it: after CUDA-graph padding, :meth:`padded_tokens`). 0 for dense
        models. A shared expert is not part of it: each rank runs it on its own tokens, like the dense layers.
        (Hook for :mod:`agentreplay.perf.parallel`, the DP / EP step pricer.)"""
        if not self._moe or tokens <= 0:
            return 0.0
        gate_up, down = self._experts(tokens, ep)
        return self._layers * (gate_up + tokens / ep * self._act_tok + down)

    def prefill_tiles(self) -> tuple[float, int, int]:
        """``(seconds per KV tile of one CTA slot, CTA slots, query heads per GPU)`` of the tile form of prefill
        attention (:mod:`agentreplay.perf.tiles`); ``(0.0, 1, 1)`` when the FLOP form is in use."""
        return self._tile_s, self._tile_slots, self._tile_heads

    def prefill_time_s(self, tokens: int, cached: int = 0) -> float:
        """Seconds to prefill ``tokens`` new tokens after ``cached`` cached ones, alone, in one chunk."""
        return self.iteration_time_s([(tokens, cached)], ())

    def decode_step_time_s(self, batch: int, ctx: int) -> float:
        """Seconds for one decode step of ``batch`` sequences each with ``ctx`` cached tokens."""
        return self.decode_only_time_s(batch, batch * ctx)

    def __repr__(self) -> str:
        return (
            f"PerfModel(gpu={self.gpu.name!r}, model={self.model.name!r}, dtype={self.dtype!r}, tp={self.tp}, "
            f"kv_dtype={self.kv_dtype!r})"
        )
