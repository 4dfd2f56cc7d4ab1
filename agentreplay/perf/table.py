"""Measured-table pricing (:class:`TablePerfModel`) and the refined roofline it falls back to
(:class:`RefinedPerfModel`). Times are seconds; token counts are tokens.

**Refined roofline.** :class:`PerfModel` with a few more calibrated parameters (:class:`Refinement`, data in
``catalog/roofline.toml``), each fixing one measured misfit of the single-efficiency roofline:

- ``gemm_m_half_tokens``: GEMM compute efficiency saturates with the token count M,
  ``eff(M) = compute_efficiency * M / (M + M_half)`` (tiles are padded, small-M GEMMs run few CTAs), i.e. the
  compute time of a linear layer is ``FLOPs per token * (M + M_half) / (peak * compute_efficiency)``. Applies to
  every GEMM (qkv, o, gate_up, down, MoE experts and router, LM head). Still linear in M, so decode-only
  iterations keep the exact ``A(n) + c * sum_ctx`` form.
- per-class fixed kernel costs: ``kernel_overhead_us`` for GEMM kernels, ``elementwise_kernel_us`` for norms,
  rotary, SiLU, embedding, sampler and top-k, ``attn_kernel_us`` for the one attention kernel of a layer;
- ``elementwise_bandwidth_efficiency``: the effective bandwidth of activation-sized elementwise kernels, as a
  fraction of the DRAM bandwidth (may exceed 1: their operands are often L2-resident);
- ``attn_prefill_kv_efficiency``: bandwidth efficiency of the cached-prefix KV read of a prefill chunk (prefill
  kernels parallelise over query blocks, not over keys, so a short chunk over a long cache streams it with few
  CTAs); ``attn_decode_seq_us``: a fixed cost per decoding sequence per layer (KV tile granularity, metadata);
  ``attn_decode_fixed_us``: a fixed cost per layer of an iteration that decodes, beyond the attention kernel's
  launch (``attn_kernel_us``, which prefill pays too): the profiled decode calls cost ~4.5 us more than a
  one-sequence prefill call of the same size (RTX 4090 and RTX PRO 6000 profiles, two or more sequences).
- prefill attention in FlashAttention-2's tile form (:class:`PerfModel`, ``attn_prefill_tile_efficiency``)
  works here as in the plain roofline; calibration fits it for both where a serving engine's FlashAttention-2
  prefill was profiled (validation/calibrate.py).

With every refinement at its default :class:`RefinedPerfModel` prices exactly like :class:`PerfModel`.

**Table pricer.** :class:`TablePerfModel` prices each operator the measured table of a (GPU, model, TP) cell
covers from the table, the rest (and points outside the table's range) from a fallback roofline:

- dense operators: seconds per layer (per forward for embedding, final norm, LM head, sampler) of the whole
  operator, kernel launches included, against tokens (sequences for LM head and sampler); between two points
  log seconds is linear in the log of the fallback's time of the operator (:mod:`agentreplay.perf.interp`), so
  the fallback supplies the shape between measurements (fixed cost, saturation, the memory- to compute-bound
  ridge); a GEMM's fallback time is taken at its token count rounded up to whole tiles of
  ``gemm_tile_tokens`` (:data:`GEMM_TILE_TOKENS`), so its interpolation steps with the tiles. Points are made
  non-decreasing first (isotonic regression in log space) when the measurements are not;
- prefill attention: one chunk of ``tokens`` over ``context`` cached tokens, per layer, on the grid of measured
  values (:class:`agentreplay.perf.interp.Grid`: rows completed along context in the fallback's shape, linear
  in the log of the fallback's time between rows (:data:`ATTENTION_ROWS_IN_REFERENCE`), in the fallback's
  affine context shape between columns, non-decreasing along both axes); an iteration sums its chunks;
- decode attention, per layer: ``a(n) + c(n) * sum_ctx``: an intercept ``a_b`` and a slope ``c_b`` per measured
  batch size, fitted to the decode table by non-negative least squares on relative residuals with the slopes
  non-decreasing in batch size (:func:`agentreplay.perf.interp.fit_decode`); ``a`` is interpolated in log-log,
  ``c`` linearly in log batch size. Decode-only iterations therefore cost exactly ``A(n) + c(n) * sum_ctx``.
  No slope is below the DRAM stream (:func:`dram_key_s`: a key's K and V at the datasheet memory bandwidth): a
  profile faster than that read its KV cache from L2 (the RTX 4090 profile's batch-1 rows grow with the
  context as if the KV streamed at 1.6x the GPU's 1,008 GB/s; validation report, "Limits of the table
  pricer"), which a served model, streaming every layer's weights between two reads of the same KV, does not
  get.
- outside a table's range the value is anchored at the nearest table point and scaled by the fallback:
  ``t(x) = t(x_edge) * R(x) / R(x_edge)`` (continuous, monotone). A table measured on another TP, model or
  dtype is scaled point by point by the ratio of the target's to the source's roofline (``source=``).
- TP all-reduce (:class:`AllReduceTable`, the measured NCCL curve of the GPU at the table's TP degree, when one
  was profiled): seconds of one all-reduce against the bytes reduced, log seconds linear in the log of the
  fallback's all-reduce time between points (:meth:`PerfModel.allreduce_time_s`: a latency plus bytes over the
  ring's bus bandwidth), anchored and scaled by it outside; each forward's ``allreduces_per_forward`` of the
  hidden states are priced from it, the logits gather stays the fallback's. Vidur prices TP collectives from
  the same profiles (its ``all_reduce.csv``).
- fallback operators (TP collectives without an all-reduce table, MoE experts, framework and per-sequence
  overhead, and any operator the table lacks) come from the fallback's :meth:`PerfModel.breakdown`, with the
  launches of covered kernels removed from its ``kernel_overhead``.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from functools import cache, partial
from importlib import resources
from pathlib import Path
from typing import Final

import numpy as np

from agentreplay.perf.catalog import Dtype, Efficiency, GpuSpec, ModelSpec, load_gpu, load_model
from agentreplay.perf.deploy import default_cudagraph_sizes
from agentreplay.perf.interp import Curve, Grid, fit_decode
from agentreplay.perf.model import DTYPE_BYTES, OPERATORS, PerfModel, PrefillItem

# ---------------------------------------------------------------------------------------------- kernels
#: Kernel classes each operator launches (per layer, or per forward for :data:`PER_FORWARD`).
KERNELS: Final[dict[str, tuple[str, ...]]] = {
    "embedding": ("elementwise",), "layernorm": ("elementwise", "elementwise"), "qkv_proj": ("gemm",),
    "rotary_emb": ("elementwise",), "attention_prefill": ("attention",), "attention_decode": ("attention",),
    "o_proj": ("gemm",), "moe_router": ("gemm", "elementwise"), "gate_up_proj": ("gemm",),
    "act_fn": ("elementwise",), "down_proj": ("gemm",), "final_layernorm": ("elementwise",), "lm_head": ("gemm",),
    "sampler": ("elementwise",),
}
PER_FORWARD: Final = frozenset(("embedding", "final_layernorm", "lm_head", "sampler"))
EMITTING: Final = frozenset(("lm_head", "sampler"))  #: priced by the number of sequences that emit a token
_IDX: Final = {op: i for i, op in enumerate(OPERATORS)}
#: Operators that are one GEMM over the tokens (sequences for the LM head), whose time steps with CTA tiles.
GEMM_OPS: Final = frozenset(op for op, k in KERNELS.items() if k == ("gemm",))
#: Token granularity of the GEMM reference shape of :class:`TablePerfModel` (CUTLASS / cuBLAS bf16 tensor-core
#: kernels tile M in multiples of 64 rows for these shapes). Chosen by cross-validation inside the calibration
#: cells among 1, 16, 32, 64 and 128 (validation/crossval.py table_cv: per calibration cell, a table from every
#: other point scored on the GEMM points in between; scores in the validation report's constants list).
#: History: first chosen by comparing candidates on validation points, which the protocol no longer allows.
GEMM_TILE_TOKENS: Final = 64
#: Prefill-attention rows of the grid interpolated linearly in the log of the fallback's time (True) instead of
#: log tokens (False). Chosen by cross-validation inside the calibration cells (validation/crossval.py table_cv,
#: the prefill-attention grid points in between the table's rows and columns).
ATTENTION_ROWS_IN_REFERENCE: Final = True


def dram_key_s(pm: PerfModel) -> float:
    """Seconds per decode context token per layer when the KV cache streams from DRAM at the datasheet peak
    bandwidth: K and V of the rank's KV heads."""
    kv_bytes = 2 * pm.model.kv_heads_per_rank(pm.tp) * pm.model.head_dim * DTYPE_BYTES[pm.kv_dtype]
    return kv_bytes / (pm.gpu.mem_bandwidth_gbps * 1e9)


