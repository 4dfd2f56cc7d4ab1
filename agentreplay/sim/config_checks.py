"""The checks every configuration section runs when built, and the ``Literal`` types of the core sections' choices
(:mod:`agentreplay.sim.config`): a bad value fails with the section, field, value and the allowed range."""

from __future__ import annotations

from typing import Any, Literal, get_args

from agentreplay.policy.registry import ParamError, Registry, did_you_mean
from agentreplay.sim.errors import ConfigError

Arrival = Literal["closed", "poisson", "trace"]
ToolMode = Literal["replay", "fixed", "scale", "generative"]
Dtype = Literal["bf16", "fp8"]
PerfName = Literal["roofline", "refined", "table"]
#: vLLM ``--kv-cache-dtype`` (``CacheConfig.cache_dtype``, vllm/config/cache.py): "auto" = the activation dtype
KvCacheDtype = Literal["auto", "bf16", "fp8", "fp8_e4m3", "fp8_e5m2"]
CudagraphMode = Literal["FULL_AND_PIECEWISE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "NONE"]
MixedAttention = Literal["apart", "one_kernel"]
EngineCostName = Literal["catalog", "fitted"]
All2AllName = Literal[
    "allgather_reducescatter", "deepep_high_throughput", "deepep_low_latency", "flashinfer_nvlink_two_sided"
]


def check(cond: bool, section: str, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"[{section}] {name} = {value!r} is invalid: {allowed}")


def check_literal(section: str, name: str, value: Any, lit: Any) -> None:
    names = get_args(lit)
    check(value in names, section, name, value, f"one of {list(names)}{did_you_mean(value, names)}")


def check_policy(section: str, name: str, value: Any, registry: Registry[Any], params_from: Any) -> None:
    """``value`` names a policy of ``registry``; every policy's parameters build from ``params_from`` (the
    section: each parameter dataclass validates its own fields)."""
    names = registry.names()
    check(value in registry, section, name, value, f"one of {list(names)}{did_you_mean(value, names)}")
    try:
        registry.check(params_from)
    except ParamError as exc:
        raise ConfigError(f"[{section}] {exc}") from None


def check_hardware(hw: Any) -> None:
    """``[hardware]``'s values, alone and together: ``hw`` is the :class:`agentreplay.sim.config.HardwareConfig`
    being built (its ``__post_init__``, which normalises the tuples first)."""
    check_literal("hardware", "dtype", hw.dtype, Dtype)
    check_literal("hardware", "kv_cache_dtype", hw.kv_cache_dtype, KvCacheDtype)
    check(isinstance(hw.enforce_eager, bool), "hardware", "enforce_eager", hw.enforce_eager, "true or false")
    check_literal("hardware", "cudagraph_mode", hw.cudagraph_mode, CudagraphMode)
    check(
        isinstance(hw.disable_custom_all_reduce, bool),
        "hardware",
        "disable_custom_all_reduce",
        hw.disable_custom_all_reduce,
        "true or false",
    )
    check(
        all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in hw.cudagraph_capture_sizes),
        "hardware",
        "cudagraph_capture_sizes",
        list(hw.cudagraph_capture_sizes),
        "integers >= 1",
    )
    check(
        isinstance(hw.deployment_kernels, bool),
        "hardware",
        "deployment_kernels",
        hw.deployment_kernels,
        "true or false",
    )
    for name, unset in (
        ("cudagraph_mode", "FULL_AND_PIECEWISE"),
        ("cudagraph_capture_sizes", ()),
        ("disable_custom_all_reduce", False),
    ):
        value = getattr(hw, name)
        check(
            hw.deployment_kernels or value == unset,
            "hardware",
            name,
            list(value) if isinstance(value, tuple) else value,
            "its default unless deployment_kernels = true (without it no batch is padded and every TP "
            "all-reduce is NCCL's ring)",
        )
    check_literal("hardware", "perf", hw.perf, PerfName)
    check_literal("hardware", "engine_cost", hw.engine_cost, EngineCostName)
    check(
        hw.engine_cost == "catalog" or hw.deployment_kernels,
        "hardware",
        "engine_cost",
        hw.engine_cost,
        "'catalog' unless deployment_kernels = true (the engine cost was fitted on runs priced with vLLM's "
        "deployment kernels)",
    )
    check_literal("hardware", "mixed_attention", hw.mixed_attention, MixedAttention)
    check(hw.tp in (1, 2, 4, 8, 16), "hardware", "tp", hw.tp, "1, 2, 4, 8 or 16")
    check(
        isinstance(hw.instances, int) and 1 <= hw.instances <= 4096,
        "hardware",
        "instances",
        hw.instances,
        "an integer in [1, 4096]",
    )
    check(isinstance(hw.dp, int) and 1 <= hw.dp <= 64, "hardware", "dp", hw.dp, "an integer in [1, 64]")
    check(isinstance(hw.ep, bool), "hardware", "ep", hw.ep, "true or false")
    check_literal("hardware", "all2all_backend", hw.all2all_backend, All2AllName)
    check(
        hw.dp == 1 or (hw.instances == 1 and not hw.groups),
        "hardware",
        "dp",
        hw.dp,
        "dp > 1 describes one deployment: use it with instances = 1 and no groups",
    )
    check(
        not hw.ep or hw.dp > 1,
        "hardware",
        "ep",
        hw.ep,
        "expert parallelism is modelled with dp >= 2 (vLLM --data-parallel-size); EP over the TP group alone is not",
    )
    for g in hw.groups:
        parts = str(g).split(":")
        ok = (
            len(parts) in (3, 4)
            and parts[1].isdigit()
            and int(parts[1]) in (1, 2, 4, 8, 16)
            and parts[2].isdigit()
            and int(parts[2]) >= 1
            and (len(parts) == 3 or parts[3] in get_args(Dtype))
        )
        check(ok, "hardware", "groups", g, "entries 'GPU:TP:COUNT[:DTYPE]' with TP in 1, 2, 4, 8, 16 and COUNT >= 1")
