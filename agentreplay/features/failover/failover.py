"""Replica failures and drains, and the failover ledger (``[failures]``, :mod:`agentreplay.features.failover.config`).

What real deployments do, and what is modelled:

- vLLM itself has no failover: an engine whose GPU dies takes its whole KV cache (HBM) with it, and the
  requests it was serving fail at the client (``vllm/v1/engine/core_client.py`` raises ``EngineDeadError`` on
  every in-flight request). Recovery is the front end's job: a Kubernetes readiness probe fails, the Service /
  gateway (vLLM production-stack router, llm-d's inference scheduler) stops routing to the pod, and the client
  (OpenAI SDK ``max_retries``; agent frameworks) retries the call, which lands on a surviving replica.
- **fail** at ``t``: every running and waiting call of the instance is aborted and re-submitted through the
  router as a fresh call (same prompt and output length, nothing generated: the streamed part is lost, and
  the retry re-prefills its whole prompt minus whatever prefix cache its new instance has). The instance's
  KV pool, pins, retention holds and host-tier copies are dropped (LMCache's CPU offload lives in the engine
  process: ``LMCacheConnectorV1`` keeps it in the worker's host memory). Programs idle in a tool call whose
  home was the instance lose their cached KV; their next call re-prefills wherever the router sends it. The
  instance takes no calls until it recovers, empty.
- **drain** (Kubernetes pod termination: the endpoint is removed from the Service before the container gets
  SIGTERM, and vLLM's graceful shutdown finishes in-flight requests): the instance takes no new calls, finishes
  what it runs and what waits, then goes down (its cache lost as above) and recovers after
  ``recover_after_s`` when given. Every program homed there loses that cache from the drain on: the idle ones
  at once, those with a call there when it finishes (their next call is routed elsewhere).
- **A DP + EP deployment** of a MoE model (its DP ranks stepping in lockstep, :mod:`agentreplay.features.dp`) is
  one failure domain: the client dies with any of its engine cores (``MPClient.start_engine_core_monitor``), so a
  fail or drain of one rank is one of every rank, and they recover together.
- **Disaggregated prefill / decode** (:mod:`agentreplay.features.disagg`; instance indices run over the prefill
  pool, then the decode pool). A prefill instance fails like a colocated one: its prefills are retried over the prefill
  pool, with the call's output length. A decode instance's failure fails its calls whole, and the hand-offs
  queued for it: vLLM's disaggregated proxy streams the decode instance's response to the client
  (``tests/v1/kv_connector/nixl_integration/toy_proxy_server.py``), so the client sees the error and retries
  the call from a new prefill (which, on the prefill instance that computed the prompt, finds its blocks:
  vLLM's block hashes; elsewhere the trace's reuse bounds the hit, as for any call); KV transfers to the failed
  instance stop (:meth:`agentreplay.kv.tiers.Link.cancel`). Programs whose last call decoded there lose that
  context. A draining decode instance finishes its calls and its queued hand-offs, then goes down; while no
  decode instance is up, finished prefills wait for one.
- Routers skip instances that are not ``up`` (:class:`agentreplay.router.policies.InstanceView`); when every
  instance is down, released calls are held at the front end and routed when one recovers (never dropped).

The **failover ledger** (:meth:`Failover.table`): one row per affected call: aborted (running / waiting) or the
next call of an idle program whose KV was lost; the program's age at the event (seconds since arrival, turns
done), the KV tokens lost, the output tokens lost, and the tokens re-prefilled because of the failure: the part
of the lost context the retry (or next call) had to compute again, ``min(lost, prompt - cached)`` (0 for a decode
instance's context lost between calls: the next call's prefill is unchanged, its hand-off moves more blocks).

``placement = "age-aware"`` (the remedy): aborted calls are re-submitted oldest program first (most turns done,
then earliest arrival), and every affected program's re-routed call goes to the least-loaded surviving instance
(outstanding tokens) whose free KV blocks hold its prompt: old programs have the most context to rebuild and
queue first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from agentreplay.engine import PHASE_RELEASE, Engine, Event
from agentreplay.features.failover.config import FailureConfig
from agentreplay.features.failover.restart import fresh_scheduler, retry
from agentreplay.kv.segment_pool import SegmentPool
from agentreplay.request import Request
from agentreplay.sim.errors import ConfigError
from agentreplay.sim.instance import Instance
from agentreplay.sim.orchestrator import HOLD, Orchestrator

if TYPE_CHECKING:
    from agentreplay.features.disagg.disagg import Disagg
    from agentreplay.features.dp.lockstep import LockstepGroup
    from agentreplay.sim.stream import ResultStream

UP, DRAINING, DOWN = 0, 1, 2
#: the random-failure stream: the third child of the run's SeedSequence (arrivals and tools are the first two)
SPAWN_KEY = (2,)


class Failover:
    """Applies ``[failures]`` to a run: schedules the events, fails / drains / recovers instances, holds calls
    while every instance is down, places re-routed calls, and keeps the ledger. The orchestrator calls
    :meth:`place` before routing a call and :meth:`on_turn_done` when one finishes (its hooks, only when this
    exists).

    ``group``: the lockstep DP group when the instances are the DP ranks of one MoE deployment (a failure or drain
    of any rank is one of them all: their failure domain). ``disagg``: disaggregated serving; the orchestrator
    routes over its prefill pool, the other instances are its decode pool, and a decode instance's failure fails
    its calls whole (:meth:`agentreplay.features.disagg.disagg.Disagg.abort_decode`). ``sink``: a streamed run's
    output, whose ``pools`` (searched for a finished program's segments) follow an instance's fresh pool after a
    failure."""

    def __init__(
        self,
        cfg: FailureConfig,
        engine: Engine,
        orch: Orchestrator,
        instances: Sequence[Instance],
        seed: int,
        *,
        group: LockstepGroup | None = None,
        disagg: Disagg | None = None,
        sink: ResultStream | None = None,
    ) -> None:
        for e in cfg.events:
            if e.instance >= len(instances):
                raise ConfigError(
                    f"[failures] events.instance = {e.instance} is invalid: an instance index in "
                    f"[0, {len(instances) - 1}]"
                )
        self.cfg = cfg
        self.engine = engine
        self.orch = orch
        self.instances = instances
        self.rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=SPAWN_KEY))
        self.age_aware = cfg.placement == "age-aware"
        n = len(instances)
        self.state = [UP] * n
        self.n_up = n
        self.drain_recover: list[float | None] = [None] * n  #: recovery delay of a draining instance
        self.pending_recoveries = 0
        self.held: list[tuple[Request, tuple[int, ...] | None]] = []
        self.held_calls = 0
        self.replace: set[int] = set()  #: programs whose next routed call the age-aware placement places
        m = orch.w.n_programs
        self.turns_done = [0] * m
        self.finished = [False] * m
        self.n_finished = 0
        self.open: dict[int, int] = {}  #: program -> its ledger row awaiting the re-routed call's outcome
        self.rows: list[dict[str, Any]] = []
        self.events_log: list[dict[str, Any]] = []
        self._timers: list[Event] = []
        self.sink = sink
        self.group = group
        self.disagg = disagg
        #: the orchestrator routes over the first ``routed`` instances (under disaggregation, the prefill pool)
        self.routed = n if disagg is None else disagg.n_prefill
        if disagg is not None:
            disagg.watch(self.on_side_done, self.check_recovers)

    def _decode(self) -> Disagg:
        """The disaggregated pools (an instance index ``>= routed`` is a decode instance: they exist)."""
        assert self.disagg is not None
        return self.disagg

    # ---- schedule ----------------------------------------------------------------------------------------
    def start(self) -> None:
        for e in sorted(self.cfg.events, key=lambda e: (e.at_s, e.instance)):
            handler = self._fail_event if e.kind == "fail" else self._drain_event
            self._at(e.at_s, handler, (e.instance, e.recover_after_s))
        if self.cfg.mtbf_s > 0:
            for i in range(len(self.instances)):
                self._at(float(self.rng.exponential(self.cfg.mtbf_s)), self._random_fail, i)

    def _at(self, t: float, handler: Any, arg: Any) -> None:
        self._timers.append(self.engine.at(t, PHASE_RELEASE, handler, arg))

    def _fail_event(self, arg: tuple[int, float | None]) -> None:
        self.fail(arg[0], arg[1])

    def _drain_event(self, arg: tuple[int, float | None]) -> None:
        self.drain(arg[0], arg[1])

    def _random_fail(self, i: int) -> None:
        """MTBF / MTTR failures (exponential, from this controller's own generator): the repair time is drawn
        with the failure, the next failure counts from the repair."""
        ttr = float(self.rng.exponential(self.cfg.mttr_s))
        if self.state[i] != DOWN:
            self.fail(i, ttr, kind="random")
        self._at(self.engine.now + ttr + float(self.rng.exponential(self.cfg.mtbf_s)), self._random_fail, i)

    # ---- state changes -----------------------------------------------------------------------------------
    def _set_down(self, i: int, recover_after_s: float | None) -> None:
        if self.state[i] == UP:
            self.n_up -= 1
        self.state[i] = DOWN
        self.drain_recover[i] = None
        self.instances[i].up = False
        if recover_after_s is not None:
            self.pending_recoveries += 1
            self._at(self.engine.now + recover_after_s, self._recover, i)

    def domain(self, i: int) -> list[int]:
        """The instances that fail with ``i``: all DP ranks of a lockstep MoE deployment (vLLM: an engine core
        that dies marks the whole client dead, ``vllm/v1/engine/core_client.py``
        ``MPClient.start_engine_core_monitor``), else ``i`` alone."""
        if self.group is not None:
            return [inst.index for inst in self.group.ranks]
        return [i]

    def fail(self, i: int, recover_after_s: float | None, kind: str = "fail") -> None:
        """Instance ``i`` loses its GPU now (ignored when it is already down), with its failure domain; the
        domain's instances recover together."""
        if self.state[i] == DOWN:
            return
        now = self.engine.now
        ranks = [j for j in self.domain(i) if self.state[j] != DOWN]
        if self.group is not None:
            self.group.abort()  # the group step in flight is lost (its ranks are reset below)
        aborted: list[Request] = []
        for j in ranks:
            inst = self.instances[j]
            self._set_down(j, None)
            old_pool = inst.pool
            running = {id(r) for r in inst.sched.running}
            lost_here = self._reset(j)
            # (the request lost here, the call the client retries): the same request, but a decode instance's
            # calls (and the hand-offs queued for it) fail whole and their prefill requests are retried
            calls = [(r, r) for r in lost_here] if j < self.routed else self._decode().abort_decode(j, lost_here)
            self.events_log.append({"t_s": now, "instance": j, "event": kind, "aborted": len(calls)})
            for r, _ in calls:
                state = "running" if id(r) in running else "waiting"  # (running: its step in flight is lost too)
                lost = max(r.computed, _cached_history(old_pool, r.program))
                self._row(r.program, r.turn_idx, kind, state, j, lost, r.generated)
            self._lose_idle(j, old_pool, kind, {r.program for r, _ in calls})
            aborted += [call for _, call in calls]
        if recover_after_s is not None:
            self.pending_recoveries += 1
            self._at(now + recover_after_s, self._recover_ranks, ranks)
        if self.age_aware:
            aborted.sort(key=self._age_key)
        for r in aborted:
            self._resubmit(retry(r, self.orch._unrouted))

    def drain(self, i: int, recover_after_s: float | None) -> None:
        """Instance ``i`` (with its failure domain) stops taking calls now and goes down once it has finished what
        it has."""
        for j in self.domain(i):
            self._drain_one(j, recover_after_s)

    def _drain_one(self, i: int, recover_after_s: float | None) -> None:
        if self.state[i] != UP:
            return
        self.state[i] = DRAINING
        self.n_up -= 1
        self.instances[i].up = False
        self.drain_recover[i] = recover_after_s
        self.events_log.append({"t_s": self.engine.now, "instance": i, "event": "drain", "aborted": 0})
        # the programs homed here lose their cache (the router no longer sends them here): those idle now, and
        # those with a call here once it finishes (on_turn_done)
        inst = self.instances[i]
        busy = {r.program for r in (*inst.sched.running, *inst.sched.waiting)}
        if i >= self.routed:  # (a decode instance also finishes the hand-offs queued for it)
            busy |= {d.program for d in self._decode().queued_calls(i)}
        self._lose_idle(i, inst.pool, "drain", busy)
        if not self._busy(i):
            self._drained(i)

    def _busy(self, i: int) -> int:
        """Calls instance ``i`` still has: running and waiting, and for a decode instance the hand-offs queued."""
        return self.instances[i].outstanding() + (len(self._decode().queued_calls(i)) if i >= self.routed else 0)

    def _drained(self, i: int) -> None:
        if self.state[i] != DRAINING or self._busy(i):
            return
        self._set_down(i, self.drain_recover[i])
        self._reset(i)
        self.events_log.append({"t_s": self.engine.now, "instance": i, "event": "drained", "aborted": 0})

    def _recover(self, i: int) -> None:
        self._recover_ranks([i])

    def _recover_ranks(self, ranks: list[int]) -> None:
        """The instances ``ranks`` (one failure domain) are repaired now; the held calls are routed again."""
        self.pending_recoveries -= 1
        back = [i for i in ranks if self.state[i] == DOWN]
        if not back:
            return
        for i in back:
            self.state[i] = UP
            self.n_up += 1
            self.instances[i].up = True
            self.events_log.append({"t_s": self.engine.now, "instance": i, "event": "recover", "aborted": 0})
        held, self.held = self.held, []
        if self.age_aware:
            held.sort(key=lambda h: self._age_key(h[0]))
        for r, ids in held:
            self.orch._route(r, ids)
        if self.disagg is not None:
            self.disagg.resume_held()

    # ---- hooks (orchestrator) ----------------------------------------------------------------------------
    def place(self, r: Request, ids: tuple[int, ...] | None) -> int:
        """Before routing ``r``: :data:`HOLD` (no instance is up: held until one recovers), an instance index
        (the age-aware placement of an affected program), or -1 (the router picks)."""
        if not self._routable():
            self.check_recovers("every instance" if self.disagg is None else "every prefill instance")
            self.held.append((r, ids))
            self.held_calls += 1
            return HOLD
        if self.age_aware and r.program in self.replace:
            self.replace.discard(r.program)
            return self._roomiest(r)
        return -1

    def _routable(self) -> bool:
        """An instance the orchestrator routes over (the prefill pool under disaggregated serving) is up."""
        if self.disagg is None:
            return self.n_up > 0
        return any(inst.up for inst in self.instances[: self.routed])

    def check_recovers(self, what: str) -> None:
        """``what`` is down and calls wait for it: an error unless an instance will recover."""
        if not self.pending_recoveries and not any(x is not None for x in self.drain_recover):
            raise RuntimeError(
                f"[failures] {what} is down at t = {self.engine.now:.3f} s and none recovers "
                "(set recover_after_s on an event): the held calls could never run"
            )

    def on_side_done(self, x: Request) -> None:
        """Disaggregated serving: a prefill or decode instance finished its part of a call (``x``: the prefill
        or the decode request). A draining instance goes down once it has nothing left; a draining decode
        instance's program loses the context cached there for its next call, which decodes elsewhere (as
        :meth:`on_turn_done` does for a colocated or prefill instance)."""
        i = x.instance
        if self.state[i] != DRAINING:
            return
        if i >= self.routed and not x.last:
            bs = self.instances[i].pool.block_size
            self._row(x.program, x.turn_idx + 1, "drain", "idle", i, x.computed // bs * bs, 0)
        if not self._busy(i):
            self.engine.at(self.engine.now, PHASE_RELEASE, self._drained, i)

    def on_turn_done(self, r: Request) -> None:
        p = r.program
        self.turns_done[p] = r.turn_idx + 1
        k = self.open.pop(p, None)
        if k is not None:
            row = self.rows[k]
            if row["state"] == "idle" and row["instance"] >= self.routed:
                row["reprefill_tokens"] = 0  # (a decode instance's context lost between calls is moved again, not
            else:  # computed: the next call's prefill is what it would have been; its hand-off moves more blocks)
                row["reprefill_tokens"] = max(0, min(row["lost_kv_tokens"], r.prompt - r.cached_tokens))
            row["retry_instance"] = r.instance
        if r.last:
            self.finished[p] = True
            self.n_finished += 1
            if self.n_finished == len(self.finished):  # the run is over: no more failures or repairs
                for ev in self._timers:
                    ev.cancel()
        i = r.instance
        if self.state[i] == DRAINING:
            if not r.last:  # its next call goes elsewhere: the context cached here is lost to it
                bs = self.instances[i].pool.block_size
                self._row(p, r.turn_idx + 1, "drain", "idle", i, r.computed // bs * bs, 0)
                if self.age_aware:
                    self.replace.add(p)
            if self.instances[i].outstanding() == 0:
                self.engine.at(self.engine.now, PHASE_RELEASE, self._drained, i)

    # ---- helpers -----------------------------------------------------------------------------------------
    def _reset(self, i: int) -> list[Request]:
        """Instance ``i`` goes on with a fresh scheduler over an empty KV stack (:meth:`Instance.reset`); its
        running and waiting calls are returned."""
        inst = self.instances[i]
        aborted = inst.reset(fresh_scheduler(inst.sched, self.engine))
        if self.sink is not None:
            self.sink.pools[i] = inst.pool
        return aborted

    def _resubmit(self, r: Request) -> None:
        if self.age_aware:
            self.replace.add(r.program)
        self.orch._route(r, r.chain_ids if self.orch.w.chains is not None else None)

    def _age_key(self, r: Request) -> tuple[int, float, int]:
        """Oldest first: most turns done, then earliest arrival, then program index."""
        return (-r.turn_idx, r.info.arrival_s, r.program)

    def _roomiest(self, r: Request) -> int:
        """The up instance with the fewest outstanding tokens among those whose free blocks hold ``r``'s prompt
        (all up instances when none does); ties to the lowest index."""
        ups = [k for k in range(self.routed) if self.instances[k].up]
        fits = [k for k in ups if self.instances[k].pool.free_blocks * self.instances[k].pool.block_size >= r.prompt]
        cands = fits or ups
        return min(cands, key=lambda k: (self.instances[k].outstanding_tokens(), k))

    def _lose_idle(self, i: int, old_pool: SegmentPool, kind: str, skip: set[int]) -> None:
        """Programs between calls (in a tool) whose previous call ran on ``i``: their cached KV there is lost."""
        infos = self.orch.infos
        held = {r.program for r, _ in self.held}
        if i < self.routed:
            homed = [p for p, info in enumerate(infos) if info is not None and info.home == i]
        else:
            # a decode instance: the programs whose last call decoded there (their next call is in a tool or in the
            # prefill pool: their context here is lost the same way)
            homed = self._decode().decode_homed(i)
        for p in homed:
            if self.finished[p] or p in skip or p in held:
                continue
            self._row(p, self.turns_done[p], kind, "idle", i, _cached_history(old_pool, p), 0)
            if self.age_aware:
                self.replace.add(p)

    def _row(self, p: int, turn: int, kind: str, state: str, i: int, lost: int, lost_out: int) -> None:
        info = self.orch.infos[p]
        assert info is not None  # (a program with a call or a cached context has arrived)
        prev = self.open.get(p)
        if prev is not None:  # hit again before its re-routed call finished: that call's outcome is unknown
            self.rows[prev]["reprefill_tokens"] = -1
        self.open[p] = len(self.rows)
        self.rows.append(
            {
                "program": p,
                "program_id": str(self.orch.w.program_ids[p]),
                "turn": turn,
                "event": kind,
                "state": state,
                "instance": i,
                "t_s": self.engine.now,
                "age_s": self.engine.now - info.arrival_s,
                "turns_done": self.turns_done[p],
                "lost_kv_tokens": lost,
                "lost_output_tokens": lost_out,
                "reprefill_tokens": 0,
                "retry_instance": -1,
            }
        )

    # ---- outputs -----------------------------------------------------------------------------------------
    def table(self, arrival_s: np.ndarray, finish_s: np.ndarray) -> pa.Table:
        """The ledger, one row per affected call, with the program's JCT in this run."""
        cols: dict[str, list[Any]] = {k: [] for k in _COLUMNS}
        for row in self.rows:
            for k in list(_COLUMNS)[:-1]:
                cols[k].append(row[k])
            p = row["program"]
            cols["jct_s"].append(float(finish_s[p] - arrival_s[p]))
        return pa.table({k: pa.array(v, type=_COLUMNS[k]) for k, v in cols.items()})

    def summary(self) -> dict[str, Any]:
        reprefill = [r["reprefill_tokens"] for r in self.rows if r["reprefill_tokens"] > 0]
        return {
            "placement": self.cfg.placement,
            "events": self.events_log,
            "affected_calls": len(self.rows),
            "aborted_calls": sum(1 for r in self.rows if r["state"] != "idle"),
            "programs_affected": len({r["program"] for r in self.rows}),
            "lost_kv_tokens": sum(r["lost_kv_tokens"] for r in self.rows),
            "lost_output_tokens": sum(r["lost_output_tokens"] for r in self.rows),
            "reprefill_tokens": sum(reprefill),
            "held_calls": self.held_calls,
        }


_COLUMNS: dict[str, pa.DataType] = {
    "program": pa.int64(),
    "program_id": pa.string(),
    "turn": pa.int64(),
    "event": pa.string(),
    "state": pa.string(),
    "instance": pa.int64(),
    "t_s": pa.float64(),
    "age_s": pa.float64(),
    "turns_done": pa.int64(),
    "lost_kv_tokens": pa.int64(),
    "lost_output_tokens": pa.int64(),
    "reprefill_tokens": pa.int64(),
    "retry_instance": pa.int64(),
    "jct_s": pa.float64(),
}


def _cached_history(pool: SegmentPool, p: int) -> int:
    """Tokens of program ``p``'s context cached in ``pool`` (its history segment's present blocks, from block 0)."""
    seg = pool.segments.get(("prog", p))
    return 0 if seg is None else seg.present * pool.block_size
