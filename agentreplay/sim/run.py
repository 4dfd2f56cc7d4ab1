"""``simulate()``: the Python API behind ``agentreplay simulate``. Builds the cluster, replays, returns data.

Seeding: one ``numpy.random.SeedSequence(seed)`` spawns one generator per component (arrivals, tools), so a
component's draws do not depend on what another drew. Same trace + config + seed gives identical results and
byte-identical output files.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import json
import math
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from agentreplay.engine import Engine
from agentreplay.kv.manager import KVManager
from agentreplay.kv.residency import GIB, Residency
from agentreplay.kv.retention import RETENTIONS, ToolStats
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.kv.tiers import HostTier, Link
from agentreplay.perf import IterationPricer, kv_capacity, load_gpu, load_model
from agentreplay.perf.deploy import default_cudagraph_sizes, graph_padding, kv_cache_dtype
from agentreplay.perf.parallel import DPStepPricer, EPComm, check_deployment, expert_weight_bytes_freed, lockstep
from agentreplay.perf.table import pricer_from_names
from agentreplay.router.admission import ADMISSIONS
from agentreplay.router.policies import ROUTERS
from agentreplay.scheduler.queue import QUEUE_ORDERS
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.scheduler.victim import VICTIMS
from agentreplay.sim import tables
from agentreplay.sim.admission import apply_max_model_len
from agentreplay.sim.config import ConfigError, HardwareConfig, SimConfig, to_toml
from agentreplay.sim.disagg import Disagg, disagg_hardware, link_gbps
from agentreplay.sim.dp import LockstepGroup
from agentreplay.sim.failover import Failover
from agentreplay.sim.footprint import FootprintSampler
from agentreplay.sim.instance import Instance
from agentreplay.sim.metrics import Recorder, summarize
from agentreplay.sim.orchestrator import Orchestrator
from agentreplay.sim.speculative import draft_pricer, speculative_pricer, step_workload
from agentreplay.sim.speculative import summary as speculation_summary
from agentreplay.sim.thinking import apply as thinking_budget
from agentreplay.sim.tools import make_tools
from agentreplay.sim.workload import Workload, compile_trace
from agentreplay.trace.io import Trace, write_tables

if TYPE_CHECKING:  # the DataFrames are built on demand (SimResult)
    import pandas as pd


class CapacityError(ValueError):
    """The configuration cannot run the trace (weights do not fit, or no room for the longest request)."""


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What each instance gets, resolved before the run (written into the summary)."""

    num_gpu_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_source: str  #: "memory model" or "config"