def launch_s(pm: PerfModel, op: str) -> float:
    """Seconds of fixed cost per kernel of operator ``op`` under ``pm`` (one per class in the refined model)."""
    if isinstance(pm, RefinedPerfModel):
        return pm.launch[KERNELS[op][0]]
    return pm.efficiency.kernel_overhead_us * 1e-6


def kernels_s(pm: PerfModel, op: str) -> float:
    """Fixed launch seconds of all kernels of one occurrence of ``op`` under ``pm``."""
    if isinstance(pm, RefinedPerfModel):
        return sum(pm.launch[c] for c in KERNELS[op])
    return len(KERNELS[op]) * pm.efficiency.kernel_overhead_us * 1e-6


# ---------------------------------------------------------------------------------------------- refined roofline
@dataclass(frozen=True, slots=True)
class Refinement:
    """Parameters of :class:`RefinedPerfModel` beyond :class:`Efficiency`; ``None`` = the Efficiency value it
    refines (named per field). Units in the names."""

    gemm_m_half_tokens: float = 0.0  #: tokens at which a GEMM reaches half of compute_efficiency
    elementwise_kernel_us: float | None = None  #: per elementwise kernel (None: kernel_overhead_us)
    elementwise_bandwidth_efficiency: float | None = None  #: (None: bandwidth_efficiency); may exceed 1 (L2)
    attn_kernel_us: float | None = None  #: per attention kernel, per layer (None: kernel_overhead_us)
    attn_prefill_kv_efficiency: float | None = None  #: prefix KV read in prefill (None: attn_decode_efficiency)
    attn_prefill_m_half_tokens: float = 0.0  #: chunk tokens at which prefill attention reaches half its efficiency
    attn_decode_seq_us: float = 0.0  #: per decoding sequence per layer
    attn_decode_fixed_us: float = 0.0  #: per layer, once per iteration with decoding sequences

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                continue
            if f.name.endswith("_efficiency") and not 0.0 < v <= 4.0:
                raise ValueError(f"Refinement.{f.name}={v!r} must be in (0, 4]")
            if v < 0.0:
                raise ValueError(f"Refinement.{f.name}={v!r} must be >= 0")


