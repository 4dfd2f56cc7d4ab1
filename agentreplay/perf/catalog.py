"""GPU and model catalogs: frozen specs loaded from TOML (``catalog/gpus.toml``, ``catalog/models.toml``).

Every number the performance model uses lives in those files (datasheet peaks, config.json shapes, starting
efficiencies), so calibration edits data, not code. A user catalog with the same layout can be passed as
``path=`` to every loader; a GPU's efficiency keys default to the file's ``[defaults.efficiency]``, then to the
packaged defaults, key by key.

Units: memory in GiB (2^30 bytes), bandwidth in GB/s (10^9 bytes/s), compute in dense TFLOP/s (10^12), byte
counts in bytes, times in the unit their name says (``_us``, ``_ms``, ``_s``).
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any, Final, Literal, get_args

from agentreplay.policy.registry import did_you_mean

Dtype = Literal["bf16", "fp8"]
Architecture = Literal["ampere", "ada", "hopper", "blackwell"]
Interconnect = Literal["nvlink", "pcie"]

#: Bytes per parameter / per cached K or V element.
DTYPE_BYTES: Final[dict[str, int]] = {"bf16": 2, "fp8": 1}
#: Bytes per activation element: activations stay bf16 even for fp8 checkpoints (W8A8 GEMMs quantise their
#: input on the fly; norms, rotary and residuals run in bf16).
ACT_BYTES: Final = 2
#: Memory CUDA does not report as usable, when a GPU entry gives no ``usable_memory_gib``: the RTX 4090 in the
#: measured vLLM run reports 23.52 of 24 GiB.
DRIVER_RESERVE_GIB: Final = 0.5

_CATALOG_DIR = "catalog"


def check_dtype(dtype: str, field: str = "dtype") -> None:
    """Raise ValueError unless ``dtype`` is one of :data:`Dtype`."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"{field}={dtype!r} is not supported; allowed: {sorted(DTYPE_BYTES)}")


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Fractions of peak that real kernels reach, plus fixed overheads. See ``catalog/gpus.toml`` for sources.

    Invariants: every ``*_efficiency`` is in (0, 1]; overheads are >= 0.
    """

    compute_efficiency: float  #: large GEMMs, fraction of the dense tensor peak
    bandwidth_efficiency: float  #: weight / activation streaming, fraction of memory bandwidth
    attn_prefill_efficiency: float  #: attention FLOPs, fraction of the bf16 tensor peak
    attn_decode_efficiency: float  #: paged KV reads in decode attention, fraction of memory bandwidth
    allreduce_efficiency: float  #: achieved / link bandwidth for TP collectives
    allreduce_latency_us: float  #: fixed cost per collective, microseconds
    kernel_overhead_us: float  #: fixed cost per kernel launched, microseconds
    framework_overhead_ms: float  #: fixed cost per engine iteration, milliseconds
    per_seq_overhead_us: float = 0.0  #: cost per sequence in the batch per iteration, microseconds
    #: prefill attention by FlashAttention-2's CTA critical path (agentreplay.perf.tiles): fraction of an SM's
    #: share of the bf16 peak one full KV tile reaches; 0 = the FLOP form (attn_prefill_efficiency)
    attn_prefill_tile_efficiency: float = 0.0
    #: fixed cost of one of vLLM's custom (P2P) all-reduces, microseconds (agentreplay.perf.deploy); NCCL's ring
    #: pays allreduce_latency_us instead
    custom_allreduce_latency_us: float = 5.0
    #: sampler traffic per logit of each emitting sequence, bytes at the streaming bandwidth: 8 = the fp32 logits
    #: read and written once; vLLM v1's ``Sampler`` (vllm/v1/sample/sampler.py) runs several eager passes over them
    sampler_bytes_per_logit: float = 8.0

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name == "attn_prefill_tile_efficiency" and v == 0.0:
                continue  # off
            if f.name.endswith("_efficiency"):
                if not 0.0 < v <= 1.0:
                    raise ValueError(f"Efficiency.{f.name}={v!r} must be in (0, 1]")
            elif v < 0.0:
                raise ValueError(f"Efficiency.{f.name}={v!r} must be >= 0")


@dataclass(frozen=True, slots=True)
class GpuSpec:
    """One GPU model: datasheet peaks, interconnect, and the default efficiencies for it."""

    name: str  #: catalog key, e.g. "h100-sxm"
    display_name: str
    architecture: Architecture
    memory_gib: float  #: datasheet memory, GiB
    usable_memory_gib: float  #: total memory as CUDA reports it (what vLLM scales by utilization), GiB
    mem_bandwidth_gbps: float  #: peak memory bandwidth, GB/s
    bf16_tflops: float  #: dense bf16 tensor peak, TFLOP/s
    fp8_tflops: float  #: dense fp8 tensor peak, TFLOP/s; 0 when the GPU has no fp8 tensor cores
    interconnect: Interconnect
    interconnect_bw_gbps: float  #: per-GPU, one-direction bandwidth usable by a ring all-reduce, GB/s
    efficiency: Efficiency
    sm_count: int = 0  #: streaming multiprocessors; 0 = not given (no tile-level attention pricing)
    smem_per_sm_kib: float = 0.0  #: shared memory one SM can give its resident CTAs, KiB; 0 = not given
    #: CUDA compute capability, e.g. "8.6"; "" = not given (vLLM's per-capability rules then take their defaults)
    compute_capability: str = ""
    #: GPUs of this model in one host can read each other's memory (CUDA peer access), which vLLM's custom
    #: all-reduce needs; GeForce boards cannot
    p2p: bool = True

    @property
    def has_fp8(self) -> bool:
        """True when the GPU has fp8 tensor cores (Ada, Hopper, Blackwell)."""
        return self.fp8_tflops > 0

    def gemm_peak_tflops(self, dtype: Dtype) -> float:
        """Dense peak for GEMMs with ``dtype`` weights: fp8 rate where supported, else bf16 (weight-only fp8)."""
        return self.fp8_tflops if dtype == "fp8" and self.has_fp8 else self.bf16_tflops


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """Decoder-only transformer shapes, as in the model's Hugging Face config.json.

    Linear layers (q/k/v/o, MLP, experts, shared expert) take the serving dtype; embeddings, LM head, norms and
    the MoE router stay bf16, as in vLLM's fp8 checkpoints (vLLM builds MoE routers unquantized, e.g.
    ``ReplicatedLinear(..., quant_config=None)`` in vllm/model_executor/models/llama4.py ``Llama4MoE``). An entry
    whose fp8 checkpoint also leaves the attention projections unquantized says so (``bf16_attention``).
    """

    name: str  #: catalog key, e.g. "llama-3.1-8b"
    hf_repo: str
    model_type: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int  #: dense MLP width (unused when every layer is MoE)
    vocab_size: int
    max_position_embeddings: int
    tie_word_embeddings: bool
    num_experts: int = 0  #: 0 for dense models
    experts_per_token: int = 0
    moe_intermediate_size: int = 0  #: per-expert MLP width
    #: width of a shared expert: a dense gate_up / down MLP every token runs in every MoE layer beside its routed
    #: experts (Llama 4: ``intermediate_size``; vLLM llama4.py ``Llama4MoE.shared_expert``); 0 = none
    shared_expert_intermediate_size: int = 0
    #: q/k/v/o stay bf16 when the model is served fp8: the entry's fp8 checkpoint was quantized with
    #: ``self_attn`` on its ignore list (compressed-tensors keeps ignored layers unquantized in vLLM)
    bf16_attention: bool = False

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def qk_norm(self) -> bool:
        """Qwen3 applies an RMSNorm to q and k per head (implicit in its model_type)."""
        return self.model_type in ("qwen3", "qwen3_moe")

    @property
    def mlp_width(self) -> int:
        """Width of one MLP (per expert for MoE)."""
        return self.moe_intermediate_size if self.is_moe else self.intermediate_size

    def kv_heads_per_rank(self, tp: int = 1) -> int:
        """KV heads each TP rank stores: heads are split, and replicated when there are fewer than ranks."""
        return max(1, self.num_key_value_heads // tp)

    def validate_tp(self, tp: int) -> None:
        """Raise ValueError, naming the model, the field and the value, when ``tp`` cannot shard this model."""
        if not isinstance(tp, int) or tp < 1:
            raise ValueError(f"{self.name}: tensor parallel size tp={tp!r} must be an integer >= 1")
        checks = [("num_attention_heads", self.num_attention_heads), ("mlp width", self.mlp_width)]
        if self.shared_expert_intermediate_size:
            checks.append(("shared_expert_intermediate_size", self.shared_expert_intermediate_size))
        if self.num_key_value_heads >= tp:
            checks.append(("num_key_value_heads", self.num_key_value_heads))
        elif tp % self.num_key_value_heads:
            raise ValueError(
                f"{self.name}: tp={tp} is not a multiple of num_key_value_heads={self.num_key_value_heads} "
                "(KV heads can only be replicated evenly)"
            )
        for field, value in checks:
            if value % tp:
                raise ValueError(f"{self.name}: tp={tp} does not divide {field}={value}")

    # ---- parameter counts (whole model, all ranks) -------------------------------------------------------
    def _attn_linear_params(self) -> int:
        q = self.num_attention_heads * self.head_dim
        kv = self.num_key_value_heads * self.head_dim
        return self.hidden_size * (q + 2 * kv) + q * self.hidden_size

    def _mlp_linear_params(self) -> int:
        """MLP weights of one layer: gate, up, down of the dense MLP, or of every routed expert plus the shared
        expert."""
        per_mlp = 3 * self.hidden_size * self.mlp_width  # gate, up, down
        if not self.is_moe:
            return per_mlp
        return per_mlp * self.num_experts + 3 * self.hidden_size * self.shared_expert_intermediate_size

    def _bf16_params(self) -> int:
        """Embedding, LM head, norms and router: kept in bf16 whatever the serving dtype."""
        embed = self.vocab_size * self.hidden_size
        lm_head = 0 if self.tie_word_embeddings else embed
        norms = 2 * self.hidden_size + (2 * self.head_dim if self.qk_norm else 0)
        router = self.hidden_size * self.num_experts
        return embed + lm_head + self.num_hidden_layers * (norms + router) + self.hidden_size

    def param_count(self) -> int:
        """Total parameters (untied LM head counted once more), e.g. 8,030,261,248 for Llama-3.1-8B."""
        linear = self.num_hidden_layers * (self._attn_linear_params() + self._mlp_linear_params())
        return linear + self._bf16_params()

    def weight_bytes(self, dtype: Dtype = "bf16", tp: int = 1) -> int:
        """Weight bytes held by one TP rank: linear layers in ``dtype`` (attention in bf16 under
        ``bf16_attention``) split over ``tp`` (KV projections replicated when kv heads < tp), embedding and LM
        head vocab-split in bf16, norms and router replicated."""
        check_dtype(dtype)
        self.validate_tp(tp)
        q = self.num_attention_heads * self.head_dim // tp
        kv = self.kv_heads_per_rank(tp) * self.head_dim
        attn = self.hidden_size * (q + 2 * kv) + q * self.hidden_size
        attn_bytes = ACT_BYTES if self.bf16_attention else DTYPE_BYTES[dtype]
        mlp = self._mlp_linear_params() // tp * DTYPE_BYTES[dtype]
        linear = self.num_hidden_layers * (attn * attn_bytes + mlp)
        embed = self.vocab_size * self.hidden_size
        vocab_split = (embed + (0 if self.tie_word_embeddings else embed)) // tp
        replicated = self._bf16_params() - embed - (0 if self.tie_word_embeddings else embed)
        return linear + (vocab_split + replicated) * ACT_BYTES

    def kv_bytes_per_token(self, dtype: Dtype = "bf16", tp: int = 1) -> int:
        """KV-cache bytes one token occupies on one TP rank: 2 (K and V) * layers * kv heads per rank *
        head_dim * bytes per element."""
        check_dtype(dtype, "kv dtype")
        self.validate_tp(tp)
        return 2 * self.num_hidden_layers * self.kv_heads_per_rank(tp) * self.head_dim * DTYPE_BYTES[dtype]


# ---- loading ------------------------------------------------------------------------------------------------
def packaged_file(filename: str) -> Path:
    """The packaged catalog's ``filename`` (``agentreplay/perf/catalog/``)."""
    return Path(str(resources.files("agentreplay.perf").joinpath(_CATALOG_DIR, filename)))


