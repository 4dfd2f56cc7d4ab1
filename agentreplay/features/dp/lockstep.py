"""The DP ranks of one MoE deployment stepping in lockstep, as vLLM's ``DPEngineCoreProc`` runs them.

Each rank is an :class:`~agentreplay.sim.instance.Instance` with its own scheduler and KV pool; requests reach
the ranks through the ``vllm-dp`` router (vLLM's front-end balancer). The group owns the clock of every step:
when anything may have changed (a request arrived, a step ended, KV finished loading) it schedules one group
step at that instant (scheduling phase, so every request released at the same time is seen), runs every rank's
scheduler, prices the step with :class:`agentreplay.perf.parallel.DPStepPricer` (the slowest rank, ranks with
nothing scheduled running vLLM's one-token dummy batch: ``vllm/v1/engine/core.py``
``DPEngineCoreProc.run_busy_loop`` / ``execute_dummy_batch``), and applies every rank's part when it ends. When no
rank scheduled anything the group idles (vLLM pauses the wave once ``_has_global_unfinished_reqs`` is false).

Not modelled: once every rank is idle vLLM keeps running dummy batches until the next ``dp_sync_interval``
all-reduce (``_has_global_unfinished_reqs``); a request arriving then waits for at most one dummy step.

Ranks in a group never fast-forward decode runs (``fast_decode`` off): a run's length depends on the other
ranks' steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentreplay.engine import PHASE_COMPLETE, PHASE_SCHEDULE, Engine, Event
from agentreplay.perf.parallel import Batch, DPStepPricer, batch_tokens
from agentreplay.sim.instance import Instance


@dataclass(slots=True)
class GroupStats:
    steps: int = 0  #: lockstep steps of the group
    dummy_rank_steps: int = 0  #: rank-steps spent on the dummy batch (a rank with nothing scheduled)
    busy_s: float = 0.0  #: seconds the group was stepping
    comm_s: float = 0.0  #: seconds of those spent in MoE dispatch / combine


class LockstepGroup:
    """Steps ``ranks`` together; see the module docstring. Attaching sets every rank's ``lockstep`` hook."""

    def __init__(self, engine: Engine, ranks: Sequence[Instance], pricer: DPStepPricer) -> None:
        if len(ranks) != pricer.comm.dp:
            raise ValueError(f"{len(ranks)} ranks for a pricer of dp = {pricer.comm.dp}")
        self.engine = engine
        self.ranks = list(ranks)
        self.pricer = pricer
        self.stats = GroupStats()
        self._busy = False
        self._pending = False
        self._active: list[Instance] = []
        self._done: Event | None = None  #: the completion of the group step in flight
        for r in self.ranks:
            r.fast_decode = False
            r.lockstep = self

    def wake(self) -> None:
        """Something may have changed what a rank's scheduler would do: step at this instant unless a step is
        in flight (its end steps again)."""
        if self._busy or self._pending:
            return
        self._pending = True
        self.engine.at(self.engine.now, PHASE_SCHEDULE, self._step)

    def _step(self, _: object = None) -> None:
        self._pending = False
        if self._busy:
            return
        batches: list[Batch] = [r.begin_lockstep() for r in self.ranks]
        active = [r for r, b in zip(self.ranks, batches, strict=True) if b is not None]
        if not active:
            return
        dt = self.pricer.step_time_s(batches)
        st = self.stats
        st.steps += 1
        st.dummy_rank_steps += len(self.ranks) - len(active)
        st.busy_s += dt
        st.comm_s += self.pricer.comm.step_s(max(batch_tokens(b, self.pricer.decode_tokens) for b in batches))
        self._busy = True
        self._active = active
        self._done = self.engine.at(self.engine.now + dt, PHASE_COMPLETE, self._complete)

    def abort(self) -> None:
        """Failover hook (:mod:`agentreplay.features.failover`): the deployment failed; the group step in flight is
        abandoned (its ranks are reset by the caller: :meth:`Instance.reset`)."""
        if self._done is not None:
            self._done.cancel()
            self._done = None
        self._busy = False
        self._active = []

    def _complete(self, _: object = None) -> None:
        self._done = None
        self._busy = False
        active, self._active = self._active, []
        for r in active:
            r.complete_lockstep()
        if any(r.sched.running or r.sched.waiting for r in self.ranks):
            self.wake()
