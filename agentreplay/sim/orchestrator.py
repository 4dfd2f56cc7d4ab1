"""Program Orchestrator: per-program state machine and arrivals.

A program arrives, releases turn 0, and from then on releases turn t+1 only after turn t finished decoding
*and* its tool call (the Tool Simulator's gap) elapsed (DESIGN §1). Arrival modes: ``closed`` (N programs in
flight, the next starts the moment one finishes, like a pool of N agent workers), ``poisson`` (exponential
inter-arrival times at ``rate_per_s``, from the orchestrator's own seeded generator) and ``trace`` (the
trace's ``arrival_s``, shifted so the first program arrives at 0).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import numpy as np

from agentreplay.engine import PHASE_RELEASE, Engine
from agentreplay.kv.retention import ToolStats
from agentreplay.kv.segment_pool import Segment
from agentreplay.request import ProgramInfo, Request
from agentreplay.router.admission import AdmissionPolicy, AdmitAll
from agentreplay.router.policies import Router
from agentreplay.sim.config import WorkloadConfig
from agentreplay.sim.dag import FanOut
from agentreplay.sim.instance import Instance
from agentreplay.sim.metrics import Recorder
from agentreplay.sim.tools import ToolModel
from agentreplay.sim.workload import Workload

#: a placement hook's answer (:meth:`Orchestrator.install`): hold the call until an instance can take it
HOLD: Final = -2


class Orchestrator:
    def __init__(
        self,
        engine: Engine,
        workload: Workload,
        cfg: WorkloadConfig,
        tools: ToolModel,
        router: Router,
        instances: Sequence[Instance],
        recorder: Recorder,
        rng_arrivals: np.random.Generator,
        rng_tools: np.random.Generator,
        block_size: int,
        tool_stats: ToolStats | None = None,
        log: Callable[[dict[str, Any]], None] | None = None,
        *,
        admission: AdmissionPolicy | None = None,
        priorities: list[int] | None = None,
    ) -> None:
        self.engine = engine
        self.w = workload
        self.cfg = cfg
        self.tools = tools
        self.router = router
        self.admission: AdmissionPolicy = admission if admission is not None else AdmitAll()
        self._gated = not isinstance(self.admission, AdmitAll)  # admit-all: no call per released turn
        #: released calls the admission policy holds at the front end, in release order (with their chain ids)
        self.deferred: list[tuple[Request, tuple[int, ...] | None]] = []
        self._wake_at = float("inf")  #: the pending admission timer (inf: none)
        #: per program, its priority class's rank (ProgramInfo.priority; None: every program 0)
        self.priorities = priorities
        self.instances = instances
        self.rec = recorder
        self.rng_arrivals = rng_arrivals
        self.rng_tools = rng_tools
        self.bs = block_size
        self._next_program = 0
        self.done_programs = 0
        self.tool_stats = tool_stats if tool_stats is not None else ToolStats()
        self.log = log
        self.infos: list[ProgramInfo | None] = [None] * workload.n_programs
        # Per-turn scalars are read through memoryviews: same values as Python int / float, about 3x cheaper
        # per access than numpy scalar indexing, and no per-turn copy of the arrays.
        self._turn_start = _ints(workload.turn_start)
        self._input = _ints(workload.input_tokens)
        self._output = _ints(workload.output_tokens)
        self._reused = _ints(workload.reused_tokens)
        self._prefix_tokens = _ints(workload.prefix_tokens)
        #: the workload's per-turn / per-program lists, typed here (read natively; filled in place by a day's
        #: chunked generator, never replaced)
        self._tool_class: list[str] = workload.tool_class
        self._prefix_ids: list[str | None] = workload.prefix_ids
        self._closed = cfg.arrival == "closed"
        self.affinity_breaks = 0
        #: the segment a request names until it is routed (the router reads only its tokens and program)
        self._unrouted = Segment(("unrouted",), 0, 0)
        #: the mechanisms' hooks (:meth:`install`; agentreplay.features.mechanism.Hooks), in registry order: each
        #: routed call before it is submitted (disaggregated prefill); a call's placement before it is routed, -1 =
        #: the router picks (failover); each finished call (failover). Empty unless a mechanism is on: no call then
        self._on_route: tuple[Callable[[Request], None], ...] = ()
        self._place: tuple[Callable[[Request, tuple[int, ...] | None], int], ...] = ()
        self._on_turn_done: tuple[Callable[[Request], None], ...] = ()
        #: fan-out joins (:mod:`agentreplay.sim.dag`); None for independent programs (no per-call work then)
        self.fan: FanOut | None = None
        self._roots: list[int] = list(range(workload.n_programs))
        if workload.dag is not None:
            self.fan = FanOut(
                workload.dag, engine, self._arrive, self._release, workload.turn_start, workload.prefix_tokens
            )
            self._roots = self.fan.roots

    def install(
        self,
        on_route: tuple[Callable[[Request], None], ...],
        place: tuple[Callable[[Request, tuple[int, ...] | None], int], ...],
        on_turn_done: tuple[Callable[[Request], None], ...],
    ) -> None:
        """The mechanisms' hooks, before :meth:`start` (agentreplay.sim.build: built once the mechanisms, which may
        need this orchestrator, are attached)."""
        self._on_route, self._place, self._on_turn_done = on_route, place, on_turn_done

    def start(self) -> None:
        roots = self._roots
        n = len(roots)
        mode = self.cfg.arrival
        if mode == "closed":
            for _ in range(min(self.cfg.concurrency, n)):
                self._arrive_next()
        elif mode == "poisson":
            gaps = self.rng_arrivals.exponential(1.0 / self.cfg.rate_per_s, size=n)
            times = np.cumsum(gaps) - gaps[0]
            for k in range(n):
                self.engine.at(float(times[k]), PHASE_RELEASE, self._arrive, roots[k])
            self._next_program = n
        else:
            arr = self.w.arrival_s[roots] if self.fan is not None else self.w.arrival_s
            if np.isnan(arr).any():
                p = int(np.argmax(np.isnan(arr)))
                raise ValueError(f"arrival 'trace': program {self.w.program_ids[p]!r} has no arrival_s")
            arr = arr - arr.min()
            for q in np.argsort(arr, kind="stable").tolist():
                self.engine.at(float(arr[q]), PHASE_RELEASE, self._arrive, roots[q])
            self._next_program = n

    def _arrive_next(self) -> None:
        p = self._roots[self._next_program]
        self._next_program += 1
        self.engine.at(self.engine.now, PHASE_RELEASE, self._arrive, p)

    def _arrive(self, p: int) -> None:
        self.rec.program_arrived(p, self.engine.now)
        pid = self._prefix_ids[p]
        self.infos[p] = info = ProgramInfo(
            self.engine.now, prefix_key=pid, prefix_tokens=self._prefix_tokens[p] if pid is not None else 0
        )
        if self.fan is not None and self.fan.parent[p] < 0:
            self.fan.root_arrived(p)
        if self.priorities is not None:
            info.priority = self.priorities[p]
        self._release(self._turn_start[p], p)

    def _segments(self, inst: Instance, p: int) -> tuple[Segment | None, Segment, int]:
        base = self._prefix_tokens[p] // self.bs
        pid = self._prefix_ids[p]
        shared = pid is not None and base > 0 and inst.sched.prefix_caching
        pfx = inst.pool.segment(("prefix", pid, base), 0) if shared else None
        if pfx is None:
            base = 0
        prog = inst.pool.segment(("prog", p), base)
        return pfx, prog, base

    def _chain(self, inst: Instance, turn: int, ids: tuple[int, ...]) -> tuple[list[Segment], Segment, int]:
        """Segments of a block-hash prefix chain on ``inst`` (``Workload.chains``): segment ``s`` covers tokens
        ``seg_bounds[s]``, i.e. blocks ``[start // bs, end // bs)`` (a block straddling a boundary belongs to the
        later segment, whose identity implies the whole path before it); empty ones are skipped."""
        bounds = self.w.seg_bounds
        assert bounds is not None
        segs: list[Segment] = []
        base = 0
        if inst.sched.prefix_caching:
            bs = self.bs
            for s in ids:
                lo, hi = int(bounds[s, 0]) // bs, int(bounds[s, 1]) // bs
                if hi > lo:
                    segs.append(inst.pool.segment(("chain", s), lo))
                    base = hi
        return segs, inst.pool.segment(("turn", turn), base), base

    def _release(self, turn: int, p: int) -> None:
        w = self.w
        now = self.engine.now
        info = self.infos[p]
        assert info is not None
        starts = self._turn_start
        last = turn == starts[p + 1] - 1
        r = Request(
            turn=turn,
            program=p,
            turn_idx=turn - starts[p],
            prompt=self._input[turn],
            target_out=self._output[turn],
            reuse=self._reused[turn],
            pfx=None,
            prog=self._unrouted,
            base=0,
            release_s=now,
            info=info,
            tool_class=self._tool_class[turn],
            last=last,
        )
        if not last:
            r.next_gap_s = self.tools.gap_s(turn, self.rng_tools)
        chains = w.chains
        ids = chains[turn] if chains is not None else None
        if ids is not None:
            bounds = w.seg_bounds
            assert bounds is not None
            r.chain_ids = ids
            r.chain_ends = tuple([int(bounds[s, 1]) for s in ids])
        elif self.fan is not None:
            r.chain_ids, r.chain_ends = self.fan.tag(p, r.prompt)
        if self._gated and not self.admission.admit(r, self.instances, now):
            self.deferred.append((r, ids))
            self._log_admission(r, "hold")
            self._arm()
            return
        self._route(r, ids)

    def _log_admission(self, r: Request, decision: str) -> None:
        if self.log is not None:
            self.log(
                {
                    "t": self.engine.now,
                    "event": "admission",
                    "program": r.program,
                    "turn": r.turn_idx,
                    "decision": decision,
                    "policy": self.admission.name,
                    "held_s": self.engine.now - r.release_s,
                }
            )

    def _arm(self) -> None:
        """Ask the engine to offer the held calls again when the admission policy wants it (a periodic check,
        a forced resume), unless an earlier offer is already pending."""
        t = max(self.admission.next_wake(self.engine.now), self.engine.now)
        if t < self._wake_at:
            self._wake_at = t
            self.engine.at(t, PHASE_RELEASE, self._wake, t)

    def _wake(self, t: float) -> None:
        if t != self._wake_at:  # superseded by an earlier timer
            return
        self._wake_at = float("inf")
        if self.deferred:
            self._offer_deferred()

    def _route(self, r: Request, ids: tuple[int, ...] | None) -> None:
        """Send an admitted call to the instance its router picks."""
        now = self.engine.now
        info = r.info
        p = r.program
        i = -1
        for place in self._place:  # (failover: HOLD when no instance is up; >= 0: placed after a failure)
            i = place(r, ids)
            if i != -1:
                break
        if i < 0:
            if i == HOLD:
                return
            i = self.router.pick(r, self.instances, now)
        if info.home >= 0 and i != info.home:
            info.affinity_breaks += 1
            self.affinity_breaks += 1
        if self.log is not None:
            self.log(
                {
                    "t": now,
                    "event": "route",
                    "program": p,
                    "turn": r.turn_idx,
                    "instance": i,
                    "router": self.router.name,
                    "home": info.home,
                    "prompt": r.prompt,
                }
            )
        info.home = i
        inst = self.instances[i]
        if ids is not None:
            r.chain, r.prog, r.base = self._chain(inst, r.turn, ids)
        elif self.fan is not None and self.fan.parent[p] >= 0 and inst.sched.prefix_caching:
            r.chain, r.prog, r.base = self.fan.segments(inst.pool, p, self.bs, self.w.prefix_ids[p])
        else:
            r.pfx, r.prog, r.base = self._segments(inst, p)
        for hook in self._on_route:
            hook(r)
        inst.submit(r)

    def _offer_deferred(self) -> None:
        """A call finished: offer the held calls to the admission policy again, in release order."""
        held, self.deferred = self.deferred, []
        now = self.engine.now
        for r, ids in held:
            if self.admission.admit(r, self.instances, now):
                self._log_admission(r, "admit")
                self._route(r, ids)
            else:
                self.deferred.append((r, ids))
        if self.deferred:
            self._arm()

    def on_turn_done(self, r: Request) -> None:
        if self._gated:
            self.admission.finished(r, self.engine.now)
        for hook in self._on_turn_done:
            hook(r)
        if self.deferred:
            self._offer_deferred()
        self.rec.record_turn(r)
        r.info.service_tokens += (r.prompt - r.cached_tokens) + r.target_out
        fan = self.fan
        if fan is not None:
            fan.turn_done(r.turn, r.last)
        if r.last:
            self.rec.program_finished(r.program, self.engine.now)
            self.done_programs += 1
            if fan is not None and not fan.program_done(r.program):
                return  # (closed loop: the worker is busy until its whole workflow finished)
            if self._closed and self._next_program < len(self._roots):
                self._arrive_next()
            return
        gap = r.next_gap_s
        self.rec.tool_gap(r.turn, gap)
        self.engine.at(self.engine.now + gap, PHASE_RELEASE, self._tool_done, (r.turn, r.program, r.tool_class, gap))

    def _tool_done(self, arg: tuple[int, int, str, float]) -> None:
        turn, p, tool_class, gap = arg
        self.tool_stats.observe(tool_class, gap)
        if self.fan is not None and not self.fan.gap_done(turn):
            return  # join: children of this turn still running
        self._release(turn + 1, p)


def _ints(a: np.ndarray) -> memoryview:
    return np.ascontiguousarray(a, dtype=np.int64).data
