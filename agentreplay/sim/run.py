"""``simulate()``: the Python API behind ``agentreplay simulate``. Resolves the run (the workload, the cluster's
instances, their KV capacity and pricers: :func:`resolve`), builds the kernel and attaches the mechanisms that are
on (:mod:`agentreplay.sim.build`), replays, and collects the outputs (:mod:`agentreplay.sim.collect`).

Same trace + config + seed gives identical results and byte-identical output files (seeding:
:mod:`agentreplay.sim.build`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import math
import os
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from agentreplay.features.mechanism import Cluster, Hooks, Mechanism, Sizing, enabled
from agentreplay.perf import IterationPricer, kv_capacity, load_gpu, load_model
from agentreplay.perf.deploy import default_cudagraph_sizes, graph_padding, kv_cache_dtype
from agentreplay.perf.parallel import check_deployment, expert_weight_bytes_freed
from agentreplay.perf.table import pricer_from_names
from agentreplay.sim.admission import Rejections, apply_max_model_len
from agentreplay.sim.build import ClusterPlan, Resolved, attach, build
from agentreplay.sim.collect import collect
from agentreplay.sim.config import ConfigError, HardwareConfig, SimConfig
from agentreplay.sim.result import SimResult
from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.trace.io import Trace


class CapacityError(ValueError):
    """The configuration cannot run the trace (weights do not fit, or no room for the longest request)."""


def plan_cluster(
    cfg: SimConfig, workload: Workload | None = None, hw: HardwareConfig | None = None
) -> list[ClusterPlan]:
    """One :class:`ClusterPlan` per instance (instances of the same GPU / TP / dtype share one); ``hw``: the
    cluster's hardware when known (default: :func:`cluster_hardware`)."""
    plans: dict[tuple[str, int, str], ClusterPlan] = {}
    out = []
    for spec in (hw or cluster_hardware(cfg)).instance_specs():
        if spec not in plans:
            plans[spec] = plan_instance(cfg, *spec, workload=workload)
        out.append(plans[spec])
    return out


def cluster_hardware(cfg: SimConfig, mechanisms: Sequence[tuple[str, Mechanism]] | None = None) -> HardwareConfig:
    """``[hardware]`` as the instances are built, as the mechanisms that are on shape it (with ``[disagg]`` on: the
    prefill pool then the decode pool); ``mechanisms``: those of ``cfg`` when already built."""
    hw = cfg.hardware
    for _, m in enabled(cfg) if mechanisms is None else mechanisms:
        hw = m.hardware(hw)
    return hw


def plan_instance(cfg: SimConfig, gpu_name: str, tp: int, dtype: str, workload: Workload | None = None) -> ClusterPlan:
    """Resolve the KV block count and batching limits of one instance; fail with the numbers if it cannot run."""
    hw = dataclasses.replace(cfg.hardware, gpu=gpu_name, tp=tp, dtype=dtype, groups=())  # type: ignore[arg-type]
    try:
        gpu, model = load_gpu(hw.gpu), load_model(hw.model)
        model.validate_tp(hw.tp)
    except ValueError as exc:
        raise CapacityError(str(exc)) from None
    seqs, tokens = cfg.scheduler.resolved(gpu.memory_gib, gpu.name)
    if cfg.cache.num_gpu_blocks is not None:
        blocks, source = cfg.cache.num_gpu_blocks, "config"
    else:
        try:
            cap = kv_capacity(
                gpu,
                model,
                hw.dtype,
                hw.tp,
                cfg.cache.gpu_memory_utilization,
                cfg.cache.block_size,
                kv_dtype=kv_cache_dtype(hw.kv_cache_dtype),
            )
        except ValueError as exc:
            raise CapacityError(str(exc)) from None
        blocks, source = cap.blocks, "memory model"
        freed = expert_weight_bytes_freed(model, hw.dtype, hw.tp, hw.dp)  # type: ignore[arg-type]
        if freed:  # the experts spread over the DP ranks leave each rank more room for KV
            blocks = (cap.budget_bytes - cap.weight_bytes + freed - cap.reserve_bytes) // cap.block_bytes
            source = f"memory model, experts over {hw.dp * hw.tp} ranks"
    mml = cfg.scheduler.max_model_len
    if mml is not None and math.ceil(mml / cfg.cache.block_size) > blocks:
        # vLLM refuses to start (vllm/v1/core/kv_cache_utils.py::_check_enough_kv_cache_memory)
        raise CapacityError(
            f"{model.name} on {hw.tp}x {gpu.name}: max_model_len {mml:,} needs {math.ceil(mml / cfg.cache.block_size)} "
            f"KV blocks of {cfg.cache.block_size} tokens, only {blocks} available (from the {source}); vLLM "
            f'refuses to start ("To serve at least one request with the model\'s max seq len"): lower '
            f"--max-model-len to at most {blocks * cfg.cache.block_size:,}"
        )
    if workload is not None and workload.n_turns:
        longest = int((workload.input_tokens + workload.output_tokens).max())
        need = math.ceil(longest / cfg.cache.block_size)
        if need > blocks:
            raise CapacityError(
                f"{model.name} on {hw.tp}x {gpu.name}: {blocks} KV blocks of {cfg.cache.block_size} tokens "
                f"({blocks * cfg.cache.block_size:,} tokens, from the {source}) leave no room for the longest "
                f"request of the trace ({longest:,} tokens = {need} blocks); set --max-model-len (vLLM rejects "
                f"longer requests and runs the rest) to at most {blocks * cfg.cache.block_size:,}"
            )
    return ClusterPlan(blocks, seqs, tokens, source)