def _read_toml(path: str) -> dict[str, Any]:
    """Parsed TOML, cached per (path, mtime, size) so an edited user catalog is re-read."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"catalog file not found: {path}") from None
    return _parse_toml(path, st.st_mtime_ns, st.st_size)


@cache
def _parse_toml(path: str, _mtime_ns: int, _size: int) -> dict[str, Any]:
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"catalog file {path} is not valid TOML: {exc}") from None


def _table(path: Path, section: str) -> dict[str, dict[str, Any]]:
    data = _read_toml(str(Path(path).resolve()))
    table = data.get(section, {})
    if not isinstance(table, dict):
        raise ValueError(f"{path}: [{section}] must be a table of entries")
    return table


def _lookup(path: Path, section: str, name: str) -> dict[str, Any]:
    table = _table(path, section)
    if name not in table:
        known = sorted(table)
        raise ValueError(f"unknown {section} {name!r}{did_you_mean(name, known)} in {path}; known: {', '.join(known)}")
    return dict(table[name])


def _check_keys(where: str, entry: dict[str, Any], allowed: set[str], required: set[str]) -> None:
    unknown = set(entry) - allowed
    if unknown:
        raise ValueError(f"{where}: unknown field(s) {sorted(unknown)}; allowed: {sorted(allowed)}")
    missing = required - set(entry)
    if missing:
        raise ValueError(f"{where}: missing field(s) {sorted(missing)}")


def _efficiency(path: Path, entry: dict[str, Any], where: str) -> Efficiency:
    packaged = _read_toml(str(packaged_file("gpus.toml")))["defaults"]["efficiency"]
    user = _read_toml(str(Path(path).resolve())).get("defaults", {}).get("efficiency", {})
    merged = {**packaged, **user, **entry}  # entry over the file's defaults over the packaged defaults
    names = {f.name for f in fields(Efficiency)}
    required = {
        f.name
        for f in fields(Efficiency)
        if f.name
        not in (
            "per_seq_overhead_us",
            "attn_prefill_tile_efficiency",
            "custom_allreduce_latency_us",
            "sampler_bytes_per_logit",
        )
    }
    _check_keys(f"{where}.efficiency", merged, names, required)
    return Efficiency(**{k: float(v) for k, v in merged.items()})


def list_gpus(path: str | Path | None = None) -> list[str]:
    """Catalog keys of the GPUs in the packaged catalog (or in ``path``), sorted."""
    return sorted(_table(Path(path) if path else packaged_file("gpus.toml"), "gpu"))


def list_models(path: str | Path | None = None) -> list[str]:
    """Catalog keys of the models in the packaged catalog (or in ``path``), sorted."""
    return sorted(_table(Path(path) if path else packaged_file("models.toml"), "model"))


def load_gpu(name: str, path: str | Path | None = None) -> GpuSpec:
    """The GPU ``name`` from the packaged catalog or from a user TOML ``path`` with ``[gpu.<name>]`` tables.

    Raises ValueError for an unknown name (listing the known ones) or a malformed entry.
    """
    src = Path(path) if path else packaged_file("gpus.toml")
    entry = _lookup(src, "gpu", name)
    where = f"{src}: gpu.{name}"
    eff = _efficiency(src, entry.pop("efficiency", {}), where)
    allowed = {f.name for f in fields(GpuSpec)} - {"name", "efficiency"}
    _check_keys(
        where,
        entry,
        allowed,
        allowed - {"usable_memory_gib", "fp8_tflops", "sm_count", "smem_per_sm_kib", "compute_capability", "p2p"},
    )
    for key, options in (("architecture", Architecture), ("interconnect", Interconnect)):
        if entry[key] not in get_args(options):
            raise ValueError(f"{where}: {key}={entry[key]!r}; allowed: {list(get_args(options))}")
    entry.setdefault("fp8_tflops", 0.0)
    entry.setdefault("usable_memory_gib", float(entry["memory_gib"]) - DRIVER_RESERVE_GIB)
    for key in ("memory_gib", "usable_memory_gib", "mem_bandwidth_gbps", "bf16_tflops", "interconnect_bw_gbps"):
        if not float(entry[key]) > 0:
            raise ValueError(f"{where}: {key}={entry[key]!r} must be > 0")
    if float(entry["fp8_tflops"]) < 0:
        raise ValueError(f"{where}: fp8_tflops={entry['fp8_tflops']!r} must be >= 0")
    sms = entry.pop("sm_count", 0)
    if not isinstance(sms, int) or isinstance(sms, bool) or sms < 0:
        raise ValueError(f"{where}: sm_count={sms!r} must be an integer >= 0")
    if float(entry.get("smem_per_sm_kib", 0.0)) < 0:
        raise ValueError(f"{where}: smem_per_sm_kib={entry['smem_per_sm_kib']!r} must be >= 0")
    cc = entry.pop("compute_capability", "")
    if not isinstance(cc, str) or (cc and not (cc.count(".") == 1 and cc.replace(".", "").isdigit())):
        raise ValueError(f'{where}: compute_capability={cc!r} must be a string like "8.6"')
    p2p = entry.pop("p2p", True)
    if not isinstance(p2p, bool):
        raise ValueError(f"{where}: p2p={p2p!r} must be true or false")
    numeric = {k: float(v) for k, v in entry.items() if k not in ("display_name", "architecture", "interconnect")}
    return GpuSpec(
        name=name,
        display_name=str(entry["display_name"]),
        architecture=entry["architecture"],
        interconnect=entry["interconnect"],
        efficiency=eff,
        sm_count=sms,
        compute_capability=cc,
        p2p=p2p,
        **numeric,
    )


_MODEL_INTS: Final = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
)
_MOE_INTS: Final = ("num_experts", "experts_per_token", "moe_intermediate_size", "shared_expert_intermediate_size")
_MODEL_BOOLS: Final = ("tie_word_embeddings", "bf16_attention")


def load_model(name: str, path: str | Path | None = None) -> ModelSpec:
    """The model ``name`` from the packaged catalog or from a user TOML ``path`` with ``[model.<name>]`` tables.

    Raises ValueError for an unknown name (listing the known ones) or inconsistent shapes.
    """
    src = Path(path) if path else packaged_file("models.toml")
    entry = _lookup(src, "model", name)
    where = f"{src}: model.{name}"
    allowed = {f.name for f in fields(ModelSpec)} - {"name"}
    _check_keys(where, entry, allowed, allowed - {*_MOE_INTS, "bf16_attention"})
    for key in (*_MODEL_INTS, *_MOE_INTS):
        value = entry.get(key, 0)
        minimum = 0 if key in _MOE_INTS else 1
        if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
            raise ValueError(f"{where}: {key}={value!r} must be an integer >= {minimum}")
    for key in _MODEL_BOOLS:
        if not isinstance(entry.get(key, False), bool):
            raise ValueError(f"{where}: {key}={entry[key]!r} must be true or false")
    spec = ModelSpec(name=name, **entry)
    _check_shapes(where, spec)
    return spec


def _check_shapes(where: str, spec: ModelSpec) -> None:
    """Raise ValueError, with the numbers, for shapes that cannot belong to one model."""
    if spec.num_attention_heads % spec.num_key_value_heads:
        raise ValueError(
            f"{where}: num_attention_heads={spec.num_attention_heads} is not a multiple of "
            f"num_key_value_heads={spec.num_key_value_heads}"
        )
    if spec.is_moe and not (1 <= spec.experts_per_token <= spec.num_experts and spec.moe_intermediate_size):
        raise ValueError(
            f"{where}: MoE needs 1 <= experts_per_token ({spec.experts_per_token}) <= num_experts "
            f"({spec.num_experts}) and moe_intermediate_size > 0 ({spec.moe_intermediate_size})"
        )
    if spec.shared_expert_intermediate_size and not spec.is_moe:
        raise ValueError(
            f"{where}: shared_expert_intermediate_size={spec.shared_expert_intermediate_size} needs a MoE model "
            "(num_experts > 0)"
        )


def catalog_rows() -> dict[str, list[dict[str, Any]]]:
    """The packaged GPUs and models with their key numbers, one row each, sorted by name (``agentreplay catalog``):
    ``gpus``: memory (GiB), HBM bandwidth (GB/s), dense bf16 and fp8 peaks (TFLOP/s; fp8 None without fp8 tensor
    cores), interconnect and its per-GPU bandwidth (GB/s); ``models``: parameters (billions), layers, hidden size,
    attention and KV heads, experts and experts per token (None for a dense model), KV-cache bytes per token in
    bf16."""
    gpus = []
    for name in list_gpus():
        g = load_gpu(name)
        gpus.append(
            {
                "name": name,
                "memory_gib": g.memory_gib,
                "hbm_gbps": g.mem_bandwidth_gbps,
                "bf16_tflops": g.bf16_tflops,
                "fp8_tflops": g.fp8_tflops if g.has_fp8 else None,
                "interconnect": g.interconnect,
                "interconnect_gbps": g.interconnect_bw_gbps,
            }
        )
    models = []
    for name in list_models():
        m = load_model(name)
        models.append(
            {
                "name": name,
                "params_b": m.param_count() / 1e9,
                "layers": m.num_hidden_layers,
                "hidden": m.hidden_size,
                "heads": m.num_attention_heads,
                "kv_heads": m.num_key_value_heads,
                "experts": m.num_experts if m.is_moe else None,
                "experts_per_token": m.experts_per_token if m.is_moe else None,
                "kv_bytes_per_token_bf16": m.kv_bytes_per_token("bf16"),
            }
        )
    return {"gpus": gpus, "models": models}
