"""From command-line options to a simulate configuration: the TOML file, then the preset, then the options given,
then the pricer. Shared by ``simulate``, ``compare`` and ``fleet``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentreplay.cli.output import fail


def build_config(config: Path | None, overrides: dict[str, dict[str, Any]], preset: str | None = None) -> Any:
    """The TOML file (or defaults), then the preset, then the command-line options that were given; the pricer
    resolved last (``--perf``, else the file's ``[hardware] perf``, else ``auto``: :mod:`agentreplay.perf.auto`)."""
    from agentreplay.perf.auto import resolve
    from agentreplay.policy.presets import apply_preset
    from agentreplay.sim.config import ConfigError, SimConfig, load

    requested = (overrides.get("hardware") or {}).get("perf")
    try:
        cfg = load(config) if config else SimConfig()
        if preset:
            cfg = apply_preset(cfg, preset)
        sections = {
            k: {f: v for f, v in fields.items() if v is not None and (k, f, v) != ("hardware", "perf", "auto")}
            for k, fields in overrides.items()
            if k != "seed"
        }
        cfg = cfg.replace(**{k: v for k, v in sections.items() if v})
        if overrides.get("seed") is not None:
            cfg = cfg.replace(seed=overrides["seed"])
        cfg, _ = resolve(cfg, requested, config)
    except (ConfigError, ValueError) as exc:
        raise fail(str(exc)) from None
    return cfg


def common_overrides(
    *,
    gpu: str | None = None,
    model: str | None = None,
    dtype: str | None = None,
    kv_cache_dtype: str | None = None,
    tp: int | None = None,
    instances: int | None = None,
    dp: int | None = None,
    ep: bool | None = None,
    all2all_backend: str | None = None,
    groups: list[str] | None = None,
    perf: str | None = None,
    mixed_attention: str | None = None,
    deployment_kernels: bool | None = None,
    enforce_eager: bool | None = None,
    engine_cost: str | None = None,
    arrival: str | None = None,
    concurrency: int | None = None,
    rate: float | None = None,
    max_programs: int | None = None,
    tools: str | None = None,
    tool_scale: float | None = None,
    tool_fixed: float | None = None,
    tool_model: Path | None = None,
    seed: int | None = None,
    router: str | None = None,
    queue: str | None = None,
    victim: str | None = None,
    retention: str | None = None,
    ttl: float | None = None,
    admission: str | None = None,
    max_model_len: int | None = None,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    num_gpu_blocks: int | None = None,
    dram_gib: float | None = None,
    cxl_gib: float | None = None,
    inter_instance_gbps: float | None = None,
    decision_log: bool | None = None,
) -> dict[str, Any]:
    """The configuration sections the command-line options of ``simulate``, ``compare`` and ``fleet`` set, in the
    layout of a ``--config`` file; an option left unset (None) keeps the file's value (:func:`build_config`).
    Keyword-only: the options are many and alike (a swapped pair would still type-check). ``--tool-model`` alone
    implies ``--tools generative``; ``--dp`` above 1 without ``--router`` means vLLM's own DP balancer."""
    if tool_model is not None and tools is None:
        tools = "generative"
    if dp is not None and dp > 1 and router is None:
        router = "vllm-dp"  # vLLM's own front end balances its DP ranks
    return {
        "hardware": {
            "gpu": gpu,
            "model": model,
            "dtype": dtype,
            "tp": tp,
            "instances": instances,
            "groups": tuple(groups) if groups else None,
            "perf": perf,
            "mixed_attention": mixed_attention,
            "kv_cache_dtype": kv_cache_dtype,
            "enforce_eager": enforce_eager,
            "deployment_kernels": deployment_kernels,
            "engine_cost": engine_cost,
            "dp": dp,
            "ep": ep,
            "all2all_backend": all2all_backend,
        },
        "router": {"policy": router, "inter_instance_gbps": inter_instance_gbps},
        "workload": {"arrival": arrival, "concurrency": concurrency, "rate_per_s": rate, "max_programs": max_programs},
        "tools": {
            "mode": tools,
            "scale": tool_scale,
            "fixed_s": tool_fixed,
            "model_path": str(tool_model) if tool_model else None,
        },
        "cache": {"num_gpu_blocks": num_gpu_blocks},
        "scheduler": {
            "max_num_seqs": max_num_seqs,
            "max_num_batched_tokens": max_num_batched_tokens,
            "max_model_len": max_model_len,
        },
        "policy": {
            "queue": queue,
            "victim": victim,
            "retention": retention,
            "ttl_s": ttl,
            "decision_log": decision_log,
        },
        "tiers": {"dram_gib": dram_gib, "cxl_gib": cxl_gib},
        "admission": {"policy": admission},
        "seed": seed,
    }
