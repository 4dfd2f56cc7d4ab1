"""The study's controlled experiments, each one sweep spec: one axis varied, everything else fixed.

Every experiment starts from :func:`base_config` (1 x H100 SXM, Llama-3.1-8B, Poisson program arrivals at
0.05 programs/s, the first ``programs`` programs of the bundled SWE-bench Verified trace, trace tool durations,
vllm's policy) and changes only what its ``varies`` names. ``x`` is the plotted axis, ``group`` the lines.

The finding each experiment tests is the published one of AgentServeSim; the loads span the range
its artifact ran (0.02-0.1 programs/s) and beyond, up to saturation of one instance.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agentreplay.sim.workload import Workload
from agentreplay.study.spec import (
    POLICIES,
    StudyOptions,
    config_value,
    eta_of,
    policy_name,
    policy_zip,
    reuse_scale_for,
)

#: program arrival rates from light to saturated, programs/s (one H100 + Llama-3.1-8B saturates near 0.1)
LOADS = [0.02, 0.05, 0.1, 0.15]
PRESETS7 = ["vllm", "sglang", "autellix", "continuum", "infercept", "lmcache-offload", "agent-affinity"]
#: the grid's 10 policies: the 7 presets and 3 variants that isolate how Continuum's TTL is chosen
GRID_POLICIES = [*PRESETS7, "continuum-nocap", "continuum-code", "oracle"]
#: the grid's hardware x model cells: (gpu, model, tp, max_model_len); TP only where the weights need it, and a
#: max_model_len where the KV cache cannot hold the trace's longest call (vLLM then rejects the longer calls)
GRID_HARDWARE = [
    ("h100-sxm", "llama-3.1-8b", 1, 131072),
    ("h100-sxm", "llama-3.1-70b", 4, 131072),
    ("b200", "llama-3.1-8b", 1, 131072),
    ("b200", "llama-3.1-70b", 2, 131072),
    ("rtxpro6000", "llama-3.1-8b", 1, 131072),
    ("rtxpro6000", "llama-3.1-70b", 2, 122880),
    ("rtx3090", "llama-3.1-8b", 1, 40960),
    ("rtx3090", "llama-3.1-70b", 8, 65536),
]
#: tier configurations per instance: (name, DRAM GiB, CXL GiB); +DRAM 320 has the capacity of DRAM 64 + CXL 256
#: at DRAM bandwidth, so the two differ only in the CXL part's bandwidth and latency
TIERS = [("HBM only", 0.0, 0.0), ("+DRAM 64", 64.0, 0.0), ("+DRAM 64 +CXL 256", 64.0, 256.0), ("+DRAM 320", 320.0, 0.0)]
ETAS = [0.1, 0.3, 0.5, 0.7, 0.9]
TOOL_SCALES = [0.25, 1.0, 4.0, 8.0]
RETENTIONS = [
    ("lru", 30.0),
    ("evict", 30.0),
    ("ttl", 30.0),
    ("continuum", 30.0),
    ("continuum", 1.0e6),
    ("infercept", 30.0),
    ("oracle", 30.0),
]
ETA_POLICIES = ["vllm", "autellix", "continuum", "infercept", "agent-affinity"]
TOOL_POLICIES = [
    "vllm",
    "autellix",
    "continuum",
    "continuum-nocap",
    "continuum-strict",
    "vllm+program-fcfs",
    "vllm+continuum-ttl",
    "agent-affinity",
    "infercept",
]
#: (retention, continuum variant, TTL cap s, unpin on pressure): none, static threshold, adaptive TTL (each also
#: with pins honoured until their TTL), adaptive TTL without the cap, oracle
BIMODAL_RETENTION = [
    ("lru", "paper", 30.0, True),
    ("continuum", "code", 30.0, True),
    ("continuum", "paper", 30.0, True),
    ("continuum", "code", 30.0, False),
    ("continuum", "paper", 30.0, False),
    ("continuum", "paper", 1.0e6, True),
    ("oracle", "paper", 30.0, True),
]


@dataclass(frozen=True, slots=True)
class Experiment:
    name: str  #: output folder name
    finding: str  #: "1".."5" or "grid"
    title: str
    varies: tuple[str, ...]  #: the config paths that differ between its cells (seed aside)
    x: str  #: results column on the figure's x axis
    group: str  #: what the lines are: a key of :data:`GROUPS`
    spec: dict[str, Any] = field(repr=False)  #: the sweep spec in TOML layout (agentreplay.sweep.parse_spec)
    x_values: dict[Any, float] | None = None  #: value of ``x`` -> what the figure plots (eta for reuse scales)
    facet: str | None = None  #: results column: one panel per value (a second, separately read axis)


def _retention_name(c: dict[str, Any]) -> str:
    ret, variant = config_value(c, "policy.retention"), config_value(c, "policy.continuum_variant")
    if ret != "continuum":
        return str(ret)
    honoured = " (pins honoured)" if config_value(c, "policy.unpin_on_pressure") is False else ""
    if variant == "code":
        return "continuum static threshold (code)" + honoured
    cap = " (no cap)" if config_value(c, "policy.continuum_max_ttl_s") > 100 else ""
    return "continuum adaptive TTL" + cap + honoured


def _tier_name(c: dict[str, Any]) -> str:
    dram, cxl = config_value(c, "tiers.dram_gib") or 0.0, config_value(c, "tiers.cxl_gib") or 0.0
    return next((t[0] for t in TIERS if t[1] == dram and t[2] == cxl), f"DRAM {dram:g} + CXL {cxl:g}")


#: how a cell's config (TOML layout) names its line in a figure
GROUPS: dict[str, Callable[[dict[str, Any]], str]] = {
    "policy": lambda c: policy_name(c) or "?",
    "router": lambda c: str(config_value(c, "router.policy")),
    "queue": lambda c: str(config_value(c, "policy.queue")),
    "retention": _retention_name,
    "tier": _tier_name,
}


def base_config(programs: int) -> dict[str, Any]:
    """The fixed part of every experiment (TOML layout)."""
    return {
        "hardware": {"gpu": "h100-sxm", "model": "llama-3.1-8b", "tp": 1, "instances": 1},
        "workload": {"arrival": "poisson", "rate_per_s": 0.05, "max_programs": programs},
        **{
            s: {k.split(".")[1]: v for k, v in POLICIES["vllm"].items() if k.startswith(s + ".")}
            for s in ("router", "policy", "tiers")
        },
    }


def _spec(
    opts: StudyOptions,
    base: dict[str, Any],
    grid: dict[str, list[Any]] | None = None,
    zips: list[dict[str, list[Any]]] | None = None,
    seeds: tuple[int, ...] | None = None,
) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sweep": {"trace": str(opts.trace), "seeds": list(seeds or opts.seeds)},
        "base": base,
        "grid": grid or {},
    }
    if zips:
        out["zip"] = zips
    return out


def _with(base: dict[str, Any], **sections: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(base)
    for s, values in sections.items():
        out.setdefault(s, {}).update(values)
    return out


def experiments(opts: StudyOptions, workload: Workload, bimodal_model: str | Path) -> list[Experiment]:
    """Every experiment of the study. ``workload``: the compiled trace (for the eta transform's reuse scales);
    ``bimodal_model``: the path of the bimodal tool-model JSON (readable by every worker)."""
    n = opts.programs
    base = base_config(n)
    head = workload.head(n)
    out: list[Experiment] = []
    # Finding 1: routing, 4 instances; the lines are routers, everything else vllm's
    routers = ["round-robin", "least-loaded", "session-affinity", "cache-aware", "autellix"]
    out.append(
        Experiment(
            "routing",
            "1",
            "Router alone: 4 x H100, Llama-3.1-8B, FCFS + LRU",
            ("router.policy", "workload.rate_per_s"),
            "workload_rate_per_s",
            "router",
            _spec(
                opts,
                _with(base, hardware={"instances": 4}, workload={"max_programs": 2 * n}),
                {"router.policy": routers, "workload.rate_per_s": [0.1, 0.2, 0.4]},
            ),
        )
    )
    out.append(
        Experiment(
            "routing-ceiling",
            "1",
            "Single-instance ceiling at the same per-instance load",
            ("workload.rate_per_s",),
            "workload_rate_per_s",
            "router",
            _spec(opts, _with(base, workload={"max_programs": n // 2}), {"workload.rate_per_s": [0.025, 0.05, 0.1]}),
        )
    )
    # Finding 2: prefix reuse eta on the real trace
    etas = [e for e in ETAS if e < 0.97] + [1.0]
    scales = [reuse_scale_for(head, e) if e < 1.0 else 1.0 for e in etas]
    out.append(
        Experiment(
            "reuse-eta",
            "2",
            "Prefix reuse eta (real trace, reuse transform) x preset",
            ("workload.reuse_scale", *POLICIES["vllm"]),
            "workload_reuse_scale",
            "policy",
            _spec(opts, base, {"workload.reuse_scale": scales}, [policy_zip(ETA_POLICIES)]),
            {s: eta_of(head, s) for s in scales},
        )
    )
    # Finding 3: tool latency scale (the cell: 0.1 programs/s) and bimodal tools
    out.append(
        Experiment(
            "tool-scale",
            "3",
            "Tool-duration scale x preset, one panel per load",
            ("tools.scale", "workload.rate_per_s", *POLICIES["vllm"]),
            "tools_scale",
            "policy",
            _spec(
                opts,
                _with(base, tools={"mode": "scale"}),
                {"workload.rate_per_s": [0.05, 0.1], "tools.scale": TOOL_SCALES},
                [policy_zip(TOOL_POLICIES)],
            ),
            facet="workload_rate_per_s",
        )
    )
    bim: dict[str, list[Any]] = {
        "policy.retention": [r[0] for r in BIMODAL_RETENTION],
        "policy.continuum_variant": [r[1] for r in BIMODAL_RETENTION],
        "policy.continuum_max_ttl_s": [r[2] for r in BIMODAL_RETENTION],
        "policy.unpin_on_pressure": [r[3] for r in BIMODAL_RETENTION],
    }
    out.append(
        Experiment(
            "bimodal-tools",
            "3",
            "Bimodal generative tools: retention alone (FCFS)",
            (
                "policy.retention",
                "policy.continuum_variant",
                "policy.continuum_max_ttl_s",
                "policy.unpin_on_pressure",
                "tools.scale",
                "workload.rate_per_s",
            ),
            "tools_scale",
            "retention",
            _spec(
                opts,
                _with(base, tools={"mode": "generative", "model_path": str(bimodal_model)}),
                {"workload.rate_per_s": [0.05, 0.1], "tools.scale": [1.0, 4.0]},
                [bim],
            ),
            facet="workload_rate_per_s",
        )
    )
    # Finding 4: tiers alone (offload retention, so the tiers are used), light to saturated
    out.append(
        Experiment(
            "tiers",
            "4",
            "Tiers alone: LMCache-style offload, HBM / +DRAM / +CXL",
            ("tiers.dram_gib", "tiers.cxl_gib", "workload.rate_per_s"),
            "workload_rate_per_s",
            "tier",
            _spec(
                opts,
                _with(base, policy={"retention": "offload"}),
                {"workload.rate_per_s": [*LOADS, 0.2]},
                [{"tiers.dram_gib": [t[1] for t in TIERS], "tiers.cxl_gib": [t[2] for t in TIERS]}],
            ),
        )
    )
    # One policy axis at a time, and the presets, over load
    out.append(
        Experiment(
            "queue",
            "axes",
            "Queue order alone (LRU retention, 1 instance)",
            ("policy.queue", "workload.rate_per_s"),
            "workload_rate_per_s",
            "queue",
            _spec(
                opts,
                base,
                {"policy.queue": ["fcfs", "program-fcfs", "plas", "continuum"], "workload.rate_per_s": LOADS[:3]},
            ),
        )
    )
    out.append(
        Experiment(
            "retention",
            "axes",
            "Retention alone (FCFS, 1 instance)",
            ("policy.retention", "policy.continuum_max_ttl_s", "workload.rate_per_s"),
            "workload_rate_per_s",
            "retention",
            _spec(
                opts,
                base,
                {"workload.rate_per_s": LOADS[:3]},
                [
                    {
                        "policy.retention": [r[0] for r in RETENTIONS],
                        "policy.continuum_max_ttl_s": [r[1] for r in RETENTIONS],
                    }
                ],
            ),
        )
    )
    out.append(
        Experiment(
            "presets",
            "axes",
            "Published presets over load (1 x H100, Llama-3.1-8B)",
            ("workload.rate_per_s", *POLICIES["vllm"]),
            "workload_rate_per_s",
            "policy",
            _spec(opts, base, {"workload.rate_per_s": LOADS}, [policy_zip(PRESETS7)]),
        )
    )
    # The 80-cell grid: hardware x model x policy, one seed
    hw: dict[str, list[Any]] = {
        "hardware.gpu": [h[0] for h in GRID_HARDWARE],
        "hardware.model": [h[1] for h in GRID_HARDWARE],
        "hardware.tp": [h[2] for h in GRID_HARDWARE],
        "scheduler.max_model_len": [h[3] for h in GRID_HARDWARE],
    }
    out.append(
        Experiment(
            "grid",
            "grid",
            "80-cell grid: 4 GPUs x 2 models x 10 policies",
            ("hardware.gpu", "hardware.model", "hardware.tp", "scheduler.max_model_len", *POLICIES["vllm"]),
            "hardware_gpu",
            "policy",
            _spec(
                opts,
                _with(base, workload={"max_programs": opts.grid_programs}),
                None,
                [hw, policy_zip(GRID_POLICIES)],
                seeds=opts.seeds[:1],
            ),
        )
    )
    return out
