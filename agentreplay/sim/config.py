"""Simulation configuration: one frozen dataclass per component under :class:`SimConfig`, loadable from TOML.

The core sections (hardware, cache, scheduler, workload, tools, router, policy, tiers, metrics) are defined here;
the optional features' sections (``[disagg]``, ``[failures]``, ...) in their folders, listed by
:class:`agentreplay.features.registry.FeatureSections`, which gives :class:`SimConfig` one field per section. Every
value is checked when the config is built (:mod:`agentreplay.sim.config_checks`); a bad value fails with the
section, field, value and the allowed range. Defaults follow vLLM v1 where it has one (cited per field).
"""

from __future__ import annotations

import dataclasses
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, fields, make_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from agentreplay.features.registry import section_types
from agentreplay.kv.retention import RETENTIONS
from agentreplay.policy.registry import ParamError, close_names
from agentreplay.router.policies import ROUTERS, LoadMetric
from agentreplay.scheduler.queue import QUEUE_ORDERS
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim.config_checks import (
    All2AllName,
    Arrival,
    CudagraphMode,
    Dtype,
    EngineCostName,
    KvCacheDtype,
    MixedAttention,
    PerfName,
    ToolMode,
    check,
    check_hardware,
    check_literal,
    check_policy,
)
from agentreplay.sim.errors import ConfigError


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    """What the instances run on: ``instances`` identical instances of ``gpu`` x ``tp``, or a heterogeneous
    cluster given as ``groups`` of ``"GPU:TP:COUNT[:DTYPE]"`` (e.g. ``["h100-sxm:1:2", "a100-80gb:2:1"]``),
    all serving ``model``."""

    gpu: str = "h100-sxm"  #: GPU catalog name (``agentreplay catalog``)
    model: str = "llama-3.1-8b"  #: model catalog name
    dtype: Dtype = "bf16"  #: checkpoint (linear-layer weight) dtype
    #: KV-cache element dtype, vLLM ``--kv-cache-dtype``: "auto" stores K/V in bf16 (also for fp8 checkpoints);
    #: fp8 variants take one byte per element (capacity, decode attention bytes; agentreplay.perf.deploy)
    kv_cache_dtype: KvCacheDtype = "auto"
    #: price the kernels as vLLM's deployment runs them (agentreplay.perf.deploy): batches padded to the CUDA-graph
    #: capture sizes (enforce_eager, cudagraph_mode, cudagraph_capture_sizes below) and TP all-reduces through
    #: vLLM's custom all-reduce where vLLM uses it (unless disable_custom_all_reduce). Off (the default): every batch
    #: priced at its own size and every TP all-reduce as NCCL's ring, what the catalog's efficiencies were
    #: calibrated under (eager component profiles, NCCL all-reduce curves); the three CUDA-graph / all-reduce
    #: fields below then must keep their defaults
    deployment_kernels: bool = False
    #: vLLM ``--enforce-eager``: no CUDA graphs, so batches are not padded to capture sizes
    enforce_eager: bool = False
    #: vLLM ``compilation_config.cudagraph_mode``: FULL_AND_PIECEWISE (default), PIECEWISE and FULL pad every batch
    #: up to the largest capture size; FULL_DECODE_ONLY pads decode-only batches; NONE none (as enforce_eager)
    cudagraph_mode: CudagraphMode = "FULL_AND_PIECEWISE"
    #: vLLM ``--disable-custom-all-reduce``: every TP all-reduce through NCCL (agentreplay.perf.deploy)
    disable_custom_all_reduce: bool = False
    #: vLLM ``compilation_config.cudagraph_capture_sizes``; empty = vLLM's defaults for the scheduler limits
    #: (VllmConfig._set_cudagraph_sizes; agentreplay.perf.deploy.cudagraph_capture_sizes)
    cudagraph_capture_sizes: tuple[int, ...] = ()
    perf: PerfName = "roofline"  #: iteration pricer: calibrated roofline, refined roofline, or measured table
    #: the engine cost beyond the kernels (per-step host cost, per-sequence cost, CUDA-graph replay gap, the
    #: sampler's passes over the logits): "catalog" = the GPU catalogue's efficiencies; "fitted" = the values fitted
    #: end to end on measured vLLM runs (catalog engine_cost.json, `calibrate --engine-cost`; the validation's
    #: inference-perf replays use them), only on the GPU they were fitted on and with deployment_kernels = true
    engine_cost: EngineCostName = "catalog"
    #: a mixed prefill + decode iteration's attention: as the one FlashAttention-2 kernel vLLM runs (on GPUs with
    #: the tile form of prefill attention; agentreplay.perf.model docstring), or its two parts priced apart
    mixed_attention: MixedAttention = "one_kernel"
    tp: int = 1  #: tensor-parallel degree (GPUs per instance)
    instances: int = 1  #: number of instances (data-parallel replicas)
    groups: tuple[str, ...] = ()  #: heterogeneous cluster; overrides gpu / tp / instances when set
    #: vLLM ``--data-parallel-size``: engines (DP ranks) of one deployment, each ``tp`` GPUs with its own scheduler
    #: and KV cache. A MoE model's ranks step in lockstep (agentreplay.features.dp); a dense model's are independent.
    #: Requests reach the ranks through the router: ``vllm-dp`` is vLLM's own balancer (any other policy stands
    #: for an external load balancer, vLLM ``--data-parallel-external-lb``).
    dp: int = 1
    #: vLLM ``--enable-expert-parallel``: the experts spread over the dp * tp ranks (MoE models, dp >= 2)
    ep: bool = False
    #: vLLM ``parallel_config.all2all_backend``: how MoE dispatch / combine run (agentreplay.perf.parallel)
    all2all_backend: All2AllName = "allgather_reducescatter"

    def __post_init__(self) -> None:
        object.__setattr__(self, "cudagraph_capture_sizes", tuple(self.cudagraph_capture_sizes))
        object.__setattr__(self, "groups", tuple(self.groups))
        check_hardware(self)

    def instance_specs(self) -> list[tuple[str, int, str]]:
        """``(gpu, tp, dtype)`` of every instance, in index order."""
        if not self.groups:
            return [(self.gpu, self.tp, self.dtype)] * (self.instances * self.dp)
        out = []
        for g in self.groups:
            parts = g.split(":")
            out += [(parts[0], int(parts[1]), parts[3] if len(parts) == 4 else self.dtype)] * int(parts[2])
        return out


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """KV cache. Defaults: vLLM ``CacheConfig`` (block_size 16, gpu_memory_utilization 0.9, prefix caching on
    in v1)."""

    block_size: int = 16  #: tokens per KV block
    gpu_memory_utilization: float = 0.9  #: fraction of GPU memory vLLM may use
    num_gpu_blocks: int | None = None  #: explicit block count per instance (overrides the memory model)
    enable_prefix_caching: bool = True  #: vLLM v1 default

    def __post_init__(self) -> None:
        check(
            self.block_size in (1, 8, 16, 32, 64, 128),
            "cache",
            "block_size",
            self.block_size,
            "one of 1, 8, 16, 32, 64, 128",
        )
        check(
            0.0 < self.gpu_memory_utilization <= 1.0,
            "cache",
            "gpu_memory_utilization",
            self.gpu_memory_utilization,
            "in (0, 1]",
        )
        check(
            self.num_gpu_blocks is None or self.num_gpu_blocks >= 1,
            "cache",
            "num_gpu_blocks",
            self.num_gpu_blocks,
            ">= 1 or unset",
        )


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Batch scheduler limits. Unset limits take vLLM's defaults for the OpenAI server
    (``EngineArgs.get_batch_defaults``): GPUs with >= 70 GiB other than A100: 8192 batched tokens and
    1024 sequences; other GPUs: 2048 and 256."""

    max_num_seqs: int | None = None  #: running sequences per instance
    max_num_batched_tokens: int | None = None  #: token budget per iteration (chunked prefill)
    fast_decode: bool = True  #: advance unchanged decode batches in one event (exact; see Instance)
    #: keep decoding requests in a lazily advanced cohort, so a step costs the same however many decode
    #: (exact; see agentreplay.scheduler.cohort). Off = the reference path: every step visits every running request
    #: (and fast_decode, which advances the cohort, has no effect).
    lazy_decode: bool = True
    #: admit a waiting request only if its whole remaining prompt fits in the free blocks, not just its first
    #: chunk: vLLM ``--scheduler-reserve-full-isl`` (``allocate_slots(full_sequence_must_fit=...)``), on by default
    #: in current vLLM (0.32). Like vLLM, the blocks other in-flight prefills still need are kept free only for an
    #: admission that starts an async KV load. Off = older vLLM v1.
    reserve_full_isl: bool = True
    #: longest sequence (prompt + output tokens) the engine serves, vLLM ``--max-model-len``: a request whose
    #: prompt has ``>= max_model_len`` tokens is rejected and counted, the rest run; an admitted request's output
    #: stops at ``max_model_len`` (agentreplay.sim.admission). Unset: no limit (every request runs)
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        check(
            self.max_model_len is None or self.max_model_len >= 2,
            "scheduler",
            "max_model_len",
            self.max_model_len,
            ">= 2 tokens or unset",
        )
        check(
            self.max_num_seqs is None or self.max_num_seqs >= 1,
            "scheduler",
            "max_num_seqs",
            self.max_num_seqs,
            ">= 1 or unset",
        )
        check(
            self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1,
            "scheduler",
            "max_num_batched_tokens",
            self.max_num_batched_tokens,
            ">= 1 or unset",
        )

    def resolved(self, gpu_memory_gib: float, gpu_name: str) -> tuple[int, int]:
        """``(max_num_seqs, max_num_batched_tokens)`` with vLLM's hardware-dependent defaults filled in."""
        big = gpu_memory_gib >= 70 and "a100" not in gpu_name.lower()
        seqs = self.max_num_seqs if self.max_num_seqs is not None else (1024 if big else 256)
        tokens = self.max_num_batched_tokens if self.max_num_batched_tokens is not None else (8192 if big else 2048)
        return seqs, tokens


