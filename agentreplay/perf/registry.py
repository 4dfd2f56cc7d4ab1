"""The pricer of a deployment by name (:func:`pricer_from_names`): one builder per kind in a name-keyed registry
(:data:`PRICER_KINDS`, the ``[hardware] perf`` choices)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from agentreplay.perf.catalog import Dtype, GpuSpec, load_gpu, load_model
from agentreplay.perf.deploy import default_cudagraph_sizes
from agentreplay.perf.loaders import refinement_path
from agentreplay.perf.model import PerfModel
from agentreplay.perf.refined import RefinedPerfModel
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


def _roofline(r: PricerRequest) -> PerfModel:
    return PerfModel(
        r.spec,
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
    )


#: Pricer kind -> builder; a new pricer kind is one builder here (and its tests).
BUILDERS: Final[dict[str, Callable[[PricerRequest], PerfModel | TablePerfModel]]] = {
    "roofline": _roofline,
    "refined": _refined,
    "table": _table,
}
#: Pricer kinds :func:`pricer_from_names` builds (e.g. for a ``[hardware] perf`` config option).
PRICER_KINDS: Final = tuple(BUILDERS)


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
) -> PerfModel | TablePerfModel:
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
    spec = load_gpu(gpu, catalog)
    sizes = default_cudagraph_sizes(spec) if cudagraph_sizes is None else tuple(cudagraph_sizes)
    build = BUILDERS.get(kind)
    if build is None:
        raise ValueError(f"perf={kind!r}; allowed: {list(PRICER_KINDS)}")
    return build(
        PricerRequest(
            spec, gpu, model, dtype, tp, catalog, mixed_attention, sizes, kv_dtype, graph_mixed, custom_allreduce
        )
    )
