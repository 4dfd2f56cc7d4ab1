"""Measured-table pricing (:class:`TablePerfModel`), falling back to a roofline (:class:`PerfModel` or the refined
roofline, :mod:`agentreplay.perf.refined`). Times are seconds; token counts are tokens.

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
- a table measured at TP > 1 holds one rank's operators only, never a TP collective: LLMServingSim's vLLM profiler
  runs every TP degree on one GPU with each rank's shapes (``profiler/core/engine.py`` ``fuse_engine_kwargs``:
  ``tensor_parallel_size=1``, heads, intermediate size and vocabulary divided by TP) and its simulator adds an
  ALLREDUCE after ``o_proj`` and ``down_proj`` itself (``serving/core/trace_generator.py`` ``_emit_sequence``,
  ``_TP_ALLREDUCE_AFTER``, simulated by ASTRA-Sim); LLMServingSim v0 and Vidur profile one rank the same way.
  So the collectives of a TP-N iteration are priced once, as below, whether the table is that TP's own profile
  (:meth:`TablePerfModel.from_names` takes it unscaled) or another TP's scaled.
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
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final

import numpy as np

from agentreplay.perf.catalog import DTYPE_BYTES, Dtype
from agentreplay.perf.interp import Curve, Grid, fit_decode
from agentreplay.perf.kernels import EMITTING, GEMM_OPS, KERNELS, PER_FORWARD
from agentreplay.perf.loaders import load_allreduce_tables, load_tables, refinement_path, tables_path
from agentreplay.perf.measured import AllReduceTable, MeasuredTable, allreduce_key
from agentreplay.perf.model import PerfModel, PrefillItem
from agentreplay.perf.refined import RefinedPerfModel, kernels_s
from agentreplay.perf.terms import OPERATORS

_IDX: Final = {op: i for i, op in enumerate(OPERATORS)}

#: Token granularity of the GEMM reference shape of :class:`TablePerfModel` (CUTLASS / cuBLAS bf16 tensor-core
#: kernels tile M in multiples of 64 rows for these shapes). Chosen by cross-validation inside the calibration
#: cells among 1, 16, 32, 64 and 128 (validation/protocol/crossval.py table_cv: per calibration cell, a table from every
#: other point scored on the GEMM points in between; scores in the validation report's constants list).
#: History: first chosen by comparing candidates on validation points, which the protocol no longer allows.
GEMM_TILE_TOKENS: Final = 64
#: Prefill-attention rows of the grid interpolated linearly in the log of the fallback's time (True) instead of
#: log tokens (False). Chosen by cross-validation inside the calibration cells (validation/protocol/crossval.py
#: table_cv, the prefill-attention grid points in between the table's rows and columns).
ATTENTION_ROWS_IN_REFERENCE: Final = True


def dram_key_s(pm: PerfModel) -> float:
    """Seconds per decode context token per layer when the KV cache streams from DRAM at the datasheet peak
    bandwidth: K and V of the rank's KV heads."""
    kv_bytes = 2 * pm.model.kv_heads_per_rank(pm.tp) * pm.model.head_dim * DTYPE_BYTES[pm.kv_dtype]
    return kv_bytes / (pm.gpu.mem_bandwidth_gbps * 1e9)


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

    def __init__(
        self,
        table: MeasuredTable,
        fallback: PerfModel,
        source: PerfModel | None = None,
        *,
        gemm_tile_tokens: int = GEMM_TILE_TOKENS,
        attention_rows_in_reference: bool = ATTENTION_ROWS_IN_REFERENCE,
        all_reduce: AllReduceTable | None = None,
    ) -> None:
        if gemm_tile_tokens < 1:
            raise ValueError(f"gemm_tile_tokens={gemm_tile_tokens} must be >= 1")
        if all_reduce is not None and (all_reduce.gpu != fallback.gpu.name or all_reduce.tp != fallback.tp):
            raise ValueError(
                f"all-reduce table {all_reduce.name} is for {all_reduce.gpu} over {all_reduce.tp} GPUs, "
                f"the pricer for {fallback.gpu.name} at TP={fallback.tp}"
            )
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
                psecs = psecs * np.array(
                    [self._pf_ref(fallback, a, b) / self._pf_ref(src, a, b) for a, b in zip(pn, pc, strict=True)]
                )
            self._grid = Grid(
                pn,
                pc,
                psecs,
                lambda a, b: self._pf_ref(fallback, a, b),
                reference_between_rows=attention_rows_in_reference,
            )
        self._dec: Curve | None = None
        self._dec_log_batches = np.zeros(0)
        self._dec_slopes = np.zeros(0)  # seconds per context token per layer, at each measured batch size
        self._c = fallback.decode_coeffs(1)[1]  # seconds per context token, whole model, without a decode table
        if table.attention_decode is not None and len(table.attention_decode[0]):
            bs, icpt, slope = fit_decode(*table.attention_decode)
            if source is not None:
                icpt = icpt * np.array([self._dec_ref(fallback, b) / self._dec_ref(src, b) for b in bs])
                slope = (
                    slope
                    * (fallback.decode_coeffs(1)[1] / self._layers)
                    / (src.decode_coeffs(1)[1] / src.model.num_hidden_layers)
                )  # per-layer ratio
            self._dec = Curve(bs, np.maximum(icpt, 1e-12))
            self._dec_log_batches, self._dec_slopes = np.log(bs), np.maximum(slope, dram_key_s(fallback))
        self.all_reduce = all_reduce
        self._ar: Curve | None = None
        if all_reduce is not None:
            self._ar = Curve(
                all_reduce.nbytes, all_reduce.seconds, [fallback.allreduce_time_s(b) for b in all_reduce.nbytes]
            )
        self._covered = (
            frozenset(self._curves)
            | ({"attention_prefill"} if self._grid else set())
            | ({"attention_decode"} if self._dec else set())
            | ({"tp_comm"} if self._ar else set())
        )
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
            got = self._refs[(n, emitting)] = {
                o: self._op_unit(pm, bd, o) for o in self.table.ops if (o in EMITTING) == emitting
            }
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
    def from_names(
        cls,
        gpu: str,
        model: str,
        dtype: Dtype = "bf16",
        tp: int = 1,
        *,
        catalog: str | Path | None = None,
        tables: str | Path | None = None,
        refinements: str | Path | None = None,
        mixed_attention: str = "one_kernel",
        kv_dtype: Dtype = "bf16",
        cudagraph_sizes: Sequence[int] = (),
        graph_mixed: bool = True,
        custom_allreduce: bool = False,
        async_scheduling: bool = False,
    ) -> TablePerfModel:
        """The packaged (or ``tables``) table of (gpu, model, tp), unscaled when it was measured in ``dtype`` (that
        TP's own profile: a TP-2 deployment is priced from the TP-2 profile, never from the TP-1 one scaled); when
        only other TPs of (gpu, model) were measured, the nearest one scaled by the roofline ratio; at TP > 1 the
        all-reduce table of (gpu, tp) when one was measured (no table holds a TP collective: module docstring).
        Fallback: :meth:`RefinedPerfModel.from_names` (with ``mixed_attention``). Raises ValueError when no table
        of (gpu, model) exists."""
        fallback = RefinedPerfModel.from_names(
            gpu,
            model,
            dtype,
            tp,
            catalog=catalog,
            refinements=refinements or refinement_path(catalog),
            mixed_attention=mixed_attention,
            kv_dtype=kv_dtype,
            cudagraph_sizes=cudagraph_sizes,
            graph_mixed=graph_mixed,
            custom_allreduce=custom_allreduce,
            async_scheduling=async_scheduling,
        )
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
        source = RefinedPerfModel(
            fallback.gpu,
            fallback.model,
            t.dtype,  # type: ignore[arg-type]
            src_tp,
            efficiency=fallback.efficiency,
            refinement=fallback.refinement,
        )
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
