"""Simulation configuration: one frozen dataclass per component under :class:`SimConfig`, loadable from TOML.

Every value is checked when the config is built; a bad value fails with the section, field, value and the
allowed range. Defaults follow vLLM v1 where it has one (cited per field).
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Literal, get_args

Arrival = Literal["closed", "poisson", "trace"]
ToolMode = Literal["replay", "fixed", "scale"]
RouterName = Literal["round-robin", "least-loaded"]
Dtype = Literal["bf16", "fp8"]


class ConfigError(ValueError):
    """An invalid configuration value; the message names section, field, value and the allowed range."""


def _check(cond: bool, section: str, name: str, value: Any, allowed: str) -> None:
    if not cond:
        raise ConfigError(f"[{section}] {name} = {value!r} is invalid: {allowed}")


def _literal(section: str, name: str, value: Any, lit: Any) -> None:
    _check(value in get_args(lit), section, name, value, f"one of {list(get_args(lit))}")


@dataclass(frozen=True, slots=True)
class HardwareConfig:
    """What one instance runs on. ``instances`` identical instances form the cluster."""

    gpu: str = "h100-sxm"  #: GPU catalog name (``agentreplay catalog``)
    model: str = "llama-3.1-8b"  #: model catalog name
    dtype: Dtype = "bf16"  #: weight and KV dtype
    tp: int = 1  #: tensor-parallel degree (GPUs per instance)
    instances: int = 1  #: number of instances (data-parallel replicas)

    def __post_init__(self) -> None:
        _literal("hardware", "dtype", self.dtype, Dtype)
        _check(self.tp in (1, 2, 4, 8, 16), "hardware", "tp", self.tp, "1, 2, 4, 8 or 16")
        _check(isinstance(self.instances, int) and 1 <= self.instances <= 4096, "hardware", "instances",
               self.instances, "an integer in [1, 4096]")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """KV cache. Defaults: vLLM ``CacheConfig`` (block_size 16, gpu_memory_utilization 0.9, prefix caching on
    in v1)."""

    block_size: int = 16  #: tokens per KV block
    gpu_memory_utilization: float = 0.9  #: fraction of GPU memory vLLM may use
    num_gpu_blocks: int | None = None  #: explicit block count per instance (overrides the memory model)
    enable_prefix_caching: bool = True  #: vLLM v1 default

    def __post_init__(self) -> None:
        _check(self.block_size in (1, 8, 16, 32, 64, 128), "cache", "block_size", self.block_size,
               "one of 1, 8, 16, 32, 64, 128")
        _check(0.0 < self.gpu_memory_utilization <= 1.0, "cache", "gpu_memory_utilization",
               self.gpu_memory_utilization, "in (0, 1]")
        _check(self.num_gpu_blocks is None or self.num_gpu_blocks >= 1, "cache", "num_gpu_blocks",
               self.num_gpu_blocks, ">= 1 or unset")


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Batch scheduler limits. Unset limits take vLLM's defaults for the OpenAI server
    (``EngineArgs.get_batch_defaults``): GPUs with >= 70 GiB other than A100: 8192 batched tokens and
    1024 sequences; other GPUs: 2048 and 256."""

    max_num_seqs: int | None = None  #: running sequences per instance
    max_num_batched_tokens: int | None = None  #: token budget per iteration (chunked prefill)
    fast_decode: bool = True  #: advance unchanged decode batches in one event (exact; see Instance)

    def __post_init__(self) -> None:
        _check(self.max_num_seqs is None or self.max_num_seqs >= 1, "scheduler", "max_num_seqs",
               self.max_num_seqs, ">= 1 or unset")
        _check(self.max_num_batched_tokens is None or self.max_num_batched_tokens >= 1, "scheduler",
               "max_num_batched_tokens", self.max_num_batched_tokens, ">= 1 or unset")

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

    def __post_init__(self) -> None:
        _literal("workload", "arrival", self.arrival, Arrival)
        _check(self.concurrency >= 1, "workload", "concurrency", self.concurrency, ">= 1")
        _check(self.rate_per_s > 0, "workload", "rate_per_s", self.rate_per_s, "> 0")
        _check(self.max_programs is None or self.max_programs >= 1, "workload", "max_programs",
               self.max_programs, ">= 1 or unset")