REFINEMENT_FIELDS: Final = tuple(f.name for f in fields(Refinement))
_EFFICIENCY_FIELDS: Final = tuple(f.name for f in fields(Efficiency))


class RefinedPerfModel(PerfModel):
    """:class:`PerfModel` with the :class:`Refinement` terms (module docstring). Same invariants and API."""

    def __init__(
        self,
        gpu: GpuSpec,
        model: ModelSpec,
        dtype: Dtype = "bf16",
        tp: int = 1,
        efficiency: Efficiency | None = None,
        kv_dtype: Dtype = "bf16",
        refinement: Refinement | None = None,
        mixed_attention: str = "one_kernel",
        cudagraph_sizes: Sequence[int] = (),
        graph_mixed: bool = True,
        custom_allreduce: bool = False,
    ) -> None:
        super().__init__(gpu, model, dtype, tp, efficiency, kv_dtype, mixed_attention, cudagraph_sizes, graph_mixed,
                         custom_allreduce)
        r = refinement if refinement is not None else Refinement()
        eff = self.efficiency
        self.refinement = r
        self._m_half = float(r.gemm_m_half_tokens)
        self._pf_m_half = float(r.attn_prefill_m_half_tokens)
        if r.elementwise_bandwidth_efficiency is not None:
            s = eff.bandwidth_efficiency / r.elementwise_bandwidth_efficiency
            self._norm_tok *= s
            self._rope_tok *= s
            self._act_tok *= s
            self._embed_tok *= s
            self._final_norm_tok *= s
            self._sampler_tok *= s
        if r.attn_prefill_kv_efficiency is not None:
            self._pf_prefix_s *= eff.attn_decode_efficiency / r.attn_prefill_kv_efficiency
        self._dec_seq_s += self._layers * r.attn_decode_seq_us * 1e-6
        self._dec_fixed_s = self._layers * r.attn_decode_fixed_us * 1e-6
        k = eff.kernel_overhead_us
        self.launch = {"gemm": k * 1e-6,
                       "elementwise": (k if r.elementwise_kernel_us is None else r.elementwise_kernel_us) * 1e-6,
                       "attention": (k if r.attn_kernel_us is None else r.attn_kernel_us) * 1e-6}
        body = [op for op in KERNELS if op not in PER_FORWARD and op != "attention_decode"
                and (op != "moe_router" or self._moe)]
        self._kernel_layer_s = sum(kernels_s(self, op) for op in body)
        self._kernel_fwd_s = kernels_s(self, "embedding") + kernels_s(self, "final_layernorm")
        self._kernel_emit_s = kernels_s(self, "lm_head") + kernels_s(self, "sampler")

    @classmethod
    def from_names(cls, gpu: str, model: str, dtype: Dtype = "bf16", tp: int = 1,  # type: ignore[override]
                   catalog: str | Path | None = None, refinements: str | Path | None = None,
                   **kwargs: object) -> RefinedPerfModel:
        """Build from catalog keys with the refinement of ``gpu`` in ``refinements`` (default: the packaged
        ``catalog/roofline.toml``; a GPU without an entry prices like :class:`PerfModel`)."""
        spec = load_gpu(gpu, catalog)
        eff, ref = load_refinement(spec, refinements)
        return cls(spec, load_model(model), dtype, tp, efficiency=eff, refinement=ref, **kwargs)  # type: ignore

    def _gemm(self, op: tuple[float, float, float], tokens: int) -> float:
        flop_s, weight_s, act_s = op
        return max((tokens + self._m_half) * flop_s, weight_s + tokens * act_s)

    def _terms(self, tokens: int, emit: int, seqs: int, pf_work: float, pf_prefix: int, pf_chunk: int,
               n_dec: int, sum_ctx: int) -> tuple[float, ...]:
        t = list(super()._terms(tokens, emit, seqs, pf_work, pf_prefix, pf_chunk, n_dec, sum_ctx))
        if tokens == 0:
            return tuple(t)
        tokens = self.padded_tokens(tokens, pf_chunk == 0)  # as PerfModel._terms: CUDA-graph padding
        n_layers = self._layers
        if n_dec and self._dec_fixed_s:
            t[_IDX["attention_decode"]] += self._dec_fixed_s
        if pf_chunk and self._pf_m_half:  # sum over chunks of (chunk + m) * (prefix + chunk / 2)
            work = pf_work + self._pf_m_half * (pf_prefix + 0.5 * pf_chunk)
            t[_IDX["attention_prefill"]] = n_layers * max(
                work * self._pf_flop_s, pf_prefix * self._pf_prefix_s + pf_chunk * self._pf_chunk_s)
        if self._m_half:
            t[_IDX["qkv_proj"]] = n_layers * self._gemm(self._qkv, tokens)
            t[_IDX["o_proj"]] = n_layers * self._gemm(self._o, tokens)
            if self._moe:
                touched, rows = self._moe_rows(tokens)  # fused MoE's padded rows (PerfModel._moe_rows)
                k = self._experts_per_token
                work = (rows + touched * self._m_half) / k  # + per-expert M_half, in token units
                for name, (flop_s, weight_s, act_s) in (("gate_up_proj", self._gate_up), ("down_proj", self._down)):
                    t[_IDX[name]] = n_layers * max(work * flop_s, touched * weight_s + tokens * act_s)
                t[_IDX["moe_router"]] = n_layers * self._gemm(self._router, tokens)
            else:
                t[_IDX["gate_up_proj"]] = n_layers * self._gemm(self._gate_up, tokens)
                t[_IDX["down_proj"]] = n_layers * self._gemm(self._down, tokens)
            t[_IDX["lm_head"]] = self._gemm(self._lm_head, emit) if emit else 0.0
        t[_IDX["kernel_overhead"]] = (n_layers * self._kernel_layer_s + self._kernel_fwd_s
                                      + (self._kernel_emit_s if emit else 0.0))
        return tuple(t)

    def __repr__(self) -> str:
        return f"Refined{super().__repr__()}"


