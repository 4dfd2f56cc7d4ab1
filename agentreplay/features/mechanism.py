"""The Mechanism seam: how an optional part of the simulator takes part in a run.

The kernel (:mod:`agentreplay.sim.build`) is the engine, the instances (a vLLM v1 scheduler and KV manager each,
priced by the performance model), the router and the orchestrator. A mechanism changes what it simulates: one
per feature folder that declares one (:mod:`agentreplay.features.registry`), built for a run by the folder's
``MECHANISM`` factory from the :class:`~agentreplay.sim.config.SimConfig` (None when the feature is off). Every
mechanism that is on takes part at fixed stages, each a method of :class:`Mechanism` that does nothing unless
overridden, called in registry order:

- resolve, before anything is built: :meth:`~Mechanism.hardware` (the cluster's instances: disaggregation's two
  pools), :meth:`~Mechanism.prepare` (the workload before the cluster is sized: thinking budgets),
  :meth:`~Mechanism.pricer` (each instance's pricer: speculation's verification steps and drafter),
  :meth:`~Mechanism.admit` (the workload once the cluster is priced: classes and deadline admission);
- build: :meth:`~Mechanism.wire` (a :class:`Wiring`: what the instances and the orchestrator are built with),
  then, once the kernel is built, :meth:`~Mechanism.attach` (the mechanism's runtime objects against the
  :class:`Cluster`, and the :class:`Hooks` the orchestrator and the run call);
- collect, once the run is over: :meth:`~Mechanism.tables` (extra output tables) and :meth:`~Mechanism.summary`
  (its sections of ``summary.json``; none when off, so a run without it keeps its summary).

A mechanism that needs another names it in ``needs`` (an earlier feature of the registry) and receives it in
:meth:`~Mechanism.attach` when that one is on: the couplings (failover x disaggregation, failover x a lockstep DP
group) are declared, not injected. In a default run the only mechanism built is the front end's admission gate
(:mod:`agentreplay.features.classes`, ``admit-all``), which has no hook: every :class:`Hooks` tuple is empty, so
the compiled orchestrator iterates empty tuples where it would call them, and does nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from agentreplay.features.base import load
from agentreplay.features.registry import NAMES, features

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

    from agentreplay.engine import Engine
    from agentreplay.kv.segment_pool import SegmentPool
    from agentreplay.kv.tiers import Link
    from agentreplay.perf.pricer import IterationPricer
    from agentreplay.request import Request
    from agentreplay.router.admission import AdmissionPolicy
    from agentreplay.sim.build import ClusterPlan
    from agentreplay.sim.config import HardwareConfig, SimConfig
    from agentreplay.sim.instance import Instance
    from agentreplay.sim.metrics import Recorder
    from agentreplay.sim.orchestrator import Orchestrator
    from agentreplay.sim.stream import ResultStream
    from agentreplay.sim.tables import Columns
    from agentreplay.sim.workload import Workload

#: an instance as ``(gpu, tp, dtype)`` (:meth:`agentreplay.sim.config.HardwareConfig.instance_specs`)
Spec = tuple[str, int, str]
#: a finished call's handler (an instance's ``on_finish``)
Finish = Callable[["Request"], None]
#: an instance's remote KV source (:class:`agentreplay.kv.residency.Residency` ``remote``)
Remote = Callable[["Request"], "tuple[SegmentPool, Link] | None"]
#: an instance's sample hook (:class:`agentreplay.sim.instance.Instance` ``on_sample``): when the next is due
Sample = Callable[["Instance"], float]
#: placement before routing (:meth:`agentreplay.sim.orchestrator.Orchestrator.install`)
Place = Callable[["Request", "tuple[int, ...] | None"], int]


@dataclass(frozen=True, slots=True)
class Sizing:
    """What :meth:`Mechanism.admit` may read once the cluster is priced."""

    trace: Any  #: the trace as given to ``simulate`` (a ``Trace``'s programs table may carry extra columns)
    pricer: IterationPricer  #: the first instance's pricer (uncontended time estimates)
    chunk_tokens: int  #: the first instance's token budget per iteration (max_num_batched_tokens)


@dataclass(frozen=True, slots=True)
class Parts:
    """What the kernel has before its instances are built (:meth:`Mechanism.wire`)."""

    cfg: SimConfig
    engine: Engine
    workload: Workload  #: the workload the run replays (its tokens are what the tables count)
    specs: list[Spec]  #: every instance, in index order
    block_bytes: int  #: bytes of one KV block, all TP ranks (the links and tiers price blocks with it)
    sink: ResultStream | None  #: a streamed run's output (None: tables kept in memory)
    deliver: Finish  #: the kernel's handler of a finished call (orchestrator, progress)


@dataclass(frozen=True, slots=True)
class Wiring:
    """What a mechanism builds the kernel with; every field left at its default changes nothing. A field other
    than ``links`` and ``spreads_history`` may be set by one mechanism of a run only (:func:`combine`)."""

    steps: Workload | None = None  #: what the engine schedules (default: the workload itself)
    decode_tokens: int | None = None  #: tokens of a step's budget one decode takes (default 1)
    links: tuple[Link, ...] = ()  #: links the mechanism moves KV over (counted in ``bytes_moved``)
    finish: Callable[[int], Finish] | None = None  #: instance index -> its finished-call handler
    remote: Callable[[int], Remote | None] | None = None  #: instance index -> where its KV pulls read from
    sample: Callable[[Sample], Sample] | None = None  #: wraps the recorder's sample hook
    routed: int | None = None  #: the orchestrator routes over the first ``routed`` instances (default: all)
    router: str | None = None  #: the orchestrator's router policy (default: ``[router] policy``)
    admission: AdmissionPolicy | None = None  #: the front end's admission policy (default: admit all)
    priorities: list[int] | None = None  #: per program, its priority class's rank (default: all 0)
    #: a program's history may be cached outside its home instance (a streamed run searches every pool)
    spreads_history: bool = False


@dataclass(frozen=True, slots=True)
class Cluster:
    """The built kernel (:meth:`Mechanism.attach`)."""

    cfg: SimConfig
    engine: Engine
    workload: Workload  #: the workload the run replays (the recorder's)
    steps: Workload  #: what the engine schedules (the orchestrator's)
    hardware: HardwareConfig  #: ``[hardware]`` as the instances are built
    specs: list[Spec]
    plans: list[ClusterPlan]
    pricers: dict[Spec, IterationPricer]
    block_bytes: int
    decode_tokens: int
    recorder: Recorder
    sink: ResultStream | None
    links: list[Link]
    instances: list[Instance]
    orch: Orchestrator


@dataclass(frozen=True, slots=True)
class Hooks:
    """Callables the kernel calls, each tuple in registry order. ``on_route``: a routed call, before it is
    submitted; ``place``: before a call is routed, returns -1 (the router picks), an instance index, or
    :data:`agentreplay.sim.orchestrator.HOLD` (the first other than -1 decides); ``on_turn_done``: a finished
    call, after the admission policy saw it; ``before_run``: once, before the first arrival; ``after_run``: once
    every program finished, before the outputs are closed."""

    on_route: tuple[Callable[[Request], None], ...] = ()
    place: tuple[Place, ...] = ()
    on_turn_done: tuple[Callable[[Request], None], ...] = ()
    before_run: tuple[Callable[[], None], ...] = ()
    after_run: tuple[Callable[[], None], ...] = ()

    def __add__(self, other: Hooks) -> Hooks:
        return Hooks(*(getattr(self, f.name) + getattr(other, f.name) for f in fields(Hooks)))


@dataclass(frozen=True, slots=True)
class View:
    """What :meth:`Mechanism.tables` and :meth:`Mechanism.summary` read once the run is over."""

    cluster: Cluster
    #: a column of the programs table in program order (from the files a streamed run wrote, or in memory)
    program_column: Callable[[str], np.ndarray]


class Mechanism(Protocol):
    """One optional part of the simulator (module docstring). Subclasses override the stages they take part in."""

    #: the features (registry names, earlier in the registry) this one receives in :meth:`attach` when they are on
    needs: ClassVar[tuple[str, ...]] = ()

    def hardware(self, hw: HardwareConfig) -> HardwareConfig:
        """``[hardware]`` as the instances are built."""
        return hw

    def prepare(self, workload: Workload) -> Workload:
        """The workload, before the cluster is sized (the longest request must fit its KV pool)."""
        return workload

    def pricer(self, base: IterationPricer, spec: Spec) -> IterationPricer:
        """The pricer of the instances of ``spec``."""
        return base

    def admit(self, workload: Workload, sizing: Sizing) -> Workload:
        """The programs that run, once the cluster is priced."""
        return workload

    def wire(self, parts: Parts) -> Wiring:
        """What the instances and the orchestrator are built with."""
        return Wiring()

    def attach(self, cluster: Cluster, deps: Mapping[str, Mechanism]) -> Hooks:
        """The mechanism's runtime objects against the built kernel; ``deps``: the mechanisms of ``needs`` that
        are on, by feature name."""
        return Hooks()

    def tables(self, view: View) -> dict[str, Columns | pa.Table]:
        """Extra output tables (``NAME.parquet``); a streamed run writes what a mechanism streamed itself."""
        return {}

    def summary(self, view: View) -> dict[str, Any]:
        """The mechanism's sections of the run summary."""
        return {}


