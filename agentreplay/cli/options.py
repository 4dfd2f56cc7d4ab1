"""Options shared by ``simulate`` and ``compare``: one definition each, help text with unit and default.

Choice lists come from the policy registries (:mod:`agentreplay.policy.registry`: each policy's name and
summary), the configuration's ``Literal`` types and the preset registry, and each default is read
from the configuration dataclasses, so help cannot drift from what the simulator accepts. An option left unset
keeps the value of the ``--config`` file, or else the default shown. Help text must not contain square
brackets (rich markup).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, get_args

import typer
from rich.markup import escape

from agentreplay.kv.retention import RETENTIONS
from agentreplay.policy.presets import PRESETS
from agentreplay.policy.registry import Registry
from agentreplay.router.admission import ADMISSIONS
from agentreplay.router.policies import ROUTERS
from agentreplay.scheduler.queue import QUEUE_ORDERS
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim import config as C

_DEFAULTS = C.SimConfig()


def choices(literal: Any) -> str:
    """``a | b | c`` from a ``Literal`` type."""
    return " | ".join(get_args(literal))


def policies(registry: Registry[Any]) -> str:
    """``a (what a does); b (what b does)``: a policy axis's names and summaries, from its registry."""
    return "; ".join(f"{e.name} ({e.summary})" for e in registry.entries())


def default(section: str, name: str, unit: str = "") -> str:
    """``Default: VALUE UNIT.``, the configuration dataclass's default for ``section.name``."""
    value = getattr(getattr(_DEFAULTS, section), name)
    return f"Default: {value}{' ' + unit if unit else ''}."


#: The help panels of ``simulate`` and ``compare`` (typer's ``rich_help_panel``); an option without one
#: (``--config``, ``--json``) is listed under "Options". Each panel is one table: its option names are cut at 80
#: columns once its widest name, widest negative flag (``--no-ep``), type and a help column as wide as those add
#: up to more than 76 (tests/cli/test_help.py), hence the pricing flags have their own.
WORKLOAD, DEPLOYMENT, PRICING = "Workload", "Deployment", "Performance model"
POLICIES, MECHANISMS, OUTPUT = "Policies", "Mechanisms: KV cache, batching, host tiers", "Output"


def _opt(help_text: str, *names: str, panel: str | None = None) -> Any:
    return typer.Option(*names, help=help_text, rich_help_panel=panel)