@dataclass(frozen=True, slots=True)
class WorkloadConfig:
    """How programs arrive. ``closed``: ``concurrency`` programs in flight, a new one starts when one ends
    (a pool of agent workers); ``poisson``: program arrivals at ``rate_per_s``; ``trace``: the trace's
    ``arrival_s``."""

    arrival: Arrival = "closed"
    concurrency: int = 64  #: programs in flight (closed loop)
    rate_per_s: float = 0.1  #: program arrival rate (poisson)
    max_programs: int | None = None  #: replay only the first N programs of the trace
    reuse_scale: float = 1.0  #: counterfactual: each turn reuses this fraction of what the trace says it reuses

    def __post_init__(self) -> None:
        check_literal("workload", "arrival", self.arrival, Arrival)
        check(self.concurrency >= 1, "workload", "concurrency", self.concurrency, ">= 1")
        check(self.rate_per_s > 0, "workload", "rate_per_s", self.rate_per_s, "> 0")
        check(
            self.max_programs is None or self.max_programs >= 1,
            "workload",
            "max_programs",
            self.max_programs,
            ">= 1 or unset",
        )
        check(0.0 <= self.reuse_scale <= 1.0, "workload", "reuse_scale", self.reuse_scale, "in [0, 1]")


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """Tool-gap durations: ``replay`` (trace), ``fixed`` (``fixed_s`` every gap), ``scale`` (trace x ``scale``),
    ``generative`` (sampled from a fitted tool model, ``agentreplay fit-tools``; ``scale`` and ``class_scale``
    multiply its draws)."""

    mode: ToolMode = "replay"
    fixed_s: float = 1.0  #: seconds per gap in fixed mode
    scale: float = 1.0  #: multiplier in scale and generative modes
    model_path: str | None = None  #: tool-model JSON for generative mode
    class_scale: dict[str, float] | None = None  #: per-class multipliers in generative mode, e.g. {test = 2.0}

    def __post_init__(self) -> None:
        check_literal("tools", "mode", self.mode, ToolMode)
        check(self.fixed_s >= 0, "tools", "fixed_s", self.fixed_s, ">= 0")
        check(self.scale >= 0, "tools", "scale", self.scale, ">= 0")
        check(
            self.mode != "generative" or bool(self.model_path),
            "tools",
            "model_path",
            self.model_path,
            "a tool-model JSON path when mode = 'generative'",
        )
        for cls, k in (self.class_scale or {}).items():
            check(isinstance(k, int | float) and k >= 0, "tools", f"class_scale.{cls}", k, ">= 0")


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How a released turn picks an instance: ``policy`` names a router of
    :data:`agentreplay.router.policies.ROUTERS` (each policy's source in its docstring); the other fields are the
    routers' parameters (each router's parameter dataclass reads the fields it names, and validates them).

    Cache-aware defaults are the SGLang router's (sgl-model-gateway ``CacheAware`` policy as logged at start-up:
    cache_threshold 0.3, balance_abs_threshold 64, balance_rel_threshold 1.5, eviction_interval_secs 60,
    max_tree_size 2**26); its tree is kept in tokens here instead of characters."""

    policy: str = "least-loaded"  #: a name of ROUTERS
    load_metric: LoadMetric = "requests"  #: least-loaded: outstanding requests or outstanding tokens
    affinity_max_outstanding: int = 64  #: session-affinity: leave home when it has more requests than this
    inter_instance_gbps: float = 0.0  #: KV transfer bandwidth between instances on a move (0 = re-prefill)
    cache_threshold: float = 0.3  #: cache-aware: minimum prefix match ratio to follow the cache
    balance_abs_threshold: int = 64  #: cache-aware: imbalance if max - min load exceeds this ...
    balance_rel_threshold: float = 1.5  #: ... and max load exceeds min load times this
    eviction_interval_s: float = 60.0  #: cache-aware: LRU pruning period of the approximate trees
    max_tree_tokens: int = 2**26  #: cache-aware: per-instance tree size kept after pruning
    autellix_long_tokens: int = 2048  #: autellix: new (uncached) prompt tokens above which a call goes home

    def __post_init__(self) -> None:
        check_policy("router", "policy", self.policy, ROUTERS, self)


@dataclass(frozen=True, slots=True)
class PolicyConfig:
    """Per-instance scheduling and KV-retention policies: ``queue``, ``victim`` and ``retention`` name policies of
    :data:`agentreplay.scheduler.queue.QUEUE_ORDERS`, :data:`agentreplay.scheduler.victim.VICTIMS` and
    :data:`agentreplay.kv.retention.RETENTIONS`; the fields after them are those policies' parameters (each
    policy's parameter dataclass reads the fields it names, and validates them).

    Where the source gives no value (Autellix's queue boundaries, Continuum's quantile) the default is ours and
    documented in the policy's docstring."""

    queue: str = "fcfs"  #: waiting-queue order
    victim: str = "most-recent"  #: which running request a recompute preemption evicts
    retention: str = "lru"  #: what happens to a program's KV during its tool gap
    ttl_s: float = 5.0  #: ttl: static pin length
    continuum_variant: Literal["paper", "code"] = "paper"  #: continuum: TTL from the tool CDF, or fixed 2 s pin
    continuum_quantile: float = 0.8  #: continuum (paper): TTL = this quantile of the tool's observed durations
    continuum_max_ttl_s: float = 30.0  #: continuum (paper): never pin longer than this
    continuum_code_pin_s: float = 2.0  #: continuum (code): pin length when the tool's running mean <= it
    unpin_on_pressure: bool = True  #: release pins (oldest first) when a waiting request cannot be admitted
    plas_quanta_tokens: tuple[int, ...] = (16_384, 65_536, 262_144)  #: PLAS: MLFQ level boundaries (service)
    plas_starvation_s: float = 30.0  #: PLAS: a call waiting longer than this is promoted to the top level
    priority_order: tuple[str, ...] = ("fcfs", "fcfs", "fcfs")  #: priority: order within each class (queue.py)
    decision_log: bool = False  #: keep a per-decision log (router, admission, preemption, retention)

    def __post_init__(self) -> None:
        if isinstance(self.plas_quanta_tokens, list):  # a TOML array
            object.__setattr__(self, "plas_quanta_tokens", tuple(self.plas_quanta_tokens))
        if isinstance(self.priority_order, list):  # a TOML array
            object.__setattr__(self, "priority_order", tuple(self.priority_order))
        check_policy("policy", "queue", self.queue, QUEUE_ORDERS, self)
        check_policy("policy", "victim", self.victim, VICTIMS, self)
        check_policy("policy", "retention", self.retention, RETENTIONS, self)


