"""One serving instance: the vLLM v1 scheduler (with its KV manager) and a performance model, driven by the engine.

An instance is *idle* (nothing scheduled) or *busy* (one completion event pending). A submitted request wakes
an idle instance with a scheduling event at the same time but a later phase, so every request released at
that instant is seen by the same scheduler step. The instance prices the step the scheduler plans and schedules
its completion; at the completion the scheduler applies it (:meth:`Scheduler.update_from_output`: tokens
computed and emitted, finished requests freed through the retention policy), the instance reports the finished
requests and schedules the next step.

Fast decode (DESIGN §4 "Speed"). When a step is decode-only and the next steps would be identical in
composition (no prefill in flight, nothing preempted, every running request scheduled, and the waiting queue
either empty or blocked for a reason decode cannot lift: ``max_num_seqs`` reached, token budget used, or
not enough free blocks, which decoding only makes scarcer), the instance commits ``k`` steps in one event:
``k`` stops exactly before the first finishing request would emit its last token or the first step whose block
allocation would fail, and the event time is the closed-form sum of the ``k`` step times. A request submitted
while such a run is in flight truncates it at the end of the step in progress, where the scheduler runs again:
the result equals a step-by-step run (a test checks this). Runs and single steps advance the scheduler's
decode cohort as a whole (:mod:`agentreplay.scheduler.cohort`); a request whose prompt completes joins it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from agentreplay.engine import PHASE_COMPLETE, PHASE_SCHEDULE, Engine, Event
from agentreplay.perf.model import mixed_pricer
from agentreplay.perf.pricer import IterationPricer
from agentreplay.request import Request
from agentreplay.router.policies import InstanceView
from agentreplay.scheduler.plan import StepPlan
from agentreplay.scheduler.scheduler import Scheduler
from agentreplay.sim.gpu_time import charge_run, charge_step

_STABLE_STOPS = frozenset({"empty", "max_seqs", "no_budget", "no_blocks"})


class LockstepHook(Protocol):
    """The group an instance steps in lockstep with (:class:`agentreplay.features.dp.lockstep.LockstepGroup`, the DP
    ranks of a MoE deployment as vLLM's ``DPEngineCoreProc`` runs them). A Protocol, so this module imports
    nothing from the feature above it."""

    def wake(self) -> None:
        """Something may have changed what a rank's scheduler would do (a request arrived, KV loaded, a step
        ended): the group steps at this instant unless a group step is in flight."""
        ...


class _Run:
    """A committed batch of decode steps: started at ``t0`` with context sum ``sum_ctx``, ``steps`` long.
    Step i (0-based) costs ``a + c * (sum_ctx + i * n)``.

    Step end times are summed one step at a time, in order, from ``t0``, so they are bit-identical to single
    decode steps priced as ``a + c * sum_ctx`` (the context sums are whole numbers below 2**53, exact as
    doubles). They are not stored: compiled, the loop is a few machine instructions a step, less than storing
    (about 70 steps a run on average on the synthetic day, and a truncation reads back about 13)."""

    __slots__ = ("a", "allocated", "c", "n", "steps", "sum_ctx", "t0")

    def __init__(self, t0: float, n: int, sum_ctx: int, steps: int, a: float, c: float, allocated: int = 1) -> None:
        if n < 1:
            raise ValueError(f"a decode run needs at least one sequence, got n={n}")
        self.t0 = t0
        self.n = n
        self.sum_ctx = sum_ctx
        self.steps = steps
        self.a = a
        self.c = c
        self.allocated = allocated  #: steps whose KV blocks are allocated (the first step's by the scheduler)

    def end_of_step(self, j: int) -> float:
        """Completion time of step ``j`` (1-based)."""
        return self._walk(j, math.inf)[1]

    def progress(self, now: float) -> tuple[int, float]:
        """``(j, end of step j)`` for the step ``j`` (1-based) in progress at ``now``; a step ending exactly at
        ``now`` counts as that one (after the last step: the last)."""
        return self._walk(self.steps, now)

    def _walk(self, last: int, now: float) -> tuple[int, float]:
        """Steps summed one by one up to step ``last``, or to the first ending at or after ``now``: ``(that
        step, its end)``. The loop counts context sums in doubles (whole numbers below 2**53: exact)."""
        t: float = self.t0
        a: float = self.a
        c: float = self.c
        s: float = float(self.sum_ctx)
        n: float = float(self.n)
        s0 = s
        end = s + n * last
        while s < end:
            t += a + c * s
            s += n
            if t >= now:
                break
        return int((s - s0) / n), t

    def steps_done_by(self, now: float) -> int:
        """The step in progress at ``now`` (1-based); a step ending exactly at ``now`` counts as that one."""
        return self.progress(now)[0]


@dataclass(slots=True)
class InstanceStats:
    iterations: int = 0
    decode_runs: int = 0
    busy_s: float = 0.0
    preemptions: int = 0
    prefill_tokens: int = 0
    decode_tokens: int = 0


class Instance(InstanceView):
    def __init__(
        self,
        index: int,
        engine: Engine,
        perf: IterationPricer,
        scheduler: Scheduler,
        on_finish: Callable[[Request], None],
        *,
        fast_decode: bool = True,
        on_sample: Callable[[Instance], float] | None = None,
        gpus: int = 1,
    ) -> None:
        self.index = index
        self.gpus = gpus  #: GPUs of the instance (its TP degree): the GPU-seconds a step costs are dt x gpus
        self.engine = engine
        self.perf = perf
        #: the pricer reads each decode's context (else only their count and sum: IterationPricer)
        self._contexts = bool(getattr(perf, "needs_decode_contexts", False))
        #: the pricer's mixed-step price from the decodes' count and sum, where it has one (else None)
        self._mixed = mixed_pricer(perf)
        self.sched = scheduler
        self.pool = scheduler.kv.pool
        self.residency = scheduler.kv.residency
        self.on_finish = on_finish
        #: called at the start of a step from ``sample_due`` on; returns when it wants the next call (the
        #: recorder's time series and the footprint sampler keep one sample per interval per instance)
        self.on_sample = on_sample
        self.sample_due = 0.0
        self.fast_decode = fast_decode
        if self.residency is not None:
            self.residency.on_ready = self._wake
        scheduler.recompute_s = self._recompute_s
        self.stats = InstanceStats()
        self._busy = False
        self._wake_pending = False
        self._done: Event | None = None  # the pending completion (a truncated run cancels and replaces it)
        self._plan: StepPlan | None = None
        self._run: _Run | None = None
        self._t_start = 0.0
        #: the DP group this instance steps in lockstep with (:class:`LockstepHook`), or None: the group then
        #: schedules and prices every step, and this instance only plans and applies its part
        self.lockstep: LockstepHook | None = None
        self.up = True  #: takes new calls (InstanceView; False while down or draining)

    def _recompute_s(self, tokens: int) -> float:
        """A prefill of ``tokens`` alone (what retention policies weigh against keeping the KV)."""
        return self.perf.iteration_time_s([(tokens, 0)], ())

    # ---- load figures the router reads (InstanceView) ------------------------------------------------------
    def outstanding(self) -> int:
        return len(self.sched.waiting) + len(self.sched.running)

    def outstanding_tokens(self) -> int:
        self.sched.cohort.sync(self.sched.running)
        return sum(
            r.total_tokens - r.computed + r.target_out - r.generated for r in (*self.sched.waiting, *self.sched.running)
        )

    def queue_lengths(self) -> tuple[int, int]:
        return len(self.sched.waiting), len(self.sched.running)

    def kv_usage(self) -> float:
        return self.pool.used_blocks / self.pool.num_blocks

    def kv_capacity_tokens(self) -> int:
        return self.pool.num_blocks * self.pool.block_size

    # ---- events ------------------------------------------------------------------------------------------------
    def submit(self, r: Request) -> None:
        r.instance = self.index
        r.pinned = self.residency is not None and r.program in self.residency.pins
        self.sched.waiting.append(r)
        if not self._busy:
            self._wake()
        elif self._run is not None:
            self._truncate_run()

    def _wake(self) -> None:
        """Something may have changed what the scheduler would do (a request arrived, KV finished loading, a pin
        expired, a tier write freed blocks): schedule now if idle. During a decode run, end the run after the
        step in progress, where a step-by-step engine would next run the scheduler."""
        if self.lockstep is not None:
            self.lockstep.wake()
            return
        if self._run is not None:
            self._truncate_run()
            return
        if not self._wake_pending:
            self._wake_pending = True
            self.engine.at(self.engine.now, PHASE_SCHEDULE, self._step)

    def _step(self, _: object = None) -> None:
        self._wake_pending = False
        if self._busy:
            return
        plan = self._begin()
        if plan is None:
            return
        now = self.engine.now
        co = self.sched.cohort
        # a run needs the next steps to schedule the same: not after a step that started KV loads (the next
        # step's admission no longer reserves their blocks, so it may admit what this one could not)
        if (
            self.fast_decode
            and not plan.prefill
            and not plan.decode
            and plan.stop in _STABLE_STOPS
            and plan.cohort == len(self.sched.running)
            and not plan.loading
        ):
            self._start_run(plan)
            return
        n_dec = len(plan.decode) + plan.cohort
        sum_ctx = sum(r.computed for r in plan.decode) + (co.sum_ctx if plan.cohort else 0)
        if plan.prefill:
            prefill = [(n, before, before + n == r.total_tokens) for r, n, before in plan.prefill]
            if self._contexts:  # the cohort (a prefix of the running list) first, in running order
                tick = co.tick
                ctxs = [r.c_off + tick for r in self.sched.running[: plan.cohort]] + [r.computed for r in plan.decode]
                dt = self.perf.iteration_time_s(prefill, ctxs)
            elif self._mixed is not None:  # (the same number, without the list below)
                dt = self._mixed(prefill, n_dec, sum_ctx)
            else:  # the count and the sum are all such a pricer reads (IterationPricer)
                dt = self.perf.iteration_time_s(prefill, [sum_ctx] + [0] * (n_dec - 1) if n_dec else ())
        else:  # decode-only: the same arithmetic as a fast-forwarded run (see _Run)
            a, c = self.perf.decode_coeffs(n_dec)
            dt = a + c * sum_ctx
        self._run = None
        self._done = self.engine.at(now + dt, PHASE_COMPLETE, self._complete)

    def begin_lockstep(self) -> tuple[list[tuple[int, int, bool]], list[int]] | None:
        """Lockstep hook (:mod:`agentreplay.features.dp`): run the scheduler for this rank's part of a group step and
        return its batch (prefill items, decode contexts), or None when it scheduled nothing (the rank then runs
        vLLM's dummy batch). The group prices the step and calls :meth:`complete_lockstep` when it ends."""
        if self._busy:
            return None
        plan = self._begin()
        if plan is None:
            return None
        co = self.sched.cohort
        prefill = [(n, before, before + n == r.total_tokens) for r, n, before in plan.prefill]
        tick = co.tick
        ctxs = [r.c_off + tick for r in self.sched.running[: plan.cohort]] + [r.computed for r in plan.decode]
        self._run = None
        return prefill, ctxs

    def complete_lockstep(self) -> None:
        """Lockstep hook: the group step this rank took part in has ended; apply it."""
        self._complete()

    def _begin(self) -> StepPlan | None:
        """Run the scheduler now and start the step it plans (busy, admissions logged, sampled); None when it
        planned nothing (an idle instance, woken again later by whatever can change that)."""
        plan = self.sched.schedule(self.engine.now)
        self.stats.preemptions += len(plan.preempted)
        if plan.empty:
            self.sched.recycle(plan)
            if self.sched.unstall():
                self._wake()
            return None
        now = self.engine.now
        self._busy = True
        self._t_start = now
        self._plan = plan
        if self.on_sample is not None and now >= self.sample_due:
            self.sample_due = self.on_sample(self)
        return plan

    def _start_run(self, plan: StepPlan) -> None:
        co = self.sched.cohort
        n = co.n
        k = co.steps_to_finish()
        if k > 1:  # the blocks of steps 2..k must fit (the first step's are allocated)
            k = 1 + co.steps_within(1, self.pool.free_blocks, k - 1)
        a, c = self.perf.decode_coeffs(n)
        run = _Run(self.engine.now, n, co.sum_ctx, k, a, c)
        self._run = run
        self._done = self.engine.at(run.end_of_step(k), PHASE_COMPLETE, self._complete)

    def _truncate_run(self) -> None:
        """Something woke the instance mid-run: end the run at the end of the step in progress."""
        run = self._run
        assert run is not None
        j, end = run.progress(self.engine.now)
        if j >= run.steps:
            return
        run.steps = j
        assert self._done is not None
        self._done.cancel()
        self._done = self.engine.at(end, PHASE_COMPLETE, self._complete)

    def _complete(self, _: object = None) -> None:
        self._done = None
        now = self.engine.now
        plan = self._plan
        assert plan is not None
        stats = self.stats
        stats.iterations += 1
        dt = now - self._t_start
        stats.busy_s += dt
        run = self._run
        if run is not None:
            charge_run(self.sched.cohort, dt * self.gpus, run.n)
            k = run.steps
            stats.decode_runs += 1
            stats.iterations += k - 1
            stats.decode_tokens += k * run.n
            # the blocks of the steps not yet allocated (all beyond the first, unless sync_pool ran) are
            # allocated now: the same pool state as step by step, since only tail appends (releases) touch this
            # pool during the run
            self._allocate_run(run, k)
            self._run = None
            finished = self.sched.update_from_output(plan, now, k)
        else:
            charge_step(plan, dt * self.gpus, self.sched.cohort)
            for _, n, _ in plan.prefill:
                stats.prefill_tokens += n
            stats.decode_tokens += len(plan.decode) + plan.cohort
            finished = self.sched.update_from_output(plan, now)
        self._plan = None
        self.sched.recycle(plan)  # (nothing here reads the plan again)
        self._busy = False
        for r in finished:
            self.on_finish(r)
        if self.sched.running or self.sched.waiting:
            if self.lockstep is not None:
                self.lockstep.wake()
            elif not self._wake_pending and self.engine.nothing_else_now():
                self._step()  # exactly what the wake event would do next
            else:
                self._wake()

    def check_idle(self) -> None:
        """Invariant check for an idle instance (nothing running or waiting): every block in use belongs to a
        pin or a tier write in flight, and the pool's own invariants hold."""
        assert not self.sched.running and not self.sched.waiting, "check_idle on a busy instance"
        segs = {}
        for r in self.residency.held_segments() if self.residency is not None else []:
            segs[id(r.prog)] = r.prog
            if r.pfx is not None:
                segs[id(r.pfx)] = r.pfx
            for seg in r.chain:
                segs[id(seg)] = seg
        expected = sum(seg.present - seg.base + seg.held_stale for seg in segs.values())
        self.pool.check(held_by_requests=expected)

    def reset(self, scheduler: Scheduler) -> list[Request]:
        """Failover hook (:mod:`agentreplay.features.failover`): the instance lost its GPU. The step in flight is
        abandoned; the running and waiting requests are returned (with their computed / generated tokens as of
        the last step completed by now) for the caller to re-submit elsewhere; the instance goes on with ``scheduler``,
        a fresh one over an empty KV stack (HBM, pins, host tiers lost). The old stack's pending callbacks (KV
        loads, tier writes, pin expiries) no longer wake this instance."""
        old = self.sched
        run = self._run
        if run is not None:  # the steps of the decode run completed by now count (as step by step)
            j, end = run.progress(self.engine.now)
            done = j if end <= self.engine.now else j - 1
            if done > 0:
                old.cohort.advance(done)  # (the run stops before any member's last token: none finishes)
        old.cohort.sync(old.running)
        aborted = [*old.running, *old.waiting]
        if self._done is not None:
            self._done.cancel()
            self._done = None
        if self._busy:
            self.stats.busy_s += self.engine.now - self._t_start
        self._plan = None
        self._run = None
        self._busy = False
        if self.residency is not None:
            self.residency.on_ready = _ignore
        self.sched = scheduler
        self.pool = scheduler.kv.pool
        self.residency = scheduler.kv.residency
        if self.residency is not None:
            self.residency.on_ready = self._wake
        scheduler.recompute_s = self._recompute_s
        return aborted

    def sync_pool(self) -> None:
        """Allocate the blocks of the decode-run steps started by now, as a step-by-step engine would have (for
        a reader of this pool from outside, e.g. another instance loading a migrating program's cached KV)."""
        run = self._run
        if run is not None:
            self._allocate_run(run, run.steps_done_by(self.engine.now))

    def _allocate_run(self, run: _Run, upto: int) -> None:
        if upto > run.allocated:
            self.sched.allocate_decode_steps(run.allocated, upto - run.allocated)
            run.allocated = upto


def _ignore() -> None:
    """The wake-up of a KV stack an instance no longer uses (after :meth:`Instance.reset`)."""