Trace = Annotated[
    Path, _opt("Canonical trace folder (programs.parquet, turns.parquet).", "--trace", "-t", panel=WORKLOAD)
]
#: the fleet-* studies run on the bundled sample unless told otherwise (a path relative to the repository root)
BUNDLED_TRACE = Path("datasets/swebench-verified")
FleetTrace = Annotated[
    Path,
    _opt(
        f"Canonical trace folder. Default: the bundled sample, {BUNDLED_TRACE} (from the repository root).",
        "--trace",
        "-t",
        panel=WORKLOAD,
    ),
]
Gpu = Annotated[
    str | None, _opt(f"GPU catalog name (see `agentreplay catalog`). {default('hardware', 'gpu')}", panel=DEPLOYMENT)
]
Model = Annotated[
    str | None,
    _opt(f"Model catalog name (see `agentreplay catalog`). {default('hardware', 'model')}", panel=DEPLOYMENT),
]
Dtype = Annotated[
    str | None,
    _opt(
        f"Checkpoint (linear-layer weight) dtype: {choices(C.Dtype)}; the KV cache "
        f"follows --kv-cache-dtype. {default('hardware', 'dtype')}",
        panel=DEPLOYMENT,
    ),
]
KvCacheDtype = Annotated[
    str | None,
    _opt(
        f"KV-cache element dtype, vLLM --kv-cache-dtype: {choices(C.KvCacheDtype)} (auto: the activation dtype, bf16; "
        f"fp8 variants: one byte per element, twice the KV blocks). {default('hardware', 'kv_cache_dtype')}",
        panel=DEPLOYMENT,
    ),
]
DeploymentKernels = Annotated[
    bool | None,
    _opt(
        f"Price kernels as vLLM deploys them: batches padded to CUDA-graph sizes (unless --enforce-eager), "
        f"vLLM's custom all-reduce where it applies (perf.deploy); --catalog-kernels: as the catalog was "
        f"calibrated (own batch size, NCCL ring). {default('hardware', 'deployment_kernels')}",
        "--deployment-kernels/--catalog-kernels",
        panel=PRICING,
    ),
]
EnforceEager = Annotated[
    bool | None,
    _opt(
        f"vLLM --enforce-eager: no CUDA graphs, so no batch is padded to a capture size (with --deployment-kernels; "
        f"--cuda-graphs: padded as the config's cudagraph_mode says). {default('hardware', 'enforce_eager')}",
        "--enforce-eager/--cuda-graphs",
        panel=PRICING,
    ),
]
Perf = Annotated[
    str | None,
    _opt(
        f"Iteration pricer: auto | {choices(C.PerfName)}. auto: table (the serving engine's measured per-layer "
        f"profile) when one of exactly this GPU, model, dtypes and TP is shipped, else roofline (the calibrated GPU "
        f"and model); summary.json says which ran. Default: auto, unless the --config file sets hardware.perf.",
        panel=PRICING,
    ),
]
EngineCost = Annotated[
    str | None,
    _opt(
        f"Engine cost beyond the kernels: {choices(C.EngineCostName)}. fitted: the per-step, per-sequence, "
        f"CUDA-graph gap and sampler costs fitted end to end on measured vLLM runs (the validation's inference-perf "
        f"replays), on the GPU they were fitted on, with --deployment-kernels and the roofline pricer. "
        f"{default('hardware', 'engine_cost')}",
        "--engine-cost",
        panel=PRICING,
    ),
]
MixedAttention = Annotated[
    str | None,
    _opt(
        f"Attention of an iteration mixing prefill and decode: {choices(C.MixedAttention)} (one_kernel: vLLM's one "
        f"FlashAttention-2 kernel; apart: the two parts priced separately). {default('hardware', 'mixed_attention')}",
        panel=PRICING,
    ),
]
Tp = Annotated[
    int | None,
    _opt(f"Tensor-parallel degree, GPUs per instance (1, 2, 4, 8, 16). {default('hardware', 'tp')}", panel=DEPLOYMENT),
]
Instances = Annotated[
    int | None,
    _opt(
        f"Number of identical instances (data-parallel replicas). {default('hardware', 'instances')}", panel=DEPLOYMENT
    ),
]
Dp = Annotated[
    int | None,
    _opt(
        f"vLLM --data-parallel-size: DP ranks of one deployment, each --tp GPUs with its own scheduler and KV cache (a "
        f"MoE model's ranks step in lockstep); router vllm-dp unless --router is given. {default('hardware', 'dp')}",
        "--dp",
        panel=DEPLOYMENT,
    ),
]
Ep = Annotated[
    bool | None,
    _opt(
        f"vLLM --enable-expert-parallel: the experts spread over the dp x tp ranks (MoE model, --dp 2 or more). "
        f"{default('hardware', 'ep')}",
        "--ep/--no-ep",
        panel=DEPLOYMENT,
    ),
]
All2AllBackend = Annotated[
    str | None,
    _opt(
        f"vLLM all2all_backend, how MoE dispatch / combine run over the DP / EP group: {choices(C.All2AllName)}. "
        f"{default('hardware', 'all2all_backend')}",
        panel=DEPLOYMENT,
    ),
]
Group = Annotated[
    list[str] | None,
    _opt(
        "Heterogeneous cluster: GPU:TP:COUNT or GPU:TP:COUNT:DTYPE, repeatable (e.g. --group h100-sxm:1:2 --group "
        "a100-80gb:2:1); replaces --gpu, --tp and --instances. Default: none.",
        panel=DEPLOYMENT,
    ),
]
Router = Annotated[str | None, _opt(f"Router: {policies(ROUTERS)}. {default('router', 'policy')}", panel=POLICIES)]
Arrival = Annotated[
    str | None,
    _opt(
        f"Program arrivals: {choices(C.Arrival)} (closed: --concurrency in flight; "
        f"poisson: --rate; trace: the trace's arrival_s). "
        f"{default('workload', 'arrival')}",
        panel=WORKLOAD,
    ),
]
Concurrency = Annotated[
    int | None, _opt(f"Programs in flight, closed loop. {default('workload', 'concurrency')}", panel=WORKLOAD)
]
Rate = Annotated[
    float | None,
    _opt(
        f"Program arrival rate, programs per second (poisson); requests per second "
        f"for a request-level trace (one request per program). "
        f"{default('workload', 'rate_per_s')}",
        panel=WORKLOAD,
    ),
]
MaxPrograms = Annotated[
    int | None, _opt("Replay only the first N programs of the trace. Default: all.", panel=WORKLOAD)
]
MaxModelLen = Annotated[
    int | None,
    _opt(
        "vLLM --max-model-len, tokens (prompt + output): a request whose prompt has this many tokens or more is "
        "rejected and counted, the rest run; outputs stop at this length. Default: none (no limit).",
        panel=MECHANISMS,
    ),
]
Tools = Annotated[
    str | None,
    _opt(
        f"Tool gaps: {choices(C.ToolMode)} (generative: drawn from --tool-model). {default('tools', 'mode')}",
        panel=WORKLOAD,
    ),
]
ToolScale = Annotated[
    float | None,
    _opt(f"Multiplier of every tool gap for --tools scale or generative. {default('tools', 'scale')}", panel=WORKLOAD),
]
ToolFixed = Annotated[
    float | None, _opt(f"Seconds per tool gap for --tools fixed. {default('tools', 'fixed_s', 's')}", panel=WORKLOAD)
]
ToolModel = Annotated[
    Path | None,
    _opt("Tool-model JSON written by fit-tools; implies --tools generative. Default: none.", panel=WORKLOAD),
]
NumGpuBlocks = Annotated[
    int | None,
    _opt(
        f"KV blocks per instance, {_DEFAULTS.cache.block_size} tokens each (overrides the memory model). Default: "
        f"from GPU memory x {_DEFAULTS.cache.gpu_memory_utilization} - weights - activations.",
        panel=MECHANISMS,
    ),
]
MaxNumSeqs = Annotated[
    int | None,
    _opt(
        "vLLM max_num_seqs: running sequences per instance. Default: vLLM's, 1024 on GPUs with 70 GiB or more "
        "(not A100), else 256.",
        panel=MECHANISMS,
    ),
]
MaxNumBatchedTokens = Annotated[
    int | None,
    _opt(
        "vLLM max_num_batched_tokens: prompt + decode tokens per iteration (chunked prefill). Default: vLLM's, 8192 on "
        "GPUs with 70 GiB or more (not A100), else 2048.",
        panel=MECHANISMS,
    ),
]
Preset = Annotated[
    str | None,
    _opt(
        f"Policy preset: {' | '.join(PRESETS)}; options given explicitly override it. "
        "Default: none (the policies below).",
        panel=POLICIES,
    ),
]
Queue = Annotated[
    str | None, _opt(f"Waiting-queue order: {policies(QUEUE_ORDERS)}. {default('policy', 'queue')}", panel=POLICIES)
]
Admission = Annotated[
    str | None,
    _opt(f"Front-end admission: {policies(ADMISSIONS)}. {default('admission', 'policy')}", panel=POLICIES),
]
Victim = Annotated[
    str | None, _opt(f"Preemption victim: {policies(VICTIMS)}. {default('policy', 'victim')}", panel=POLICIES)
]
Retention = Annotated[
    str | None,
    _opt(f"KV retention during a tool gap: {policies(RETENTIONS)}. {default('policy', 'retention')}", panel=POLICIES),
]
Ttl = Annotated[
    float | None, _opt(f"Pin length for --retention ttl, seconds. {default('policy', 'ttl_s', 's')}", panel=POLICIES)
]
DramGib = Annotated[
    float | None,
    _opt(f"Host DRAM tier for KV per instance, GiB (0: none). {default('tiers', 'dram_gib', 'GiB')}", panel=MECHANISMS),
]
CxlGib = Annotated[
    float | None,
    _opt(f"CXL tier for KV per instance, GiB (0: none). {default('tiers', 'cxl_gib', 'GiB')}", panel=MECHANISMS),
]
InterInstanceGbps = Annotated[
    float | None,
    _opt(
        f"KV transfer bandwidth between instances when a program moves, GB/s (0: the new instance re-prefills). "
        f"{default('router', 'inter_instance_gbps', 'GB/s')}",
        panel=MECHANISMS,
    ),
]
DecisionLog = Annotated[
    bool | None,
    _opt(
        f"Write decisions.jsonl (router, admission, preemption and retention "
        f"decisions). {default('policy', 'decision_log')}",
        "--decision-log/--no-decision-log",
        panel=OUTPUT,
    ),
]
Seed = Annotated[
    int | None, _opt(f"Random seed (arrivals, generative tools). Default: {_DEFAULTS.seed}.", panel=WORKLOAD)
]
Config = Annotated[
    Path | None,
    _opt("Simulation config TOML; options given override it. Default: none (the defaults shown).", "--config", "-c"),
]
_JSON = "Print the result as JSON instead of tables (no progress bar)."
Json = Annotated[bool, typer.Option("--json", help=_JSON)]
#: ``--json`` in the Output panel, for a command whose options are in panels
OutputJson = Annotated[bool, typer.Option("--json", help=_JSON, rich_help_panel=OUTPUT)]

