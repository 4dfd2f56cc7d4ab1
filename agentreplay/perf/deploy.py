"""How vLLM (0.32) deploys a model on a GPU, as far as it changes what the kernels cost: CUDA-graph capture sizes,
the KV-cache dtype, the TP all-reduce algorithm and the linear-layer kernel of a quantized checkpoint.

Each function reproduces one vLLM rule and cites it (file and function); :class:`agentreplay.perf.model.PerfModel`
prices iterations with the results.

- :func:`cudagraph_capture_sizes`: ``VllmConfig._set_cudagraph_sizes`` (``vllm/config/vllm.py``). At run time
  ``CudagraphDispatcher.dispatch`` (``vllm/v1/cudagraph_dispatcher.py``) pads a batch of ``num_tokens`` up to the
  next capture size whenever ``num_tokens <= max_cudagraph_capture_size``: FULL graphs for uniform decode batches,
  PIECEWISE graphs for prefill and mixed batches under the default ``cudagraph_mode = FULL_AND_PIECEWISE``
  (``vllm/config/compilation.py``, ``CompilationConfig.cudagraph_mode``); larger batches run without a graph at
  their own size. Padding is what :func:`padded_tokens` returns.
- :func:`kv_cache_dtype`: ``CacheConfig.cache_dtype`` (``vllm/config/cache.py``): ``"auto"`` stores K and V in the
  model's activation dtype (bf16, also for fp8 checkpoints without KV scales), ``"fp8"`` / ``"fp8_e4m3"`` /
  ``"fp8_e5m2"`` in one byte per element.
- :func:`allreduce_kind`: the dispatch order of ``CudaCommunicator.all_reduce``
  (``vllm/distributed/device_communicators/cuda_communicator.py``): vLLM's custom all-reduce
  (``custom_all_reduce.py``, ``CustomAllreduce.__init__`` and ``should_custom_ar``) where the GPUs can reach each
  other's memory (``_can_p2p``; GeForce boards cannot) and either there are 2 of them or they are fully
  connected by NVLink, for a message under ``max_size`` (8 MiB, or ``CUSTOM_ALL_REDUCE_MAX_SIZES`` of
  ``all_reduce_utils.py`` per compute capability); otherwise PyNCCL (NCCL's ring).
- :func:`linear_kernel`: an fp8 checkpoint's linear layers run ``MarlinFP8ScaledMMLinearKernel``
  (``vllm/model_executor/kernels/linear/scaled_mm/marlin.py``: fp8 weights, bf16 activations, dequantised in
  registers) below compute capability 8.9, where the CUTLASS / FlashInfer W8A8 fp8 kernels are not supported
  (``scaled_mm/cutlass.py``, ``is_supported``), and W8A8 fp8 (activations quantised on the fly, fp8 tensor cores)
  from 8.9 on (Ada, Hopper, Blackwell).
"""

from __future__ import annotations

from typing import Final, Literal

from agentreplay.perf.catalog import Dtype, GpuSpec
from agentreplay.perf.padding import padded_tokens, padding_table