class SimResult:
    """A finished run: ``summary``, ``config``, ``decisions`` (None without the decision log) and its tables.

    The tables come as NumPy columns (:meth:`columns`), Arrow tables (:meth:`tables`, what :meth:`write` writes)
    or DataFrames (``turns``, ``programs``, ``instances``); the DataFrames are built on first use, since importing
    pandas is most of a small run's start-up (:mod:`agentreplay.sim.tables`)."""

    __slots__ = ("_columns", "_frames", "_migrations", "_rec", "config", "decisions", "extra", "summary")

    def __init__(
        self,
        rec: Recorder,
        migrations: list[int],
        summary: dict[str, Any],
        config: SimConfig,
        decisions: list[dict[str, Any]] | None = None,
    ) -> None:
        self.summary, self.config, self.decisions = summary, config, decisions
        self._rec, self._migrations = rec, migrations
        self._columns: dict[str, tables.Columns | None] = {}
        self._frames: dict[str, pd.DataFrame] = {}
        #: tables of mechanisms that are on: NumPy columns (e.g. ``footprint``) or Arrow tables (``failover``)
        self.extra: dict[str, tables.Columns | pa.Table] = {}

    def columns(self, name: str) -> tables.Columns | None:
        """``turns``, ``programs`` or ``instances`` as NumPy columns (None: instances of a run without
        samples, whose frame has object columns)."""
        if self._rec.sink is not None:
            raise RuntimeError(f"the tables were streamed to {self._rec.sink.out} (read them from there)")
        if name not in self._columns:
            if name == "turns":
                self._columns[name] = tables.turn_columns(self._rec)
            elif name == "programs":
                turns = self.columns("turns")
                assert turns is not None
                self._columns[name] = tables.program_columns(self._rec, turns, self._migrations)
            elif name == "instances":
                self._columns[name] = tables.instance_columns(self._rec)
            elif name in self.extra:
                self._columns[name] = self.extra[name]
            else:
                raise KeyError(name)
        return self._columns[name]

    def _frame(self, name: str) -> pd.DataFrame:
        if name not in self._frames:
            rec = self._rec
            if name == "programs":
                df = rec.programs_frame(self.turns)
                df["migrations"] = self._migrations
            else:
                df = rec.turns_frame() if name == "turns" else rec.instances_frame()
            self._frames[name] = df
        return self._frames[name]

    @property
    def turns(self) -> pd.DataFrame:
        return self._frame("turns")

    @property
    def programs(self) -> pd.DataFrame:
        return self._frame("programs")

    @property
    def instances(self) -> pd.DataFrame:
        return self._frame("instances")

    def tables(self) -> dict[str, pa.Table]:
        """The three output tables, as ``pyarrow.Table.from_pandas`` would give them from the DataFrames."""
        out = {}
        for name in ("turns", "programs", "instances"):
            cols = self.columns(name)
            out[name] = (
                tables.to_arrow(cols)
                if cols is not None
                else pa.Table.from_pandas(self._frame(name), preserve_index=False)
            )
        for name, extra in self.extra.items():
            out[name] = extra if isinstance(extra, pa.Table) else tables.to_arrow(extra)
        return out

    def write(self, out_dir: str | os.PathLike[str]) -> dict[str, Path]:
        """Write turns/programs/instances.parquet, summary.json and config.toml (Parquet atomically)."""
        out = Path(out_dir)
        sink = self._rec.sink
        paths = write_tables(out, self.tables()) if sink is None else {n: Path(q) for n, q in sink.paths.items()}
        texts = [
            ("summary.json", json.dumps(self.summary, indent=2, sort_keys=True) + "\n"),
            ("config.toml", to_toml(self.config)),
        ]
        if self.decisions is not None:
            texts.append(("decisions.jsonl", "".join(json.dumps(d, sort_keys=True) + "\n" for d in self.decisions)))
        for name, text in texts:
            tmp = out / f".{name}.tmp"
            tmp.write_text(text)
            os.replace(tmp, out / name)
            paths[name] = out / name
        return paths


def plan_cluster(cfg: SimConfig, workload: Workload | None = None) -> list[ClusterPlan]:
    """One :class:`ClusterPlan` per instance (instances of the same GPU / TP / dtype share one)."""
    plans: dict[tuple[str, int, str], ClusterPlan] = {}
    out = []
    for spec in cluster_hardware(cfg).instance_specs():
        if spec not in plans:
            plans[spec] = plan_instance(cfg, *spec, workload=workload)
        out.append(plans[spec])
    return out


def cluster_hardware(cfg: SimConfig) -> HardwareConfig:
    """``[hardware]`` as the instances are built: with ``[disagg]`` on, the prefill pool then the decode pool."""
    return cfg.hardware if not cfg.disagg.enabled else disagg_hardware(cfg.disagg, cfg.hardware)


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


