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


def _opt(help_text: str, *names: str) -> Any:
    return typer.Option(*names, help=help_text)


Trace = Annotated[Path, _opt("Canonical trace folder (programs.parquet, turns.parquet).", "--trace", "-t")]
#: the fleet-* studies run on the bundled sample unless told otherwise (a path relative to the repository root)
BUNDLED_TRACE = Path("datasets/swebench-verified")
FleetTrace = Annotated[
    Path,
    _opt(
        f"Canonical trace folder. Default: the bundled sample, {BUNDLED_TRACE} (from the repository root).",
        "--trace",
        "-t",
    ),
]
Gpu = Annotated[str | None, _opt(f"GPU catalog name (see `agentreplay catalog`). {default('hardware', 'gpu')}")]
Model = Annotated[str | None, _opt(f"Model catalog name (see `agentreplay catalog`). {default('hardware', 'model')}")]
Dtype = Annotated[
    str | None,
    _opt(
        f"Checkpoint (linear-layer weight) dtype: {choices(C.Dtype)}; the KV cache "
        f"follows --kv-cache-dtype. {default('hardware', 'dtype')}"
    ),
]
KvCacheDtype = Annotated[
    str | None,
    _opt(
        f"KV-cache element dtype, vLLM --kv-cache-dtype: {choices(C.KvCacheDtype)} (auto: the activation dtype, bf16; "
        f"fp8 variants: one byte per element, twice the KV blocks). {default('hardware', 'kv_cache_dtype')}"
    ),
]
DeploymentKernels = Annotated[
    bool | None,
    _opt(
        f"Price the kernels as vLLM deploys them: batches padded to the CUDA-graph capture sizes (unless "
        f"--enforce-eager) and TP all-reduces through vLLM's custom all-reduce where vLLM uses it (agentreplay.perf."
        f"deploy); off: each batch at its own size and every all-reduce as NCCL's ring, as the catalog was "
        f"calibrated. {default('hardware', 'deployment_kernels')}",
        "--deployment-kernels/--no-deployment-kernels",
    ),
]
EnforceEager = Annotated[
    bool | None,
    _opt(
        f"vLLM --enforce-eager: no CUDA graphs, so no batch is padded to a capture size (with --deployment-kernels; "
        f"--cuda-graphs: padded as the config's cudagraph_mode says). {default('hardware', 'enforce_eager')}",
        "--enforce-eager/--cuda-graphs",
    ),
]
Perf = Annotated[
    str | None,
    _opt(
        f"Iteration pricer: auto | {choices(C.PerfName)}. auto: table (iterations priced from the measured "
        f"per-layer profile, TP collectives added once) when a profile of exactly this GPU, model, dtype, KV-cache "
        f"dtype and TP, taken by the serving engine itself, is shipped (agentreplay/perf/catalog/tables.toml); "
        f"else roofline (predicted from the calibrated GPU and model). summary.json records which ran and why. "
        f"Default: auto, unless the --config file sets hardware.perf."
    ),
]
MixedAttention = Annotated[
    str | None,
    _opt(
        f"Attention of an iteration mixing prefill and decode: {choices(C.MixedAttention)} (one_kernel: vLLM's one "
        f"FlashAttention-2 kernel; apart: the two parts priced separately). {default('hardware', 'mixed_attention')}"
    ),
]
Tp = Annotated[
    int | None, _opt(f"Tensor-parallel degree, GPUs per instance (1, 2, 4, 8, 16). {default('hardware', 'tp')}")
]
Instances = Annotated[
    int | None, _opt(f"Number of identical instances (data-parallel replicas). {default('hardware', 'instances')}")
]
Dp = Annotated[
    int | None,
    _opt(
        f"vLLM --data-parallel-size: DP ranks of one deployment, each --tp GPUs with its own scheduler and KV cache (a "
        f"MoE model's ranks step in lockstep); router vllm-dp unless --router is given. {default('hardware', 'dp')}",
        "--dp",
    ),
]
Ep = Annotated[
    bool | None,
    _opt(
        f"vLLM --enable-expert-parallel: the experts spread over the dp x tp ranks (MoE model, --dp 2 or more). "
        f"{default('hardware', 'ep')}",
        "--ep/--no-ep",
    ),
]
All2AllBackend = Annotated[
    str | None,
    _opt(
        f"vLLM all2all_backend, how MoE dispatch / combine run over the DP / EP group: {choices(C.All2AllName)}. "
        f"{default('hardware', 'all2all_backend')}"
    ),
]
Group = Annotated[
    list[str] | None,
    _opt(
        "Heterogeneous cluster: GPU:TP:COUNT or GPU:TP:COUNT:DTYPE, repeatable (e.g. --group h100-sxm:1:2 --group "
        "a100-80gb:2:1); replaces --gpu, --tp and --instances. Default: none."
    ),
]
Router = Annotated[str | None, _opt(f"Router: {policies(ROUTERS)}. {default('router', 'policy')}")]
Arrival = Annotated[
    str | None,
    _opt(
        f"Program arrivals: {choices(C.Arrival)} (closed: --concurrency in flight; "
        f"poisson: --rate; trace: the trace's arrival_s). "
        f"{default('workload', 'arrival')}"
    ),
]
Concurrency = Annotated[int | None, _opt(f"Programs in flight, closed loop. {default('workload', 'concurrency')}")]
Rate = Annotated[
    float | None,
    _opt(
        f"Program arrival rate, programs per second (poisson); requests per second "
        f"for a request-level trace (one request per program). "
        f"{default('workload', 'rate_per_s')}"
    ),
]
MaxPrograms = Annotated[int | None, _opt("Replay only the first N programs of the trace. Default: all.")]
MaxModelLen = Annotated[
    int | None,
    _opt(
        "vLLM --max-model-len, tokens (prompt + output): a request whose prompt has this many tokens or more is "
        "rejected and counted, the rest run; outputs stop at this length. Default: none (no limit)."
    ),
]
Tools = Annotated[
    str | None,
    _opt(f"Tool gaps: {choices(C.ToolMode)} (generative: drawn from --tool-model). {default('tools', 'mode')}"),
]
ToolScale = Annotated[
    float | None, _opt(f"Multiplier of every tool gap for --tools scale or generative. {default('tools', 'scale')}")
]
ToolFixed = Annotated[float | None, _opt(f"Seconds per tool gap for --tools fixed. {default('tools', 'fixed_s', 's')}")]
ToolModel = Annotated[
    Path | None, _opt("Tool-model JSON written by fit-tools; implies --tools generative. Default: none.")
]
NumGpuBlocks = Annotated[
    int | None,
    _opt(
        f"KV blocks per instance, {_DEFAULTS.cache.block_size} tokens each (overrides the memory model). Default: "
        f"from GPU memory x {_DEFAULTS.cache.gpu_memory_utilization} - weights - activations."
    ),
]
MaxNumSeqs = Annotated[
    int | None,
    _opt(
        "vLLM max_num_seqs: running sequences per instance. Default: vLLM's, 1024 on GPUs with 70 GiB or more "
        "(not A100), else 256."
    ),
]
MaxNumBatchedTokens = Annotated[
    int | None,
    _opt(
        "vLLM max_num_batched_tokens: prompt + decode tokens per iteration (chunked prefill). Default: vLLM's, 8192 on "
        "GPUs with 70 GiB or more (not A100), else 2048."
    ),
]
Preset = Annotated[
    str | None,
    _opt(
        f"Policy preset: {' | '.join(PRESETS)}; options given explicitly override it. "
        "Default: none (the policies below)."
    ),
]
Queue = Annotated[str | None, _opt(f"Waiting-queue order: {policies(QUEUE_ORDERS)}. {default('policy', 'queue')}")]
Admission = Annotated[
    str | None,
    _opt(f"Front-end admission: {policies(ADMISSIONS)}. {default('admission', 'policy')}"),
]
Victim = Annotated[str | None, _opt(f"Preemption victim: {policies(VICTIMS)}. {default('policy', 'victim')}")]
Retention = Annotated[
    str | None, _opt(f"KV retention during a tool gap: {policies(RETENTIONS)}. {default('policy', 'retention')}")
]
Ttl = Annotated[float | None, _opt(f"Pin length for --retention ttl, seconds. {default('policy', 'ttl_s', 's')}")]
DramGib = Annotated[
    float | None, _opt(f"Host DRAM tier for KV per instance, GiB (0: none). {default('tiers', 'dram_gib', 'GiB')}")
]
CxlGib = Annotated[
    float | None, _opt(f"CXL tier for KV per instance, GiB (0: none). {default('tiers', 'cxl_gib', 'GiB')}")
]
InterInstanceGbps = Annotated[
    float | None,
    _opt(
        f"KV transfer bandwidth between instances when a program moves, GB/s (0: the new instance re-prefills). "
        f"{default('router', 'inter_instance_gbps', 'GB/s')}"
    ),
]
DecisionLog = Annotated[
    bool | None,
    _opt(
        f"Write decisions.jsonl (router, admission, preemption and retention "
        f"decisions). {default('policy', 'decision_log')}",
        "--decision-log/--no-decision-log",
    ),
]
Seed = Annotated[int | None, _opt(f"Random seed (arrivals, generative tools). Default: {_DEFAULTS.seed}.")]
Config = Annotated[
    Path | None,
    _opt("Simulation config TOML; options given override it. Default: none (the defaults shown).", "--config", "-c"),
]
Json = Annotated[bool, typer.Option("--json", help="Print the result as JSON instead of tables (no progress bar).")]
