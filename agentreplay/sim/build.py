"""The kernel of a run: engine, recorder, instances (a scheduler with its KV manager and host tiers, priced by the
performance model), router and orchestrator (:func:`build`), then the mechanisms that are on attached to it in
registry order (:func:`attach`, :mod:`agentreplay.features.mechanism`).

Seeding: one ``numpy.random.SeedSequence(seed)`` spawns one generator per component (arrivals, tools), so a
component's draws do not depend on what another drew; a mechanism that draws spawns its own child (failures:
the third).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from agentreplay.engine import Engine
from agentreplay.features.mechanism import (
    Cluster,
    Hooks,
    Mechanism,
    Parts,
    Remote,
    Sample,
    Spec,
    Wiring,
    combine,
    dependencies,
)
from agentreplay.kv.manager import KVManager
from agentreplay.kv.residency import GIB, Residency
from agentreplay.kv.retention import RETENTIONS, ToolStats
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import HostTier, Link
from agentreplay.perf import load_model
from agentreplay.perf.deploy import kv_cache_dtype
from agentreplay.router.policies import ROUTERS
from agentreplay.scheduler.queue import QUEUE_ORDERS
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim.instance import Instance
from agentreplay.sim.metrics import Recorder
from agentreplay.sim.orchestrator import Orchestrator
from agentreplay.sim.tools import make_tools

if TYPE_CHECKING:
    import os

    from agentreplay.perf.pricer import IterationPricer
    from agentreplay.request import Request
    from agentreplay.sim.config import HardwareConfig, SimConfig
    from agentreplay.sim.stream import ResultStream
    from agentreplay.sim.workload import Workload


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What each instance gets, resolved before the run (written into the summary)."""

    num_gpu_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_source: str  #: "memory model" or "config"


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the run needs before anything is built (:func:`agentreplay.sim.run.resolve`)."""

    workload: Workload  #: the workload the run replays, after every mechanism's prepare and admit stages
    hardware: HardwareConfig  #: ``[hardware]`` as the instances are built
    specs: list[Spec]
    plans: list[ClusterPlan]
    pricers: dict[Spec, IterationPricer]


def build(
    cfg: SimConfig,
    res: Resolved,
    mechanisms: Sequence[tuple[str, Mechanism]],
    progress: Callable[[int, int], None] | None = None,
    stream_to: str | os.PathLike[str] | None = None,
) -> tuple[Cluster, list[dict[str, Any]] | None]:
    """The kernel, built with the mechanisms' :class:`~agentreplay.features.mechanism.Wiring`, and the decision
    log it fills (None without ``policy.decision_log``). ``progress``: called ``(done_programs, total)`` as
    programs end; ``stream_to``: the folder a streamed run writes its tables to (:mod:`agentreplay.sim.stream`)."""
    workload = res.workload
    rng_arrivals, rng_tools = (np.random.default_rng(s) for s in np.random.SeedSequence(cfg.seed).spawn(2))
    engine = Engine()
    sink: ResultStream | None = None
    if stream_to is not None:
        from agentreplay.sim.stream import ResultStream

        sink = ResultStream(workload, stream_to)
    rec = Recorder(workload, cfg.metrics.timeseries_interval_s, sink)
    orch_ref: list[Orchestrator] = []

    def on_finish(r: Request) -> None:
        orch_ref[0].on_turn_done(r)
        if progress is not None and r.turn == int(workload.turn_start[r.program + 1]) - 1:
            progress(orch_ref[0].done_programs, workload.n_programs)

    hw = res.hardware
    kv_dtype = kv_cache_dtype(hw.kv_cache_dtype)
    block_bytes = cfg.cache.block_size * load_model(hw.model).kv_bytes_per_token(kv_dtype, 1)  # all TP ranks
    decisions: list[dict[str, Any]] | None = [] if cfg.policy.decision_log else None
    log = None if decisions is None else decisions.append
    pc = cfg.policy
    tool_stats = ToolStats(samples=False)  # (a policy that reads quantiles asks for the durations when built)
    policies = _Policies(
        QUEUE_ORDERS.build(pc.queue, pc),
        VICTIMS.build(pc.victim, pc),
        RETENTIONS.build(pc.retention, pc, tool_stats),
        log,
    )
    fabric = Link("fabric", engine, cfg.router.inter_instance_gbps, 0.0) if cfg.router.inter_instance_gbps > 0 else None
    parts = Parts(cfg, engine, workload, res.specs, block_bytes, sink, on_finish)
    wiring = combine([m.wire(parts) for _, m in mechanisms], [name for name, _ in mechanisms])
    links: list[Link] = ([] if fabric is None else [fabric]) + list(wiring.links)
    instances = _instances(cfg, res, parts, wiring, policies, links, fabric, rec.sample)
    routed = instances if wiring.routed is None else instances[: wiring.routed]
    steps = wiring.steps if wiring.steps is not None else workload
    orch = Orchestrator(
        engine,
        steps,
        cfg.workload,
        make_tools(cfg.tools, workload),
        ROUTERS.build(wiring.router or cfg.router.policy, cfg.router),
        routed,
        rec,
        rng_arrivals,
        rng_tools,
        cfg.cache.block_size,
        tool_stats,
        log,
        admission=wiring.admission,
        priorities=wiring.priorities,
    )
    orch_ref.append(orch)
    if sink is not None:  # (a fan-out child's prefix chain puts its ancestors' history segments in its pool too)
        sink.bind(orch.infos, [inst.pool for inst in instances], not wiring.spreads_history and workload.dag is None)
    cluster = Cluster(
        cfg,
        engine,
        workload,
        steps,
        hw,
        res.specs,
        res.plans,
        res.pricers,
        block_bytes,
        wiring.decode_tokens or 1,
        rec,
        sink,
        links,
        instances,
        orch,
    )
    return cluster, decisions


@dataclass(frozen=True, slots=True)
class _Policies:
    """The per-instance policies every scheduler shares (``[policy]``), and the decision log's writer."""

    order: Any
    victim: Any
    retention: Any
    log: Callable[[dict[str, Any]], None] | None