def _packaged(name: str) -> Path:
    return Path(str(resources.files("agentreplay.perf").joinpath("catalog", name)))


def _beside(catalog: str | Path | None, name: str) -> Path:
    if catalog is not None and (Path(catalog).parent / name).exists():
        return Path(catalog).parent / name
    return _packaged(name)


def refinement_path(catalog: str | Path | None = None) -> Path:
    """``roofline.toml`` beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return _beside(catalog, "roofline.toml")


def tables_path(catalog: str | Path | None = None) -> Path:
    """``tables.toml`` beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return _beside(catalog, "tables.toml")


def calibration_path(catalog: str | Path | None = None) -> Path:
    """``calibration.json`` (what ``agentreplay calibrate`` fitted, on which points, or borrowed from which GPU)
    beside the GPU catalog ``catalog`` when it exists there, else the packaged one."""
    return _beside(catalog, "calibration.json")


def load_refinement(gpu: GpuSpec, path: str | Path | None = None) -> tuple[Efficiency, Refinement]:
    """``(efficiency, refinement)`` of ``gpu`` from a ``roofline.toml`` (``[gpu."name"]`` tables holding
    Efficiency keys, which override the GPU catalog's, and :class:`Refinement` keys). No entry: the catalog
    efficiency and no refinement."""
    p = Path(path) if path else _packaged("roofline.toml")
    if not p.exists():
        return gpu.efficiency, Refinement()
    with open(p, "rb") as fh:
        entry = dict(tomllib.load(fh).get("gpu", {}).get(gpu.name, {}))
    unknown = set(entry) - set(_EFFICIENCY_FIELDS) - set(REFINEMENT_FIELDS)
    if unknown:
        raise ValueError(f"{p}: gpu.{gpu.name}: unknown field(s) {sorted(unknown)}")
    eff = replace(gpu.efficiency, **{k: float(v) for k, v in entry.items() if k in _EFFICIENCY_FIELDS})
    return eff, Refinement(**{k: float(v) for k, v in entry.items() if k in REFINEMENT_FIELDS})


# ---------------------------------------------------------------------------------------------- tables
@dataclass(frozen=True)
class MeasuredTable:
    """The measured profile of one (GPU, model, TP, dtype) cell, per layer (see the module docstring).

    ``ops``: operator -> (tokens, seconds); ``attention_prefill``: (tokens, context, seconds);
    ``attention_decode``: (batch, context, seconds)."""

    name: str
    gpu: str
    model: str
    tp: int = 1
    dtype: str = "bf16"
    ops: Mapping[str, tuple[Sequence[int], Sequence[float]]] = field(default_factory=dict)
    attention_prefill: tuple[Sequence[int], Sequence[int], Sequence[float]] | None = None
    attention_decode: tuple[Sequence[int], Sequence[int], Sequence[float]] | None = None

    def __post_init__(self) -> None:
        bad = set(self.ops) - (set(KERNELS) - {"attention_prefill", "attention_decode", "moe_router"})
        if bad:
            raise ValueError(f"table {self.name}: operators {sorted(bad)} cannot be tabulated by tokens")


def table_key(gpu: str, model: str, tp: int) -> str:
    return f"{gpu}/{model}/tp{tp}"


@dataclass(frozen=True)
class AllReduceTable:
    """Measured seconds of one all-reduce over ``tp`` GPUs of ``gpu`` (one node) against the bytes reduced."""

    name: str
    gpu: str
    tp: int
    nbytes: Sequence[int]
    seconds: Sequence[float]

    def __post_init__(self) -> None:
        if self.tp < 2:
            raise ValueError(f"all-reduce table {self.name}: tp={self.tp} must be >= 2")
        if not len(self.nbytes) or len(self.nbytes) != len(self.seconds):
            raise ValueError(f"all-reduce table {self.name}: needs as many bytes as seconds, at least one point "
                             f"({len(self.nbytes)} bytes, {len(self.seconds)} seconds)")
        bad = [(b, t) for b, t in zip(self.nbytes, self.seconds, strict=True) if not (b > 0 and t > 0)]
        if bad:
            raise ValueError(f"all-reduce table {self.name}: bytes and seconds must be > 0, got {bad[:3]}")