@dataclass(frozen=True, slots=True)
class ToolConfig:
    """Tool-gap durations: ``replay`` (trace), ``fixed`` (``fixed_s`` every gap), ``scale`` (trace x ``scale``)."""

    mode: ToolMode = "replay"
    fixed_s: float = 1.0  #: seconds per gap in fixed mode
    scale: float = 1.0  #: multiplier in scale mode

    def __post_init__(self) -> None:
        _literal("tools", "mode", self.mode, ToolMode)
        _check(self.fixed_s >= 0, "tools", "fixed_s", self.fixed_s, ">= 0")
        _check(self.scale >= 0, "tools", "scale", self.scale, ">= 0")


@dataclass(frozen=True, slots=True)
class RouterConfig:
    """How a released turn picks an instance."""

    policy: RouterName = "least-loaded"

    def __post_init__(self) -> None:
        _literal("router", "policy", self.policy, RouterName)


@dataclass(frozen=True, slots=True)
class MetricsConfig:
    timeseries_interval_s: float = 1.0  #: minimum simulated time between instance time-series samples

    def __post_init__(self) -> None:
        _check(self.timeseries_interval_s > 0, "metrics", "timeseries_interval_s", self.timeseries_interval_s,
               "> 0")


@dataclass(frozen=True, slots=True)
class SimConfig:
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    workload: WorkloadConfig = field(default_factory=WorkloadConfig)
    tools: ToolConfig = field(default_factory=ToolConfig)
    router: RouterConfig = field(default_factory=RouterConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    seed: int = 0

    def replace(self, **sections: dict[str, Any]) -> SimConfig:
        """A copy with some fields of some sections replaced: ``cfg.replace(hardware={"tp": 4})``."""
        updates: dict[str, Any] = {}
        for name, changes in sections.items():
            if name == "seed":
                updates["seed"] = changes
                continue
            current = getattr(self, name)
            updates[name] = _build(type(current), name, {**dataclasses.asdict(current), **changes})
        return dataclasses.replace(self, **updates)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _build(cls: type, section: str, values: dict[str, Any]) -> Any:
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"[{section}] unknown field(s) {unknown}; known: {sorted(known)}")
    try:
        return cls(**values)
    except TypeError as exc:
        raise ConfigError(f"[{section}] {exc}") from exc


def from_dict(data: dict[str, Any]) -> SimConfig:
    """Build a :class:`SimConfig` from nested dicts (the TOML layout); unknown sections or fields fail."""
    sections = {f.name: f for f in fields(SimConfig)}
    unknown = sorted(set(data) - set(sections))
    if unknown:
        raise ConfigError(f"unknown section(s) {unknown}; known: {sorted(sections)}")
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        if name == "seed":
            _check(isinstance(value, int) and value >= 0, "root", "seed", value, "a non-negative integer")
            kwargs["seed"] = value
        else:
            if not isinstance(value, dict):
                raise ConfigError(f"[{name}] must be a table, got {value!r}")
            default_cls = type(getattr(SimConfig(), name))
            kwargs[name] = _build(default_cls, name, value)
    return SimConfig(**kwargs)


def load(path: str | Path) -> SimConfig:
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"{p}: {exc}") from exc
    try:
        return from_dict(data)
    except ConfigError as exc:
        raise ConfigError(f"{p}: {exc}") from exc


def to_toml(cfg: SimConfig) -> str:
    """Serialise to TOML (unset optional values are written as comments, since TOML has no null)."""
    lines = [f"seed = {cfg.seed}", ""]
    for f in fields(SimConfig):
        if f.name == "seed":
            continue
        lines.append(f"[{f.name}]")
        for k, v in dataclasses.asdict(getattr(cfg, f.name)).items():
            if v is None:
                lines.append(f"# {k} = (unset: default)")
            elif isinstance(v, bool):
                lines.append(f"{k} = {'true' if v else 'false'}")
            elif isinstance(v, str):
                lines.append(f'{k} = "{v}"')
            else:
                lines.append(f"{k} = {v!r}")
        lines.append("")
    return "\n".join(lines)
