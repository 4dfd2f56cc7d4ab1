"""The deployment a measured vLLM run ran with, read whole from its ``meta.json``, and the simulator
configuration that replays it (or :class:`NotSimulated`, naming the file, field and value, when the run used
something the simulator does not model).

Where the fields are (LLMServingSim ``bench/core/recorder.py`` and ``runner.py``; every variant is
``schema_version`` 1, since the recorder only adds keys):

- oldest runs (vLLM 0.19, ``bench/results/rtx4090-llama8b-tp1``): ``engine_kwargs`` only: tensor / data
  parallel size, ``enable_expert_parallel``, ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``,
  ``dtype``, ``kv_cache_dtype``, ``seed``; no ``kv_cache``, ``hardware`` or ``resolved_config``;
- vLLM 0.19 runs with ``kv_cache`` (``num_gpu_blocks``, ``block_size``, ``gpu_memory_utilization``,
  ``enable_prefix_caching``...), ``hardware`` and ``resolved_config`` (vLLM's whole resolved ``VllmConfig``:
  ``parallel_config``, ``cache_config``, ``scheduler_config``, ``model_config`` (``dtype``, ``quantization``,
  ``enforce_eager``, ``max_model_len``), ``quant_config``, ``compilation_config`` (``cudagraph_mode`` as the
  enum's value, ``[2, 1]`` = FULL_AND_PIECEWISE), ``speculative_config``...);
- vLLM 0.28 runs: the same plus ``engine_kwargs`` ``load_format``, ``skip_tokenizer_init``, ``enforce_eager``
  and, later, ``kv_cache_memory_bytes``, ``disable_custom_all_reduce``; ``max_model_len`` may be null in
  ``engine_kwargs`` (resolved in ``model_config``). The recorder says these blocks "can be ``{}`` if collection
  failed".

Each field is read from the resolved config first (what ran), then ``kv_cache``, then ``engine_kwargs`` (what
was asked); :attr:`Deployment.paths` says where. A field found nowhere takes vLLM's default, listed in
:attr:`Deployment.derived` with its source (vLLM 0.32 source, ``vllm/config/*.py``, unless said otherwise):

- tp / pp / dp 1, expert parallel off: ``ParallelConfig`` (``config/parallel.py``); with dp > 1, the MoE
  ``all2all_backend`` ``allgather_reducescatter`` (``ParallelConfig.all2all_backend``; ``naive`` and ``pplx``
  run as it);
- block size 16: ``CacheConfig.DEFAULT_BLOCK_SIZE`` (``config/cache.py``; some attention backends, e.g. MLA,
  choose another); prefix caching on: ``CacheConfig.enable_prefix_caching``; KV dtype ``auto`` (= model dtype):
  ``CacheConfig.cache_dtype``;
- GPU memory utilisation: 0.92 in ``CacheConfig`` of vLLM 0.32, and what the vLLM 0.28 runs resolved without
  the recorder setting it; 0.9 for vLLM < 0.20 (what the vLLM 0.19 run resolved; vLLM's documented default
  through 0.19). Between 0.20 and 0.27 the switch is not pinned down: 0.92 is used and the note says so;
- ``max_num_seqs`` 128, ``max_num_batched_tokens`` 2048: ``SchedulerConfig.DEFAULT_MAX_NUM_SEQS`` /
  ``DEFAULT_MAX_NUM_BATCHED_TOKENS`` (``config/scheduler.py``), what ``EngineArgs.
  _set_default_max_num_seqs_and_batched_tokens_args`` (``engine/arg_utils.py``) falls back to for a usage context
  outside ``get_batch_defaults``' table, as for ``AsyncLLM.from_engine_args`` (``ENGINE_CONTEXT``), the recorder's
  engine; chunked prefill on and ``scheduler_reserve_full_isl`` on: ``SchedulerConfig``;
- CUDA graphs: ``FULL_AND_PIECEWISE`` (optimisation level O2's default, ``config/vllm.py``
  ``OPTIMIZATION_LEVEL_02``; also what the 0.19 and 0.28 runs resolved), ``NONE`` under ``enforce_eager``;
- no quantization, no speculative decoding: ``ModelConfig.quantization`` / ``speculative_config`` None;
- ``num_gpu_blocks`` (not a vLLM setting, vLLM profiles it at start-up): the simulator's memory model
  (:mod:`agentreplay.perf.memory`, the same ``plan_instance`` a simulation uses) at the recorded or default
  utilisation; the note says "KV blocks derived: N from the memory model (utilisation X)".

Replayed with the matching ``SimConfig`` fields: ``hardware`` ``gpu/model/dtype/tp``, ``kv_cache_dtype`` (an
fp8 KV cache: ``fp8``, ``fp8_e4m3``, ``fp8_e5m2``; ``auto`` for the model dtype), ``dp`` / ``ep`` /
``all2all_backend`` (DP ranks behind vLLM's balancer, router ``vllm-dp``; a MoE model's ranks in lockstep with
expert parallelism: :mod:`agentreplay.perf.parallel`), cache ``num_gpu_blocks/block_size/gpu_memory_utilization/
enable_prefix_caching``, scheduler ``max_num_seqs/max_num_batched_tokens/reserve_full_isl``.

Not modelled, so refused with :class:`NotSimulated` (the pricer's dtypes are bf16 and fp8 weights; the scheduler
always chunks prefills): expert parallelism with dp = 1 (over the TP group alone), a DP layout
:func:`agentreplay.perf.parallel.check_deployment` refuses (e.g. experts not divisible over the EP group), an
``all2all_backend`` not modelled, pipeline parallelism > 1, decode / prefill context parallelism > 1, dual-batch
overlap, a quantization other than ``fp8``, a model dtype other than bf16, a KV-cache dtype other than the
model's or fp8, chunked prefill off, ``long_prefill_token_threshold`` > 0, a scheduling policy other than
``fcfs``, eager execution (``enforce_eager`` or ``cudagraph_mode`` NONE: the pricer's per-kernel overhead stands
for CUDA-graph replay), speculative decoding, LoRA, KV transfer (disaggregated serving), KV offloading, a
``kv_cache_memory_bytes`` budget without a recorded block count.
Async scheduling (``scheduler_config.async_scheduling``), where recorded true, hides the host step cost behind the
GPU step (:func:`agentreplay.perf.stepcost.overlapped`); not recorded, the catalogue's host cost is priced whole.
Recorded but not priced (they do not change what is scheduled): ``max_model_len`` (every replayed request
completed in the run), the CUDA-graph mode among the graph modes; replays keep
``[hardware] deployment_kernels`` off (no CUDA-graph padding, NCCL all-reduces), as the catalog was calibrated.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

#: Field -> the places it is read from, in order (dotted paths into meta.json).
SOURCES: Final[dict[str, tuple[str, ...]]] = {
    "tp": ("resolved_config.parallel_config.tensor_parallel_size", "engine_kwargs.tensor_parallel_size"),
    "pp": ("resolved_config.parallel_config.pipeline_parallel_size", "engine_kwargs.pipeline_parallel_size"),
    "dp": ("resolved_config.parallel_config.data_parallel_size", "engine_kwargs.data_parallel_size"),
    "ep": ("resolved_config.parallel_config.enable_expert_parallel", "engine_kwargs.enable_expert_parallel"),
    "dcp": (
        "resolved_config.parallel_config.decode_context_parallel_size",
        "engine_kwargs.decode_context_parallel_size",
    ),
    "pcp": (
        "resolved_config.parallel_config.prefill_context_parallel_size",
        "engine_kwargs.prefill_context_parallel_size",
    ),
    "dbo": ("resolved_config.parallel_config.enable_dbo", "engine_kwargs.enable_dbo"),
    "all2all_backend": ("resolved_config.parallel_config.all2all_backend", "engine_kwargs.all2all_backend"),
    "dtype": ("resolved_config.model_config.dtype", "engine_kwargs.dtype"),
    "quantization": ("resolved_config.model_config.quantization", "engine_kwargs.quantization"),
    "kv_cache_dtype": ("resolved_config.cache_config.cache_dtype", "engine_kwargs.kv_cache_dtype"),
    "block_size": ("kv_cache.block_size", "resolved_config.cache_config.block_size", "engine_kwargs.block_size"),
    "num_gpu_blocks": ("kv_cache.num_gpu_blocks", "resolved_config.cache_config.num_gpu_blocks"),
    "gpu_memory_utilization": (
        "kv_cache.gpu_memory_utilization",
        "resolved_config.cache_config.gpu_memory_utilization",
        "engine_kwargs.gpu_memory_utilization",
    ),
    "kv_cache_memory_bytes": (
        "kv_cache.kv_cache_memory_bytes",
        "resolved_config.cache_config.kv_cache_memory_bytes",
        "engine_kwargs.kv_cache_memory_bytes",
    ),
    "kv_offloading_size": ("resolved_config.cache_config.kv_offloading_size", "engine_kwargs.kv_offloading_size"),
    "enable_prefix_caching": (
        "kv_cache.enable_prefix_caching",
        "resolved_config.cache_config.enable_prefix_caching",
        "engine_kwargs.enable_prefix_caching",
    ),
    "max_model_len": ("resolved_config.model_config.max_model_len", "engine_kwargs.max_model_len"),
    "max_num_seqs": ("resolved_config.scheduler_config.max_num_seqs", "engine_kwargs.max_num_seqs"),
    "max_num_batched_tokens": (
        "resolved_config.scheduler_config.max_num_batched_tokens",
        "engine_kwargs.max_num_batched_tokens",
    ),
    "enable_chunked_prefill": (
        "resolved_config.scheduler_config.enable_chunked_prefill",
        "engine_kwargs.enable_chunked_prefill",
    ),
    "reserve_full_isl": (
        "resolved_config.scheduler_config.scheduler_reserve_full_isl",
        "engine_kwargs.scheduler_reserve_full_isl",
    ),
    "async_scheduling": (
        "resolved_config.scheduler_config.async_scheduling",
        "engine_kwargs.async_scheduling",
    ),
    "long_prefill_token_threshold": (
        "resolved_config.scheduler_config.long_prefill_token_threshold",
        "engine_kwargs.long_prefill_token_threshold",
    ),
    "policy": ("resolved_config.scheduler_config.policy", "engine_kwargs.scheduling_policy"),
    "enforce_eager": ("resolved_config.model_config.enforce_eager", "engine_kwargs.enforce_eager"),
    "cudagraph_mode": ("resolved_config.compilation_config.cudagraph_mode",),
    "speculative": ("resolved_config.speculative_config", "engine_kwargs.speculative_config"),
    "lora": ("resolved_config.lora_config", "engine_kwargs.enable_lora"),
    "kv_transfer": ("resolved_config.kv_transfer_config", "engine_kwargs.kv_transfer_config"),
}
_CUDAGRAPH_MODES: Final = {
    0: "NONE",
    1: "PIECEWISE",
    2: "FULL",
    (2, 0): "FULL_DECODE_ONLY",
    (2, 1): "FULL_AND_PIECEWISE",
}  # vllm/config/compilation.py CUDAGraphMode values
DTYPES: Final = {
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "float16": "float16",
    "half": "float16",
    "fp16": "float16",
    "float32": "float32",
    "float": "float32",
    "fp32": "float32",
}


class NotSimulated(ValueError):
    """The run used a deployment field the simulator does not model; the message names file, field and value."""


@dataclass(frozen=True)
class Deployment:
    """Every deployment field of one measured vLLM run (vLLM spellings); see the module docstring."""

    source: str  #: the meta.json it was read from
    vllm_version: str | None
    tp: int
    pp: int
    dp: int
    ep: bool  #: enable_expert_parallel
    dtype: str  #: model dtype as vLLM resolved it ("bfloat16", "float16", ... or "auto" when unresolved)
    quantization: str | None
    kv_cache_dtype: str
    block_size: int
    num_gpu_blocks: int | None  #: None when the run does not record it
    gpu_memory_utilization: float
    max_model_len: int | None
    max_num_seqs: int
    max_num_batched_tokens: int
    enable_chunked_prefill: bool
    enable_prefix_caching: bool
    cudagraph_mode: str  #: CUDAGraphMode name (or the raw value when not recognised)
    enforce_eager: bool
    reserve_full_isl: bool  #: scheduler_reserve_full_isl
    #: async_scheduling: the host step cost overlaps the GPU step (agentreplay.perf.stepcost.overlapped); False
    #: when not recorded (the catalogue's host cost, as calibrated)
    async_scheduling: bool = False
    #: MoE dispatch / combine over the DP / EP group (vLLM ``parallel_config.all2all_backend``)
    all2all_backend: str = "allgather_reducescatter"
    #: other fields that change what runs, with their values (dcp, pcp, dbo, speculative, lora, kv_transfer...)
    extra: Mapping[str, Any] = field(default_factory=dict)
    paths: Mapping[str, str] = field(default_factory=dict)  #: field -> dotted path it was read from
    derived: Mapping[str, str] = field(default_factory=dict)  #: field -> how it was derived (not recorded)

    @property
    def n_gpus(self) -> int:
        return self.tp * self.pp * self.dp

    def where(self, name: str) -> str:
        return self.paths.get(name, f"{name} (not recorded)")


def _get(cfg: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    node: Any = cfg
    for key in path.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return False, None
        node = node[key]
    return True, node


def _lookup(cfg: Mapping[str, Any], name: str, *, allow_null: bool = False) -> tuple[str | None, Any]:
    """(path, value) of the first place that records ``name``; a recorded null counts only with allow_null
    (a null quantization / speculative config is a recorded "none", a null block count is not recorded)."""
    for path in SOURCES[name]:
        found, value = _get(cfg, path)
        if found and (value is not None or allow_null):
            return path, value
    return None, None


def _version(text: str | None) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", str(text or ""))
    return (int(m.group(1)), int(m.group(2))) if m else None


def _default_utilization(version: str | None) -> tuple[float, str]:
    v = _version(version)
    if v is not None and v < (0, 20):
        return 0.9, f"not recorded: vLLM {version} default 0.9 (what the vLLM 0.19 run resolved)"
    how = "vLLM 0.32 CacheConfig.gpu_memory_utilization default 0.92 (vllm/config/cache.py)"
    if v is None or v < (0, 28):
        how += f"; the run's vLLM {version or '(version not recorded)'} may predate the change from 0.9"
    return 0.92, f"not recorded: {how}"


def _cudagraph(value: Any) -> str:
    key = tuple(value) if isinstance(value, list | tuple) else value
    if isinstance(key, str):
        return key.upper().removeprefix("CUDAGRAPHMODE.")
    return _CUDAGRAPH_MODES.get(key, str(value))  # type: ignore[call-overload]


def _async(cfg: Mapping[str, Any], paths: dict[str, str]) -> bool:
    """The recorded ``async_scheduling`` (False when not recorded: the host step cost is then priced whole)."""
    path, value = _lookup(cfg, "async_scheduling")
    if path is None:
        return False
    paths["async_scheduling"] = path
    return as_bool(value)


def as_bool(v: Any) -> bool:
    return v if isinstance(v, bool) else str(v).lower() in ("1", "true", "yes")


def from_config(cfg: Mapping[str, Any], source: str, vllm_version: str | None = None) -> Deployment:
    """The deployment recorded in a ``vllm-run`` cell's ``config_json`` (the meta.json blocks the collector
    keeps), with vLLM's defaults for what the run does not record (listed in ``derived``)."""
    vals: dict[str, Any] = {}
    paths: dict[str, str] = {}
    derived: dict[str, str] = {}
    defaults: dict[str, tuple[Any, str]] = {
        "tp": (1, "ParallelConfig.tensor_parallel_size default 1"),
        "pp": (1, "ParallelConfig.pipeline_parallel_size default 1"),
        "dp": (1, "ParallelConfig.data_parallel_size default 1"),
        "ep": (False, "ParallelConfig.enable_expert_parallel default False"),
        "dtype": ("auto", "ModelConfig.dtype default 'auto' (the checkpoint's dtype)"),
        "kv_cache_dtype": ("auto", "CacheConfig.cache_dtype default 'auto' (the model dtype)"),
        "block_size": (16, "CacheConfig.DEFAULT_BLOCK_SIZE 16 (vllm/config/cache.py)"),
        "enable_prefix_caching": (True, "CacheConfig.enable_prefix_caching default True"),
        "max_num_seqs": (128, "SchedulerConfig.DEFAULT_MAX_NUM_SEQS 128 (AsyncLLM engine context)"),
        "max_num_batched_tokens": (
            2048,
            "SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS 2048 (AsyncLLM engine context)",
        ),
        "enable_chunked_prefill": (True, "SchedulerConfig.enable_chunked_prefill default True"),
        "reserve_full_isl": (True, "SchedulerConfig.scheduler_reserve_full_isl default True (vLLM 0.32)"),
        "enforce_eager": (False, "ModelConfig.enforce_eager default False"),
    }
    for name, (default, how) in defaults.items():
        path, value = _lookup(cfg, name)
        if path is None:
            vals[name], derived[name] = default, f"not recorded: vLLM {how}"
        else:
            vals[name], paths[name] = value, path
    for name in (
        "quantization",
        "speculative",
        "lora",
        "kv_transfer",
        "kv_offloading_size",
        "kv_cache_memory_bytes",
        "max_model_len",
        "num_gpu_blocks",
    ):
        path, value = _lookup(cfg, name, allow_null=name in ("quantization", "speculative", "lora", "kv_transfer"))
        vals[name] = value
        if path is not None:
            paths[name] = path
        elif name in ("quantization", "speculative"):
            what = "ModelConfig.quantization" if name == "quantization" else "VllmConfig.speculative_config"
            derived[name] = f"not recorded: vLLM default None ({what})"
    for name in ("dcp", "pcp", "dbo", "long_prefill_token_threshold", "policy"):
        path, value = _lookup(cfg, name)
        vals[name] = value
        if path is not None:
            paths[name] = path
    path, a2a = _lookup(cfg, "all2all_backend")
    if path is not None:
        paths["all2all_backend"] = path
    else:
        a2a = "allgather_reducescatter"
        if int(vals["dp"]) > 1:  # only a DP deployment's MoE layers use it: listed only where it matters
            derived["all2all_backend"] = (
                "not recorded: vLLM ParallelConfig.all2all_backend default "
                "'allgather_reducescatter' (vllm/config/parallel.py)"
            )
    path, util = _lookup(cfg, "gpu_memory_utilization")
    if path is None:
        util, derived["gpu_memory_utilization"] = _default_utilization(vllm_version)
    else:
        paths["gpu_memory_utilization"] = path
    path, mode = _lookup(cfg, "cudagraph_mode")
    eager = as_bool(vals["enforce_eager"])
    if path is None:
        mode = "NONE" if eager else "FULL_AND_PIECEWISE"
        derived["cudagraph_mode"] = (
            "not recorded: NONE under enforce_eager (vllm/config/vllm.py)"
            if eager
            else "not recorded: vLLM optimisation level O2 default FULL_AND_PIECEWISE "
            "(vllm/config/vllm.py OPTIMIZATION_LEVEL_02)"
        )
    else:
        paths["cudagraph_mode"] = path
        mode = _cudagraph(mode)
    if vals["num_gpu_blocks"] is None:
        derived["num_gpu_blocks"] = "not recorded: from the simulator's memory model"
    dtype_raw = str(vals["dtype"]).lower().removeprefix("torch.")
    extra = {
        k: vals[k]
        for k in (
            "dcp",
            "pcp",
            "dbo",
            "long_prefill_token_threshold",
            "policy",
            "speculative",
            "lora",
            "kv_transfer",
            "kv_offloading_size",
            "kv_cache_memory_bytes",
        )
    }
    return Deployment(
        source=source,
        vllm_version=vllm_version,
        tp=int(vals["tp"]),
        pp=int(vals["pp"]),
        dp=int(vals["dp"]),
        ep=as_bool(vals["ep"]),
        dtype=DTYPES.get(dtype_raw, dtype_raw),
        quantization=None if vals["quantization"] is None else str(vals["quantization"]),
        kv_cache_dtype=str(vals["kv_cache_dtype"]),
        block_size=int(vals["block_size"]),
        num_gpu_blocks=None if vals["num_gpu_blocks"] is None else int(vals["num_gpu_blocks"]),
        gpu_memory_utilization=float(util),
        max_model_len=None if vals["max_model_len"] is None else int(vals["max_model_len"]),
        max_num_seqs=int(vals["max_num_seqs"]),
        max_num_batched_tokens=int(vals["max_num_batched_tokens"]),
        enable_chunked_prefill=as_bool(vals["enable_chunked_prefill"]),
        enable_prefix_caching=as_bool(vals["enable_prefix_caching"]),
        cudagraph_mode=str(mode),
        enforce_eager=eager,
        reserve_full_isl=as_bool(vals["reserve_full_isl"]),
        async_scheduling=_async(cfg, paths),
        all2all_backend=str(a2a),
        extra=extra,
        paths=paths,
        derived=derived,
    )
