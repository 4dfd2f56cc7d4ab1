"""What ``agentreplay calibrate`` fits and how, declared in one place: the parameters, their bounds and starting
points, the stages of the plain and the refined roofline fits, the rows left out of the fit, and which GPUs borrow
from which (:mod:`validation.calibration.calibrate`). Constants only: a leaf that
:mod:`validation.protocol.constants` lists from."""

from __future__ import annotations

from typing import Final

from agentreplay.perf import GpuSpec

FIT_PARAMS: Final = (
    "compute_efficiency",
    "bandwidth_efficiency",
    "kernel_overhead_us",
    "attn_prefill_efficiency",
    "attn_prefill_tile_efficiency",
    "attn_decode_efficiency",
    "allreduce_efficiency",
    "allreduce_latency_us",
)
BOUNDS: Final = {
    "compute_efficiency": (0.2, 1.0),
    "bandwidth_efficiency": (0.3, 1.0),
    "kernel_overhead_us": (0.0, 50.0),
    "attn_prefill_efficiency": (0.05, 1.0),
    "attn_decode_efficiency": (0.05, 1.0),
    "allreduce_efficiency": (0.05, 1.0),
    "attn_prefill_tile_efficiency": (0.05, 1.0),
    "allreduce_latency_us": (0.0, 200.0),
}
KERNEL_PARAMS: Final = FIT_PARAMS[:6]  #: what a GPU without profiles borrows from its nearest profiled GPU
NEAREST: Final = {"h200": "h100-sxm", "b200": "h100-sxm", "a100-40gb": "a100-80gb", "l40s": "rtx4090"}
#: Compared but not fitted: HF-eager elementwise modules run as several unfused kernels each (RMSNorm: casts,
#: pow, mean, rsqrt, two muls; rotary: slices, neg, cat, muls, adds), unlike the fused kernels of the serving
#: engines the model prices; fitting them would inflate kernel_overhead_us for every GEMM.
#: The same holds for HF's module attention (not the paged FlashAttention kernels of serving engines: its fit gave
#: H100 13% of the bf16 peak where vLLM's kernels reach 30-50%).
FIT_EXCLUDE: Final = frozenset(
    ("llmservingsim-v0", g)
    for g in ("layernorm", "rotary_emb", "act_fn", "embedding", "final_layernorm", "attention_prefill")
)
#: Architectures whose vLLM prefill attention is FlashAttention-2, the kernel agentreplay.perf.tiles describes:
#: vLLM's FlashAttention backend runs FA3 only on compute capability 9.0 (Hopper), whose tiles and persistent
#: scheduler differ (vllm/attention/utils/fa_utils.py get_flash_attn_version).
TILE_ARCHITECTURES: Final = frozenset(("ampere", "ada", "blackwell"))


def tile_form(gpu: GpuSpec) -> bool:
    """True when ``gpu``'s prefill attention is fitted in the FlashAttention-2 tile form (needs its SM count)."""
    return gpu.architecture in TILE_ARCHITECTURES and gpu.sm_count > 0 and gpu.smem_per_sm_kib > 0


SHARE_FLOOR: Final = 0.01  #: smallest weight share of an operator in the fit
ROBUST_SCALE: Final = 0.1  #: soft-L1 loss scale on log-time residuals (10%): HF eager elementwise outliers
#: Fixed starting point (typical published values; the fit also starts from the middle of the box), so a re-run
#: does not depend on what a previous calibration wrote.
START: Final = {
    "compute_efficiency": 0.7,
    "bandwidth_efficiency": 0.85,
    "kernel_overhead_us": 2.0,
    "attn_prefill_efficiency": 0.45,
    "attn_decode_efficiency": 0.7,
    "allreduce_efficiency": 0.75,
    "allreduce_latency_us": 10.0,
    "attn_prefill_tile_efficiency": 0.6,
}


#: Fit stages: each family of operators fits its own parameters, earlier stages' values held fixed, so that e.g.
#: the fixed cost of attention kernels does not leak into the per-kernel overhead of every GEMM.
STAGES: Final = (
    ("dense", ("compute_efficiency", "bandwidth_efficiency", "kernel_overhead_us")),
    ("attention", ("attn_prefill_efficiency", "attn_prefill_tile_efficiency", "attn_decode_efficiency")),
    ("allreduce", ("allreduce_efficiency", "allreduce_latency_us")),
)


GEMM_GROUPS: Final = ("qkv_proj", "o_proj", "gate_up_proj", "down_proj", "lm_head")
ELEMENTWISE_GROUPS: Final = ("embedding", "layernorm", "rotary_emb", "act_fn", "final_layernorm", "sampler")
ATTENTION_GROUPS: Final = ("attention_prefill", "attention_decode")
#: The refined roofline (agentreplay.perf.refined.RefinedPerfModel) is fitted stage by stage, each operator family
#: on its own rows and parameters, earlier stages held fixed; every point weighs its relative error (log
#: residual), each curve (cell x operator group) counting equally.
REFINED_STAGES: Final = (
    ("gemm", GEMM_GROUPS, ("compute_efficiency", "bandwidth_efficiency", "kernel_overhead_us", "gemm_m_half_tokens")),
    ("elementwise", ELEMENTWISE_GROUPS, ("elementwise_kernel_us", "elementwise_bandwidth_efficiency")),
    (
        "attention",
        ATTENTION_GROUPS,
        (
            "attn_prefill_efficiency",
            "attn_prefill_m_half_tokens",
            "attn_prefill_kv_efficiency",
            "attn_prefill_tile_efficiency",
            "attn_decode_efficiency",
            "attn_kernel_us",
            "attn_decode_seq_us",
            "attn_decode_fixed_us",
        ),
    ),
    ("allreduce", (), ("allreduce_efficiency", "allreduce_latency_us")),
)
REFINED_BOUNDS: Final = {
    **BOUNDS,
    "gemm_m_half_tokens": (0.0, 4096.0),
    "elementwise_kernel_us": (0.0, 50.0),
    "elementwise_bandwidth_efficiency": (0.1, 4.0),
    "attn_kernel_us": (0.0, 100.0),
    "attn_prefill_kv_efficiency": (0.02, 1.0),
    "attn_decode_seq_us": (0.0, 10.0),
    "attn_prefill_m_half_tokens": (0.0, 4096.0),
    "attn_prefill_tile_efficiency": (0.05, 1.0),
    "attn_decode_fixed_us": (0.0, 50.0),
}
REFINED_START: Final = {
    **START,
    "gemm_m_half_tokens": 64.0,
    "elementwise_kernel_us": 2.0,
    "elementwise_bandwidth_efficiency": 1.0,
    "attn_kernel_us": 5.0,
    "attn_prefill_kv_efficiency": 0.3,
    "attn_decode_seq_us": 0.1,
    "attn_prefill_m_half_tokens": 0.0,
    "attn_prefill_tile_efficiency": 0.6,
    "attn_decode_fixed_us": 0.0,
}
REFINED_KERNEL_PARAMS: Final = tuple(p for _, _, ps in REFINED_STAGES[:3] for p in ps)  #: what NEAREST borrows
#: Prefill attention in the tile form (agentreplay.perf.tiles) replaces these FLOP-form parameters.
FLOP_PREFILL_PARAMS: Final = ("attn_prefill_efficiency", "attn_prefill_m_half_tokens", "attn_prefill_kv_efficiency")