@dataclass(frozen=True, slots=True)
class TierConfig:
    """Host memory tiers below HBM, per instance (LMCache-style CPU offload; CXL expansion).

    Defaults: host DRAM reached over PCIe Gen5 x16 (~50 GB/s usable of 64 GB/s), CXL Type-3 memory at ~25 GB/s
    per device with ~0.5 us extra latency (published CXL memory-expander figures). Capacity 0 disables a tier."""

    dram_gib: float = 0.0  #: host DRAM for KV per instance, GiB
    dram_gbps: float = 50.0  #: host link (PCIe) bandwidth, GB/s, shared by concurrent transfers
    dram_latency_us: float = 10.0  #: per-transfer setup latency, microseconds
    cxl_gib: float = 0.0  #: CXL memory per instance, GiB (used when DRAM is full, or alone)
    cxl_gbps: float = 25.0
    cxl_latency_us: float = 20.0

    def __post_init__(self) -> None:
        for name in ("dram_gib", "cxl_gib", "dram_latency_us", "cxl_latency_us"):
            check(getattr(self, name) >= 0, "tiers", name, getattr(self, name), ">= 0")
        for name in ("dram_gbps", "cxl_gbps"):
            check(getattr(self, name) > 0, "tiers", name, getattr(self, name), "> 0")


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    timeseries_interval_s: float = 1.0  #: minimum simulated time between instance time-series samples

    def __post_init__(self) -> None:
        check(self.timeseries_interval_s > 0, "metrics", "timeseries_interval_s", self.timeseries_interval_s, "> 0")