#: vLLM ``--kv-cache-dtype`` values (``CacheDType`` in ``vllm/config/cache.py``) this model prices.
KV_CACHE_DTYPES: Final = ("auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2")
#: vLLM ``CustomAllreduce._SUPPORTED_WORLD_SIZES`` (custom_all_reduce.py); 16 is refused by should_custom_ar.
CUSTOM_AR_WORLD_SIZES: Final = (2, 4, 6, 8)
#: ``CustomAllreduce.__init__(max_size=8192 * 1024)``: the default largest message of the custom all-reduce.
CUSTOM_AR_MAX_BYTES: Final = 8192 * 1024
_MIB: Final = 1 << 20
#: ``CUSTOM_ALL_REDUCE_MAX_SIZES`` (vllm/distributed/device_communicators/all_reduce_utils.py): the custom
#: all-reduce's message limit per compute capability and world size, where smaller than the default.
CUSTOM_AR_MAX_BYTES_BY_CC: Final[dict[str, dict[int, int]]] = {
    "9.0": {2: 64 * _MIB, 4: 32 * _MIB, 6: _MIB // 2, 8: _MIB // 4},
    "10.0": {2: 2 * _MIB, 4: 2 * _MIB, 6: 1 * _MIB, 8: 1 * _MIB},
    "10.3": {2: 4 * _MIB, 4: 4 * _MIB, 6: 8 * _MIB, 8: 4 * _MIB},
}
#: Message size under which the custom all-reduce on 3-4 (resp. 5-8) NVLink GPUs runs its one-stage kernel
#: (every rank reads every peer's whole buffer); above, two stages (reduce-scatter + all-gather). Two GPUs always
#: run one stage. csrc/custom_all_reduce.cuh, ``CustomAllreduce::allreduce``.
ONE_STAGE_MAX_BYTES: Final = {4: 512 * 1024, 8: 256 * 1024}
AllReduceKind = Literal["none", "custom", "nccl"]
#: vLLM ``CompilationConfig.cudagraph_mode`` values (``CUDAGraphMode``, vllm/config/compilation.py)
CUDAGRAPH_MODES: Final = ("FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "NONE")
LinearKernel = Literal["bf16", "fp8_marlin_w8a16", "fp8_w8a8"]


def cudagraph_capture_sizes(
    max_num_seqs: int,
    max_num_batched_tokens: int,
    *,
    data_center_blackwell: bool = False,
    max_capture_size: int | None = None,
) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes (tokens), ``VllmConfig._set_cudagraph_sizes`` without speculative
    decoding: ``[1, 2, 4] + range(8, 256, 8) + range(256, max + 1, 16)``, ``max = min(2 * max_num_seqs, 512
    (1024 on data-center Blackwell), max_num_batched_tokens)`` unless ``max_capture_size`` gives it; plus
    ``max_num_batched_tokens`` and ``max_num_seqs`` when they fit under it."""
    if max_num_seqs < 1 or max_num_batched_tokens < 1:
        raise ValueError(
            f"max_num_seqs={max_num_seqs} and max_num_batched_tokens={max_num_batched_tokens} must be >= 1"
        )
    default_max = 1024 if data_center_blackwell else 512
    uniform: list[int] = []
    if max_capture_size is None:
        top = min(max_num_seqs * 2, default_max)
        if max_num_seqs <= top:
            uniform = [max_num_seqs]
    else:
        if max_capture_size < 1:
            raise ValueError(f"max_cudagraph_capture_size={max_capture_size} must be >= 1")
        top = max_capture_size
    top = min(max_num_batched_tokens, top)
    sizes = [i for i in (1, 2, 4) if i <= top]
    if top >= 8:
        sizes += list(range(8, min(top + 1, 256), 8))
    if top >= 256:
        sizes += list(range(256, top + 1, 16))
    if max_num_batched_tokens <= top:
        sizes.append(max_num_batched_tokens)
    sizes += [s for s in uniform if s <= max_num_batched_tokens]
    return tuple(sorted(set(sizes)))


def graph_padding(mode: str) -> tuple[bool, bool]:
    """``(decode-only batches padded, mixed / prefill batches padded)`` under vLLM's ``cudagraph_mode``: FULL and
    PIECEWISE graphs both run padded batches (``CudagraphDispatcher.dispatch``); FULL_DECODE_ONLY runs mixed
    batches eagerly at their own size; NONE (``--enforce-eager``) pads nothing."""
    if mode not in CUDAGRAPH_MODES:
        raise ValueError(f"cudagraph_mode={mode!r} is not supported; allowed: {list(CUDAGRAPH_MODES)}")
    return mode != "NONE", mode not in ("NONE", "FULL_DECODE_ONLY")


def kv_cache_dtype(value: str) -> Dtype:
    """The element dtype of the KV cache for vLLM's ``--kv-cache-dtype value`` (``"auto"``: bf16)."""
    if value not in KV_CACHE_DTYPES:
        raise ValueError(f"kv_cache_dtype={value!r} is not supported; allowed: {list(KV_CACHE_DTYPES)}")
    return "fp8" if value.startswith("fp8") else "bf16"


def is_data_center_blackwell(gpu: GpuSpec) -> bool:
    """Compute capability 10.x (B200 / GB200): ``current_platform.is_device_capability_family(100)``."""
    return gpu.compute_capability.startswith("10.")


def allreduce_kind(gpu: GpuSpec, tp: int, nbytes: float, disable_custom_all_reduce: bool = False) -> AllReduceKind:
    """Which all-reduce vLLM runs for a ``nbytes`` tensor over ``tp`` GPUs of ``gpu`` (module docstring);
    ``disable_custom_all_reduce``: vLLM ``--disable-custom-all-reduce`` (``ParallelConfig``), NCCL always."""
    if tp < 2:
        return "none"
    if disable_custom_all_reduce:
        return "nccl"
    return "custom" if nbytes < custom_ar_max_bytes(gpu, tp) else "nccl"


def custom_ar_max_bytes(gpu: GpuSpec, tp: int) -> int:
    """Largest message (exclusive) vLLM's custom all-reduce takes on ``tp`` GPUs of ``gpu``; 0 when it is disabled
    there (no P2P, an unsupported world size, or more than 2 GPUs without NVLink)."""
    if not gpu.p2p or tp not in CUSTOM_AR_WORLD_SIZES or (tp > 2 and gpu.interconnect != "nvlink"):
        return 0
    return min(
        CUSTOM_AR_MAX_BYTES, CUSTOM_AR_MAX_BYTES_BY_CC.get(gpu.compute_capability, {}).get(tp, CUSTOM_AR_MAX_BYTES)
    )


def custom_ar_link_bytes(tp: int, nbytes: float) -> float:
    """Bytes each rank moves over its link in vLLM's custom all-reduce of an ``nbytes`` tensor: one stage reads the
    (tp - 1) peers' whole buffers; two stages (reduce-scatter + all-gather) move 2 (tp - 1) / tp x ``nbytes`` like a
    ring. vLLM switches to two stages where its authors measured them faster, so the two-stage price is taken as
    never below the one-stage price at the switch (the two stages' second barrier and extra pass), which also keeps
    the price non-decreasing in the bytes."""
    if tp == 2:
        return float(nbytes)
    switch = float(ONE_STAGE_MAX_BYTES[4] if tp <= 4 else ONE_STAGE_MAX_BYTES[8])
    if nbytes < switch:
        return (tp - 1) * float(nbytes)
    return max((tp - 1) * switch, 2.0 * (tp - 1) / tp * nbytes)


def fused_moe_block_m(tokens: int, fp8_block_scaled: bool = False) -> int:
    """BLOCK_SIZE_M of vLLM's fused MoE Triton kernel for a batch of ``tokens`` tokens without a tuned config
    (``get_default_config``, vllm/model_executor/layers/fused_moe/fused_moe.py): bf16 and per-tensor fp8
    16 / 32 / 64 / 128 up to 32 / 96 / 512 / more tokens; block-scaled fp8 16 up to 64 tokens, else 64."""
    if fp8_block_scaled:
        return 16 if tokens <= 64 else 64
    if tokens <= 32:
        return 16
    if tokens <= 96:
        return 32
    return 64 if tokens <= 512 else 128


def linear_kernel(gpu: GpuSpec, dtype: Dtype) -> LinearKernel:
    """The kernel vLLM runs an ``dtype`` checkpoint's linear layers with on ``gpu`` (module docstring)."""
    if dtype == "bf16":
        return "bf16"
    return "fp8_w8a8" if gpu.has_fp8 else "fp8_marlin_w8a16"


def default_cudagraph_sizes(
    gpu: GpuSpec, max_num_seqs: int | None = None, max_num_batched_tokens: int | None = None
) -> tuple[int, ...]:
    """vLLM's default CUDA-graph capture sizes on ``gpu`` (:func:`cudagraph_capture_sizes`)
    for the given scheduler limits; unset limits take vLLM's defaults for the OpenAI server
    (``EngineArgs.get_batch_defaults``: 1024 sequences and 8192 tokens on GPUs with >= 70 GiB other than A100,
    else 256 and 2048; the same rule as :meth:`agentreplay.sim.config.SchedulerConfig.resolved`)."""
    big = gpu.memory_gib >= 70 and "a100" not in gpu.name.lower()
    seqs = max_num_seqs if max_num_seqs is not None else (1024 if big else 256)
    tokens = max_num_batched_tokens if max_num_batched_tokens is not None else (8192 if big else 2048)
    return cudagraph_capture_sizes(seqs, tokens, data_center_blackwell=is_data_center_blackwell(gpu))


__all__ = [
    "CUSTOM_AR_MAX_BYTES",
    "KV_CACHE_DTYPES",
    "allreduce_kind",
    "cudagraph_capture_sizes",
    "custom_ar_link_bytes",
    "custom_ar_max_bytes",
    "default_cudagraph_sizes",
    "fused_moe_block_m",
    "graph_padding",
    "is_data_center_blackwell",
    "kv_cache_dtype",
    "linear_kernel",
    "padded_tokens",
    "padding_table",
]