def enabled(cfg: SimConfig) -> list[tuple[str, Mechanism]]:
    """The mechanisms ``cfg`` turns on, ``(feature name, mechanism)`` in registry order."""
    out = []
    for f in features():
        if f.mechanism is not None:
            m = load(f.mechanism)(cfg)
            if m is not None:
                out.append((f.name, m))
    return out


def combine(wirings: Sequence[Wiring], names: Sequence[str]) -> Wiring:
    """One :class:`Wiring` of the mechanisms ``names`` (in registry order): their links and ``spreads_history``
    together, any other field from the one mechanism that sets it (two that do: an error naming both)."""
    values: dict[str, Any] = {}
    setters: dict[str, str] = {}
    for w, name in zip(wirings, names, strict=True):
        for f in fields(Wiring):
            v = getattr(w, f.name)
            if f.name == "links":
                values[f.name] = values.get(f.name, ()) + v
            elif f.name == "spreads_history":
                values[f.name] = values.get(f.name, False) or v
            elif v is not None:
                if f.name in setters:
                    raise ValueError(f"mechanisms {setters[f.name]!r} and {name!r} both set the kernel's {f.name}")
                setters[f.name] = name
                values[f.name] = v
    return Wiring(**values)


def dependencies(name: str, mechanism: Mechanism, attached: Mapping[str, Mechanism]) -> dict[str, Mechanism]:
    """The mechanisms ``name`` needs that are on (``attached``: those attached so far); a need that is not an
    earlier feature of the registry is an error (it could never be attached first)."""
    if name not in NAMES:
        raise ValueError(f"mechanism {name!r} is not a registered feature ({', '.join(NAMES)})")
    order = list(NAMES)
    bad = [n for n in mechanism.needs if n not in order or order.index(n) >= order.index(name)]
    if bad:
        raise ValueError(f"mechanism {name!r} needs {bad}: not features registered before it ({', '.join(NAMES)})")
    return {n: attached[n] for n in mechanism.needs if n in attached}
