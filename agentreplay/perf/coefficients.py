"""The roofline's coefficients, by group: what :class:`agentreplay.perf.model.PerfModel` precomputes once per
(GPU, model, dtype, TP, efficiencies) and then prices every iteration with (seconds per token, per byte, per key
or per call). Each group is a function returning a named tuple; the formulas are the model's (see its module
docstring for the operators and their sources)."""

from __future__ import annotations

from typing import NamedTuple

from agentreplay.perf.catalog import ACT_BYTES, DTYPE_BYTES, Dtype, Efficiency, GpuSpec, ModelSpec
from agentreplay.perf.deploy import custom_ar_max_bytes
from agentreplay.perf.tiles import ctas_per_sm, tile_flops

#: (compute seconds per token, weight-read seconds, activation seconds per token) of one GEMM
Gemm = tuple[float, float, float]

_KERNELS_PER_LAYER = 9  # 2 fused add+RMSNorm, qkv, rotary, attention, o, gate_up, act, down
_KERNELS_PER_MOE_LAYER = 2  # router GEMM, top-k + token alignment
_KERNELS_PER_SHARED_EXPERT = 3  # the shared expert's gate_up, act, down


def gemm(k_in: int, n_out: int, peak: float, w_bytes: int, bw: float) -> Gemm:
    """(compute seconds per token, weight-read seconds, activation seconds per token) of a k_in x n_out GEMM."""
    return 2.0 * k_in * n_out / peak, k_in * n_out * w_bytes / bw, (k_in + n_out) * ACT_BYTES / bw


def bandwidth(gpu: GpuSpec, eff: Efficiency) -> float:
    """Bytes/s for weights and activations."""
    return gpu.mem_bandwidth_gbps * 1e9 * eff.bandwidth_efficiency


def widths(model: ModelSpec, tp: int) -> tuple[int, int, int, int]:
    """Per-rank widths: hidden, query (= attention output), K (or V), MLP (per expert for MoE)."""
    q = model.num_attention_heads * model.head_dim // tp
    return model.hidden_size, q, model.kv_heads_per_rank(tp) * model.head_dim, model.mlp_width // tp


class Linear(NamedTuple):
    """Linear layers; gate_up / down include the top-k fan-out in their per-token terms (weights per expert).
    q/k/v/o run in bf16 where the model's fp8 checkpoint leaves them unquantized (``ModelSpec.bf16_attention``)."""

    qkv: Gemm
    o: Gemm
    router: Gemm
    gate_up: Gemm
    down: Gemm
    lm_head: Gemm