def allreduce_key(gpu: str, tp: int) -> str:
    return f"{gpu}/tp{tp}"


def _stamp(path: str | Path | None) -> tuple[str, int, int] | None:
    """(resolved path, modification time, size) of a ``tables.toml`` (default: the packaged one), the key its
    parse is memoised on; None when the file does not exist."""
    p = Path(path) if path else _packaged("tables.toml")
    if not p.exists():
        return None
    st = p.stat()
    return str(p.resolve()), st.st_mtime_ns, st.st_size


def load_tables(path: str | Path | None = None) -> dict[str, MeasuredTable]:
    """Every table in a ``tables.toml`` (default: the packaged ``catalog/tables.toml``), keyed
    ``gpu/model/tpN``; parsed once per (path, modification time)."""
    stamp = _stamp(path)
    return dict(_parse(*stamp)[0]) if stamp else {}


def load_allreduce_tables(path: str | Path | None = None) -> dict[str, AllReduceTable]:
    """Every ``[allreduce."gpu/tpN"]`` table in a ``tables.toml`` (default: the packaged one), keyed ``gpu/tpN``;
    parsed once per (path, modification time)."""
    stamp = _stamp(path)
    return dict(_parse(*stamp)[1]) if stamp else {}


@cache
def _parse(path: str, _mtime_ns: int, _size: int) -> tuple[dict[str, MeasuredTable], dict[str, AllReduceTable]]:
    """The ``[table]`` and ``[allreduce]`` sections of one ``tables.toml``, read once."""
    with open(path, "rb") as fh:
        raw = tomllib.load(fh)
    tables = {}
    for key, t in raw.get("table", {}).items():
        pf, dec = t.get("attention_prefill"), t.get("attention_decode")
        tables[key] = MeasuredTable(
            name=str(t.get("source", key)), gpu=str(t["gpu"]), model=str(t["model"]), tp=int(t["tp"]),
            dtype=str(t.get("dtype", "bf16")),
            ops={op: (v["tokens"], v["seconds"]) for op, v in t.get("op", {}).items()},
            attention_prefill=(pf["tokens"], pf["context"], pf["seconds"]) if pf else None,
            attention_decode=(dec["batch"], dec["context"], dec["seconds"]) if dec else None)
    allreduce = {}
    for key, t in raw.get("allreduce", {}).items():
        try:
            allreduce[key] = AllReduceTable(
                name=str(t.get("source", key)), gpu=str(t["gpu"]), tp=int(t["tp"]),
                nbytes=[int(v) for v in t["bytes"]], seconds=[float(v) for v in t["seconds"]])
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"{path}: [allreduce.\"{key}\"]: {exc}") from exc
    return tables, allreduce