def graph_sizes(cfg: SimConfig, gpu_name: str, plan: ClusterPlan) -> tuple[int, ...]:
    """CUDA-graph capture sizes of an instance: none without ``deployment_kernels`` or under ``enforce_eager``,
    the configured ones, or vLLM's defaults for the instance's scheduler limits
    (:func:`agentreplay.perf.deploy.cudagraph_capture_sizes`)."""
    hw = cfg.hardware
    if not hw.deployment_kernels or hw.enforce_eager or not graph_padding(hw.cudagraph_mode)[0]:
        return ()
    if hw.cudagraph_capture_sizes:
        return tuple(s for s in hw.cudagraph_capture_sizes if s <= plan.max_num_batched_tokens)
    return default_cudagraph_sizes(load_gpu(gpu_name), plan.max_num_seqs, plan.max_num_batched_tokens)


def simulate(
    trace: Trace | Workload,
    cfg: SimConfig | None = None,
    *,
    perf: IterationPricer | None = None,
    progress: Callable[[int, int], None] | None = None,
    stream_to: str | os.PathLike[str] | None = None,
    error_bands: str | os.PathLike[str] = "packaged",
    findings: bool = True,
) -> SimResult:
    """Replay ``trace`` on the cluster of ``cfg``; ``perf`` overrides the catalog performance model (tests,
    measured profiles). ``progress`` is an optional callable ``(done_programs, total)`` called as programs end.
    ``stream_to``: a folder; the tables are written there as programs finish (:mod:`agentreplay.sim.stream`)
    instead of being kept in memory. ``error_bands``: the error bands of the headline figures in the summary
    (:func:`agentreplay.sim.collect.error_band_dict`: ``"packaged"``, an ``error_bands.json``, or ``"none"``);
    ``findings``: the saturation / reuse findings in the summary (False: left out, e.g. a sweep cell).
    """
    cfg = cfg or SimConfig()
    mechanisms = enabled(cfg)
    compiled = trace if isinstance(trace, Workload) else compile_trace(trace)
    res, rejections = resolve(trace, compiled, cfg, mechanisms, perf)
    cluster, decisions = build(cfg, res, mechanisms, progress, stream_to)
    run(cluster, attach(cluster, mechanisms))
    return collect(cluster, mechanisms, rejections, decisions, compiled, error_bands, findings)