def request_view(summary: dict[str, Any]) -> None:
    """A request-level trace (every program one request): name the figures per request, as serving benchmarks do
    (vLLM ``benchmark_serving``: E2E latency, TTFT, TPOT per request, request throughput). For one request E2E =
    finish - arrival = the program's JCT; the program keys stay for tools that read them."""
    summary["unit"] = "request"
    summary["requests"] = summary["programs"]
    summary["e2e_s"] = summary["jct_s"]
    summary["throughput_requests_per_s"] = summary["throughput_programs_per_s"]


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
    progress: Any = None,
    stream_to: str | os.PathLike[str] | None = None,
) -> SimResult:
    """Replay ``trace`` on the cluster of ``cfg``; ``perf`` overrides the catalog performance model (tests,
    measured profiles). ``progress`` is an optional callable ``(done_programs, total)`` called as programs end.
    ``stream_to``: a folder; the tables are written there as programs finish (:mod:`agentreplay.sim.stream`)
    instead of being kept in memory.
    """
    cfg = cfg or SimConfig()
    workload = trace if isinstance(trace, Workload) else compile_trace(trace)
    if cfg.workload.max_programs is not None:
        workload = workload.head(cfg.workload.max_programs)
    workload = workload.with_reuse_scale(cfg.workload.reuse_scale)
    workload, rejections = apply_max_model_len(workload, cfg.scheduler.max_model_len)
    thinking = thinking_budget(workload, cfg.thinking) if cfg.thinking.enabled else None
    if thinking is not None:
        workload = thinking[0]
    speculation = cfg.speculative if cfg.speculative.enabled else None
    hw = cluster_hardware(cfg)
    if hw.dp > 1:
        try:
            check_deployment(load_model(hw.model), hw.dp, hw.tp, hw.ep, hw.all2all_backend)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    plans = plan_cluster(cfg, workload)
    specs = hw.instance_specs()
    pricers: dict[tuple[str, int, str], IterationPricer] = {}
    kv_dtype = kv_cache_dtype(hw.kv_cache_dtype)
    for spec, plan in zip(specs, plans, strict=True):
        if spec not in pricers:
            pricers[spec] = perf or pricer_from_names(
                hw.perf,
                spec[0],
                hw.model,
                spec[2],  # type: ignore[arg-type]
                spec[1],
                mixed_attention=hw.mixed_attention,
                kv_dtype=kv_dtype,
                cudagraph_sizes=graph_sizes(cfg, spec[0], plan),
                graph_mixed=graph_padding(hw.cudagraph_mode)[1],
                custom_allreduce=hw.deployment_kernels and not hw.disable_custom_all_reduce,
            )
            if speculation is not None:
                pricers[spec] = speculative_pricer(pricers[spec], speculation, draft_pricer(cfg, spec))
    adm, cls = cfg.admission, None
    if cfg.classes.enabled or adm.policy == "deadline":  # (classes, deadlines: agentreplay.sim.classes)
        from agentreplay.sim.classes import setup as setup_classes

        cls = setup_classes(trace, workload, cfg, pricers[specs[0]], plans[0].max_num_batched_tokens)
        workload = cls.workload
    # what the engine schedules (speculation: verification steps per turn, agentreplay.sim.speculative)
    steps = step_workload(workload, speculation, cfg.seed) if speculation is not None else workload
    seeds = np.random.SeedSequence(cfg.seed).spawn(2)
    rng_arrivals, rng_tools = (np.random.default_rng(s) for s in seeds)
    engine = Engine()
    sink = None
    if stream_to is not None:
        from agentreplay.sim.stream import ResultStream

        # (the footprint series is streamed; the failover ledger, the classes' and the workflows' summaries read
        # the programs written)
        sink = ResultStream(workload, stream_to)
    rec = Recorder(workload, cfg.metrics.timeseries_interval_s, sink)
    instances: list[Instance] = []
    orch_ref: list[Orchestrator] = []

    def on_finish(r: Any) -> None:
        orch_ref[0].on_turn_done(r)
        if progress is not None and r.turn == int(workload.turn_start[r.program + 1]) - 1:
            progress(orch_ref[0].done_programs, workload.n_programs)

    model_spec = load_model(hw.model)
    block_bytes = cfg.cache.block_size * model_spec.kv_bytes_per_token(kv_dtype, 1)  # whole block, all TP ranks
    decisions: list[dict[str, Any]] | None = [] if cfg.policy.decision_log else None
    log = decisions.append if decisions is not None else None
    tool_stats = ToolStats(samples=False)  # (a policy that reads quantiles asks for the durations when built)
    pc = cfg.policy
    order, victim = QUEUE_ORDERS.build(pc.queue, pc), VICTIMS.build(pc.victim, pc)
    retention = RETENTIONS.build(pc.retention, pc, tool_stats)
    fabric = Link("fabric", engine, cfg.router.inter_instance_gbps, 0.0) if cfg.router.inter_instance_gbps > 0 else None
    links: list[Link] = [] if fabric is None else [fabric]

    def remote(r: Any) -> tuple[SegmentPool, Link] | None:
        if fabric is None:
            return None
        old = instances[r.migrate_from]
        old.sync_pool()  # its decode run's evictions so far, as step by step
        return old.pool, fabric

    dc, disagg = cfg.disagg, None
    if dc.enabled:  # the KV-transfer link into each instance (agentreplay.sim.disagg)
        pd_links = [
            Link(f"kvxfer{i}", engine, link_gbps(dc, g, t), dc.link_latency_us * 1e-6)
            for i, (g, t, _) in enumerate(specs)
        ]
        links += pd_links
        disagg = Disagg(dc, engine, pd_links, block_bytes, cfg.router, on_finish)
    fp = FootprintSampler(cfg.footprint.interval_s, block_bytes, sink) if cfg.footprint.interval_s > 0 else None
    # tokens of the step's budget and of a MoE group step a decode takes: 1 + k drafts (agentreplay.sim.speculative)
    decode_tokens = 1 + speculation.num_speculative_tokens if speculation is not None else 1
    on_sample = rec.sample if fp is None else fp.hook(rec.sample)
    tc = cfg.tiers
    for i, spec in enumerate(specs):
        plan, pricer = plans[i], pricers[spec]
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
        fin: Callable[[Any], None] = on_finish
        rem: Callable[[Any], tuple[SegmentPool, Link] | None] | None = remote
        if disagg is not None:  # the prefill pool hands finished prefills over and pulls from the decode pool
            fin, rem = (
                (disagg.on_prefill_done, disagg.remote) if i < dc.prefill_instances else (disagg.on_decode_done, None)
            )
        residency = Residency(engine, pool, block_bytes, tiers, rem, cfg.policy.unpin_on_pressure)
        kv = KVManager(pool, cfg.cache.enable_prefix_caching, residency, retention)
        sched = Scheduler(
            kv,
            plan.max_num_seqs,
            plan.max_num_batched_tokens,
            order=order,
            victim=victim,
            reserve_full_isl=cfg.scheduler.reserve_full_isl,
            lazy_decode=cfg.scheduler.lazy_decode,
            decode_tokens=decode_tokens,
            index=i,
            log=log,
        )
        instances.append(
            Instance(
                i,
                engine,
                pricer,
                sched,
                fin,
                fast_decode=cfg.scheduler.fast_decode,
                on_sample=on_sample,
                gpus=spec[1],
            )
        )
    group: LockstepGroup | None = None
    if lockstep(model_spec, hw.dp):
        comm = EPComm.build(load_gpu(specs[0][0]), model_spec, hw.dp, specs[0][1], hw.all2all_backend)
        group = LockstepGroup(engine, instances, DPStepPricer(pricers[specs[0]], comm, decode_tokens=decode_tokens))
    orch = Orchestrator(
        engine,
        steps,
        cfg.workload,
        make_tools(cfg.tools, workload),
        ROUTERS.build((dc.enabled and dc.prefill_router) or cfg.router.policy, cfg.router),
        instances if disagg is None else instances[: dc.prefill_instances],
        rec,
        rng_arrivals,
        rng_tools,
        cfg.cache.block_size,
        tool_stats,
        log,
        admission=(admission := ADMISSIONS.build(adm.policy, adm, None if cls is None else cls.ctx)),
        priorities=None if cls is None or cls.classes is None or not cfg.classes.enabled else cls.classes.tolist(),
    )
    orch_ref.append(orch)
    if disagg is not None:
        disagg.attach(instances)
        orch.on_route = disagg.prepare
    failover = None
    if cfg.failures.enabled:
        failover = orch.failover = Failover(cfg.failures, engine, orch, instances, cfg.seed)
        failover.group = group  # (a lockstep DP deployment fails and recovers as a whole)
        if disagg is not None:
            failover.attach_disagg(disagg)
        failover.start()
    if sink is not None:
        sink.infos, sink.pools = orch.infos, [inst.pool for inst in instances]
        # (a fan-out child's prefix chain puts its ancestors' history segments in the child's pool too)
        sink.home_pools = disagg is None and workload.dag is None
        if failover is not None:
            failover.sink = sink  # (a failed instance's fresh pool replaces the old one in sink.pools)
    try:
        with frozen_heap():
            orch.start()
            engine.run()
    except BaseException:
        if sink is not None:
            sink.abort()
        raise
    unfinished = int(np.isnan(rec.program_finish_s).sum()) if sink is None else sink.live_programs
    if unfinished:
        if sink is not None:
            sink.abort()
        raise RuntimeError(f"simulation ended with {unfinished} unfinished programs (a bug: please report)")
    for inst in instances:
        inst.check_idle()
    assert disagg is None or disagg.idle(), "disaggregated hand-offs left in flight"
    migrations = [0 if info is None else info.affinity_breaks for info in orch.infos] if sink is None else []
    result = SimResult(rec, migrations, {}, cfg, decisions)
    fp_cols = fp.finish() if fp is not None else None  # (streamed: written to the sink, None)
    if fp_cols is not None:
        result.extra["footprint"] = fp_cols
    if sink is not None:
        sink.close(rec.sample_rows)

    def program_column(name: str) -> np.ndarray:
        """A column of the programs table in program order: from the files written, or in memory."""
        if sink is not None:
            return sink.program_column(name)
        programs = result.columns("programs")
        assert programs is not None
        return np.asarray(programs[name])

    if failover is not None:
        ledger = failover.table(program_column("arrival_s"), program_column("finish_s"))
        if sink is not None:
            sink.add_table("failover", ledger)
        else:
            result.extra["failover"] = ledger
    summary = result.summary
    if sink is not None:
        summary.update(sink.summary())
    else:
        turns, programs = result.columns("turns"), result.columns("programs")
        assert turns is not None and programs is not None
        summary.update(summarize(tables.FrameView(turns), tables.FrameView(programs)))
    summary["policy"] = {
        "router": cfg.router.policy,
        "queue": cfg.policy.queue,
        "victim": cfg.policy.victim,
        "retention": cfg.policy.retention,
    }
    summary["rejected"] = rejections.summary()
    if adm.policy != "admit-all":
        summary["admission"] = admission.summary()  # type: ignore[attr-defined]
        if cls is not None and adm.policy == "deadline":
            summary["admission"]["rejected_programs"] = len(cls.rejected_classes)
    if cls is not None and cfg.classes.enabled:
        summary["classes"] = cls.summary(program_column("jct_s"))
    if workload.single_turn:
        request_view(summary)
    summary["affinity_breaks"] = orch.affinity_breaks
    if orch.fan is not None:  # fan-out workflows (absent otherwise: other summaries keep their exact form)
        summary["fanout"] = orch.fan.summary(program_column("arrival_s"))
    summary["bytes_moved"] = {link.name: link.bytes_moved for link in links}
    summary["bytes_moved_total"] = sum(link.bytes_moved for link in links)
    summary["pinned_block_s"] = sum(inst.residency.pinned_block_s for inst in instances if inst.residency)
    summary["unpins_on_pressure"] = sum(inst.residency.unpins_on_pressure for inst in instances if inst.residency)
    plan = plans[0]
    summary["cluster"] = {
        "instances": len(specs),
        "gpu": specs[0][0],
        "model": hw.model,
        "dtype": specs[0][2],
        "tp": specs[0][1],
        "num_gpu_blocks": plan.num_gpu_blocks,
        "kv_blocks_from": plan.kv_source,
        "max_num_seqs": plan.max_num_seqs,
        "max_num_batched_tokens": plan.max_num_batched_tokens,
        "groups": list(hw.groups),
        "kv_cache_dtype": kv_dtype,
        "per_instance": [
            {"gpu": g, "tp": t, "dtype": d, "num_gpu_blocks": p.num_gpu_blocks}
            for (g, t, d), p in zip(specs, plans, strict=True)
        ],
    }
    summary["engine"] = {
        "events": engine.events_processed,
        "iterations": sum(i.stats.iterations for i in instances),
        "decode_runs": sum(i.stats.decode_runs for i in instances),
        "busy_s_per_instance": [i.stats.busy_s for i in instances],
    }
    if disagg is not None:
        summary["disagg"] = disagg.summary(engine.now)
    if thinking is not None:
        summary["thinking"] = {"budget_tokens": cfg.thinking.budget_tokens, **thinking[1].as_dict()}
    if speculation is not None:
        summary["speculative"] = speculation_summary(workload, steps, speculation)
    if hw.dp > 1:  # (absent otherwise: summaries of other deployments keep their exact form)
        summary["cluster"].update(
            {"dp": hw.dp, "ep": hw.ep, "all2all_backend": hw.all2all_backend, "lockstep": group is not None}
        )
    if fp is not None:  # (absent otherwise, like dp_group)
        summary["footprint"] = {"interval_s": fp.interval_s, "block_bytes": block_bytes, "samples": fp.samples}
    if failover is not None:
        summary["failover"] = failover.summary()
    if group is not None:
        summary["dp_group"] = dataclasses.asdict(group.stats)
    return result


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
    find fewer of them still alive to traverse and promote.

    Measured on ``benchmarks/bench_sim.py --day --programs 10000`` (compiled, streamed): the freeze saves about
    13% of the run's wall time (more as the workload grows), the threshold about 5% more (three interleaved
    pairs of 8,000-program days)."""
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
