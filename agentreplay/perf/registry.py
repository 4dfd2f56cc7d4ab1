"""The pricer of a deployment by name (:func:`pricer_from_names`): one builder per kind in a name-keyed registry
(:data:`PRICER_KINDS`, the ``[hardware] perf`` choices), and ``auto`` (:func:`choose_pricer`): the measured-table
pricer where a deployment profile of exactly the deployment is shipped, else the roofline (DESIGN §5, "Profiled
deployments": a profile of the exact GPU, model, dtype and TP is an input; without one the performance model
predicts from other GPUs and models)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentreplay.perf.catalog import Dtype, GpuSpec, load_gpu, load_model
from agentreplay.perf.deploy import default_cudagraph_sizes
from agentreplay.perf.engine_cost import fitted_efficiency
from agentreplay.perf.loaders import refinement_path, tables_path
from agentreplay.perf.measured import table_key
from agentreplay.perf.model import PerfModel
from agentreplay.perf.refined import RefinedPerfModel
from agentreplay.perf.stepcost import overlapped
from agentreplay.perf.table_index import TableEntry, table_entries
from agentreplay.perf.table_model import TablePerfModel


@dataclass(frozen=True, slots=True)
class PricerRequest:
    """One :func:`pricer_from_names` call as every builder of :data:`BUILDERS` receives it."""

    spec: GpuSpec  #: the GPU ``gpu`` names, loaded from ``catalog``
    gpu: str
    model: str
    dtype: Dtype
    tp: int
    catalog: str | Path | None
    mixed_attention: str
    cudagraph_sizes: tuple[int, ...]  #: resolved capture sizes (tokens); () = eager
    kv_dtype: Dtype
    graph_mixed: bool
    custom_allreduce: bool
    async_scheduling: bool = False  #: vLLM --async-scheduling: the host step cost is hidden (stepcost.overlapped)


def _roofline(r: PricerRequest) -> PerfModel:
    return PerfModel(
        dataclasses.replace(r.spec, efficiency=overlapped(r.spec.efficiency)) if r.async_scheduling else r.spec,
        load_model(r.model),
        r.dtype,
        r.tp,
        mixed_attention=r.mixed_attention,
        cudagraph_sizes=r.cudagraph_sizes,
        kv_dtype=r.kv_dtype,
        graph_mixed=r.graph_mixed,
        custom_allreduce=r.custom_allreduce,
    )


def _refined(r: PricerRequest) -> RefinedPerfModel:
    return RefinedPerfModel.from_names(
        r.gpu,
        r.model,
        r.dtype,
        r.tp,
        catalog=r.catalog,
        refinements=refinement_path(r.catalog),
        mixed_attention=r.mixed_attention,
        cudagraph_sizes=r.cudagraph_sizes,
        kv_dtype=r.kv_dtype,
        graph_mixed=r.graph_mixed,
        custom_allreduce=r.custom_allreduce,
        async_scheduling=r.async_scheduling,
    )


def _table(r: PricerRequest) -> TablePerfModel:
    return TablePerfModel.from_names(
        r.gpu,
        r.model,
        r.dtype,
        r.tp,
        catalog=r.catalog,
        refinements=refinement_path(r.catalog),
        mixed_attention=r.mixed_attention,
        cudagraph_sizes=r.cudagraph_sizes,
        kv_dtype=r.kv_dtype,
        graph_mixed=r.graph_mixed,
        custom_allreduce=r.custom_allreduce,
        async_scheduling=r.async_scheduling,
    )


#: Pricer kind -> builder; a new pricer kind is one builder here (and its tests).
BUILDERS: Final[dict[str, Callable[[PricerRequest], PerfModel | TablePerfModel]]] = {
    "roofline": _roofline,
    "refined": _refined,
    "table": _table,
}
#: Pricer kinds :func:`pricer_from_names` builds (e.g. for a ``[hardware] perf`` config option).
PRICER_KINDS: Final = tuple(BUILDERS)
#: The kind that picks one of :data:`PRICER_KINDS` per deployment (:func:`choose_pricer`).
AUTO: Final = "auto"
#: What a user may ask for: ``auto`` or one of the kinds.
PERF_CHOICES: Final = (AUTO, *PRICER_KINDS)


@dataclass(frozen=True, slots=True)
class PricerChoice:
    """What ``auto`` runs for one deployment (:func:`choose_pricer`) and why, as ``summary.json`` records it."""

    kind: str  #: one of :data:`PRICER_KINDS`: ``table`` or ``roofline``
    reason: str  #: one sentence: the profile it prices from, or why there is none
    table: str | None = None  #: the ``tables.toml`` key priced from (``gpu/model/tpN``), with ``kind == "table"``
    source: str | None = None  #: the measured cell that table was made from

    def as_dict(self) -> dict[str, str | None]:
        return {"kind": self.kind, "reason": self.reason, "table": self.table, "source": self.source}


def _deployment(gpu: str, model: str, dtype: str, tp: int, kv_dtype: str) -> str:
    return f"{gpu} / {model} / {dtype} (KV {kv_dtype}) / TP{tp}"


def _why_not(key: str, entry: TableEntry | None, others: list[int], dtype: str, kv_dtype: str) -> str:
    """Why the shipped table of ``key`` (None: none) is not a deployment profile of the deployment."""
    if entry is None:
        return f"profiled at TP {', '.join(map(str, others))} only" if others else "no per-layer profile of it"
    if not entry.origin.deployment_profile:
        return (
            f"the shipped table {key} ({entry.origin.source}) is a kernel profile taken outside the serving engine, "
            "not a profile of the deployment (--perf table prices from it)"
        )
    return f"profiled in {entry.dtype} with a {entry.origin.kv_dtype} KV cache, not {dtype} with a {kv_dtype} KV cache"


def choose_from(
    entries: Mapping[str, TableEntry], gpu: str, model: str, dtype: str, tp: int, kv_dtype: str
) -> PricerChoice:
    """:func:`choose_pricer` on the tables ``entries`` describes (:func:`agentreplay.perf.table_index.table_entries`
    of a ``tables.toml``)."""
    key = table_key(gpu, model, tp)
    entry = entries.get(key)
    what = _deployment(gpu, model, dtype, tp, kv_dtype)
    if (
        entry is not None
        and entry.origin.deployment_profile
        and entry.dtype == dtype
        and entry.origin.kv_dtype == kv_dtype
    ):
        comm = ", TP collectives (none in the profile) added once by the table pricer" if tp > 1 else ""
        return PricerChoice(
            "table",
            f"a {entry.origin.engine} {entry.origin.engine_version} per-layer profile of exactly {what} is shipped "
            f"({entry.origin.source}): iterations priced from it{comm}",
            key,
            entry.origin.source,
        )
    others = sorted(e.tp for e in entries.values() if e.gpu == gpu and e.model == model and e.origin.deployment_profile)
    why = _why_not(key, entry, others, dtype, kv_dtype)
    return PricerChoice("roofline", f"no deployment profile of {what}: {why}; the roofline predicts it")


def choose_pricer(
    gpu: str,
    model: str,
    dtype: str = "bf16",
    tp: int = 1,
    *,
    kv_dtype: str = "bf16",
    catalog: str | Path | None = None,
) -> PricerChoice:
    """``auto``: ``table`` when the ``tables.toml`` beside ``catalog`` (or the packaged one) holds a *deployment
    profile* (:class:`~agentreplay.perf.loaders.TableOrigin`: the serving engine's own per-layer profile) of
    exactly ``gpu``, ``model``, ``dtype``, ``kv_dtype`` and ``tp``: iterations are then priced from that TP's own
    profile, TP collectives added by the table pricer (the profile holds none; the measured all-reduce curve of
    the GPU where one exists, else the roofline's); else ``roofline``, with the reason. A kernel profile of the
    same shapes taken outside the engine (HF-transformers modules, Vidur's operators), another TP's, dtype's or KV
    dtype's profile does not count; ``--perf table`` still prices from those, scaled. Expert parallelism has no
    profile dimension: the experts of a MoE model are the roofline's in every table. The tables are read from
    their index where it stands for the file (:mod:`agentreplay.perf.table_index`), else parsed: the same choice."""
    return choose_from(table_entries(tables_path(catalog)), gpu, model, dtype, tp, kv_dtype)


def pricer_from_names(
    kind: str,
    gpu: str,
    model: str,
    dtype: Dtype = "bf16",
    tp: int = 1,
    catalog: str | Path | None = None,
    mixed_attention: str = "one_kernel",
    *,
    kv_dtype: Dtype = "bf16",
    cudagraph_sizes: Sequence[int] | None = (),
    graph_mixed: bool = True,
    custom_allreduce: bool = False,
    async_scheduling: bool = False,
    engine_cost: str = "catalog",
) -> PerfModel | TablePerfModel:
    """The pricer of a vLLM deployment. ``roofline``: :meth:`PerfModel.from_names` (the default); ``refined``:
    :class:`RefinedPerfModel`; ``table``: :class:`TablePerfModel` (ValueError when no table of the GPU and model
    exists); ``auto``: the kind :func:`choose_pricer` picks (``table`` for a shipped deployment profile of exactly
    this deployment, else ``roofline``). ``mixed_attention``: :data:`agentreplay.perf.model.MIXED_ATTENTION` (the
    table's mixed iterations take its fallback's one kernel when that is longer than its measured parts).
    ``kv_dtype``: the KV cache's element dtype (:func:`agentreplay.perf.deploy.kv_cache_dtype`).
    ``cudagraph_sizes``: the CUDA-graph capture sizes batches are padded to; ``None`` = vLLM's defaults for the
    GPU's default scheduler limits (:func:`agentreplay.perf.deploy.default_cudagraph_sizes`), ``()`` (the
    default) = eager (no graphs, no padding, as the calibration profiles ran); ``graph_mixed``: mixed / prefill
    batches are padded too (False under ``cudagraph_mode = FULL_DECODE_ONLY``). ``custom_allreduce``: True =
    vLLM's custom all-reduce where vLLM uses it; False (the default, as calibrated) = NCCL for every TP all-reduce
    (vLLM ``--disable-custom-all-reduce``). A simulation passes both from ``[hardware] deployment_kernels``
    (:func:`agentreplay.sim.run.graph_sizes`). ``async_scheduling``: vLLM ``--async-scheduling``, the host step
    cost hidden behind the GPU step (:func:`agentreplay.perf.stepcost.overlapped`; False, as calibrated).
    ``engine_cost``: ``catalog`` (the GPU catalogue's efficiencies) or ``fitted`` (the engine cost fitted end to end
    on measured vLLM runs, :func:`agentreplay.perf.engine_cost.fitted_efficiency`; the roofline only)."""
    spec = load_gpu(gpu, catalog)
    sizes = default_cudagraph_sizes(spec) if cudagraph_sizes is None else tuple(cudagraph_sizes)
    if kind == AUTO:
        kind = choose_pricer(gpu, model, dtype, tp, kv_dtype=kv_dtype, catalog=catalog).kind
    build = BUILDERS.get(kind)
    if build is None:
        raise ValueError(f"perf={kind!r}; allowed: {list(PERF_CHOICES)}")
    if engine_cost == "fitted":
        if kind != "roofline":
            raise ValueError(
                f"engine_cost = 'fitted' prices with the roofline; this deployment runs the {kind!r} pricer "
                "(pass perf = 'roofline', or engine_cost = 'catalog')"
            )
        spec = dataclasses.replace(spec, efficiency=fitted_efficiency(spec, catalog))
    elif engine_cost != "catalog":
        raise ValueError(f"engine_cost={engine_cost!r}; allowed: ['catalog', 'fitted']")
    return build(
        PricerRequest(
            spec,
            gpu,
            model,
            dtype,
            tp,
            catalog,
            mixed_attention,
            sizes,
            kv_dtype,
            graph_mixed,
            custom_allreduce,
            async_scheduling,
        )
    )