#: the core sections of a --config file (the core of agentreplay.sim.config.SimConfig, in its order); each
#: feature's sections follow, from the feature registry (:func:`config_section_rows`)
CORE_SECTIONS: dict[str, str] = {
    "hardware": "GPU, model, dtypes, TP / DP / EP, groups, pricer, CUDA graphs",
    "cache": "KV block size and count, memory utilisation, prefix caching",
    "scheduler": "vLLM batching limits, max_model_len, decode options",
    "workload": "arrivals (closed, poisson, trace), max_programs, reuse",
    "tools": "tool-gap durations: replay, fixed, scale, generative",
    "router": "router policy and parameters, inter-instance KV transfer",
    "policy": "queue order, preemption victim, KV retention, decision log",
    "tiers": "host DRAM / CXL tiers: size, bandwidth, latency",
    "metrics": "instance time-series sampling interval",
}


def config_section_rows() -> dict[str, str]:
    """Section name -> what it sets: the core sections, then each registered feature's, named by its feature
    folder (whose README.md is the feature's page)."""
    from agentreplay.features import features

    rows = dict(CORE_SECTIONS)
    for f in features():
        for section in f.sections:
            rows[section] = f"the {f.name} feature: agentreplay/features/{f.name}/"
    return rows


def config_sections() -> str:
    """A help epilog listing every config section, one line each (at most 76 characters: whole at 80 columns),
    and where their fields are documented; rich markup escaped."""
    sections = config_section_rows()
    width = max(map(len, sections)) + 2
    rows = "\n".join(f"{f'[{name}]':<{width}}  {what}" for name, what in sections.items())
    return escape(
        "Sections of a --config TOML file (seed = N goes at its top). Every field, with its unit and default, is in "
        "the configuration reference of the docs (generated from agentreplay/sim/config.py and each feature's "
        f"config.py).\n{rows}"
    )