class TablePerfModel:
    """Prices iterations from a :class:`MeasuredTable`, the rest from ``fallback`` (the target's roofline).
    ``source``: the roofline of the cell the table was measured on when it differs from the target (other TP,
    model or dtype); the table is then scaled point by point by target / source roofline time.

    ``gemm_tile_tokens``: the token granularity of the GEMM reference shape (1: none; module docstring).
    ``all_reduce``: the measured all-reduce curve of the GPU at the fallback's TP degree (module docstring).

    Invariants: more tokens, more sequences or longer contexts never cost less; a table point is reproduced to
    float precision (same cell, monotone data; decode: data linear in the context per batch size with slopes
    non-decreasing in batch size); decode-only iterations of ``n`` sequences cost exactly ``A(n) + c(n) *
    sum_ctx`` (:meth:`decode_coeffs`); ``sum(breakdown(...).values())`` equals ``iteration_time_s(...)`` up to
    rounding.
    """

    def __init__(self, table: MeasuredTable, fallback: PerfModel, source: PerfModel | None = None, *,
                 gemm_tile_tokens: int = GEMM_TILE_TOKENS,
                 attention_rows_in_reference: bool = ATTENTION_ROWS_IN_REFERENCE,
                 all_reduce: AllReduceTable | None = None) -> None:
        if gemm_tile_tokens < 1:
            raise ValueError(f"gemm_tile_tokens={gemm_tile_tokens} must be >= 1")
        if all_reduce is not None and (all_reduce.gpu != fallback.gpu.name or all_reduce.tp != fallback.tp):
            raise ValueError(f"all-reduce table {all_reduce.name} is for {all_reduce.gpu} over {all_reduce.tp} GPUs, "
                             f"the pricer for {fallback.gpu.name} at TP={fallback.tp}")
        self.table, self.fallback = table, fallback
        self.gpu, self.model, self.dtype, self.tp = fallback.gpu, fallback.model, fallback.dtype, fallback.tp
        self._layers = fallback.model.num_hidden_layers
        self._tile = gemm_tile_tokens
        self._tiled = GEMM_OPS - ({"gate_up_proj", "down_proj"} if fallback.model.is_moe else set())
        self._refs: dict[tuple[int, bool], dict[str, float]] = {}
        self._kernel_s = {op: kernels_s(fallback, op) for op in KERNELS}
        src = source if source is not None else fallback
        self._curves: dict[str, Curve] = {}
        for op, (xs, raw) in table.ops.items():
            if len(xs) == 0:
                continue
            secs = np.asarray(raw, dtype=float)
            if source is not None:
                secs = secs * np.array([self._op_ref(fallback, op, v) / self._op_ref(src, op, v) for v in xs])
            self._curves[op] = Curve(xs, secs, [self._shape(op, v) for v in xs])
        self._grid: Grid | None = None
        if table.attention_prefill is not None and len(table.attention_prefill[0]):
            pn, pc, praw = table.attention_prefill
            psecs = np.asarray(praw, dtype=float)
            if source is not None:
                psecs = psecs * np.array([self._pf_ref(fallback, a, b) / self._pf_ref(src, a, b)
                                          for a, b in zip(pn, pc, strict=True)])
            self._grid = Grid(pn, pc, psecs, lambda a, b: self._pf_ref(fallback, a, b),
                              reference_between_rows=attention_rows_in_reference)
        self._dec: Curve | None = None
        self._dec_log_batches = np.zeros(0)
        self._dec_slopes = np.zeros(0)  # seconds per context token per layer, at each measured batch size
        self._c = fallback.decode_coeffs(1)[1]  # seconds per context token, whole model, without a decode table
        if table.attention_decode is not None and len(table.attention_decode[0]):
            bs, icpt, slope = fit_decode(*table.attention_decode)
            if source is not None:
                icpt = icpt * np.array([self._dec_ref(fallback, b) / self._dec_ref(src, b) for b in bs])
                slope = slope * (fallback.decode_coeffs(1)[1] / self._layers) / (
                    src.decode_coeffs(1)[1] / src.model.num_hidden_layers)  # per-layer ratio
            self._dec = Curve(bs, np.maximum(icpt, 1e-12))
            self._dec_log_batches, self._dec_slopes = np.log(bs), np.maximum(slope, dram_key_s(fallback))
        self.all_reduce = all_reduce
        self._ar: Curve | None = None
        if all_reduce is not None:
            self._ar = Curve(all_reduce.nbytes, all_reduce.seconds,
                             [fallback.allreduce_time_s(b) for b in all_reduce.nbytes])
        self._covered = frozenset(self._curves) | ({"attention_prefill"} if self._grid else set()) | (
            {"attention_decode"} if self._dec else set()) | ({"tp_comm"} if self._ar else set())
        self._coeffs: dict[int, tuple[float, float]] = {}

    # ---- references from a roofline (per layer, or per forward, launches included) -------------------------
    @staticmethod
    def _op_breakdown(pm: PerfModel, n: int, emitting: bool) -> dict[str, float]:
        """``pm``'s operator seconds at ``n`` tokens (sequences when ``emitting``: LM head and sampler)."""
        return pm.breakdown((), [0] * n) if emitting else pm.breakdown([(n, 0, False)], ())

    @staticmethod
    def _op_unit(pm: PerfModel, bd: dict[str, float], op: str) -> float:
        """``op``'s seconds in ``bd`` per layer (per forward for :data:`PER_FORWARD`), launches included."""
        return bd[op] / (1 if op in PER_FORWARD else pm.model.num_hidden_layers) + kernels_s(pm, op)

    @classmethod
    def _op_ref(cls, pm: PerfModel, op: str, x: float) -> float:
        return cls._op_unit(pm, cls._op_breakdown(pm, max(1, round(x)), op in EMITTING), op)

    @staticmethod
    def _pf_ref(pm: PerfModel, tokens: float, context: float) -> float:
        bd = pm.breakdown([(max(1, round(tokens)), max(0, round(context)), False)], ())
        return bd["attention_prefill"] / pm.model.num_hidden_layers + kernels_s(pm, "attention_prefill")

    @staticmethod
    def _dec_ref(pm: PerfModel, batch: float) -> float:
        bd = pm.breakdown((), [0] * max(1, round(batch)))
        return bd["attention_decode"] / pm.model.num_hidden_layers + kernels_s(pm, "attention_decode")

    def _ref(self, op: str, x: float) -> float:
        """The fallback's seconds of ``op`` at ``x`` tokens (sequences for :data:`EMITTING`), per layer or per
        forward, launches included; memoised per (x, emitting), all tabulated operators at once."""
        n, emitting = max(1, round(x)), op in EMITTING
        got = self._refs.get((n, emitting))
        if got is None:
            pm = self.fallback
            bd = self._op_breakdown(pm, n, emitting)
            got = self._refs[(n, emitting)] = {o: self._op_unit(pm, bd, o) for o in self.table.ops
                                                if (o in EMITTING) == emitting}
        return got[op]

    def _shape(self, op: str, x: float) -> float:
        """The reference a dense curve interpolates in: :meth:`_ref`, with a GEMM's token count rounded up to
        whole tiles of ``gemm_tile_tokens`` (a GEMM computes whole CTA tiles, so its time steps with them)."""
        if self._tile > 1 and op in self._tiled:
            x = -(-max(1, round(x)) // self._tile) * self._tile
        return self._ref(op, x)

    def _decode_slope(self, n: int) -> float:
        """Seconds per context token of a decode iteration of ``n`` sequences, whole model: the per-batch slopes
        interpolated linearly in log batch size (held at the edges); non-decreasing in ``n``."""
        if not len(self._dec_slopes):
            return self._c
        u = math.log(max(n, 1))
        return self._layers * float(np.interp(u, self._dec_log_batches, self._dec_slopes))

    @classmethod
    def from_names(cls, gpu: str, model: str, dtype: Dtype = "bf16", tp: int = 1, *,
                   catalog: str | Path | None = None, tables: str | Path | None = None,
                   refinements: str | Path | None = None, mixed_attention: str = "one_kernel",
                   kv_dtype: Dtype = "bf16", cudagraph_sizes: Sequence[int] = (), graph_mixed: bool = True,
                   custom_allreduce: bool = False) -> TablePerfModel:
        """The packaged (or ``tables``) table of (gpu, model, tp); when only other TPs of (gpu, model) were
        measured, the nearest one scaled by the roofline ratio; at TP > 1 the all-reduce table of (gpu, tp) when
        one was measured. Fallback: :meth:`RefinedPerfModel.from_names` (with ``mixed_attention``). Raises
        ValueError when no table of (gpu, model) exists."""
        fallback = RefinedPerfModel.from_names(gpu, model, dtype, tp, catalog=catalog,
                                               refinements=refinements or refinement_path(catalog),
                                               mixed_attention=mixed_attention, kv_dtype=kv_dtype,
                                               cudagraph_sizes=cudagraph_sizes, graph_mixed=graph_mixed,
                                               custom_allreduce=custom_allreduce)
        all_tables = load_tables(tables or tables_path(catalog))
        same = {t.tp: t for t in all_tables.values() if t.gpu == gpu and t.model == model}
        if not same:
            known = ", ".join(sorted(all_tables)) or "none"
            raise ValueError(f"no measured table for {gpu} / {model}; known: {known}")
        src_tp = min(same, key=lambda k: (abs(math.log2(k / tp)), k))
        t = same[src_tp]
        ar = load_allreduce_tables(tables or tables_path(catalog)).get(allreduce_key(gpu, tp)) if tp > 1 else None
        if src_tp == tp and t.dtype == dtype:
            return cls(t, fallback, all_reduce=ar)
        source = RefinedPerfModel(fallback.gpu, fallback.model, t.dtype, src_tp,  # type: ignore[arg-type]
                                  efficiency=fallback.efficiency, refinement=fallback.refinement)
        return cls(t, fallback, source, all_reduce=ar)

    @property
    def needs_decode_contexts(self) -> bool:
        """As the fallback's (:attr:`PerfModel.needs_decode_contexts`): mixed iterations are priced as one kernel."""
        return self.fallback.needs_decode_contexts

    def covers(self, op: str) -> bool:
        """True when ``op`` is priced from the table (its launches included) rather than the fallback."""
        return op in self._covered

    # ---- core ---------------------------------------------------------------------------------------------
    def _priced(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int], with_ctx: bool) -> list[float]:
        fb = self.fallback.breakdown(prefill, decode_ctx)
        out = [fb[op] for op in OPERATORS]
        tokens = sum(int(item[0]) for item in prefill) + len(decode_ctx)
        if tokens == 0:
            return out
        emit = sum(1 for item in prefill if len(item) < 3 or item[2]) + len(decode_ctx)
        n_layers, fbm = self._layers, self.fallback
        tokens = fbm.padded_tokens(tokens, not prefill)  # CUDA-graph padding (PerfModel.padded_tokens)
        removed = 0.0
        for op, curve in self._curves.items():
            x = emit if op in EMITTING else tokens
            if x == 0:
                continue
            per = 1 if op in PER_FORWARD else n_layers
            if curve.lo <= x <= curve.hi:  # the common case, without closures
                v = curve(x, self._shape(op, x) if curve.lr is not None else None)
            else:
                v = curve.at(x, partial(self._ref, op), partial(self._shape, op))
            out[_IDX[op]] = per * v
            removed += per * self._kernel_s[op]
        attn_kernel = False
        if self._grid is not None and prefill:
            pf = 0.0
            for item in prefill:
                pf += self._grid.at(float(item[0]), float(item[1]), lambda a, b: self._pf_ref(fbm, a, b))
            out[_IDX["attention_prefill"]] = n_layers * pf
            attn_kernel = True
        if self._dec is not None and decode_ctx:
            n = len(decode_ctx)
            a = self._dec.at(n, lambda v: self._dec_ref(fbm, v))
            c = self._decode_slope(n) if with_ctx else 0.0
            out[_IDX["attention_decode"]] = n_layers * a + (c * sum(decode_ctx) if with_ctx else 0.0)
            attn_kernel = True
        if attn_kernel:
            removed += n_layers * self._kernel_s["attention_prefill"]
        ar = self._ar
        if ar is not None and not fbm.uses_custom_allreduce(tokens * fbm.allreduce_bytes_per_token):
            # the table measured NCCL; vLLM's custom all-reduce stays the fallback's
            nbytes = tokens * fbm.allreduce_bytes_per_token
            ref = fbm.allreduce_time_s(nbytes)
            measured = ar(nbytes, ref) if ar.lo <= nbytes <= ar.hi else ar.at(nbytes, fbm.allreduce_time_s)
            out[_IDX["tp_comm"]] += fbm.allreduces_per_forward * (measured - ref)
        if prefill and decode_ctx and fbm.needs_decode_contexts:
            # a mixed iteration is one kernel: the fallback's critical path when it is longer than the measured parts
            i, j = _IDX["attention_prefill"], _IDX["attention_decode"]
            out[i], out[j] = max(fb["attention_prefill"], out[i] + out[j]), 0.0
        k = _IDX["kernel_overhead"]
        out[k] = max(0.0, out[k] - removed)
        return out

    # ---- public API ---------------------------------------------------------------------------------------
    def decode_coeffs(self, n_seqs: int) -> tuple[float, float]:
        """``(A, c)``: a decode-only iteration of ``n_seqs`` sequences costs ``A + c * sum_ctx`` exactly; both
        depend on ``n_seqs`` (the decode table's per-batch slopes) and never decrease with it. Memoised."""
        if n_seqs < 0:
            raise ValueError(f"n_seqs={n_seqs} must be >= 0")
        got = self._coeffs.get(n_seqs)
        if got is None:
            a = sum(self._priced((), [0] * n_seqs, with_ctx=False)) if n_seqs else 0.0
            got = self._coeffs[n_seqs] = (a, self._decode_slope(n_seqs))
        return got

    def decode_only_time_s(self, n_seqs: int, sum_ctx: int) -> float:
        if n_seqs < 0 or sum_ctx < 0:
            raise ValueError(f"n_seqs={n_seqs} and sum_ctx={sum_ctx} must be >= 0")
        a, c = self.decode_coeffs(n_seqs)
        return a + c * sum_ctx if n_seqs else 0.0

    def iteration_time_s(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> float:
        """Seconds for one iteration (same arguments as :meth:`PerfModel.iteration_time_s`)."""
        if not prefill:
            return self.decode_only_time_s(len(decode_ctx), sum(decode_ctx))
        return sum(self._priced(prefill, decode_ctx, with_ctx=True))

    def breakdown(self, prefill: Sequence[PrefillItem], decode_ctx: Sequence[int]) -> dict[str, float]:
        """Seconds per operator (all :data:`OPERATORS`); covered operators include their kernel launches."""
        return dict(zip(OPERATORS, self._priced(prefill, decode_ctx, with_ctx=True), strict=True))

    def prefill_time_s(self, tokens: int, cached: int = 0) -> float:
        return self.iteration_time_s([(tokens, cached)], ())

    def decode_step_time_s(self, batch: int, ctx: int) -> float:
        return self.decode_only_time_s(batch, batch * ctx)

    def __repr__(self) -> str:
        return f"TablePerfModel(table={self.table.name!r}, fallback={self.fallback!r})"


#: Pricer kinds :func:`pricer_from_names` builds (e.g. for a ``[hardware] perf`` config option).
PRICER_KINDS: Final = ("roofline", "refined", "table")


def pricer_from_names(kind: str, gpu: str, model: str, dtype: Dtype = "bf16", tp: int = 1,
                      catalog: str | Path | None = None,
                      mixed_attention: str = "one_kernel", *, kv_dtype: Dtype = "bf16",
                      cudagraph_sizes: Sequence[int] | None = (), graph_mixed: bool = True,
                      custom_allreduce: bool = False) -> PerfModel | TablePerfModel:
    """The pricer of a vLLM deployment. ``roofline``: :meth:`PerfModel.from_names` (the default); ``refined``:
    :class:`RefinedPerfModel`; ``table``: :class:`TablePerfModel` (ValueError when no table of the GPU and model
    exists). ``mixed_attention``: :data:`agentreplay.perf.model.MIXED_ATTENTION` (the table's mixed iterations
    take its fallback's one kernel when that is longer than its measured parts). ``kv_dtype``: the KV cache's
    element dtype (:func:`agentreplay.perf.deploy.kv_cache_dtype`). ``cudagraph_sizes``: the CUDA-graph capture
    sizes batches are padded to; ``None`` = vLLM's defaults for the GPU's default scheduler limits
    (:func:`agentreplay.perf.deploy.default_cudagraph_sizes`), ``()`` (the default) = eager (no graphs, no
    padding, as the calibration profiles ran); ``graph_mixed``: mixed / prefill batches are padded too (False
    under ``cudagraph_mode = FULL_DECODE_ONLY``). ``custom_allreduce``: True = vLLM's custom all-reduce where vLLM
    uses it; False (the default, as calibrated) = NCCL for every TP all-reduce (vLLM
    ``--disable-custom-all-reduce``). A simulation passes both from ``[hardware] deployment_kernels``
    (:func:`agentreplay.sim.run.graph_sizes`)."""
    extra = {"kv_dtype": kv_dtype, "graph_mixed": graph_mixed, "custom_allreduce": custom_allreduce}
    spec = load_gpu(gpu, catalog)
    sizes = default_cudagraph_sizes(spec) if cudagraph_sizes is None else tuple(cudagraph_sizes)
    if kind == "roofline":
        return PerfModel(spec, load_model(model), dtype, tp, mixed_attention=mixed_attention, cudagraph_sizes=sizes,
                         **extra)  # type: ignore[arg-type]
    if kind == "refined":
        return RefinedPerfModel.from_names(gpu, model, dtype, tp, catalog=catalog,
                                           refinements=refinement_path(catalog), mixed_attention=mixed_attention,
                                           cudagraph_sizes=sizes, **extra)
    if kind == "table":
        return TablePerfModel.from_names(gpu, model, dtype, tp, catalog=catalog,
                                         refinements=refinement_path(catalog), mixed_attention=mixed_attention,
                                         cudagraph_sizes=sizes, **extra)  # type: ignore[arg-type]
    raise ValueError(f"perf={kind!r}; allowed: {list(PRICER_KINDS)}")