def resolve(
    trace: Trace | Workload,
    workload: Workload,
    cfg: SimConfig,
    mechanisms: Sequence[tuple[str, Mechanism]],
    perf: IterationPricer | None = None,
) -> tuple[Resolved, Rejections]:
    """What the run needs before anything is built, and the requests ``max_model_len`` rejected: the workload as
    configured (``max_programs``, ``reuse_scale``, ``max_model_len``) and as each mechanism prepares it, the
    cluster's instances and their plans (which fail with the numbers when the longest request cannot fit), their
    pricers (as each mechanism prices), then the workload as each mechanism admits it. ``trace``: as given to
    :func:`simulate` (a ``Trace`` may carry program columns), ``workload``: it compiled."""
    if cfg.workload.max_programs is not None:
        workload = workload.head(cfg.workload.max_programs)
    workload = workload.with_reuse_scale(cfg.workload.reuse_scale)
    workload, rejections = apply_max_model_len(workload, cfg.scheduler.max_model_len)
    for _, m in mechanisms:
        workload = m.prepare(workload)
    hw = cluster_hardware(cfg, mechanisms)
    if hw.dp > 1:
        try:
            check_deployment(load_model(hw.model), hw.dp, hw.tp, hw.ep, hw.all2all_backend)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    plans = plan_cluster(cfg, workload, hw)
    specs = hw.instance_specs()
    pricers: dict[tuple[str, int, str], IterationPricer] = {}
    for spec, plan in zip(specs, plans, strict=True):
        if spec not in pricers:
            pricer = perf or instance_pricer(cfg, hw, spec, plan)
            for _, m in mechanisms:
                pricer = m.pricer(pricer, spec)
            pricers[spec] = pricer
    sizing = Sizing(trace, pricers[specs[0]], plans[0].max_num_batched_tokens)
    for _, m in mechanisms:
        workload = m.admit(workload, sizing)
    return Resolved(workload, hw, specs, plans, pricers), rejections


def instance_pricer(
    cfg: SimConfig, hw: HardwareConfig, spec: tuple[str, int, str], plan: ClusterPlan
) -> IterationPricer:
    """The catalog pricer of the instances of ``spec`` (``[hardware] perf``), with their CUDA-graph sizes."""
    return pricer_from_names(
        hw.perf,
        spec[0],
        hw.model,
        spec[2],  # type: ignore[arg-type]
        spec[1],
        mixed_attention=hw.mixed_attention,
        kv_dtype=kv_cache_dtype(hw.kv_cache_dtype),
        cudagraph_sizes=graph_sizes(cfg, spec[0], plan),
        graph_mixed=graph_padding(hw.cudagraph_mode)[1],
        custom_allreduce=hw.deployment_kernels and not hw.disable_custom_all_reduce,
        engine_cost=hw.engine_cost,
    )


def run(cluster: Cluster, hooks: Hooks) -> None:
    """Replay: the mechanisms' ``before_run`` hooks, the arrivals, the engine until nothing is left; then the
    invariants of a finished run (every program finished, every instance idle) and the ``after_run`` hooks. A
    streamed run that fails leaves no file looking complete."""
    sink = cluster.sink
    for hook in hooks.before_run:
        hook()
    try:
        with frozen_heap():
            cluster.orch.start()
            cluster.engine.run()
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    unfinished = int(np.isnan(cluster.recorder.program_finish_s).sum()) if sink is None else sink.live_programs
    if unfinished:
        if sink is not None:
            sink.abort()
        raise RuntimeError(f"simulation ended with {unfinished} unfinished programs (a bug: please report)")
    for inst in cluster.instances:
        inst.check_idle()
    for hook in hooks.after_run:
        hook()


#: allocations between collections of the youngest generation during a run (CPython's default: 700)
YOUNG_THRESHOLD = 50_000


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Hide the objects that exist before the run from the cyclic garbage collector while it runs
    (``gc.freeze``: "move them to a permanent generation and ignore them in all the future collections",
    https://docs.python.org/3/library/gc.html#gc.freeze), then give them back (``gc.unfreeze``: "put them back
    into the oldest generation"). The run allocates millions of short-lived objects, so the collector runs full
    collections all along, and each would traverse everything that existed before: the workload's per-turn lists
    (a day of 1 M programs holds 40 M tool-class references), the configuration and whatever the caller holds,
    none of it garbage the run made. Collections of what the run creates go on as usual. A caller that froze
    objects itself keeps them frozen (its own and, then, these).

    The youngest generation is also collected every 50,000 allocations instead of 700 (``gc.set_threshold``,
    restored after): the run's objects mostly die young (a call's request, a step's plan), so fewer collections
    find fewer of them still alive to traverse and promote."""
    frozen_before = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(max(thresholds[0], YOUNG_THRESHOLD), *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        if frozen_before == 0:
            gc.unfreeze()
