"""A recorded vLLM deployment (:class:`validation.e2e.deployment.Deployment`) replayed: :func:`unmodelled` lists every
field the simulator does not model, :func:`check` refuses such a deployment with :class:`NotSimulated` naming file,
field and value, and :func:`sim_config` builds the matching ``SimConfig`` (the fields and the refusals are listed in
:mod:`validation.e2e.deployment`'s docstring)."""

from __future__ import annotations

import dataclasses
from typing import Any, Final, get_args

from agentreplay.sim.config import All2AllName, KvCacheDtype, SimConfig
from validation.e2e.deployment import DTYPES, Deployment, NotSimulated, as_bool

_SIM_DTYPES: Final = {"bfloat16": "bf16"}  # model dtypes the pricer knows (fp8 comes from quantization)
#: vLLM's all2all_backend values that run as the simulator's backends: "naive" and "pplx" fall back to
#: allgather_reducescatter in vLLM (agentreplay.perf.parallel); the rest are modelled by name
_ALL2ALL: Final = {
    "naive": "allgather_reducescatter",
    "pplx": "allgather_reducescatter",
    **{b: b for b in get_args(All2AllName)},
}


#: ``(field, value, why)`` of one unmodelled field, before :meth:`Deployment.where` names its file path.
_Refusal = tuple[str, Any, str]


def unmodelled(dep: Deployment) -> list[tuple[str, Any, str]]:
    """``(field path, value, why)`` for every field of ``dep`` that changes what runs and is not modelled: the
    parallel layout, the precisions, the scheduler and execution mode, then the engine features, in that order."""
    found = [*_parallelism(dep), *_precision(dep), *_scheduling(dep), *_features(dep)]
    return [(dep.where(name), value, why) for name, value, why in found]


def _parallelism(dep: Deployment) -> list[_Refusal]:
    """Expert, data, pipeline and context parallelism and dual-batch overlap the simulator does not run."""
    out: list[_Refusal] = []
    if dep.ep and dep.dp == 1:
        out.append(
            (
                "ep",
                True,
                "expert parallelism over the TP group alone (data_parallel_size 1) is not modelled; "
                "with dp >= 2 it is ([hardware] dp / ep)",
            )
        )
    if dep.dp > 1 and dep.all2all_backend not in _ALL2ALL:
        out.append(
            ("all2all_backend", dep.all2all_backend, f"MoE dispatch / combine are modelled for {sorted(_ALL2ALL)}")
        )
    if dep.pp > 1:
        out.append(("pp", dep.pp, "pipeline parallelism: the pricer splits layers by TP only"))
    for name, what in (("dcp", "decode context parallelism"), ("pcp", "prefill context parallelism")):
        if dep.extra.get(name) is not None and int(dep.extra[name]) > 1:
            out.append((name, dep.extra[name], f"{what} is not modelled"))
    if dep.extra.get("dbo") and as_bool(dep.extra["dbo"]):
        out.append(("dbo", True, "dual-batch overlap is not modelled"))
    return out


def _precision(dep: Deployment) -> list[_Refusal]:
    """Weight quantization, model dtype and KV-cache dtype the pricer cannot price."""
    out: list[_Refusal] = []
    if dep.quantization is not None and dep.quantization != "fp8":
        out.append(("quantization", dep.quantization, "the pricer prices bf16 and fp8 weights only"))
    if dep.dtype not in _SIM_DTYPES:
        why = (
            "'auto' resolves to the checkpoint's dtype, which the run does not record and the model catalog "
            "does not hold"
            if dep.dtype == "auto"
            else "the simulator's model dtype is bf16 (fp8 by quantization)"
        )
        out.append(("dtype", dep.dtype, why))
    if _kv_cache_dtype(dep) is None:
        out.append(
            (
                "kv_cache_dtype",
                dep.kv_cache_dtype,
                f"the simulated KV cache holds the model dtype or one of "
                f"{[d for d in get_args(KvCacheDtype) if d.startswith('fp8')]}",
            )
        )
    return out


def _scheduling(dep: Deployment) -> list[_Refusal]:
    """Scheduler settings and execution modes the replayed vLLM v1 scheduler and pricer do not cover."""
    out: list[_Refusal] = []
    if not dep.enable_chunked_prefill:
        out.append(("enable_chunked_prefill", False, "the simulator's scheduler always chunks prefills (vLLM v1)"))
    lpt = dep.extra.get("long_prefill_token_threshold")
    if lpt is not None and int(lpt) > 0:
        out.append(("long_prefill_token_threshold", lpt, "per-request prefill caps are not modelled"))
    if dep.extra.get("policy") not in (None, "fcfs"):
        out.append(
            ("policy", dep.extra["policy"], "only vLLM's fcfs queue is replayed (the run records no priorities)")
        )
    if dep.enforce_eager:
        out.append(
            ("enforce_eager", True, "eager execution: the pricer's per-kernel overhead stands for CUDA-graph replay")
        )
    elif dep.cudagraph_mode == "NONE":
        out.append(
            ("cudagraph_mode", "NONE", "no CUDA graphs: the pricer's per-kernel overhead stands for CUDA-graph replay")
        )
    return out