def _instances(
    cfg: SimConfig,
    res: Resolved,
    parts: Parts,
    wiring: Wiring,
    policies: _Policies,
    links: list[Link],
    fabric: Link | None,
    sample: Sample,
) -> list[Instance]:
    """One instance per spec, each with its own scheduler, KV pool and host tiers (their links appended to
    ``links``); their finish, remote and sample hooks as the mechanisms wired them."""
    instances: list[Instance] = []
    engine, block_bytes, tc = parts.engine, parts.block_bytes, cfg.tiers

    def remote(r: Request) -> tuple[SegmentPool, Link] | None:
        if fabric is None:
            return None
        old = instances[r.migrate_from]
        old.sync_pool()  # its decode run's evictions so far, as step by step
        return old.pool, fabric

    on_sample = sample if wiring.sample is None else wiring.sample(sample)
    for i, spec in enumerate(res.specs):
        plan = res.plans[i]
        pool = SegmentPool(plan.num_gpu_blocks, cfg.cache.block_size)
        tiers: list[HostTier] = []
        for name, gib, gbps, lat_us in (
            ("dram", tc.dram_gib, tc.dram_gbps, tc.dram_latency_us),
            ("cxl", tc.cxl_gib, tc.cxl_gbps, tc.cxl_latency_us),
        ):
            if gib > 0:
                link = Link(f"{name}{i}", engine, gbps, lat_us * 1e-6)
                links.append(link)
                tiers.append(HostTier(name, int(gib * GIB) // block_bytes, link))
        rem: Remote | None = remote if wiring.remote is None else wiring.remote(i)
        residency = Residency(engine, pool, block_bytes, tiers, rem, cfg.policy.unpin_on_pressure)
        sched = Scheduler(
            KVManager(pool, cfg.cache.enable_prefix_caching, residency, policies.retention),
            plan.max_num_seqs,
            plan.max_num_batched_tokens,
            order=policies.order,
            victim=policies.victim,
            reserve_full_isl=cfg.scheduler.reserve_full_isl,
            lazy_decode=cfg.scheduler.lazy_decode,
            decode_tokens=wiring.decode_tokens or 1,
            index=i,
            log=policies.log,
        )
        fin = parts.deliver if wiring.finish is None else wiring.finish(i)
        instances.append(
            Instance(
                i,
                engine,
                res.pricers[spec],
                sched,
                fin,
                fast_decode=cfg.scheduler.fast_decode,
                on_sample=on_sample,
                gpus=spec[1],
            )
        )
    return instances


def attach(cluster: Cluster, mechanisms: Sequence[tuple[str, Mechanism]]) -> Hooks:
    """Attach the mechanisms to the built kernel in registry order, each given the ones it needs, and install their
    hooks in the orchestrator; the hooks of the run (before and after it) are returned."""
    hooks = Hooks()
    attached: dict[str, Mechanism] = {}
    for name, m in mechanisms:
        hooks = hooks + m.attach(cluster, dependencies(name, m, attached))
        attached[name] = m
    cluster.orch.install(hooks.on_route, hooks.place, hooks.on_turn_done)
    return hooks