def linear(gpu: GpuSpec, model: ModelSpec, dtype: Dtype, tp: int, eff: Efficiency) -> Linear:
    bw = bandwidth(gpu, eff)
    peak = gpu.gemm_peak_tflops(dtype) * 1e12 * eff.compute_efficiency  # FLOP/s, dtype linear layers
    bf16 = gpu.bf16_tflops * 1e12 * eff.compute_efficiency  # FLOP/s, bf16 linear layers (LM head, router)
    wb = DTYPE_BYTES[dtype]
    h, q, kv, i = widths(model, tp)
    fanout = model.experts_per_token if model.is_moe else 1  # copies of each token through the MLP
    router = gemm(h, model.num_experts, bf16, ACT_BYTES, bw) if model.is_moe else (0.0, 0.0, 0.0)
    gu_flop, gu_w, gu_act = gemm(h, 2 * i, peak, wb, bw)
    dn_flop, dn_w, dn_act = gemm(i, h, peak, wb, bw)
    attn_peak, attn_wb = (bf16, ACT_BYTES) if model.bf16_attention else (peak, wb)
    return Linear(
        gemm(h, q + 2 * kv, attn_peak, attn_wb, bw),
        gemm(q, h, attn_peak, attn_wb, bw),
        router,
        (gu_flop * fanout, gu_w, gu_act * fanout),
        (dn_flop * fanout, dn_w, dn_act * fanout),
        gemm(h, -(-model.vocab_size // tp), bf16, ACT_BYTES, bw),
    )


class SharedExpert(NamedTuple):
    """The shared expert of a MoE layer (``ModelSpec.shared_expert_intermediate_size``): a dense MLP every token
    runs beside its routed experts, TP-sharded like a dense MLP (vLLM llama4.py ``Llama4MoE.shared_expert``, a
    ``LlamaMLP`` with the layer's ``quant_config``: fp8 in an fp8 checkpoint). Zeros when the model has none."""

    gate_up: Gemm
    down: Gemm
    act_tok: float  #: SiLU-and-mul, seconds per token: read gate and up, write the product


def shared_expert(gpu: GpuSpec, model: ModelSpec, dtype: Dtype, tp: int, eff: Efficiency) -> SharedExpert:
    width = model.shared_expert_intermediate_size // tp
    if not width:
        return SharedExpert((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), 0.0)
    bw = bandwidth(gpu, eff)
    peak = gpu.gemm_peak_tflops(dtype) * 1e12 * eff.compute_efficiency
    wb, h = DTYPE_BYTES[dtype], model.hidden_size
    return SharedExpert(gemm(h, 2 * width, peak, wb, bw), gemm(width, h, peak, wb, bw), 3 * width * ACT_BYTES / bw)


class Elementwise(NamedTuple):
    """Memory-bound elementwise work, seconds per token: per layer (norm, rope, act), per iteration (the rest)."""

    norm_tok: float  #: 2 fused add+RMSNorm: read x and residual, write both
    rope_tok: float  #: read+write q and k (+ Qwen3's q/k norm)
    act_tok: float  #: SiLU-and-mul: read gate and up, write the product
    embed_tok: float  #: gather a row, write it
    final_norm_tok: float
    sampler_tok: float  #: the sampler's passes over the fp32 logits (Efficiency.sampler_bytes_per_logit)


def elementwise(gpu: GpuSpec, model: ModelSpec, tp: int, eff: Efficiency) -> Elementwise:
    bw = bandwidth(gpu, eff)
    h, q, kv, i = widths(model, tp)
    fanout = model.experts_per_token if model.is_moe else 1
    rope_elems = 2 * (q + kv) * (2 if model.qk_norm else 1)
    return Elementwise(
        2 * 4 * h * ACT_BYTES / bw,
        rope_elems * ACT_BYTES / bw,
        3 * i * fanout * ACT_BYTES / bw,
        2 * h * ACT_BYTES / bw,
        4 * h * ACT_BYTES / bw,
        model.vocab_size * eff.sampler_bytes_per_logit / bw,
    )


class Attention(NamedTuple):
    """Per layer: prefill FLOPs = 4 * sum(chunk * (prefix + chunk/2)) * q; KV traffic of a chunk = read (prefix +
    chunk) tokens + write chunk tokens; q in and o out. Decode: each of ctx + 1 keys costs the larger of its FLOP
    time and its KV-byte time; each sequence writes its new K/V and reads q / o. Prefill in the tile form (where
    the GPU has ``attn_prefill_tile_efficiency``; ``tile_s`` 0 = the FLOP form): seconds per KV tile of one CTA
    slot, CTA slots on the GPU, query heads per rank."""

    pf_flop_s: float  #: seconds per unit of chunk * (prefix + chunk/2)
    pf_prefix_s: float  #: seconds per prefix token read
    pf_chunk_s: float  #: per chunk token: KV read+write, q/o
    c_key: float  #: seconds per decode context token (all layers)
    dec_seq_s: float  #: seconds per decoding sequence (all layers)
    tile_s: float
    tile_slots: int
    tile_heads: int


def attention(gpu: GpuSpec, model: ModelSpec, tp: int, eff: Efficiency, kv_dtype: Dtype) -> Attention:
    bw = bandwidth(gpu, eff)
    kv_bw = gpu.mem_bandwidth_gbps * 1e9 * eff.attn_decode_efficiency  # bytes/s, paged KV-cache traffic
    attn = gpu.bf16_tflops * 1e12 * eff.attn_prefill_efficiency  # FLOP/s, attention
    layers = model.num_hidden_layers
    _, q, kv, _ = widths(model, tp)
    kv_tok = 2 * kv * DTYPE_BYTES[kv_dtype]  # KV bytes per token per layer per rank
    c_key = layers * max(4.0 * q / attn, kv_tok / kv_bw)
    tile_s, tile_slots, tile_heads = 0.0, 1, 1
    if eff.attn_prefill_tile_efficiency > 0.0:
        if gpu.sm_count < 1 or gpu.smem_per_sm_kib <= 0.0:
            raise ValueError(
                f"{gpu.name}: attn_prefill_tile_efficiency needs sm_count and smem_per_sm_kib in the GPU catalog"
            )
        per_cta = ctas_per_sm(gpu.smem_per_sm_kib, model.head_dim)
        tile_slots = gpu.sm_count * per_cta
        tile_heads = model.num_attention_heads // tp
        sm_flops = gpu.bf16_tflops * 1e12 / gpu.sm_count * eff.attn_prefill_tile_efficiency
        tile_s = tile_flops(model.head_dim) * per_cta / sm_flops
    return Attention(
        4.0 * q / attn,
        kv_tok / kv_bw,
        2 * kv_tok / kv_bw + 2 * q * ACT_BYTES / bw,
        c_key,
        c_key + layers * (kv_tok / kv_bw + 2 * q * ACT_BYTES / bw),
        tile_s,
        tile_slots,
        tile_heads,
    )


class Collectives(NamedTuple):
    """Tensor-parallel collectives: NCCL's ring, or vLLM's custom all-reduce below ``car_max`` bytes (deploy)."""

    car_max: float
    car_lat: float
    link: float  #: bytes/s of the GPU link at the all-reduce efficiency
    ar_lat: float
    ar_byte: float  #: ring seconds per byte of the reduced tensor
    ar_tok_bytes: int  #: bytes of one token's hidden state
    n_ar: int  #: after attention and MLP in every layer, and after the embedding
    gather_tok: float  #: logits gather per emitting sequence


def collectives(gpu: GpuSpec, model: ModelSpec, tp: int, eff: Efficiency, custom_allreduce: bool) -> Collectives:
    link = gpu.interconnect_bw_gbps * 1e9 * eff.allreduce_efficiency
    return Collectives(
        float(custom_ar_max_bytes(gpu, tp)) if tp > 1 and custom_allreduce else 0.0,
        eff.custom_allreduce_latency_us * 1e-6,
        link,
        eff.allreduce_latency_us * 1e-6,
        2 * (tp - 1) / tp / link,
        model.hidden_size * ACT_BYTES,
        2 * model.num_hidden_layers + 1,
        (tp - 1) / tp * model.vocab_size * ACT_BYTES / link,
    )


class Overheads(NamedTuple):
    """Fixed costs: per kernel launched, kernels per forward outside attention's own, per sequence, per iteration."""

    kernel_s: float
    kernels_body: int  #: per layer, plus embedding and final norm
    framework_s: float
    per_seq_s: float


def overheads(model: ModelSpec, eff: Efficiency) -> Overheads:
    per_layer = _KERNELS_PER_LAYER + (_KERNELS_PER_MOE_LAYER if model.is_moe else 0)
    per_layer += _KERNELS_PER_SHARED_EXPERT if model.shared_expert_intermediate_size else 0
    return Overheads(
        eff.kernel_overhead_us * 1e-6,
        model.num_hidden_layers * per_layer + 2,
        eff.framework_overhead_ms * 1e-3,
        eff.per_seq_overhead_us * 1e-6,
    )