def _features(dep: Deployment) -> list[_Refusal]:
    """Engine features not modelled (speculative decoding, LoRA, KV transfer / offloading) and an explicit KV
    budget without a recorded block count."""
    out: list[_Refusal] = []
    for name, what in (
        ("speculative", "speculative decoding"),
        ("lora", "LoRA adapters"),
        ("kv_transfer", "KV transfer (disaggregated serving)"),
        ("kv_offloading_size", "KV offloading"),
    ):
        v = dep.extra.get(name)
        if v not in (None, False, {}, "", 0):
            out.append((name, v, f"{what} is not modelled"))
    if dep.num_gpu_blocks is None and dep.extra.get("kv_cache_memory_bytes") is not None:
        out.append(
            (
                "kv_cache_memory_bytes",
                dep.extra["kv_cache_memory_bytes"],
                "an explicit KV budget without a recorded block count: the memory model sizes by utilisation only",
            )
        )
    return out


def _kv_cache_dtype(dep: Deployment) -> str | None:
    """``[hardware] kv_cache_dtype`` for the run's KV-cache dtype: ``auto`` for the model dtype (bf16, the only
    one simulated), the fp8 variant by name; None when the simulator has no such KV cache."""
    value = DTYPES.get(str(dep.kv_cache_dtype).lower(), str(dep.kv_cache_dtype).lower())
    if value in ("auto", dep.dtype) or _SIM_DTYPES.get(value) == "bf16":
        return "auto"
    return value if value in get_args(KvCacheDtype) and value.startswith("fp8") else None


def check(dep: Deployment) -> None:
    """Raise :class:`NotSimulated` listing every unmodelled field of ``dep`` (file, field path, value, why)."""
    bad = unmodelled(dep)
    if bad:
        raise NotSimulated(f"{dep.source}: " + "; ".join(f"{p} = {v!r} ({why})" for p, v, why in bad))


def sim_config(dep: Deployment, gpu: str, model: str, base: SimConfig | None = None) -> tuple[SimConfig, str]:
    """The SimConfig that replays ``dep`` on catalog ``gpu`` / ``model``, and the note on what was derived.

    Raises :class:`NotSimulated` for an unmodelled field (:func:`check`), a value SimConfig rejects, or a block
    count the memory model cannot give."""
    check(dep)
    sections: dict[str, dict[str, Any]] = {
        "hardware": {
            "gpu": gpu,
            "model": model,
            "dtype": "fp8" if dep.quantization == "fp8" else _SIM_DTYPES[dep.dtype],
            "tp": dep.tp,
            "kv_cache_dtype": _kv_cache_dtype(dep),
            "dp": dep.dp,
            "ep": dep.ep,
            "all2all_backend": _ALL2ALL.get(dep.all2all_backend, "allgather_reducescatter"),
        },
        "cache": {
            "num_gpu_blocks": dep.num_gpu_blocks,
            "block_size": dep.block_size,
            "enable_prefix_caching": dep.enable_prefix_caching,
            "gpu_memory_utilization": dep.gpu_memory_utilization,
        },
        "scheduler": {
            "max_num_seqs": dep.max_num_seqs,
            "max_num_batched_tokens": dep.max_num_batched_tokens,
            "reserve_full_isl": dep.reserve_full_isl,
        },
    }
    if dep.dp > 1:  # one API server in front of the DP ranks: vLLM's own balancer
        sections["router"] = {"policy": "vllm-dp"}
    try:
        cfg = (base or SimConfig()).replace(**sections)
        if dep.dp > 1:
            from agentreplay.perf import load_model
            from agentreplay.perf.parallel import check_deployment

            check_deployment(load_model(model), dep.dp, dep.tp, dep.ep, cfg.hardware.all2all_backend)
    except ValueError as exc:  # ConfigError, or a DP / EP layout vLLM or the simulator does not run
        names = ("tp", "block_size", "gpu_memory_utilization") + (("dp", "ep") if dep.dp > 1 else ())
        read = ", ".join(dep.where(k) for k in names)
        raise NotSimulated(f"{dep.source}: {exc} (fields read from {read})") from None
    notes = []
    if dep.num_gpu_blocks is None:
        from agentreplay.sim.run import plan_instance

        hw = cfg.hardware
        try:
            blocks = plan_instance(cfg, hw.gpu, hw.tp, hw.dtype).num_gpu_blocks
        except ValueError as exc:
            raise NotSimulated(
                f"{dep.source}: num_gpu_blocks not recorded and the memory model cannot size it ({exc})"
            ) from None
        cfg = cfg.replace(cache={"num_gpu_blocks": blocks})
        dep_note = f"KV blocks derived: {blocks} from the memory model (utilisation {dep.gpu_memory_utilization:g})"
        notes.append(dep_note)
    others = [k for k in dep.derived if k != "num_gpu_blocks"]
    if others:
        notes.append("vLLM defaults for unrecorded " + ", ".join(f"{k}={_shown(dep, k)}" for k in others))
    return cfg, "; ".join(notes)


def _shown(dep: Deployment, name: str) -> str:
    value = getattr(dep, name, None) if name in {f.name for f in dataclasses.fields(dep)} else dep.extra.get(name)
    return str(value)
