"""KV-cache capacity of one GPU rank, the way vLLM sizes it.

vLLM (``CacheConfig.gpu_memory_utilization``, default 0.9, in ``vllm/config``) lets one engine use
``total_memory * gpu_memory_utilization`` of each GPU, where ``total_memory`` is what CUDA reports
(``torch.cuda.mem_get_info``; :attr:`GpuSpec.usable_memory_gib`). At start-up the worker
(``vllm/v1/worker/gpu_worker.py``, ``determine_available_memory``) loads the weights, then runs a dummy forward
pass of ``max_num_batched_tokens`` tokens and a dummy sampler pass over ``max_num_seqs`` sequences
(``profile_run``), and records the peak activation memory of that pass plus the memory allocated outside
PyTorch (CUDA context growth, NCCL and cuBLAS buffers). What remains is the KV cache, cut into blocks of
``block_size`` tokens:

    blocks = floor((total * utilization - weights - activation_peak - non_torch) / (block_size * kv_bytes/token))

Here ``activation_reserve_gib`` stands for ``activation_peak + non_torch``. The default,
:data:`DEFAULT_ACTIVATION_RESERVE_GIB`, is hand-set (validation/protocol/rules.py lists it so). History: it is what the
measured vLLM 0.19 run (Llama-3.1-8B on an RTX 4090,
max_num_batched_tokens = 2048, max_num_seqs = 256, CUDA graphs on; ../shared/measurements/serving-vllm-llmservingsim)
leaves unexplained: 0.9 * 23.516 GiB - 14.957 GiB of weights - 2588 blocks * 2 MiB = 1.153 GiB. The reserve grows
with max_num_batched_tokens and max_num_seqs: vLLM's own logs show 4.76 GiB activation peak + 0.13 GiB non-torch
for the same model on an H100 with larger default budgets (llm-d/llm-d-benchmark,
config_explorer/empirical-vllm-memory-results.md). Pass the value matching the engine being simulated, or
override the block count outright where the real engine's count is known. That run is a validation run; its
replay uses its recorded block count, so its figures do not depend on this value (runs that record no block count,
e.g. LLMPerf, do). Not yet derived from the profile run's activation peak.

Checked against vLLM 0.15.1 on an H100 SXM, block size 16, max_num_batched_tokens 2048, max_num_seqs 128 (the two
inference-sim runs whose block count is known, ../shared/measurements/serving-vllm-inference-sim;
tests/perf/test_memory_vllm_blocks.py): Llama-2-7B bf16 TP1 at 0.9 gets 7367 blocks here, 7463 in vLLM (-1.3%:
vLLM's profile run left 0.41 GiB, not 1.152, for activation peak + non-torch memory); Llama-4-Scout-17B-16E fp8
TP2 gets 11980, 8253 in vLLM (+45%: vLLM kept 6.6 GiB per rank beyond the text model's weights and the KV cache;
candidates the rule does not see: the checkpoint's ~0.87B-parameter vision tower, the multimodal encoder's profile
pass, MoE and TP workspaces, a gpu_memory_utilization the run did not record). The published numbers (block counts
only, no vLLM memory log) pin neither miss down well enough to change the rule; where the count matters, pass the
engine's own (``[cache] num_gpu_blocks``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from agentreplay.perf.catalog import Dtype, GpuSpec, ModelSpec, check_dtype

GIB: Final = 1 << 30
#: vLLM's default ``gpu_memory_utilization``.
DEFAULT_GPU_MEMORY_UTILIZATION: Final = 0.9
#: vLLM's default KV block size on CUDA, tokens.
DEFAULT_BLOCK_SIZE: Final = 16
#: Activation peak + non-torch memory of vLLM's profiling pass at max_num_batched_tokens = 2048, GiB: hand-set,
#: back-solved from the RTX 4090 vLLM run (see above).
DEFAULT_ACTIVATION_RESERVE_GIB: Final = 1.152


@dataclass(frozen=True, slots=True)
class KvCapacity:
    """How one rank's memory splits (bytes), and the resulting KV blocks."""

    budget_bytes: int  #: usable memory * gpu_memory_utilization
    weight_bytes: int  #: weights held by this rank
    reserve_bytes: int  #: activation peak + non-torch memory
    block_bytes: int  #: one KV block on this rank: block_size * kv bytes per token
    blocks: int  #: KV blocks that fit

    @property
    def kv_bytes(self) -> int:
        """Bytes of KV cache actually allocated (whole blocks)."""
        return self.blocks * self.block_bytes


def kv_capacity(
    gpu: GpuSpec,
    model: ModelSpec,
    dtype: Dtype = "bf16",
    tp: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    activation_reserve_gib: float = DEFAULT_ACTIVATION_RESERVE_GIB,
    kv_dtype: Dtype = "bf16",
) -> KvCapacity:
    """Memory split and KV block count of one TP rank (every rank holds the same number of blocks).

    Raises ValueError, with the numbers, for out-of-range arguments, when the weights and reserve do not fit in
    the budget, or when not even one block fits.
    """
    check_dtype(dtype)
    check_dtype(kv_dtype, "kv_dtype")
    if not 0.0 < gpu_memory_utilization <= 1.0:
        raise ValueError(f"gpu_memory_utilization={gpu_memory_utilization!r} must be in (0, 1]")
    if not isinstance(block_size, int) or block_size < 1:
        raise ValueError(f"block_size={block_size!r} must be an integer >= 1 (tokens)")
    if activation_reserve_gib < 0:
        raise ValueError(f"activation_reserve_gib={activation_reserve_gib!r} must be >= 0")
    budget = int(gpu.usable_memory_gib * GIB * gpu_memory_utilization)
    weights = model.weight_bytes(dtype, tp)
    reserve = int(activation_reserve_gib * GIB)
    block = block_size * model.kv_bytes_per_token(kv_dtype, tp)
    free = budget - weights - reserve
    where = f"{model.name} ({dtype}, tp={tp}) on {gpu.name}"
    if free <= 0:
        raise ValueError(
            f"{where}: weights {weights / GIB:.2f} GiB/rank + reserve {reserve / GIB:.2f} GiB exceed the budget "
            f"{budget / GIB:.2f} GiB ({gpu.usable_memory_gib} GiB x {gpu_memory_utilization})"
        )
    blocks = free // block
    if blocks < 1:
        raise ValueError(
            f"{where}: {free / GIB:.3f} GiB left for KV cache is less than one block of {block / 2**20:.2f} MiB"
        )
    return KvCapacity(budget, weights, reserve, block, blocks)


def kv_capacity_blocks(
    gpu: GpuSpec,
    model: ModelSpec,
    dtype: Dtype = "bf16",
    tp: int = 1,
    gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION,
    block_size: int = DEFAULT_BLOCK_SIZE,
    activation_reserve_gib: float = DEFAULT_ACTIVATION_RESERVE_GIB,
    kv_dtype: Dtype = "bf16",
) -> int:
    """KV blocks per rank: floor((memory * utilization - weights per rank - reserve) / (block_size * KV bytes
    per token per rank)). See :func:`kv_capacity` for the errors and the module docstring for the method."""
    return kv_capacity(
        gpu, model, dtype, tp, gpu_memory_utilization, block_size, activation_reserve_gib, kv_dtype
    ).blocks


__all__ = [
    "DEFAULT_ACTIVATION_RESERVE_GIB",
    "DEFAULT_BLOCK_SIZE",
    "DEFAULT_GPU_MEMORY_UTILIZATION",
    "GIB",
    "KvCapacity",
    "kv_capacity",
    "kv_capacity_blocks",
]