@dataclass(frozen=True, slots=True)
class CoreConfig:
    """The core sections of a :class:`SimConfig` (the features' sections and ``seed`` follow them)."""

    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    tools: ToolConfig = field(default_factory=ToolConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    tiers: TierConfig = field(default_factory=TierConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)

    def replace(self, **sections: dict[str, Any]) -> SimConfig:
        """A copy with some fields of some sections replaced: ``cfg.replace(hardware={"tp": 4})``."""
        updates: dict[str, Any] = {}
        for name, changes in sections.items():
            if name == "seed":
                updates["seed"] = changes
                continue
            current = getattr(self, name)
            updates[name] = _build(type(current), name, {**dataclasses.asdict(current), **changes})
        return dataclasses.replace(self, **updates)  # type: ignore[return-value]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# SimConfig: CoreConfig's sections, then one field per feature section (agentreplay.features.registry), then the
# seed. Built from the registry at import; mypy reads the declaration below, where FeatureSections types each
# feature section (its annotations name classes it imports for mypy only, so the runtime class leaves it out).
if TYPE_CHECKING:
    from agentreplay.features.registry import FeatureSections

    @dataclass(frozen=True, slots=True)
    class SimConfig(CoreConfig, FeatureSections):
        """The whole configuration: the core sections, one field per feature section, and the run's seed."""

        seed: int = 0

else:
    SimConfig = make_dataclass(
        "SimConfig",
        [*((name, cls, field(default_factory=cls)) for name, cls in section_types().items()), ("seed", int, 0)],
        bases=(CoreConfig,),
        namespace={"__module__": __name__, "__doc__": "The whole configuration (see the module docstring)."},
        frozen=True,
        slots=True,
    )


def _unknown(what: str, names: set[str], known: set[str]) -> str:
    """``WHAT(s) ['a', 'b'] (did you mean ...?)``: the unknown ``names`` with the closest ``known`` name of each
    (:func:`agentreplay.policy.registry.close_names`), and all the known ones if one has none."""
    unknown = sorted(names)
    guesses = {n: close_names(n, known) for n in unknown}
    hints = [f"{c[0]!r}" + (f" for {n!r}" if len(unknown) > 1 else "") for n, c in guesses.items() if c]
    text = f"unknown {what}(s) {unknown}" + (f" (did you mean {', '.join(hints)}?)" if hints else "")
    return text if all(guesses.values()) else f"{text}; known: {sorted(known)}"


def _build(cls: type, section: str, values: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    if set(values) - known:
        raise ConfigError(f"[{section}] {_unknown('field', set(values) - known, known)}")
    try:
        return cls(**values)
    except (TypeError, ParamError) as exc:  # (ParamError: a section validated like policy parameters)
        raise ConfigError(f"[{section}] {exc}") from exc


def unknown_names(data: dict[str, Any]) -> list[str]:
    """One line per section of ``data`` (the TOML layout) holding names :class:`SimConfig` does not know, each
    with the closest known names: the unknown sections first, then each section's unknown fields."""
    defaults = SimConfig()
    sections = {f.name for f in fields(SimConfig)}
    lines = [_unknown("section", set(data) - sections, sections)] if set(data) - sections else []
    for name, value in data.items():
        if name in sections and name != "seed" and isinstance(value, dict):
            known = {f.name for f in fields(type(getattr(defaults, name)))}
            if set(value) - known:
                lines.append(f"[{name}] {_unknown('field', set(value) - known, known)}")
    return lines


def from_dict(data: dict[str, Any]) -> SimConfig:
    """Build a :class:`SimConfig` from nested dicts (the TOML layout). Every unknown section or field fails, all
    at once (one line per section, :func:`unknown_names`), before any value is checked."""
    unknown = unknown_names(data)
    if unknown:
        raise ConfigError("\n".join(unknown))
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "seed":
            check(isinstance(value, int) and value >= 0, "root", "seed", value, "a non-negative integer")
            kwargs["seed"] = value
        else:
            if not isinstance(value, dict):
                raise ConfigError(f"[{name}] must be a table, got {value!r}")
            default_cls = type(getattr(SimConfig(), name))
            kwargs[name] = _build(default_cls, name, value)
    return SimConfig(**kwargs)


T = TypeVar("T")


def load_toml_as(path: str | Path, parse: Callable[[dict[str, Any]], T], error: type[ValueError]) -> T:
    """``parse`` of the TOML file at ``path``; an unreadable file, bad TOML, or an ``error`` raised by ``parse``
    becomes ``error`` with the file's path in front of each line of the message."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise error(f"{p}: {exc}") from exc
    try:
        return parse(data)
    except error as exc:
        raise error("\n".join(f"{p}: {line}" for line in str(exc).splitlines())) from exc


def load(path: str | Path) -> SimConfig:
    return load_toml_as(path, from_dict, ConfigError)


def to_toml(cfg: SimConfig) -> str:
    """Serialise to TOML (unset optional values are written as comments, since TOML has no null)."""
    lines = [f"seed = {cfg.seed}", ""]
    for f in fields(SimConfig):
        if f.name == "seed":
            continue
        if getattr(getattr(cfg, f.name), "enabled", True) is False:
            continue  # a mechanism section that is off: left out, so runs without it keep their config bytes
        lines.append(f"[{f.name}]")
        for k, v in dataclasses.asdict(getattr(cfg, f.name)).items():
            if v is None:
                lines.append(f"# {k} = (unset: default)")
            elif isinstance(v, bool):
                lines.append(f"{k} = {'true' if v else 'false'}")
            elif isinstance(v, dict):
                lines.append(f"{k} = {{ " + ", ".join(f"{a} = {b!r}" for a, b in v.items()) + " }")
            elif isinstance(v, tuple | list) and v and isinstance(v[0], dict):  # an array of inline tables
                items = (", ".join(f"{a} = {b!r}" for a, b in d.items() if b is not None) for d in v)
                lines.append(f"{k} = [" + ", ".join(f"{{ {x} }}" for x in items) + "]")
            elif isinstance(v, tuple | list):
                lines.append(f"{k} = {list(v)!r}")
            elif isinstance(v, str):
                lines.append(f'{k} = "{v}"')
            else:
                lines.append(f"{k} = {v!r}")
        lines.append("")
    return "\n".join(lines)
